package chunking

import (
	"bytes"
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

// fields returns the raw bytes (tag included) of each top-level field
// number of a serialized message, in order of appearance.
func fields(t *testing.T, b []byte) map[protowire.Number][][]byte {
	t.Helper()
	out := map[protowire.Number][][]byte{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			t.Fatalf("bad field %d: %v", num, protowire.ParseError(m))
		}
		out[num] = append(out[num], b[:n+m])
		b = b[n+m:]
	}
	return out
}

// TestWireThreeChunks checks the encoded bytes of a 3-chunk sequence field
// by field against the reference's encoding notes (§1.2).
func TestWireThreeChunks(t *testing.T) {
	r := response(actionOfSize(t, 0, 700<<10), actionOfSize(t, 1, 700<<10), actionOfSize(t, 2, 700<<10))
	pl := plan(t, mode{Cached, Wire, false}, 1<<20, r)
	if len(pl.Chunks) != 3 {
		t.Fatalf("got %d chunks, want 3", len(pl.Chunks))
	}
	want := []struct {
		nep, partial, index []byte // nil: absent
		trace               bool
	}{
		{nil, []byte{0x40, 0x01}, []byte{0x4A, 0x00}, true},
		{[]byte{0x2A, 0x00}, []byte{0x40, 0x01}, []byte{0x4A, 0x02, 0x08, 0x01}, false},
		{[]byte{0x2A, 0x00}, nil, []byte{0x4A, 0x02, 0x08, 0x02}, false},
	}
	for i, c := range pl.Chunks {
		e, err := Encode(c, pl.Sizes[i])
		if err != nil {
			t.Fatal(err)
		}
		f := fields(t, e.Bytes)
		one := func(num protowire.Number, w []byte, name string) {
			got := f[num]
			switch {
			case w == nil && len(got) != 0:
				t.Errorf("chunk %d: %s present (% x), want absent", i, name, got[0])
			case w != nil && (len(got) != 1 || !bytes.Equal(got[0], w)):
				t.Errorf("chunk %d: %s = % x, want % x", i, name, got, w)
			}
		}
		one(5, want[i].nep, "numEventsProcessed")
		one(8, want[i].partial, "isPartial")
		one(9, want[i].index, "chunkIndex")
		if (len(f[6]) == 1) != want[i].trace {
			t.Errorf("chunk %d: trace context present=%v, want %v", i, len(f[6]) == 1, want[i].trace)
		}
		if len(f[1]) != 1 || len(f[3]) != 1 || len(f[4]) != 1 || !bytes.Equal(f[7][0], []byte{0x38, 0x01}) || len(f[2]) != 1 {
			t.Errorf("chunk %d: instanceId/customStatus/token/requiresHistory/actions not exactly once", i)
		}
		if f[2][0][0] != 0x12 {
			t.Errorf("chunk %d: actions tag %#x, want 0x12", i, f[2][0][0])
		}
	}
}

// TestSenderMethodPath: the sender's calls arrive at the literal
// /TaskHubSidecarService/... paths a .NET or Java sidecar serves.
func TestSenderMethodPath(t *testing.T) {
	got := make(chan string, 2)
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
		m, _ := grpc.MethodFromServerStream(st)
		got <- m
		var req dtpb.OrchestratorResponse
		if err := st.RecvMsg(&req); err != nil {
			return err
		}
		return st.SendMsg(&dtpb.CompleteTaskResponse{})
	}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	defer func() { srv.Stop(); <-done }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s, err := NewSender(conn, SenderConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Complete(context.Background(), response(task(0, 10))); err != nil {
		t.Fatal(err)
	}
	if m := <-got; m != "/TaskHubSidecarService/CompleteOrchestratorTask" {
		t.Errorf("method %q, want /TaskHubSidecarService/CompleteOrchestratorTask", m)
	}
}

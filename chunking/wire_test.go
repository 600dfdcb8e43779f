package chunking

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/wrapperspb"

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

// wireCases are responses covering each field of OrchestratorResponse and
// OrchestratorAction, every action case (set, empty, nil message, nil
// wrapper), nil actions, negative ids and unknown fields at both levels.
//
//nolint:staticcheck // SA1019
func wireCases(t *testing.T) map[string]*dtpb.OrchestratorResponse {
	t.Helper()
	unknown := func(m proto.Message) {
		b := protowire.AppendTag(nil, 99, protowire.VarintType)
		m.ProtoReflect().SetUnknown(protoreflect.RawFields(protowire.AppendVarint(b, 12345)))
	}
	rng := newRand()
	var mixed []*dtpb.OrchestratorAction
	for i := range 64 {
		mixed = append(mixed, randomAction(rng, int32(i-32), rng.IntN(300)))
	}
	withUnknown := task(-1, 5)
	unknown(withUnknown)
	full := response(mixed...)
	full.NumEventsProcessed = wrapperspb.Int32(3)
	full.IsPartial = true
	full.ChunkIndex = wrapperspb.Int32(2)
	unknown(full)
	cases := map[string]*dtpb.OrchestratorResponse{
		"empty":            {},
		"envelope only":    response(),
		"mixed":            response(mixed...),
		"every field":      full,
		"nil action":       response(nil, task(1, 3)),
		"unknown fields":   response(withUnknown),
		"no case":          response(&dtpb.OrchestratorAction{Id: 4}),
		"nil wrapper":      response(&dtpb.OrchestratorAction{Id: 5, OrchestratorActionType: (*dtpb.OrchestratorAction_CreateTimer)(nil)}),
		"nil case message": response(&dtpb.OrchestratorAction{Id: 6, OrchestratorActionType: &dtpb.OrchestratorAction_SendEvent{}}),
		"large id":         response(&dtpb.OrchestratorAction{Id: math.MaxInt32}, &dtpb.OrchestratorAction{Id: math.MinInt32}),
	}
	// Every case of the oneof, set to an empty message and to one with a
	// field set, whether or not the switch in partsOf knows it.
	oneof := (&dtpb.OrchestratorAction{}).ProtoReflect().Descriptor().Oneofs().ByName("orchestratorActionType")
	for i := range oneof.Fields().Len() {
		fd := oneof.Fields().Get(i)
		for _, populated := range []bool{false, true} {
			a := &dtpb.OrchestratorAction{Id: int32(i)}
			m := a.ProtoReflect().NewField(fd).Message()
			if populated {
				f := m.Descriptor().Fields().Get(0)
				if f.Kind() == protoreflect.MessageKind && !f.IsList() && !f.IsMap() {
					m.Set(f, protoreflect.ValueOfMessage(m.NewField(f).Message()))
				} else if f.IsList() {
					l := m.Mutable(f).List()
					l.Append(l.NewElement())
				} else {
					m.Set(f, m.NewField(f)) // zero of a scalar: still exercises the path
				}
			}
			a.ProtoReflect().Set(fd, protoreflect.ValueOfMessage(m))
			if partsOf(a).generic {
				t.Errorf("oneof case %s is not in partsOf's switch", fd.Name())
			}
			cases[fmt.Sprintf("case %s populated=%v", fd.Name(), populated)] = response(a)
		}
	}
	return cases
}

// TestWireMatchesMarshal: the hand-written outer levels (wire.go) give
// proto.Size's size and proto.Marshal's bytes, for the response as planned
// and encoded by the cached planner, and for each chunk of a chunked plan.
func TestWireMatchesMarshal(t *testing.T) {
	for name, r := range wireCases(t) {
		want, err := proto.Marshal(r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		size := envelopeSize(r)
		for _, a := range r.Actions {
			if s := actionSize(fullSize, a); s != proto.Size(a) {
				t.Errorf("%s: action %d: actionSize %d, proto.Size %d", name, a.GetId(), s, proto.Size(a))
			}
			size += framed(actionSize(fullSize, a))
		}
		if size != len(want) {
			t.Errorf("%s: size %d, marshalled %d", name, size, len(want))
		}
		got, err := Encode(r, len(want))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got.Bytes, want) {
			t.Errorf("%s: encoded\n% x\nwant\n% x", name, got.Bytes, want)
		}
	}
	// Planned and chunked: each chunk's bytes are proto.Marshal's.
	r := wireCases(t)["mixed"]
	for i := range 3 {
		r.Actions = append(r.Actions, actionOfSize(t, int32(100+i), 700<<10))
	}
	for _, lp := range []bool{false, true} {
		pl := plan(t, mode{Cached, Wire, lp}, 1<<20, r)
		if len(pl.Chunks) < 3 {
			t.Fatalf("lp=%v: %d chunks, want ≥ 3", lp, len(pl.Chunks))
		}
		for i, c := range pl.Chunks {
			got, err := Encode(c, pl.Sizes[i])
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := proto.Marshal(c); !bytes.Equal(got.Bytes, want) {
				t.Errorf("lp=%v: chunk %d: encoded bytes differ from proto.Marshal", lp, i)
			}
		}
	}
}

// TestEncodeInvalidUTF8: a string field proto.Marshal refuses is refused.
func TestEncodeInvalidUTF8(t *testing.T) {
	for _, r := range []*dtpb.OrchestratorResponse{
		{InstanceId: "a\xffb"}, {CompletionToken: "\xc0"},
	} {
		if _, err := proto.Marshal(r); err == nil {
			t.Fatal("proto.Marshal accepted invalid UTF-8")
		}
		if _, err := Encode(r, envelopeSize(r)); err == nil {
			t.Errorf("Encode accepted invalid UTF-8 in %v", r)
		}
	}
}

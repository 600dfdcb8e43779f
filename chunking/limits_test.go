package chunking

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

// TestSidecarMaxConnections: a connection over MaxConnections is closed
// unanswered and counted; once one closes, a new one is served.
func TestSidecarMaxConnections(t *testing.T) {
	mp, sums := meterRig(t)
	rg := startRig(t, SidecarConfig{MaxConnections: 2, MeterProvider: mp})
	addr := rg.conn.Target()
	start := func(cc *grpc.ClientConn, id string, wait bool) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := dtpb.StartInstance(ctx, cc, &dtpb.CreateInstanceRequest{InstanceId: id}, grpc.WaitForReady(wait))
		return err
	}
	if err := start(rg.conn, "a", true); err != nil {
		t.Fatal(err)
	}
	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	second := dial()
	if err := start(second, "b", true); err != nil {
		t.Fatalf("the second connection: %v", err)
	}
	third := dial()
	if err := start(third, "c", false); status.Code(err) != codes.Unavailable {
		t.Fatalf("a third connection over MaxConnections 2: got %v, want Unavailable", err)
	}
	if got := sums()[MetricSidecarRejections+"/"+ReasonConnections]; got < 1 {
		t.Errorf("%s/%s = %d, want ≥ 1", MetricSidecarRejections, ReasonConnections, got)
	}
	second.Close()
	// The slot comes back once the server has seen the close; the third
	// client's reconnection backoff then finds it.
	if err := start(third, "c", true); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := dtpb.StartInstance(ctx, third, &dtpb.CreateInstanceRequest{InstanceId: "c"}, grpc.WaitForReady(true)); err != nil {
			t.Fatalf("after a connection closed: %v", err)
		}
	}
}

// TestSidecarMaxStreamsPerConnection: a connection has at most
// MaxStreamsPerConnection calls open; the client queues the next until one
// ends, while another connection is served.
func TestSidecarMaxStreamsPerConnection(t *testing.T) {
	rg := startRig(t, SidecarConfig{MaxStreamsPerConnection: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := dtpb.GetWorkItems(ctx, rg.conn, &dtpb.GetWorkItemsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The stream is open once it has delivered a work item.
	rg.sc.Submit(&dtpb.OrchestratorRequest{InstanceId: "w"})
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelShort()
	if _, err := dtpb.StartInstance(short, rg.conn, &dtpb.CreateInstanceRequest{InstanceId: "queued"}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a second call on the connection: got %v, want DeadlineExceeded (queued behind the open stream)", err)
	}
	other, err := grpc.NewClient(rg.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := dtpb.StartInstance(context.Background(), other, &dtpb.CreateInstanceRequest{InstanceId: "other"}); err != nil {
		t.Fatalf("a call on another connection: %v", err)
	}
	cancel()
	if _, err := dtpb.StartInstance(context.Background(), rg.conn, &dtpb.CreateInstanceRequest{InstanceId: "after"}); err != nil {
		t.Fatalf("after the stream ended: %v", err)
	}
}

// TestSidecarTokenBeforeBody: an unauthenticated call is refused on its
// headers: the client's message is not read. The client announces a
// message of 1 MiB and sends only its 5-byte prefix, then waits: the
// refusal comes without the rest.
func TestSidecarTokenBeforeBody(t *testing.T) {
	rg := startRig(t, SidecarConfig{Token: "t0ken"})
	lis := rg.conn.Target()
	c, err := net.Dial("tcp", lis)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A raw gRPC call over HTTP/2: the client preface, SETTINGS, HEADERS
	// for stream 1 without authorization, then a DATA frame holding the
	// 5-byte prefix of a 1 MiB message.
	h2 := newH2Client(t, c)
	h2.call(1, dtpb.MethodStartInstance, nil)
	h2.data(1, []byte{0, 0, 0x10, 0, 0})
	got := h2.trailers(1)
	if got["grpc-status"] != "16" {
		t.Fatalf("got %v, want grpc-status 16 (Unauthenticated) without the body", got)
	}
}

// h2Client speaks gRPC's HTTP/2 by hand, frame by frame, so that a test
// can send what a gRPC client would not (a prefix without its body).
type h2Client struct {
	t   *testing.T
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer
}

func newH2Client(t *testing.T, c net.Conn) *h2Client {
	t.Helper()
	h := &h2Client{t: t, c: c, fr: http2.NewFramer(c, c)}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.enc = hpack.NewEncoder(&h.hb)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return h
}

// call opens stream id for method with the metadata md (key, value pairs).
func (h *h2Client) call(id uint32, method string, md []string) {
	h.t.Helper()
	h.hb.Reset()
	fields := []string{":method", "POST", ":scheme", "http", ":path", method, ":authority", "sidecar",
		"content-type", "application/grpc", "te", "trailers"}
	all := append(fields, md...)
	for i := 0; i+1 < len(all); i += 2 {
		_ = h.enc.WriteField(hpack.HeaderField{Name: all[i], Value: all[i+1]})
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndHeaders: true}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *h2Client) data(id uint32, b []byte) { h.dataEnd(id, b, false) }

// dataEnd sends b on stream id, ending the client's side if end.
func (h *h2Client) dataEnd(id uint32, b []byte, end bool) {
	h.t.Helper()
	if err := h.fr.WriteData(id, end, b); err != nil {
		h.t.Fatal(err)
	}
}

// windowFor reads frames for up to wait and returns the stream (want, or
// other if not 0) that a WINDOW_UPDATE first opens, or 0 if none does. It
// answers the server's SETTINGS and PINGs.
func (h *h2Client) windowFor(want, other uint32, wait time.Duration) uint32 {
	h.t.Helper()
	_ = h.c.SetReadDeadline(time.Now().Add(wait))
	defer h.c.SetReadDeadline(time.Time{})
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return 0
			}
			h.t.Fatalf("read: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = h.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = h.fr.WritePing(true, f.Data)
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == want || (other != 0 && f.StreamID == other) {
				return f.StreamID
			}
		}
	}
}

// trailers reads frames until stream id ends with its trailers (or
// trailers-only response) and returns them; it fails the test after 10 s.
func (h *h2Client) trailers(id uint32) map[string]string {
	h.t.Helper()
	_ = h.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer h.c.SetReadDeadline(time.Time{})
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.t.Fatalf("stream %d: no trailers: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = h.fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id && f.StreamEnded() {
				out := map[string]string{}
				for _, hf := range f.Fields {
					out[hf.Name] = hf.Value
				}
				return out
			}
		}
	}
}

// TestSidecarAdmissionBeforeBody: a message reserves three times its size
// against MaxTotalBufferedBytes from its 5-byte prefix, before its body is
// let in. The first message of 200 KiB fits a 1 MiB bound and its call
// gets the window for its body; a second one, on the same connection,
// does not fit beside it and gets no window (its client can send no more
// than the call's first 64 KiB) until the first call has ended.
func TestSidecarAdmissionBeforeBody(t *testing.T) {
	rg := startRig(t, SidecarConfig{MaxTotalBufferedBytes: 1 << 20, MaxRecvMsgSize: 256 << 10})
	c, err := net.Dial("tcp", rg.conn.Target())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h2 := newH2Client(t, c)
	const size = 200 << 10
	prefix := binary.BigEndian.AppendUint32([]byte{0}, size)
	h2.call(1, dtpb.MethodCompleteOrchestratorTask, nil)
	h2.data(1, prefix)
	if got := h2.windowFor(1, 3, 5*time.Second); got != 1 {
		t.Fatalf("first message: window for stream %d, want 1", got)
	}
	h2.call(3, dtpb.MethodCompleteOrchestratorTask, nil)
	h2.data(3, prefix)
	if got := h2.windowFor(3, 0, 500*time.Millisecond); got != 0 {
		t.Fatalf("second message: window for stream %d before the first call ended, want none", got)
	}
	// The first message's body: a field 1 (instance id) of the rest of
	// its bytes, so that it decodes; the call then fails (no such token)
	// and ends, and the second message is let in.
	body := append([]byte{0x0a}, protowire.AppendVarint(nil, uint64(size-1-3))...)
	body = append(body, bytes.Repeat([]byte{'x'}, size-len(body))...)
	for len(body) > 0 {
		k := min(len(body), 16<<10)
		h2.dataEnd(1, body[:k], k == len(body))
		body = body[k:]
	}
	if got := h2.windowFor(3, 0, 10*time.Second); got != 3 {
		t.Fatalf("second message after the first call ended: window for stream %d, want 3", got)
	}
}

// TestSidecarMaxCalls: a call over MaxCalls open at once, over every
// connection, is refused on its headers with ResourceExhausted naming the
// bound, and counted; once a call ends there is room again.
func TestSidecarMaxCalls(t *testing.T) {
	mp, sums := meterRig(t)
	rg := startRig(t, SidecarConfig{MaxCalls: 1, MeterProvider: mp})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := dtpb.GetWorkItems(ctx, rg.conn, &dtpb.GetWorkItemsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rg.sc.Submit(&dtpb.OrchestratorRequest{InstanceId: "w"})
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	_, err = dtpb.StartInstance(context.Background(), rg.conn, &dtpb.CreateInstanceRequest{InstanceId: "over"})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "MaxCalls = 1") || !strings.Contains(err.Error(), "--max-calls") {
		t.Fatalf("a second call open: got %v, want ResourceExhausted naming MaxCalls = 1 and --max-calls", err)
	}
	if got := sums()[MetricSidecarRejections+"/"+ReasonCalls]; got != 1 {
		t.Errorf("%s/%s = %d, want 1", MetricSidecarRejections, ReasonCalls, got)
	}
	cancel()
	// The stream's end reaches the server a moment after the client's.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := dtpb.StartInstance(context.Background(), rg.conn, &dtpb.CreateInstanceRequest{InstanceId: "after"})
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("after the stream ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package ipc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

func taskConfig(id uint64, env map[string]string) *ipcpb.TaskConfiguration {
	return &ipcpb.TaskConfiguration{
		Id: id, TaskName: "Csc", Environment: env,
		GlobalProperties: map[string]string{"Configuration": "Release"},
		Payload:          []byte(fmt.Sprintf("payload-%d", id)),
	}
}

func TestConnRoundTrip(t *testing.T) {
	for _, mode := range []Mode{Sync, Async} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			parent, child := inProcessPair(t, []Option{WithMode(mode)}, []Option{WithMode(mode)})
			const n = 200
			errc := make(chan error, 1)
			go func() {
				for i := range n {
					in, err := child.Recv(ctx)
					if err != nil {
						errc <- err
						return
					}
					cfg := in.Msg.(*ipcpb.TaskConfiguration)
					if cfg.Id != uint64(i) || string(cfg.Payload) != fmt.Sprintf("payload-%d", i) {
						errc <- fmt.Errorf("child got packet %d with payload %q, want %d", cfg.Id, cfg.Payload, i)
						return
					}
					if err := child.Send(ctx, &ipcpb.TaskResult{Id: cfg.Id, Status: ipcpb.Status_STATUS_SUCCESS}); err != nil {
						errc <- err
						return
					}
				}
				errc <- child.Flush(ctx)
			}()
			for i := range n {
				if err := parent.Send(ctx, taskConfig(uint64(i), map[string]string{"PATH": "/bin"})); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
			}
			for i := range n {
				in, err := parent.Recv(ctx)
				if err != nil {
					t.Fatalf("recv %d: %v", i, err)
				}
				if res := in.Msg.(*ipcpb.TaskResult); res.Id != uint64(i) || res.Status != ipcpb.Status_STATUS_SUCCESS {
					t.Fatalf("result %d: id %d status %v, want id %d and success", i, res.Id, res.Status, i)
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// markCodec is a Codec with state of its own: it appends a field holding a
// per-connection sequence number to every body, and Decode checks the
// sequence and reports it in TaskName. It exercises the hook's contract:
// one codec per Conn, calls in wire order, the body framed and measured by
// the Conn, the decoded message delivered as is, a *ProtocolError counted
// by its kind.
type markCodec struct{ sent, recv uint64 }

const markField = 1000

func (c *markCodec) AppendBody(ctx context.Context, dst []byte, t Type, m proto.Message) ([]byte, error) {
	dst, err := protoCodec{}.AppendBody(ctx, dst, t, m)
	if err != nil {
		return dst, err
	}
	c.sent++
	dst = protowire.AppendTag(dst, markField, protowire.VarintType)
	return protowire.AppendVarint(dst, c.sent), nil
}

func (c *markCodec) Decode(t Type, body []byte) (proto.Message, error) {
	m, err := Unmarshal(t, body)
	if err != nil {
		return nil, err
	}
	c.recv++
	for b := body; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		v := protowire.ConsumeFieldValue(num, typ, b[n:])
		if num == markField {
			if mark, _ := protowire.ConsumeVarint(b[n:]); mark != c.recv {
				return nil, &ProtocolError{Kind: "mark", Err: fmt.Errorf("packet %d carries mark %d", c.recv, mark)}
			}
			if cfg, ok := m.(*ipcpb.TaskConfiguration); ok {
				cfg.TaskName = fmt.Sprint("mark ", c.recv)
			}
			return m, nil
		}
		b = b[n+v:] // Unmarshal accepted body: every field is well formed
	}
	return nil, &ProtocolError{Kind: "mark", Err: errors.New("no mark")}
}

func TestCodecHook(t *testing.T) {
	ctx := context.Background()
	tel := newTel(t)
	var news atomic.Int32
	newCodec := func() Codec { news.Add(1); return &markCodec{} }
	parent, child := inProcessPair(t, append(tel.opts(), WithCodec(newCodec)), []Option{WithCodec(newCodec)})
	if got := news.Load(); got != 2 {
		t.Fatalf("codec constructor called %d times for two Conns, want 2", got)
	}
	if _, ok := parent.Codec().(*markCodec); !ok || parent.Codec() == child.Codec() {
		t.Fatalf("Codec() = %T (shared with the peer: %v), want a *markCodec of its own", parent.Codec(), parent.Codec() == child.Codec())
	}
	for i := range 3 {
		if err := parent.Send(ctx, taskConfig(uint64(i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		in, err := child.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := in.Msg.(*ipcpb.TaskConfiguration).TaskName, fmt.Sprint("mark ", i+1); got != want {
			t.Fatalf("packet %d decoded as %q, want %q", i, got, want)
		}
	}
	// The serialize spans measure what the codec produced.
	var spans int
	for _, s := range tel.Spans.Ended() {
		if s.Name() != "ipc.serialize" {
			continue
		}
		plain, err := AppendFrame(nil, taskConfig(uint64(spans), nil), DefaultMaxPacketSize)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(len(plain) - HeaderSize + 3) // the mark: 2-byte tag, 1-byte value
		for _, kv := range s.Attributes() {
			if kv.Key == telemetry.AttrBytes && kv.Value.AsInt64() != want {
				t.Fatalf("packet %d: ipc.serialize %s = %d, want %d (the body with the codec's mark)", spans, telemetry.AttrBytes, kv.Value.AsInt64(), want)
			}
		}
		spans++
	}
	if spans != 3 {
		t.Fatalf("%d ipc.serialize spans, want 3", spans)
	}
}

func TestSendBufferReadBack(t *testing.T) {
	wmax := procInt("/proc/sys/net/core/wmem_max")
	if wmax <= 0 {
		t.Skip("net.core.wmem_max not readable")
	}
	for _, req := range []int{smallBuffer, DefaultBufferSize} {
		t.Run(fmt.Sprint(req), func(t *testing.T) {
			tel := newTel(t)
			parent, _ := inProcessPair(t, append(tel.opts(), WithBufferSize(req)), nil)
			want := 2 * min(req, wmax)
			gotReq, gotEff := parent.BufferSize()
			if gotReq != req || gotEff != want {
				t.Fatalf("BufferSize() = %d, %d; want %d, %d (wmem_max %d)", gotReq, gotEff, req, want, wmax)
			}
			if got := tel.sum(t, MetricBufferEffective, nil); got != int64(want) {
				t.Fatalf("%s = %d, want %d", MetricBufferEffective, got, want)
			}
			if got := tel.sum(t, MetricBufferRequested, nil); got != int64(req) {
				t.Fatalf("%s = %d, want %d", MetricBufferRequested, got, req)
			}
		})
	}
}

func TestTraceContextCarried(t *testing.T) {
	ctx := context.Background()
	ptel, ctel := newTel(t), newTel(t)
	parent, child := inProcessPair(t, ptel.opts(), ctel.opts())
	dctx, dispatch := ptel.TP.Tracer("test").Start(ctx, "runtime.dispatch")
	// What a packet carries is the codec's protocol (package taskproto
	// fills it in); the Conn parents its receive-side spans on it.
	cfg := taskConfig(1, nil)
	cfg.TraceContext = map[string]string{}
	propagation.TraceContext{}.Inject(dctx, propagation.MapCarrier(cfg.TraceContext))
	if err := parent.Send(dctx, cfg); err != nil {
		t.Fatal(err)
	}
	dispatch.End()
	in, err := child.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := dispatch.SpanContext()
	names := map[string]bool{}
	for _, s := range ctel.Spans.Ended() {
		names[s.Name()] = true
		if s.SpanContext().TraceID() != want.TraceID() || s.Parent().SpanID() != want.SpanID() {
			t.Fatalf("child span %s: trace %s parent %s, want trace %s parent %s", s.Name(),
				s.SpanContext().TraceID(), s.Parent().SpanID(), want.TraceID(), want.SpanID())
		}
	}
	if !names["ipc.receive"] || !names["ipc.deserialize"] {
		t.Fatalf("child spans %v, want ipc.receive and ipc.deserialize", names)
	}
	for _, s := range ptel.Spans.Ended() {
		names[s.Name()] = true
	}
	if !names["ipc.serialize"] || !names["ipc.send"] {
		t.Fatalf("parent spans %v, want ipc.serialize and ipc.send", names)
	}
	got := in.Context(ctx)
	if sc := traceSpanContext(got); sc.SpanID() != want.SpanID() || !sc.IsRemote() {
		t.Fatalf("Incoming.Context span = %v, want remote %v", sc.SpanID(), want.SpanID())
	}
	if got := ptel.sum(t, MetricPackets, map[string]string{string(AttrOp): "send", "amdahl.direction": "request"}); got != 1 {
		t.Fatalf("parent %s{send,request} = %d, want 1", MetricPackets, got)
	}
	if got := ctel.sum(t, MetricPackets, map[string]string{string(AttrOp): "receive", "amdahl.direction": "request"}); got != 1 {
		t.Fatalf("child %s{receive,request} = %d, want 1", MetricPackets, got)
	}
}

func TestProtocolErrors(t *testing.T) {
	unmarked, err := AppendFrame(nil, &ipcpb.TaskResult{Id: 1}, DefaultMaxPacketSize)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		kind  string
		bytes []byte
		check func(error) bool
	}{
		{"unknown_type", []byte{0x20, 0, 0, 0, 0}, func(err error) bool { var ue *UnknownTypeError; return errors.As(err, &ue) }},
		{"too_large", binary.LittleEndian.AppendUint32([]byte{2}, 1<<20), func(err error) bool { return errors.Is(err, ErrPacketTooLarge) }},
		{"mark", unmarked, func(err error) bool { var pe *ProtocolError; return errors.As(err, &pe) }}, // markCodec's
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			ctx := context.Background()
			tel := newTel(t)
			p, raw := rawPair(t)
			ch := make(chan error, 1)
			go func() {
				err := handshake(ctx, raw, p.token, false, handshakeTimeoutForTest, nil)
				if err == nil {
					_, err = raw.Write(tt.bytes)
				}
				ch <- err
			}()
			parent, err := p.Connect(ctx, append(tel.opts(), WithMaxPacketSize(1<<10), WithCodec(func() Codec { return &markCodec{} }))...)
			if err != nil {
				t.Fatal(err)
			}
			defer parent.Close()
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
			_, err = parent.Recv(ctx)
			if err == nil || !tt.check(err) {
				t.Fatalf("Recv = %v, want a %s error", err, tt.kind)
			}
			if got := tel.sum(t, MetricProtocolErrors, map[string]string{string(AttrKind): tt.kind}); got != 1 {
				t.Fatalf("%s{kind=%s} = %d, want 1", MetricProtocolErrors, tt.kind, got)
			}
			// The connection is failed: the writer must fail too.
			if err := parent.Send(ctx, &ipcpb.Shutdown{}); err == nil {
				t.Fatal("Send after a protocol error succeeded, want an error")
			}
		})
	}
}

func TestAsyncQueueBounded(t *testing.T) {
	ctx := context.Background()
	tel := newTel(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	// The first write (packet 1) holds the writer until release; a
	// non-blocking send on entered here would race the test goroutine
	// reaching <-entered, and lose.
	var once sync.Once
	hook := func(Type, int) { once.Do(func() { close(entered); <-release }) }
	parent, child := inProcessPair(t, append(tel.opts(), WithMode(Async), WithQueueLimits(1<<20, 1), func(c *config) { c.onWrite = hook }), nil)
	if err := parent.Send(ctx, taskConfig(1, nil)); err != nil {
		t.Fatal(err)
	}
	<-entered // the writer holds packet 1
	if err := parent.Send(ctx, taskConfig(2, nil)); err != nil {
		t.Fatalf("second async send: %v (the queue has room for one)", err)
	}
	if got := tel.sum(t, MetricQueueDepth, nil); got != 1 {
		t.Fatalf("%s = %d, want 1", MetricQueueDepth, got)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := parent.Send(cctx, taskConfig(3, nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("third async send with a full queue = %v, want it to block until ctx ends", err)
	}
	close(release)
	if err := parent.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []uint64{1, 2} {
		in, err := child.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if id := in.Msg.(*ipcpb.TaskConfiguration).Id; id != want {
			t.Fatalf("child got id %d, want %d", id, want)
		}
	}
	if got := tel.sum(t, MetricQueueDepth, nil); got != 0 {
		t.Fatalf("%s after flush = %d, want 0", MetricQueueDepth, got)
	}
}

func TestCloseIdempotent(t *testing.T) {
	ctx := context.Background()
	parent, child := inProcessPair(t, nil, nil)
	if err := parent.Close(); err != nil {
		t.Fatal(err)
	}
	if err := parent.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	if err := parent.Send(ctx, &ipcpb.Shutdown{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
	if _, err := parent.Recv(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after Close = %v, want ErrClosed", err)
	}
	if _, err := child.Recv(ctx); !errors.Is(err, ErrPeerClosed) {
		t.Fatalf("peer Recv after Close = %v, want ErrPeerClosed", err)
	}
	if err := child.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
}

// traceParentSink keeps what TestTraceParentBinary's allocation checks
// append on the heap, as a packet's field is.
var traceParentSink []byte

// TestTraceParentBinary: the binary traceparent round-trips a span
// context (ids, sampled flag, tracestate), and refuses what is not one.
func TestTraceParentBinary(t *testing.T) {
	ts, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled, TraceState: ts})
	b := AppendTraceParent(nil, sc)
	if len(b) != TraceParentSize {
		t.Fatalf("%d bytes, want %d", len(b), TraceParentSize)
	}
	got := ParseTraceParent(b, sc.TraceState().String())
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsSampled() || !got.IsRemote() || got.TraceState().String() != "vendor=abc" {
		t.Errorf("round trip: got %+v, want %+v (remote)", got, sc)
	}
	if b := AppendTraceParent([]byte("x"), trace.SpanContext{}); string(b) != "x" {
		t.Errorf("an invalid span context appended %q", b[1:])
	}
	// A packet's field starts empty: one allocation of the field's size,
	// not one per append as it grows (three, at 8, 24 and 48 bytes).
	if n := testing.AllocsPerRun(100, func() { traceParentSink = AppendTraceParent(nil, sc) }); n != 1 {
		t.Errorf("AppendTraceParent(nil, sc) allocates %v times, want 1", n)
	}
	if b := AppendTraceParent(nil, sc); cap(b) > 32 {
		t.Errorf("AppendTraceParent(nil, sc) allocated %d bytes, want at most 32", cap(b))
	}
	buf := make([]byte, 0, TraceParentSize)
	if n := testing.AllocsPerRun(100, func() { traceParentSink = AppendTraceParent(buf[:0], sc) }); n != 0 {
		t.Errorf("AppendTraceParent into room for it allocates %v times, want 0", n)
	}
	bad := func(mut func([]byte) []byte) []byte { return mut(AppendTraceParent(nil, sc)) }
	for name, in := range map[string][]byte{
		"short":        bad(func(b []byte) []byte { return b[:len(b)-1] }),
		"long":         bad(func(b []byte) []byte { return append(b, 0) }),
		"version 1":    bad(func(b []byte) []byte { b[0] = 1; return b }),
		"zero trace":   bad(func(b []byte) []byte { clear(b[1:17]); return b }),
		"zero span":    bad(func(b []byte) []byte { clear(b[17:25]); return b }),
		"unknown flag": bad(func(b []byte) []byte { b[25] |= 0x80; return b }),
	} {
		if got := ParseTraceParent(in, ""); got.IsValid() {
			t.Errorf("%s: parsed %+v, want nothing", name, got)
		}
	}
}

// stampCodec stamps every task configuration: two fixed64 fields of
// numbers stampStart and stampEnd end the body, filled in by StampSend.
// size, when not 0, is the stamp size it claims instead (a bad one).
type stampCodec struct {
	protoCodec
	size int
}

const stampStart, stampEnd protowire.Number = 1001, 1002

func (c *stampCodec) AppendStampedBody(ctx context.Context, dst []byte, t Type, m proto.Message) ([]byte, int, error) {
	out, err := c.AppendBody(ctx, dst, t, m)
	if err != nil || t != TypeTaskConfiguration {
		return out, 0, err
	}
	n := len(out)
	out = protowire.AppendFixed64(protowire.AppendTag(out, stampStart, protowire.Fixed64Type), 0)
	out = protowire.AppendFixed64(protowire.AppendTag(out, stampEnd, protowire.Fixed64Type), 0)
	if c.size != 0 {
		return out, c.size, nil
	}
	return out, len(out) - n, nil
}

func (c *stampCodec) StampSend(stamp []byte, start, end time.Time) {
	b := protowire.AppendFixed64(protowire.AppendTag(stamp[:0], stampStart, protowire.Fixed64Type), uint64(start.UnixNano()))
	protowire.AppendFixed64(protowire.AppendTag(b, stampEnd, protowire.Fixed64Type), uint64(end.UnixNano()))
}

// stampBytes is the size of stampCodec's stamp: two tagged fixed64.
const stampBytes = 20

// writeCounter is a Conn's stream that records the size of each Write
// call the Conn makes on it (one write(2), unless it blocks part way), and
// calls enter, when set, as each begins.
type writeCounter struct {
	stream
	mu     sync.Mutex
	writes []int
	enter  func(n int)
}

func (w *writeCounter) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.writes = append(w.writes, len(b))
	enter := w.enter
	w.mu.Unlock()
	if enter != nil {
		enter(len(b))
	}
	return w.stream.Write(b)
}

// onEnter sets the function called as each Write begins.
func (w *writeCounter) onEnter(f func(n int)) {
	w.mu.Lock()
	w.enter = f
	w.mu.Unlock()
}

// take returns the sizes of the writes since the last take.
func (w *writeCounter) take() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.writes
	w.writes = nil
	return out
}

// countedPair is inProcessPair, over a socketpair or (pipes) a pair of
// pipes, with the parent's writes counted.
func countedPair(t *testing.T, pipes bool, parentOpts []Option) (*Conn, *Conn, *writeCounter) {
	t.Helper()
	ctx := context.Background()
	var (
		w         *writeCounter
		setBuffer func(int, *slog.Logger) (int, error)
		tok       Token
		transport string
		accept    func() (*Conn, error)
	)
	if pipes {
		p, err := NewPipePair()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		w = &writeCounter{stream: &pipeStream{r: p.parentR, w: p.parentW}}
		setBuffer = func(n int, log *slog.Logger) (int, error) { return setPipeSize(p.parentW, n, log) }
		tok, transport = p.token, TransportPipe
		accept = func() (*Conn, error) { return openPipes(ctx, p.childR, p.childW, p.token, false, nil) }
	} else {
		p, fc := rawPair(t)
		w = &writeCounter{stream: p.parent}
		setBuffer = func(n int, _ *slog.Logger) (int, error) { return applySendBuffer(p.parent, n) }
		tok, transport = p.token, TransportSocketpair
		accept = func() (*Conn, error) { return Accept(ctx, fc, p.token) }
	}
	parent, child := handshakeBoth(t,
		func() (*Conn, error) { return openStream(ctx, w, setBuffer, tok, true, transport, parentOpts) },
		accept)
	w.take() // the handshake's
	return parent, child, w
}

// stampedConfig returns a task configuration whose frame, stamped by
// stampCodec, is exactly frame bytes.
func stampedConfig(t *testing.T, id uint64, frame int) *ipcpb.TaskConfiguration {
	t.Helper()
	cfg := taskConfig(id, nil)
	for p := max(frame-HeaderSize-stampBytes-proto.Size(cfg)-8, 0); p < frame; p++ {
		cfg.Payload = make([]byte, p)
		switch got := HeaderSize + proto.Size(cfg) + stampBytes; {
		case got == frame:
			return cfg
		case got > frame:
			t.Fatalf("no payload gives a stamped frame of exactly %d bytes", frame)
		}
	}
	t.Fatalf("no payload gives a stamped frame of exactly %d bytes", frame)
	return nil
}

// TestSendStampWrites: a stamped frame within the Conn's one-write limit
// goes in one write(2), stamped before it, so its send ends before the
// peer has any of it; a larger one in two, the second its stamp; an
// unstamped one in one. The limit is a quarter of the send buffer, at
// most 16 KiB; frames of exactly the limit and one byte over it are sent.
func TestSendStampWrites(t *testing.T) {
	for _, tc := range []struct {
		eff, want int
	}{{0, 0}, {-1, 0}, {4608, 1152}, {64 << 10, 16 << 10}, {2 << 20, 16 << 10}} {
		if got := oneWriteLimit(tc.eff); got != tc.want {
			t.Errorf("oneWriteLimit(%d) = %d, want %d", tc.eff, got, tc.want)
		}
	}
	for _, tc := range []struct {
		pipes bool
		buf   int
	}{{false, DefaultBufferSize}, {false, 4096}, {true, DefaultBufferSize}, {true, 4096}} {
		t.Run(fmt.Sprintf("pipes=%t/buffer=%d", tc.pipes, tc.buf), func(t *testing.T) {
			ctx := context.Background()
			parent, child, w := countedPair(t, tc.pipes, []Option{WithBufferSize(tc.buf), WithCodec(func() Codec { return &stampCodec{} })})
			limit := parent.oneWrite
			if _, eff := parent.BufferSize(); limit != oneWriteLimit(eff) || limit <= 0 {
				t.Fatalf("one-write limit %d with a buffer of %d, want %d", limit, eff, oneWriteLimit(eff))
			}
			var cfgs []*ipcpb.TaskConfiguration
			for i, payload := range []int{0, 100, limit - 200, 3 * limit, 40_000} {
				cfg := taskConfig(uint64(i), nil)
				cfg.Payload = make([]byte, payload)
				cfgs = append(cfgs, cfg)
			}
			for i, frame := range []int{limit - 1, limit, limit + 1} {
				cfgs = append(cfgs, stampedConfig(t, uint64(10+i), frame))
			}
			var one, two int
			sizes := map[int]bool{}
			for _, cfg := range cfgs {
				if err := parent.Send(ctx, cfg); err != nil {
					t.Fatal(err)
				}
				in, err := child.Recv(ctx)
				if err != nil {
					t.Fatal(err)
				}
				frame := in.Size + HeaderSize
				sizes[frame] = true
				start, end := stampOf(in.Msg)
				writes := w.take()
				switch {
				case frame <= limit:
					one++
					if len(writes) != 1 || writes[0] != frame {
						t.Errorf("a stamped frame of %d bytes (limit %d): writes %v, want one of %d", frame, limit, writes, frame)
					}
					// Stamped before its write: the send ended before
					// the frame's header had arrived.
					if start == 0 || end < start || end > in.ReceiveStart.UnixNano() {
						t.Errorf("a stamped frame of %d bytes in one write: stamp [%d, %d], want one that ends by its header's arrival (%d)", frame, start, end, in.ReceiveStart.UnixNano())
					}
				default:
					two++
					if len(writes) != 2 || writes[0] != frame-stampBytes || writes[1] != stampBytes {
						t.Errorf("a stamped frame of %d bytes (limit %d): writes %v, want %d then %d", frame, limit, writes, frame-stampBytes, stampBytes)
					}
					if read := in.ReceiveStart.Add(in.ReceiveDuration).UnixNano(); start == 0 || end < start || end > read {
						t.Errorf("a stamped frame of %d bytes in two writes: stamp [%d, %d], want one that ends by the frame's read (%d)", frame, start, end, read)
					}
				}
			}
			if one == 0 || two == 0 {
				t.Fatalf("%d frames in one write, %d in two: want both kinds", one, two)
			}
			if !sizes[limit] || !sizes[limit+1] {
				t.Fatalf("frames of %v bytes sent: want the limit (%d) and one byte over it", slices.Sorted(maps.Keys(sizes)), limit)
			}
			if err := parent.Send(ctx, &ipcpb.Shutdown{}); err != nil {
				t.Fatal(err)
			}
			if _, err := child.Recv(ctx); err != nil {
				t.Fatal(err)
			}
			if writes := w.take(); len(writes) != 1 {
				t.Errorf("an unstamped packet: writes %v, want one", writes)
			}
		})
	}
}

// TestSendStampBlocked: a stamped frame within the one-write limit whose
// write waits for the reader, because the reader has stopped draining a
// buffer it left mostly full, is still stamped before its write is
// issued: its send (the span and the stamp) ends before the wait, and
// the wait is in amdahl.ipc.send.blocked and in the send span's
// amdahl.ipc.write.duration (AttrWriteDuration).
func TestSendStampBlocked(t *testing.T) {
	ctx := context.Background()
	tel := newTel(t)
	// Pipes of one page: a write that does not fit in the page the reader
	// left unread waits for the reader to take all of it.
	parent, child, w := countedPair(t, true, append(tel.opts(), WithBufferSize(4096), WithCodec(func() Codec { return &stampCodec{} })))
	_, eff := parent.BufferSize()
	limit := parent.oneWrite
	// The child's reader reads the first packet and holds it until Recv,
	// reading no more; the second, unstamped, fills most of the pipe.
	if err := parent.Send(ctx, taskConfig(1, nil)); err != nil {
		t.Fatal(err)
	}
	if err := parent.Send(ctx, &ipcpb.LogMessage{Text: strings.Repeat("x", eff-limit/2)}); err != nil {
		t.Fatal(err)
	}
	w.take()
	entered := make(chan time.Time, 1)
	w.onEnter(func(int) {
		select {
		case entered <- time.Now():
		default:
		}
	})
	frame := limit - 100
	errc := make(chan error, 1)
	go func() { errc <- parent.Send(ctx, stampedConfig(t, 2, frame)) }()
	issued := <-entered
	time.Sleep(20 * time.Millisecond) // the reader delays its draining
	select {
	case err := <-errc:
		t.Fatalf("the stamped frame's write did not wait for the reader (Send: %v): the pipe (%d bytes) was not full", err, eff)
	default:
	}
	drained := time.Now()
	var in *Incoming
	for range 3 {
		var err error
		if in, err = child.Recv(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if writes := w.take(); len(writes) != 1 || writes[0] != frame || in.Size+HeaderSize != frame {
		t.Fatalf("a stamped frame of %d bytes (limit %d): writes %v, received %d bytes, want one write of it", frame, limit, writes, in.Size+HeaderSize)
	}
	start, end := stampOf(in.Msg)
	if start == 0 || end < start || end > issued.UnixNano() {
		t.Errorf("stamp [%d, %d]: want a send that ended by the time its write was issued (%d)", start, end, issued.UnixNano())
	}
	// The write returned after the reader drained the pipe: its wait is
	// at least drained-issued long.
	checkWriteWait(t, tel, start, end, drained.Sub(issued))
}

// TestSendStampBlockedTwoWrites: on the two-write path, the blocked time
// and the send span's amdahl.ipc.write.duration include the stamp's own
// write, which waits for the reader when the first write filled the
// buffer (here, a stream whose stamp write is slow).
func TestSendStampBlockedTwoWrites(t *testing.T) {
	ctx := context.Background()
	tel := newTel(t)
	parent, child, w := countedPair(t, false, append(tel.opts(), WithCodec(func() Codec { return &stampCodec{} })))
	frame := parent.oneWrite + 1000
	var slow time.Duration
	w.onEnter(func(n int) {
		if n == stampBytes {
			t0 := time.Now()
			time.Sleep(20 * time.Millisecond)
			slow = time.Since(t0)
		}
	})
	if err := parent.Send(ctx, stampedConfig(t, 1, frame)); err != nil {
		t.Fatal(err)
	}
	in, err := child.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if writes := w.take(); len(writes) != 2 || writes[1] != stampBytes {
		t.Fatalf("a stamped frame of %d bytes (limit %d): writes %v, want two, the second its stamp", frame, parent.oneWrite, writes)
	}
	start, end := stampOf(in.Msg)
	checkWriteWait(t, tel, start, end, slow)
}

// checkWriteWait checks that the longest amdahl.ipc.send.blocked and the
// amdahl.ipc.write.duration of the ipc.send span with the stamp's times
// [start, end] are each at least wait.
func checkWriteWait(t *testing.T, tel *tel, start, end int64, wait time.Duration) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.Reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	blocked := -1.0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == MetricSendBlocked {
				for _, p := range h.DataPoints {
					if v, ok := p.Max.Value(); ok && v > blocked {
						blocked = v
					}
				}
			}
		}
	}
	if blocked < wait.Seconds() {
		t.Errorf("%s: longest %.6f s, want the stamped frame's, whose write waited at least %.6f s", MetricSendBlocked, blocked, wait.Seconds())
	}
	var span sdktrace.ReadOnlySpan
	for _, s := range tel.Spans.Ended() {
		if s.Name() == "ipc.send" && s.StartTime().UnixNano() == start {
			span = s
		}
	}
	if span == nil || span.EndTime().UnixNano() != end {
		t.Fatalf("no ipc.send span with the stamp's times [%d, %d]", start, end)
	}
	got := -1.0
	for _, kv := range span.Attributes() {
		if kv.Key == AttrWriteDuration {
			got = kv.Value.AsFloat64()
		}
	}
	if got < wait.Seconds() {
		t.Errorf("ipc.send span: %s = %v s, want the write's wait, at least %.6f s", AttrWriteDuration, got, wait.Seconds())
	}
}

// stampOf reads the stamp back from a decoded packet's unknown fields.
func stampOf(m proto.Message) (start, end int64) {
	for b := m.ProtoReflect().GetUnknown(); len(b) > 0; {
		num, _, n := protowire.ConsumeTag(b)
		v, m := protowire.ConsumeFixed64(b[n:])
		switch num {
		case stampStart:
			start = int64(v)
		case stampEnd:
			end = int64(v)
		}
		b = b[n+m:]
	}
	return start, end
}

// TestSendStamp: a SendStamper's stamp arrives filled in with the ipc.send
// span's start and end, which is no later than the peer had read the
// frame whole; a packet the codec does not stamp goes as it is, and a
// stamp larger than the body is an error before anything is written.
func TestSendStamp(t *testing.T) {
	ctx := context.Background()
	tel := newTel(t)
	parent, child := inProcessPair(t, append(tel.opts(), WithCodec(func() Codec { return &stampCodec{} })), nil)
	const n = 20
	stamps := map[int64]int64{} // start → end
	for i := range n {
		payload := make([]byte, 1+i*20_000) // up to 380 KB: some writes block
		cfg := taskConfig(uint64(i), nil)
		cfg.Payload = payload
		if err := parent.Send(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		in, err := child.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		start, end := stampOf(in.Msg)
		if read := in.ReceiveStart.Add(in.ReceiveDuration).UnixNano(); start == 0 || end < start || end > read {
			t.Fatalf("packet %d: stamp [%d, %d], want a send that ends by the time the frame was read whole (%d)", i, start, end, read)
		}
		if got := in.Msg.(*ipcpb.TaskConfiguration); len(got.Payload) != len(payload) {
			t.Fatalf("packet %d: payload of %d bytes, want %d", i, len(got.Payload), len(payload))
		}
		stamps[start] = end
	}
	// The stamps are the send spans' times.
	sends := 0
	for _, s := range tel.Spans.Ended() {
		if s.Name() != "ipc.send" {
			continue
		}
		sends++
		if end, ok := stamps[s.StartTime().UnixNano()]; !ok || end != s.EndTime().UnixNano() {
			t.Errorf("ipc.send span [%d, %d]: no stamp with its times (stamped end %d)", s.StartTime().UnixNano(), s.EndTime().UnixNano(), end)
		}
	}
	if sends != n {
		t.Fatalf("%d ipc.send spans, want %d", sends, n)
	}
	if err := parent.Send(ctx, &ipcpb.Shutdown{}); err != nil {
		t.Fatal(err)
	}
	if in, err := child.Recv(ctx); err != nil || in.Type != TypeShutdown {
		t.Fatalf("unstamped packet: %v, %v", in, err)
	}

	bad, _ := inProcessPair(t, []Option{WithCodec(func() Codec { return &stampCodec{size: 1 << 20} })}, nil)
	if err := bad.Send(ctx, taskConfig(1, nil)); err == nil || !strings.Contains(err.Error(), "stamp") {
		t.Fatalf("a stamp larger than its body: Send = %v, want an error naming the stamp", err)
	}
}

package ipc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
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
					if err := child.Reply(ctx, in, &ipcpb.TaskResult{Id: cfg.Id, Status: ipcpb.Status_STATUS_SUCCESS}, in.ReceiveStart, 0); err != nil {
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
				res := in.Msg.(*ipcpb.TaskResult)
				if res.Id != uint64(i) {
					t.Fatalf("result %d has id %d", i, res.Id)
				}
				var phases []ipcpb.Phase
				for _, pt := range res.Timings {
					phases = append(phases, pt.Phase)
					if pt.DurationNs < 0 || pt.StartOffsetNs < 0 {
						t.Fatalf("timing %v has a negative offset or duration", pt)
					}
				}
				want := []ipcpb.Phase{ipcpb.Phase_PHASE_RECEIVE, ipcpb.Phase_PHASE_DESERIALIZE, ipcpb.Phase_PHASE_EXECUTE, ipcpb.Phase_PHASE_REPLY_SERIALIZE}
				if fmt.Sprint(phases) != fmt.Sprint(want) {
					t.Fatalf("reply timings %v, want %v", phases, want)
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDeltaEncoding(t *testing.T) {
	env := map[string]string{"PATH": "/usr/bin", "HOME": "/root", "LANG": "C.UTF-8"}
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("delta=%v", on), func(t *testing.T) {
			ctx := context.Background()
			tel := newTel(t)
			parent, child := inProcessPair(t, append(tel.opts(), WithDelta(on)), nil)
			envs := []map[string]string{env, env, {"PATH": "/other"}, {"PATH": "/other"}}
			for i, e := range envs {
				if err := parent.Send(ctx, taskConfig(uint64(i), maps.Clone(e))); err != nil {
					t.Fatal(err)
				}
			}
			for i, e := range envs {
				in, err := child.Recv(ctx)
				if err != nil {
					t.Fatal(err)
				}
				cfg := in.Msg.(*ipcpb.TaskConfiguration)
				if !maps.Equal(cfg.Environment, e) {
					t.Fatalf("packet %d environment = %v, want %v", i, cfg.Environment, e)
				}
				wantMode := ipcpb.DeltaMode_DELTA_MODE_FULL
				if on && (i == 1 || i == 3) {
					wantMode = ipcpb.DeltaMode_DELTA_MODE_IDENTICAL
				}
				if cfg.EnvironmentMode != wantMode {
					t.Fatalf("packet %d environment mode = %v, want %v", i, cfg.EnvironmentMode, wantMode)
				}
				if wantProps := map[string]string{"Configuration": "Release"}; !maps.Equal(cfg.GlobalProperties, wantProps) {
					t.Fatalf("packet %d global properties = %v, want %v", i, cfg.GlobalProperties, wantProps)
				}
			}
		})
	}
}

func TestSendDoesNotKeepDeltaMarks(t *testing.T) {
	ctx := context.Background()
	parent, child := inProcessPair(t, nil, nil)
	env := map[string]string{"A": "1"}
	m := taskConfig(1, env)
	for range 2 {
		if err := parent.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
		if m.EnvironmentMode != ipcpb.DeltaMode_DELTA_MODE_FULL || !maps.Equal(m.Environment, env) {
			t.Fatalf("Send left the caller's message changed: mode %v env %v", m.EnvironmentMode, m.Environment)
		}
	}
	for range 2 {
		if _, err := child.Recv(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSendBufferReadBack(t *testing.T) {
	wmax := wmemMax()
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
	dctx, dispatch := ptel.tp.Tracer("test").Start(ctx, "runtime.dispatch")
	if err := parent.Send(dctx, taskConfig(1, nil)); err != nil {
		t.Fatal(err)
	}
	dispatch.End()
	in, err := child.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := dispatch.SpanContext()
	names := map[string]bool{}
	for _, s := range ctel.spans.Ended() {
		names[s.Name()] = true
		if s.SpanContext().TraceID() != want.TraceID() || s.Parent().SpanID() != want.SpanID() {
			t.Fatalf("child span %s: trace %s parent %s, want trace %s parent %s", s.Name(),
				s.SpanContext().TraceID(), s.Parent().SpanID(), want.TraceID(), want.SpanID())
		}
	}
	if !names["ipc.receive"] || !names["ipc.deserialize"] {
		t.Fatalf("child spans %v, want ipc.receive and ipc.deserialize", names)
	}
	for _, s := range ptel.spans.Ended() {
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
	identical, err := AppendFrame(nil, &ipcpb.TaskResult{EnvironmentMode: ipcpb.DeltaMode_DELTA_MODE_IDENTICAL}, DefaultMaxPacketSize)
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
		{"delta", identical, func(err error) bool { return errors.Is(err, errDeltaBaseline) }},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			ctx := context.Background()
			tel := newTel(t)
			p, raw := rawPair(t)
			ch := make(chan error, 1)
			go func() {
				err := handshake(ctx, raw, p.token, handshakeTimeoutForTest, nil)
				if err == nil {
					_, err = raw.Write(tt.bytes)
				}
				ch <- err
			}()
			parent, err := p.Connect(ctx, append(tel.opts(), WithMaxPacketSize(1<<10))...)
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

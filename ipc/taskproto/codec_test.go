package taskproto

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/internal/telemetrytest"
	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// TestReplyTimings: a reply carries the host's receive, deserialize,
// execute and serialize, placed within the round trip, and, when the
// request's trace is sampled, the reply's send, stamped into the packet
// before the write carrying the stamp is issued: it starts after the
// serialize and ends before the parent had read the reply whole.
func TestReplyTimings(t *testing.T) {
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	for _, tc := range []struct {
		mode    ipc.Mode
		sampled bool
	}{{ipc.Sync, true}, {ipc.Async, true}, {ipc.Sync, false}} {
		mode := tc.mode
		t.Run(fmt.Sprintf("%s sampled=%v", mode, tc.sampled), func(t *testing.T) {
			ctx := context.Background()
			if tc.sampled {
				ctx = trace.ContextWithSpanContext(ctx, sampled)
			}
			parent, child := pair(t, []ipc.Option{ipc.WithMode(mode), WithCodec()}, []ipc.Option{ipc.WithMode(mode), WithCodec()})
			const n = 50
			errc := make(chan error, 1)
			go func() {
				for range n {
					in, err := child.Recv(ctx)
					if err != nil {
						errc <- err
						return
					}
					cfg := in.Msg.(*ipcpb.TaskConfiguration)
					start := time.Now()
					res := &ipcpb.TaskResult{Id: cfg.Id, Status: ipcpb.Status_STATUS_SUCCESS}
					if err := Reply(ctx, child, in, res, start, time.Since(start)); err != nil {
						errc <- err
						return
					}
					if len(res.Timings) != 3 || res.ReceiveStartUnixNano != in.ReceiveStart.UnixNano() {
						errc <- fmt.Errorf("Reply left res with %d timings and anchor %d, want 3 and %d", len(res.Timings), res.ReceiveStartUnixNano, in.ReceiveStart.UnixNano())
						return
					}
				}
				errc <- child.Flush(ctx)
			}()
			for i := range n {
				sendStart := time.Now()
				if err := parent.Send(ctx, taskConfig(uint64(i), map[string]string{"PATH": "/bin"})); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
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
				// Phases follow one another: the reply is serialized after
				// the execute phase ended.
				if ser, exe := res.Timings[3], res.Timings[2]; ser.StartOffsetNs < exe.StartOffsetNs+exe.DurationNs {
					t.Fatalf("reply serialize starts at %d, before execute ends at %d", ser.StartOffsetNs, exe.StartOffsetNs+exe.DurationNs)
				}
				got := AppendTimings(nil, res, sendStart, in.ReceiveStart)
				if want := map[bool]int{true: NumTimings, false: NumTimings - 1}[tc.sampled]; len(got) != want {
					t.Fatalf("AppendTimings gave %d timings, want %d", len(got), want)
				}
				if (res.ReplySend != nil) != tc.sampled {
					t.Fatalf("reply_send %v in a reply to a request sampled=%v", res.ReplySend, tc.sampled)
				}
				for _, tm := range got[:4] {
					if tm.Start.Before(sendStart) || tm.End.After(in.ReceiveStart) {
						t.Fatalf("%v/%v placed at [%v, %v], outside the round trip [%v, %v]", tm.Phase, tm.Direction, tm.Start, tm.End, sendStart, in.ReceiveStart)
					}
				}
				if !tc.sampled {
					continue
				}
				send, ser := got[4], got[3]
				if send.Phase != telemetry.Send || send.Direction != telemetry.Reply {
					t.Fatalf("fifth timing %v/%v, want send/reply", send.Phase, send.Direction)
				}
				if recvEnd := in.ReceiveStart.Add(in.ReceiveDuration); send.Start.Before(ser.End) || send.End.Before(send.Start) || send.End.After(recvEnd) {
					t.Fatalf("send/reply at [%v, %v], want from the serialize's end %v to no later than the reply was read whole, %v",
						send.Start.Sub(sendStart), send.End.Sub(sendStart), ser.End.Sub(sendStart), recvEnd.Sub(sendStart))
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestReplyWithoutCodec(t *testing.T) {
	ctx := context.Background()
	parent, child := pair(t, nil, nil)
	if err := parent.Send(ctx, taskConfig(1, nil)); err != nil {
		t.Fatal(err)
	}
	in, err := child.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := Reply(ctx, child, in, &ipcpb.TaskResult{Id: 1}, time.Now(), 0); !errors.Is(err, ErrNoCodec) {
		t.Fatalf("Reply on a plain connection = %v, want ErrNoCodec", err)
	}
}

func TestDeltaEncoding(t *testing.T) {
	env := map[string]string{"PATH": "/usr/bin", "HOME": "/root", "LANG": "C.UTF-8"}
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("delta=%v", on), func(t *testing.T) {
			ctx := context.Background()
			parent, child := pair(t, []ipc.Option{WithCodec(WithDelta(on))}, []ipc.Option{WithCodec()})
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
	parent, child := pair(t, []ipc.Option{WithCodec()}, []ipc.Option{WithCodec()})
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

// TestTraceContext: a configuration carries the span of the ctx it is sent
// with, the result carries the request's back, and both ends' receive
// spans join the request's trace.
func TestTraceContext(t *testing.T) {
	ctx := context.Background()
	ptel, ctel := newTel(t), newTel(t)
	parent, child := pair(t, append(ptel.opts(), WithCodec()), append(ctel.opts(), WithCodec()))
	dctx, dispatch := ptel.TP.Tracer("test").Start(ctx, "runtime.dispatch")
	cfg := taskConfig(1, nil)
	if err := parent.Send(dctx, cfg); err != nil {
		t.Fatal(err)
	}
	dispatch.End()
	want := dispatch.SpanContext()
	if sc := ipc.ParseTraceParent(cfg.TraceParent, ""); sc.SpanID() != want.SpanID() || sc.TraceID() != want.TraceID() || len(cfg.TraceContext) != 0 {
		t.Fatalf("Send left trace_parent %x and trace_context %v on the configuration, want the span %v in binary and no map (no tracestate)",
			cfg.TraceParent, cfg.TraceContext, want.SpanID())
	}
	in, err := child.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sc := trace.SpanContextFromContext(in.Context(ctx)); sc.SpanID() != want.SpanID() || !sc.IsRemote() {
		t.Fatalf("request context span %v, want remote %v", sc.SpanID(), want.SpanID())
	}
	if sc := in.SpanContext(); !sc.Equal(trace.SpanContextFromContext(in.Context(ctx))) {
		t.Fatalf("SpanContext %v, want the one Context carries", sc)
	}
	for _, s := range ctel.Spans.Ended() {
		if s.SpanContext().TraceID() != want.TraceID() || s.Parent().SpanID() != want.SpanID() {
			t.Fatalf("child span %s: trace %s parent %s, want trace %s parent %s", s.Name(),
				s.SpanContext().TraceID(), s.Parent().SpanID(), want.TraceID(), want.SpanID())
		}
	}
	// The host's own span, started from the request, must not leak into
	// the reply: the reply names the request.
	hctx, hs := ctel.TP.Tracer("test").Start(in.Context(ctx), "taskhost.execute")
	if err := Reply(hctx, child, in, &ipcpb.TaskResult{Id: 1}, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	hs.End()
	out, err := parent.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sc := trace.SpanContextFromContext(out.Context(ctx)); sc.SpanID() != want.SpanID() {
		t.Fatalf("reply context span %v, want the request's %v", sc.SpanID(), want.SpanID())
	}
	var names []string
	for _, s := range ptel.Spans.Ended() {
		names = append(names, s.Name())
		// The result names the span its request was sent under, a span of
		// this process: its receive and deserialize start under that span
		// itself, not under a remote copy of its context.
		if (s.Name() == "ipc.receive" || s.Name() == "ipc.deserialize") && (s.Parent().SpanID() != want.SpanID() || s.Parent().IsRemote()) {
			t.Fatalf("parent %s: parent span %s (remote %v), want %s, local", s.Name(), s.Parent().SpanID(), s.Parent().IsRemote(), want.SpanID())
		}
	}
	if fmt.Sprint(names) != "[ipc.serialize ipc.send runtime.dispatch ipc.receive ipc.deserialize]" {
		t.Fatalf("parent spans %v", names)
	}
	// A result that answers no request awaiting one (or names another span
	// than its request's) joins the span it names, as a remote parent.
	ptel.Spans.Reset()
	other := trace.NewSpanContext(trace.SpanContextConfig{TraceID: want.TraceID(), SpanID: trace.SpanID{7}, TraceFlags: trace.FlagsSampled, Remote: true})
	if err := child.Send(ctx, &ipcpb.TaskResult{Id: 1, TraceParent: ipc.AppendTraceParent(nil, other)}); err != nil {
		t.Fatal(err)
	}
	if _, err := parent.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	// A packet without a trace context carries none.
	if err := parent.Send(ctx, taskConfig(2, nil)); err != nil {
		t.Fatal(err)
	}
	if in, err := child.Recv(ctx); err != nil {
		t.Fatal(err)
	} else if sc := in.SpanContext(); sc.IsValid() || in.Context(ctx) != ctx {
		t.Fatalf("a configuration sent without a span: SpanContext %v, Context not the parent", sc)
	}
	for _, s := range ptel.Spans.Ended() {
		if (s.Name() == "ipc.receive" || s.Name() == "ipc.deserialize") && (s.Parent().SpanID() != other.SpanID() || !s.Parent().IsRemote()) {
			t.Fatalf("unawaited result %s: parent span %s (remote %v), want %s, remote", s.Name(), s.Parent().SpanID(), s.Parent().IsRemote(), other.SpanID())
		}
	}
}

// TestDeltaWithoutBaseline: a result whose environment is marked identical
// before any full one is a protocol error of kind delta that fails the
// connection.
func TestDeltaWithoutBaseline(t *testing.T) {
	ctx := context.Background()
	tel := newTel(t)
	parent, child := pair(t, append(tel.opts(), WithCodec()), nil) // the child speaks plain protobuf
	if err := child.Send(ctx, &ipcpb.TaskResult{Id: 1, EnvironmentMode: ipcpb.DeltaMode_DELTA_MODE_IDENTICAL}); err != nil {
		t.Fatal(err)
	}
	_, err := parent.Recv(ctx)
	var pe *ipc.ProtocolError
	if !errors.As(err, &pe) || pe.Kind != KindDelta || !errors.Is(err, errNoBaseline) {
		t.Fatalf("Recv = %v, want a *ipc.ProtocolError of kind %s", err, KindDelta)
	}
	if got := tel.sum(t, ipc.MetricProtocolErrors, map[string]string{string(ipc.AttrKind): KindDelta}); got != 1 {
		t.Fatalf("%s{kind=%s} = %d, want 1", ipc.MetricProtocolErrors, KindDelta, got)
	}
	if err := parent.Send(ctx, &ipcpb.Shutdown{}); err == nil {
		t.Fatal("Send after a protocol error succeeded, want an error")
	}
}

// TestControlPacketsPlain: log and shutdown packets pass through the
// codec as plain protobuf.
func TestControlPacketsPlain(t *testing.T) {
	ctx := context.Background()
	parent, child := pair(t, []ipc.Option{WithCodec()}, nil)
	if err := parent.Send(ctx, &ipcpb.LogMessage{TaskId: 3, Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	in, err := child.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := in.Msg.(*ipcpb.LogMessage); !ok || m.Text != "hi" || m.TaskId != 3 {
		t.Fatalf("got %v, want the log message", in.Msg)
	}
}

// TestReplyUnderTheRequestsContext: Reply given a context that carries the
// request's span already (a task host derives one for the task and its
// reply) sends under that context as it is, making no second one; under
// another it sends under the request's span.
func TestReplyUnderTheRequestsContext(t *testing.T) {
	ctx := context.Background()
	ct := &telemetrytest.Leaves{}
	comp, err := telemetry.NewComponent("ipc", telemetry.ComponentConfig{TracerProvider: ct, MeterProvider: metricnoop.NewMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	parent, child := pair(t, []ipc.Option{WithCodec()}, []ipc.Option{WithCodec(), ipc.WithTelemetry(comp)})
	want := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	if err := parent.Send(trace.ContextWithSpanContext(ctx, want), taskConfig(1, nil)); err != nil {
		t.Fatal(err)
	}
	in, err := child.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tctx := in.Context(ctx)
	for _, c := range []context.Context{tctx, ctx} {
		if err := Reply(c, child, in, &ipcpb.TaskResult{Id: 1}, time.Now(), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := parent.Recv(ctx); err != nil {
			t.Fatal(err)
		}
		lf, _ := ct.Get("ipc.serialize")
		got := lf.Ctx
		if sc := trace.SpanContextFromContext(got); sc.SpanID() != want.SpanID() {
			t.Errorf("the reply's serialize under span %v, want the request's %v", sc.SpanID(), want.SpanID())
		}
		if c == tctx && got != tctx {
			t.Error("Reply under a context carrying the request's span made another one")
		}
		if c == ctx && got == tctx {
			t.Error("Reply under a plain context recorded no serialize leaf of its own")
		}
	}
}

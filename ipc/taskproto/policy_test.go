package taskproto

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/internal/telemetrytest"
	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// replyRecorder is a span that may record its task's reply phases itself
// (ReplyPhaseRecorder).
type replyRecorder struct {
	trace.Span // no-op
	sc         trace.SpanContext
	records    bool
}

func (r *replyRecorder) SpanContext() trace.SpanContext { return r.sc }
func (r *replyRecorder) RecordsReplyPhases() bool       { return r.records }

// TestReplyPhases: a result that names the span its configuration was
// sent under gets its receive and deserialize leaves recorded in the
// Send's context itself, or none, and the Incoming marked PhasesLeft,
// when that span records them (ReplyPhaseRecorder); a result that names
// another span gets them under the span it names. Either way the
// configuration is awaited until its result arrives, and a log message
// gets no phase spans.
func TestReplyPhases(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	other := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{3}, TraceFlags: trace.FlagsSampled})
	for _, tc := range []struct {
		name    string
		records bool
		echo    trace.SpanContext // what the result names
		left    bool
	}{
		{"recorder", true, sc, true},
		{"not a recorder", false, sc, false},
		{"another span", true, other, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := &telemetrytest.Leaves{}
			comp, err := telemetry.NewComponent("ipc", telemetry.ComponentConfig{TracerProvider: at, MeterProvider: metricnoop.NewMeterProvider()})
			if err != nil {
				t.Fatal(err)
			}
			bg := context.Background()
			parent, child := pair(t, []ipc.Option{ipc.WithTelemetry(comp), WithCodec()}, []ipc.Option{WithCodec()})
			if err := child.Send(bg, &ipcpb.LogMessage{Text: "hello"}); err != nil {
				t.Fatal(err)
			}
			if _, err := parent.Recv(bg); err != nil {
				t.Fatal(err)
			}
			if n := at.Len(); n != 0 {
				t.Fatalf("a log message got %d phase leaves, want none", n)
			}
			ctx := trace.ContextWithSpan(bg, &replyRecorder{Span: trace.SpanFromContext(bg), sc: sc, records: tc.records})
			if err := parent.Send(ctx, taskConfig(1, nil)); err != nil {
				t.Fatal(err)
			}
			if _, err := child.Recv(bg); err != nil {
				t.Fatal(err)
			}
			if got := awaited(parent); !slices.Equal(got, []uint64{1}) {
				t.Errorf("awaited %v after the configuration, want [1]", got)
			}
			res := &ipcpb.TaskResult{Id: 1, Status: ipcpb.Status_STATUS_SUCCESS, TraceParent: ipc.AppendTraceParent(nil, tc.echo)}
			if err := child.Send(bg, res); err != nil {
				t.Fatal(err)
			}
			in, err := parent.Recv(bg)
			if err != nil {
				t.Fatal(err)
			}
			if got := awaited(parent); len(got) != 0 {
				t.Errorf("awaited %v after the result, want none", got)
			}
			if in.PhasesLeft != tc.left {
				t.Errorf("PhasesLeft = %v, want %v", in.PhasesLeft, tc.left)
			}
			if in.ReceiveStart.IsZero() || in.Size == 0 {
				t.Errorf("the result's times and size are missing: start %v, size %d", in.ReceiveStart, in.Size)
			}
			for _, name := range []string{"ipc.serialize", "ipc.send"} {
				if _, ok := at.Get(name); !ok {
					t.Errorf("no %s leaf recorded", name)
				}
			}
			for _, name := range []string{"ipc.receive", "ipc.deserialize"} {
				lf, ok := at.Get(name)
				if ok == tc.left {
					t.Errorf("%s recorded: %v, want %v", name, ok, !tc.left)
				}
				if !ok {
					continue
				}
				if tc.echo.Equal(sc) && lf.Ctx != ctx {
					t.Errorf("%s recorded in %v, want the Send's context", name, lf.Ctx)
				}
				if got := trace.SpanContextFromContext(lf.Ctx); got.SpanID() != tc.echo.SpanID() {
					t.Errorf("%s recorded under span %s, want %s", name, got.SpanID(), tc.echo.SpanID())
				}
			}
		})
	}
}

// awaited returns the ids conn's codec awaits results of, sorted.
func awaited(conn *ipc.Conn) []uint64 {
	var ids []uint64
	conn.Codec().(ipc.PhasePolicy).Awaiting(func(id uint64) { ids = append(ids, id) })
	slices.Sort(ids)
	return ids
}

// TestUnsentAwaitsNothing: a configuration over the size limit is not
// sent, so it awaits no result (PhasePolicy.Unsent), which the stall
// watchdog would otherwise report one threshold later; one that is sent
// still awaits its result.
func TestUnsentAwaitsNothing(t *testing.T) {
	parent, _ := pair(t, []ipc.Option{WithCodec(), ipc.WithMaxPacketSize(1 << 10)}, []ipc.Option{WithCodec()})
	big := taskConfig(1, map[string]string{"PATH": strings.Repeat("x", 4<<10)})
	var tooBig *ipc.PacketSizeError
	if err := parent.Send(context.Background(), big); !errors.As(err, &tooBig) {
		t.Fatalf("Send of a %d-byte environment with a 1 KiB limit: %v, want an *ipc.PacketSizeError", 4<<10, err)
	}
	if got := awaited(parent); len(got) != 0 {
		t.Errorf("awaited %v after a configuration that was not sent, want none", got)
	}
	if err := parent.Send(context.Background(), taskConfig(2, nil)); err != nil {
		t.Fatal(err)
	}
	if got := awaited(parent); !slices.Equal(got, []uint64{2}) {
		t.Errorf("awaited %v after a configuration that was sent, want [2]", got)
	}
}

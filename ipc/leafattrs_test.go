package ipc

import (
	"context"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/internal/telemetrytest"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// TestLeafAttributesOnlyWhenRead: a Conn gives its leaves (serialize,
// send, receive, deserialize) their attributes only when the tracer reads
// them (PhaseAttributes); otherwise it builds none, which would allocate
// on every packet.
func TestLeafAttributesOnlyWhenRead(t *testing.T) {
	for _, exported := range []bool{false, true} {
		at := &telemetrytest.Leaves{Exported: exported}
		comp, err := telemetry.NewComponent("ipc", telemetry.ComponentConfig{TracerProvider: at, MeterProvider: metricnoop.NewMeterProvider()})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		parent, child := inProcessPair(t, []Option{WithTelemetry(comp)}, nil)
		if err := parent.Send(ctx, taskConfig(1, nil)); err != nil {
			t.Fatal(err)
		}
		if _, err := child.Recv(ctx); err != nil {
			t.Fatal(err)
		}
		if err := child.Send(ctx, &ipcpb.TaskResult{Id: 1, Status: ipcpb.Status_STATUS_SUCCESS}); err != nil {
			t.Fatal(err)
		}
		if _, err := parent.Recv(ctx); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"ipc.serialize", "ipc.send", "ipc.receive", "ipc.deserialize"} {
			lf, ok := at.Get(name)
			if !ok {
				t.Errorf("exported=%v: no %s leaf recorded (have %d)", exported, name, at.Len())
				continue
			}
			attrs := lf.Attrs
			hasBytes := false
			for _, kv := range attrs {
				hasBytes = hasBytes || kv.Key == telemetry.AttrBytes
			}
			if exported != hasBytes || !exported && len(attrs) > 0 {
				t.Errorf("exported=%v: %s recorded with %v, want amdahl.bytes only when exported", exported, name, attrs)
			}
		}
	}
}

// replyRecorder is a span that may record its task's reply phases itself
// (ReplyPhaseRecorder).
type replyRecorder struct {
	trace.Span // no-op
	sc         trace.SpanContext
	records    bool
}

func (r *replyRecorder) SpanContext() trace.SpanContext { return r.sc }
func (r *replyRecorder) RecordsReplyPhases() bool       { return r.records }

// TestReplyPhasesLeftToTheRequestSpan: a result that names the span its
// task was sent under gets no receive and deserialize leaves from the
// Conn when that span records them itself (ReplyPhaseRecorder), and is
// marked ReplyPhasesLeft with the times to record them from; when the
// span does not, or the result names another span, the Conn records
// them as before.
func TestReplyPhasesLeftToTheRequestSpan(t *testing.T) {
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
			parent, child := inProcessPair(t, []Option{WithTelemetry(comp)}, nil)
			ctx := trace.ContextWithSpan(context.Background(), &replyRecorder{Span: trace.SpanFromContext(context.Background()), sc: sc, records: tc.records})
			if err := parent.Send(ctx, taskConfig(1, nil)); err != nil {
				t.Fatal(err)
			}
			if _, err := child.Recv(context.Background()); err != nil {
				t.Fatal(err)
			}
			res := &ipcpb.TaskResult{Id: 1, Status: ipcpb.Status_STATUS_SUCCESS, TraceParent: AppendTraceParent(nil, tc.echo)}
			if err := child.Send(context.Background(), res); err != nil {
				t.Fatal(err)
			}
			in, err := parent.Recv(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if in.ReplyPhasesLeft != tc.left {
				t.Errorf("ReplyPhasesLeft = %v, want %v", in.ReplyPhasesLeft, tc.left)
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
				if _, ok := at.Get(name); ok == tc.left {
					t.Errorf("%s recorded: %v, want %v", name, ok, !tc.left)
				}
			}
		})
	}
}

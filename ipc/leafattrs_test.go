package ipc

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// attrsTracer is a PhaseTracer that keeps the attributes each leaf is
// recorded with; exported says whether it reads them (PhaseAttributes).
type attrsTracer struct {
	tracenoop.TracerProvider
	exported bool
	mu       sync.Mutex
	leaves   map[string][]attribute.KeyValue // by span name
}

func (a *attrsTracer) StartPhaseSpan(ctx context.Context, _, _ string, _ telemetry.Phase, _ telemetry.Direction, _ time.Time) (context.Context, trace.Span) {
	return ctx, trace.SpanFromContext(ctx)
}

func (a *attrsTracer) EndPhaseSpan(trace.Span, time.Time) {}

func (a *attrsTracer) RecordPhaseSpan(_ context.Context, name, _ string, _ telemetry.Phase, _ telemetry.Direction, _, _ time.Time, attrs []attribute.KeyValue) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.leaves[name] = append([]attribute.KeyValue(nil), attrs...)
}

func (a *attrsTracer) PhaseAttributes() bool { return a.exported }

// TestLeafAttributesOnlyWhenRead: a Conn gives its leaves (serialize,
// send, receive, deserialize) their attributes only when the tracer reads
// them (PhaseAttributes); otherwise it builds none, which would allocate
// on every packet.
func TestLeafAttributesOnlyWhenRead(t *testing.T) {
	for _, exported := range []bool{false, true} {
		at := &attrsTracer{exported: exported, leaves: map[string][]attribute.KeyValue{}}
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
		at.mu.Lock()
		for _, name := range []string{"ipc.serialize", "ipc.send", "ipc.receive", "ipc.deserialize"} {
			attrs, ok := at.leaves[name]
			if !ok {
				t.Errorf("exported=%v: no %s leaf recorded (have %d)", exported, name, len(at.leaves))
				continue
			}
			hasBytes := false
			for _, kv := range attrs {
				hasBytes = hasBytes || kv.Key == telemetry.AttrBytes
			}
			if exported != hasBytes || !exported && len(attrs) > 0 {
				t.Errorf("exported=%v: %s recorded with %v, want amdahl.bytes only when exported", exported, name, attrs)
			}
		}
		at.mu.Unlock()
	}
}

package ipc

import (
	"context"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"

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

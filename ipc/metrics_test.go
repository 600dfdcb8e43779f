package ipc

import (
	"context"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"go.opentelemetry.io/otel/attribute"
	apimetric "go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/amdahl-rt/amdahl/internal/telemetrytest"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// The ipc metrics carry the scenario and variant of the component given
// with WithTelemetry, beside the connection's own transport, so dashboards
// filter them like the phase metrics.
func TestMetricsCarryRunAttributes(t *testing.T) {
	reader := metric.NewManualReader()
	mp := metric.NewMeterProvider(metric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	comp, err := telemetry.NewComponent("ipc", telemetry.ComponentConfig{MeterProvider: mp, Attributes: []attribute.KeyValue{
		telemetry.AttrTransport.String("ipc"), telemetry.AttrScenario.String("s1"), telemetry.AttrVariant.String("candidate")}})
	if err != nil {
		t.Fatal(err)
	}
	// Through a real handshake: handshakes and the buffer gauges.
	opts := []Option{WithTelemetry(comp), WithMeterProvider(mp)}
	parent, child := inProcessPair(t, opts, opts)
	_ = parent.Close()
	_ = child.Close()
	// And every other instrument, directly.
	m, err := newMetrics(mp, "socketpair", comp)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m.packet(ctx, opSend, telemetry.Request, 10)
	m.blocked.Record(ctx, 0.001, m.blockedOpt[telemetry.Request])
	m.queueDepth.Add(ctx, 1, m.plainAdd)
	m.queueSize.Add(ctx, 10, m.plainAdd)
	m.protocolError(ctx, "decode")
	m.stalls.Add(ctx, 1, apimetric.WithAttributeSet(m.set(AttrKind.String("write"))))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	check := func(name string, attrs attribute.Set) {
		seen[name]++
		enc := attrs.Encoded(attribute.DefaultEncoder())
		if v, ok := attrs.Value(telemetry.AttrScenario); !ok || v.AsString() != "s1" {
			t.Errorf("%s {%s}: no amdahl.scenario=s1", name, enc)
		}
		if v, ok := attrs.Value(telemetry.AttrVariant); !ok || v.AsString() != "candidate" {
			t.Errorf("%s {%s}: no amdahl.variant=candidate", name, enc)
		}
		if v, _ := attrs.Value(telemetry.AttrTransport); v.AsString() != "socketpair" {
			t.Errorf("%s {%s}: transport %q, want the connection's (socketpair)", name, enc, v.AsString())
		}
	}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					check(mt.Name, p.Attributes)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					check(mt.Name, p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					check(mt.Name, p.Attributes)
				}
			}
		}
	}
	for _, name := range []string{MetricBytes, MetricPackets, MetricSendBlocked, MetricQueueDepth, MetricQueueBytes,
		MetricBufferRequested, MetricBufferEffective, MetricHandshakes, MetricProtocolErrors, MetricStalls} {
		if seen[name] == 0 {
			t.Errorf("%s not recorded", name)
		}
	}
}

// TestUsesSpans: a Conn reads the span of a Send's context only when its
// phases or its metrics record (taskproto.Reply then makes no context
// for the request's span, and the writer none for each packet).
func TestUsesSpans(t *testing.T) {
	comp, err := telemetry.NewComponent("ipc", telemetry.ComponentConfig{TracerProvider: &telemetrytest.Leaves{}, MeterProvider: metricnoop.NewMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	// What OTEL_SDK_DISABLED=true gives: the no-op providers.
	off, err := telemetry.NewComponent("ipc", telemetry.ComponentConfig{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	if comp.Enabled() == off.Enabled() {
		t.Fatalf("Enabled: component %v, no-op one %v", comp.Enabled(), off.Enabled())
	}
	sdk := metric.NewMeterProvider(metric.WithReader(metric.NewManualReader()))
	t.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	for _, tc := range []struct {
		name string
		opts []Option
		want bool
	}{
		{"nothing", nil, false},
		{"no-op meter provider", []Option{WithMeterProvider(metricnoop.NewMeterProvider())}, false},
		{"disabled component", []Option{WithTelemetry(off)}, false},
		{"component", []Option{WithTelemetry(comp)}, true},
		{"meter provider", []Option{WithMeterProvider(sdk)}, true},
	} {
		parent, child := inProcessPair(t, tc.opts, tc.opts)
		if got := parent.UsesSpans(); got != tc.want {
			t.Errorf("%s: parent UsesSpans() = %v, want %v", tc.name, got, tc.want)
		}
		if got := child.UsesSpans(); got != tc.want {
			t.Errorf("%s: child UsesSpans() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

package chunking

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/codes"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// point is one data point: its metric, attributes and value.
type point struct {
	metric string
	attrs  attribute.Set
	value  float64
}

func points(t *testing.T, r *sdkmetric.ManualReader) []point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []point
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out = append(out, point{m.Name, p.Attributes, float64(p.Value)})
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					out = append(out, point{m.Name, p.Attributes, float64(p.Count)})
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

// The chunking and sidecar metrics carry the component's scenario and
// variant (not its transport), and the rare-event counters exist at zero
// before the first event, so that dashboards show 0, not no data.
func TestMetricsRunAttributesAndZeroSeries(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	comp, err := telemetry.NewComponent("chunking", telemetry.ComponentConfig{MeterProvider: mp, Attributes: []attribute.KeyValue{
		telemetry.AttrTransport.String("chunking"), telemetry.AttrScenario.String("s1"), telemetry.AttrVariant.String("candidate")}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMetrics(mp, comp)
	if err != nil {
		t.Fatal(err)
	}
	m.zeroRetries()
	sm, err := newSidecarMetrics(mp, comp)
	if err != nil {
		t.Fatal(err)
	}

	zero := map[string]int{}
	for _, p := range points(t, reader) {
		if p.value != 0 {
			t.Errorf("%s %v = %v before any event, want 0", p.metric, p.attrs.Encoded(attribute.DefaultEncoder()), p.value)
		}
		zero[p.metric]++
	}
	for name, want := range map[string]int{MetricRetries: len(retryableCodes), MetricRejections: 1, MetricPartialBuffers: 1,
		MetricDuplicates: 1, MetricProtocolErrors: len(sidecarProtocolReasons), MetricSidecarRejections: len(sidecarRefusalReasons)} {
		if zero[name] != want {
			t.Errorf("%s: %d zero series, want %d", name, zero[name], want)
		}
	}

	ctx := context.Background()
	m.planned(ctx, &Plan{Chunks: make([]*dtpb.OrchestratorResponse, 2), ActionSizings: 3, ResponseSizings: 1, Oversized: &OversizedActionError{}}, 100)
	m.retried(ctx, codes.Unavailable)
	sm.protocolError(ctx, ReasonGap)
	sm.refused(ctx, ReasonPendingInstances)
	sm.partial.Add(ctx, 1, sm.plain)
	sm.dups.Add(ctx, 1, sm.plain)
	seen := map[string]bool{}
	for _, p := range points(t, reader) {
		seen[p.metric] = true
		if v, ok := p.attrs.Value(telemetry.AttrScenario); !ok || v.AsString() != "s1" {
			t.Errorf("%s %v: no amdahl.scenario=s1", p.metric, p.attrs.Encoded(attribute.DefaultEncoder()))
		}
		if v, ok := p.attrs.Value(telemetry.AttrVariant); !ok || v.AsString() != "candidate" {
			t.Errorf("%s %v: no amdahl.variant=candidate", p.metric, p.attrs.Encoded(attribute.DefaultEncoder()))
		}
		if _, ok := p.attrs.Value(telemetry.AttrTransport); ok {
			t.Errorf("%s: carries the component's transport", p.metric)
		}
	}
	for _, name := range []string{MetricSizingComputations, MetricBytes, MetricChunks, MetricRetries, MetricRejections,
		MetricPartialBuffers, MetricDuplicates, MetricProtocolErrors, MetricSidecarRejections} {
		if !seen[name] {
			t.Errorf("%s not recorded", name)
		}
	}
}

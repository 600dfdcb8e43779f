package spans_test

import (
	"context"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// apiOnly hides a TracerProvider's telemetry.PhaseTracer methods: a
// Component built on it makes its phase spans through the OTel API
// (Tracer().Start with span options), as on any other provider.
type apiOnly struct{ trace.TracerProvider }

// BenchmarkComponentUnit measures one unit as the runtime's task unit
// has its phases (a root amdahl.work, tracked by a Collector; a phase with
// a leaf under it and a leaf with an attribute beside it) through the
// spans TracerProvider, taken whole (via=phasetracer: the Component calls
// its telemetry.PhaseTracer methods) or through the OTel API's
// trace.Tracer.Start with span options (via=otel-api): what dropping
// PhaseTracer would cost.
//
//	go test -run '^$' -bench ComponentUnit -benchmem ./telemetry/spans/
func BenchmarkComponentUnit(b *testing.B) {
	for _, via := range []string{"phasetracer", "otel-api"} {
		b.Run("via="+via, func(b *testing.B) {
			col := spans.NewCollector(func([]spans.Span, any) {})
			defer col.Close()
			tp := spans.NewTracerProvider(spans.TracerConfig{Collector: col})
			var p trace.TracerProvider = tp
			if via == "otel-api" {
				p = apiOnly{tp}
			}
			c, err := telemetry.NewComponent("ipc", telemetry.ComponentConfig{TracerProvider: p, MeterProvider: metricnoop.NewMeterProvider()})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				wctx, w := c.StartWork(ctx)
				col.Track(w.Span(), nil)
				pctx, ph := c.Start(wctx, telemetry.Send, telemetry.Request)
				_, leaf := c.Start(pctx, telemetry.Serialize, telemetry.Request, telemetry.Leaf())
				leaf.End()
				ph.End()
				_, sent := c.Start(wctx, telemetry.Send, telemetry.Reply, telemetry.Leaf())
				sent.End(telemetry.WithAttributes(telemetry.AttrBytes.Int(100)))
				w.End(telemetry.OK, nil)
			}
		})
	}
}

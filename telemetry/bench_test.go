package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

//go:noinline
func emptyPhase(ctx context.Context) context.Context { return ctx }

// BenchmarkPhase measures one StartPhase+End in each mode; "empty" is the
// baseline an "off" phase is compared with (benchstat the two).
func BenchmarkPhase(b *testing.B) {
	ctx := context.Background()
	b.Run("empty", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			emptyPhase(ctx)
		}
	})
	b.Run("off", func(b *testing.B) {
		var c *Component
		b.ReportAllocs()
		// A b.N loop, not b.Loop: b.Loop keeps calls in its body from being
		// inlined, and the disabled check is meant to inline into callers.
		for i := 0; i < b.N; i++ {
			_, ph := c.StartPhase(ctx, Serialize, Request)
			ph.End()
		}
	})
	for _, mode := range []struct {
		name   string
		labels bool
	}{{"spans+metrics", false}, {"spans+metrics+labels", true}} {
		b.Run(mode.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			defer tp.Shutdown(ctx)
			defer mp.Shutdown(ctx)
			c, err := NewComponent("ipc", ComponentConfig{TracerProvider: tp, MeterProvider: mp, PhaseLabels: mode.labels,
				Attributes: []attribute.KeyValue{AttrTransport.String("ipc"), AttrScenario.String("taskhost"), AttrVariant.String("baseline")}})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				_, ph := c.StartPhase(ctx, Serialize, Request)
				ph.End()
			}
		})
	}
	// The SDK alone, as the reference: one span and one histogram record
	// with the same attributes.
	b.Run("sdk-only", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		defer tp.Shutdown(ctx)
		defer mp.Shutdown(ctx)
		tr := tp.Tracer("x")
		h, _ := mp.Meter("x").Float64Histogram("h")
		// The same five attributes the phase API puts on span and metric.
		kv := []attribute.KeyValue{AttrComponent.String("ipc"), AttrTransport.String("ipc"), AttrScenario.String("taskhost"),
			AttrPhase.String("serialize"), AttrDirection.String("request")}
		so := []trace.SpanStartOption{trace.WithAttributes(kv...)}
		mo := metric.WithAttributeSet(attribute.NewSet(kv...))
		b.ReportAllocs()
		for b.Loop() {
			_, s := tr.Start(ctx, "ipc.serialize", so...)
			s.End()
			h.Record(ctx, 1, mo)
		}
	})
}

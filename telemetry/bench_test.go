package telemetry

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

//go:noinline
func emptyPhase(ctx context.Context) context.Context { return ctx }

// BenchmarkPhase measures one Start+End in each mode; "empty" is the
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
			_, ph := c.Start(ctx, Serialize, Request)
			ph.End()
		}
	})
	// noop-providers: the OTel API's no-op providers, as
	// OTEL_SDK_DISABLED=true gives them: a Component that exists but
	// records nothing.
	for _, mode := range []struct {
		name        string
		sdk, labels bool
	}{{"noop-providers", false, false}, {"spans+metrics", true, false}, {"spans+metrics+labels", true, true}} {
		b.Run(mode.name, func(b *testing.B) {
			var tp trace.TracerProvider = tracenoop.NewTracerProvider()
			var mp metric.MeterProvider = metricnoop.NewMeterProvider()
			if mode.sdk {
				stp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
				smp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer stp.Shutdown(ctx)
				defer smp.Shutdown(ctx)
				tp, mp = stp, smp
			}
			c, err := NewComponent("ipc", ComponentConfig{TracerProvider: tp, MeterProvider: mp, PhaseLabels: mode.labels,
				Attributes: []attribute.KeyValue{AttrTransport.String("ipc"), AttrScenario.String("taskhost"), AttrVariant.String("baseline")}})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				_, ph := c.Start(ctx, Serialize, Request)
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

// BenchmarkPhaseVsSDK measures one Start+End (spans, metrics and
// pprof labels all on, as amdahl runs) against the SDK's own equivalent
// (one span and one histogram record with the same five attributes), and
// a disabled phase, in the same loop: each iteration runs a batch of 64 of
// each and of an empty call, in an order rotated per iteration, and times
// each batch by the thread's CPU clock (on Linux), so the time the thread
// waits for a CPU on a loaded machine is not counted. It reports phase-ns,
// sdk-ns and off-ns (CPU per call, less the empty batch's: the clock's own
// cost) and x-sdk (phase over SDK). The providers are what amdahl
// run has with no exporter configured: a span processor that keeps
// nothing (the SDK still snapshots each ended span for it) and a metric
// reader; the phases run under a sampled parent span, as a unit's do.
//
//	go test -run '^$' -bench PhaseVsSDK -benchmem -count 5 ./telemetry/
func BenchmarkPhaseVsSDK(b *testing.B) {
	ctx := context.Background()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(discardProcessor{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer tp.Shutdown(ctx)
	defer mp.Shutdown(ctx)
	attrs := []attribute.KeyValue{AttrTransport.String("ipc"), AttrScenario.String("taskhost"), AttrVariant.String("baseline")}
	c, err := NewComponent("ipc", ComponentConfig{TracerProvider: tp, MeterProvider: mp, PhaseLabels: true, Attributes: attrs})
	if err != nil {
		b.Fatal(err)
	}
	var off *Component
	tr := tp.Tracer("sdk-only")
	h, _ := mp.Meter("sdk-only").Float64Histogram("h")
	kv := []attribute.KeyValue{AttrComponent.String("ipc"), AttrTransport.String("ipc"), AttrScenario.String("taskhost"),
		AttrPhase.String("serialize"), AttrDirection.String("request")}
	so := []trace.SpanStartOption{trace.WithAttributes(kv...)}
	mo := metric.WithAttributeSet(attribute.NewSet(kv...))
	pctx, parent := tr.Start(ctx, "parent")
	defer parent.End()

	const batch = 64
	arms := [4]func(){
		func() {
			for range batch {
				_, ph := c.Start(pctx, Serialize, Request)
				ph.End()
			}
		},
		func() {
			for range batch {
				_, s := tr.Start(pctx, "ipc.serialize", so...)
				s.End()
				h.Record(pctx, 1, mo)
			}
		},
		func() {
			for range batch {
				_, ph := off.Start(pctx, Serialize, Request)
				ph.End()
			}
		},
		func() {
			for range batch {
				emptyPhase(pctx)
			}
		},
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu [4]time.Duration
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		for k := range arms {
			a := (i + k) % len(arms)
			t0 := threadCPU()
			arms[a]()
			cpu[a] += threadCPU() - t0
		}
		i++
	}
	// Less the empty batch: the clock's own cost (a system call).
	calls := float64(i * batch)
	for a := range 3 {
		cpu[a] -= cpu[3]
	}
	b.ReportMetric(float64(cpu[0].Nanoseconds())/calls, "phase-ns")
	b.ReportMetric(float64(cpu[1].Nanoseconds())/calls, "sdk-ns")
	b.ReportMetric(float64(cpu[2].Nanoseconds())/calls, "off-ns")
	b.ReportMetric(float64(cpu[0])/float64(cpu[1]), "x-sdk")
}

// discardProcessor is a span processor that keeps nothing: the SDK still
// snapshots every ended span for it, as for amdahl's attribution.
type discardProcessor struct{}

func (discardProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (discardProcessor) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (discardProcessor) Shutdown(context.Context) error                  { return nil }
func (discardProcessor) ForceFlush(context.Context) error                { return nil }

// BenchmarkPerturbOff: what the perturbation hook costs a phase it does
// not perturb. Two components on the same providers, one with a delay set
// on another phase (execute) and one with none, alternate in one loop;
// x-none is the median per-iteration ratio of the perturbed component's
// serialize phase to the plain one's (≈ 1: the hook is one array load).
func BenchmarkPerturbOff(b *testing.B) {
	ctx := context.Background()
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer tp.Shutdown(ctx)
	defer mp.Shutdown(ctx)
	plain, err := NewComponent("ipc", ComponentConfig{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	perturbed, err := NewComponent("ipc", ComponentConfig{TracerProvider: tp, MeterProvider: mp,
		Delay: map[Phase]time.Duration{Execute: time.Millisecond}})
	if err != nil {
		b.Fatal(err)
	}
	const batch = 64 // phases per timed batch, so the clock's cost is small
	run := func(c *Component) time.Duration {
		start := time.Now()
		for range batch {
			_, ph := c.Start(ctx, Serialize, Request)
			ph.End()
		}
		return time.Since(start)
	}
	var ratios []float64
	i := 0
	for b.Loop() {
		var p, q time.Duration
		if i%2 == 0 {
			p, q = run(plain), run(perturbed)
		} else {
			q, p = run(perturbed), run(plain)
		}
		ratios = append(ratios, float64(q)/float64(p))
		i++
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "x-none")
}

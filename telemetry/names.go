package telemetry

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of every tracer and meter amdahl
// creates; Prometheus shows it as otel_scope_name.
const ScopeName = "github.com/amdahl-rt/amdahl"

// Version is amdahl's version, reported as the instrumentation scope version
// and by `amdahl version`.
const Version = "0.1.0"

// Span names that are not <component>.<phase>.
const (
	SpanWork = "amdahl.work"
)

// Attribute keys: the same on spans and metrics (DESIGN.md).
const (
	AttrPhase     attribute.Key = "amdahl.phase"
	AttrDirection attribute.Key = "amdahl.direction"
	AttrComponent attribute.Key = "amdahl.component"
	AttrTransport attribute.Key = "amdahl.transport"
	AttrScenario  attribute.Key = "amdahl.scenario"
	AttrVariant   attribute.Key = "amdahl.variant"
	AttrOutcome   attribute.Key = "amdahl.outcome"
	// AttrSampled is false on amdahl.work.duration for a unit whose trace
	// was not sampled, and absent otherwise: q's denominator is the work
	// time of the units amdahl.phase.critical covers (sampled ones).
	AttrSampled attribute.Key = "amdahl.sampled"
	// Span-only: never put these on metrics.
	AttrWorkID = attribute.Key("amdahl.work.id")
	AttrBytes  = attribute.Key("amdahl.bytes")
	// AttrRemote marks a span synthesised by the parent from phase timings a
	// child process returned in its reply.
	AttrRemote = attribute.Key("amdahl.remote")
	// AttrGapFrom and AttrGapTo name the rows at the ends of a gap (critical
	// time no span covers) on amdahl.phase.critical, whose amdahl.phase is
	// then PhaseGap ("start" and "end" at a unit's edges).
	AttrGapFrom = attribute.Key("amdahl.gap.from")
	AttrGapTo   = attribute.Key("amdahl.gap.to")
)

// LabelPhase is the pprof label set around each phase body.
const LabelPhase = "phase"

// Metric names (OTel); Prometheus names follow the exporter's translation,
// e.g. amdahl.phase.duration (s) → amdahl_phase_duration_seconds_*.
const (
	MetricWorkDuration  = "amdahl.work.duration"
	MetricPhaseDuration = "amdahl.phase.duration"
	MetricPhaseCritical = "amdahl.phase.critical"
)

// DurationBuckets are the explicit histogram boundaries, in seconds, of every
// duration histogram: 10 µs to 60 s, roughly ×2.5 per step. Explicit buckets
// are what Prometheus 2.x reads without feature flags and what
// histogram_quantile needs.
var DurationBuckets = []float64{
	0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

var (
	noopTracer = noop.NewTracerProvider().Tracer("")
	noopSpan   = trace.SpanFromContext(context.Background())
)

func instruments(mp metric.MeterProvider) (phase, critical, work metric.Float64Histogram, err error) {
	m := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
	b := metric.WithExplicitBucketBoundaries(DurationBuckets...)
	if phase, err = m.Float64Histogram(MetricPhaseDuration, metric.WithUnit("s"), b,
		metric.WithDescription("Duration of one phase of a unit of work.")); err != nil {
		return nil, nil, nil, fmt.Errorf("telemetry: create %s: %w", MetricPhaseDuration, err)
	}
	if critical, err = m.Float64Histogram(MetricPhaseCritical, metric.WithUnit("s"), b,
		metric.WithDescription("Exclusive time of one phase on the critical path of a unit of work.")); err != nil {
		return nil, nil, nil, fmt.Errorf("telemetry: create %s: %w", MetricPhaseCritical, err)
	}
	if work, err = m.Float64Histogram(MetricWorkDuration, metric.WithUnit("s"), b,
		metric.WithDescription("End-to-end duration of a unit of work, submission to result delivered.")); err != nil {
		return nil, nil, nil, fmt.Errorf("telemetry: create %s: %w", MetricWorkDuration, err)
	}
	return phase, critical, work, nil
}

// Meter returns the meter components use for their own metrics
// (amdahl.ipc.*, amdahl.chunking.*, amdahl.sidecar.*), from the same scope.
func Meter(mp metric.MeterProvider) metric.Meter {
	return mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
}

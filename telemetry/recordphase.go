package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// RecordCritical records dur as the exclusive time of component's phase p
// (direction d) on the critical path of one unit of work
// (amdahl.phase.critical). The attribution calls it once per row per
// unit; the critical path crosses components (ipc, taskhost, chunking), so
// amdahl.component is component and the other attributes are c's. The
// attribute sets of other components' rows are built once and cached.
func (c *Component) RecordCritical(ctx context.Context, component string, p Phase, d Direction, dur time.Duration) {
	if c == nil || !c.metrics || !p.Valid() || d > Reply {
		return
	}
	if component == c.name {
		c.criticalHist.Record(ctx, dur.Seconds(), c.metricOpt[p][d])
		return
	}
	k := criticalKey{component, p, d}
	opt, ok := c.critOpts.Load(k)
	if !ok {
		kv := append([]attribute.KeyValue{AttrComponent.String(component)}, c.attrs...)
		kv = append(kv, AttrPhase.String(p.String()))
		if d != None {
			kv = append(kv, AttrDirection.String(d.String()))
		}
		opt, _ = c.critOpts.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	}
	c.criticalHist.Record(ctx, dur.Seconds(), opt.(metric.RecordOption))
}

// RecordCriticalGap records d as a gap's time on the critical path of one
// unit of work (amdahl.phase.critical with amdahl.phase="gap",
// amdahl.gap.from and amdahl.gap.to naming the rows at its ends, no
// amdahl.component): the critical time no span covers, which attribution
// books to the gap it lies in. Past 256 distinct gaps, both ends are
// recorded as "(more)".
func (c *Component) RecordCriticalGap(ctx context.Context, from, to string, dur time.Duration) {
	if c == nil || !c.metrics {
		return
	}
	k := gapKey{from, to}
	opt, ok := c.gapOpts.Load(k)
	if !ok {
		if c.gapSets.Add(1) > maxGapSets {
			k = gapKey{GapMore, GapMore}
			if opt, ok = c.gapOpts.Load(k); ok {
				c.criticalHist.Record(ctx, dur.Seconds(), opt.(metric.RecordOption))
				return
			}
		}
		kv := append([]attribute.KeyValue{AttrPhase.String(PhaseGap), AttrGapFrom.String(k.from), AttrGapTo.String(k.to)}, c.attrs...)
		opt, _ = c.gapOpts.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	}
	c.criticalHist.Record(ctx, dur.Seconds(), opt.(metric.RecordOption))
}

// RecordPhase records a phase duration measured elsewhere (for example a child
// process's phase timings returned in its reply) into amdahl.phase.duration
// without a span.
func (c *Component) RecordPhase(ctx context.Context, p Phase, d Direction, dur time.Duration) {
	if c == nil || !c.metrics || !p.Valid() || d > Reply {
		return
	}
	c.phaseHist.Record(ctx, dur.Seconds(), c.metricOpt[p][d])
}

// RecordSpan records a phase measured elsewhere, by another goroutine or
// another process (a child's timings returned in its reply): the span
// "<component>.<phase>" from start to end, as a child of the span in ctx,
// with the attributes Start gives plus attrs (span-only: amdahl.bytes,
// amdahl.remote), and its duration in amdahl.phase.duration. It is the one
// way phase spans are built after the fact; an invalid phase or direction
// (which may come from another process) records nothing, and so does a
// phase Start would skip under the span in ctx, a sampled-out one
// (Records).
func (c *Component) RecordSpan(ctx context.Context, p Phase, d Direction, start, end time.Time, attrs ...attribute.KeyValue) {
	if c == nil || c.off || !p.Valid() || d > Reply {
		return
	}
	if _, skip := c.unrecorded(ctx, p); skip {
		return // as a phase started under a span sampled out
	}
	c.recordSpan(ctx, p, d, start, end, nil, attrs)
}

// A Timing is a phase measured elsewhere (a task host's, from its reply),
// for RecordSpans: its phase, direction and times.
type Timing struct {
	Phase      Phase
	Direction  Direction
	Start, End time.Time
}

// Timings is up to 8 phases measured elsewhere, by value: RecordSpans
// hands them so to a PhaseTracer that takes several at once, as a slice
// passed to an interface's method escapes to the heap (an allocation
// per unit in BenchmarkUnitTelemetry).
type Timings struct {
	N int
	T [8]Timing
}

// RecordSpans records phases measured elsewhere, each with attrs, as
// RecordSpan records each: through a PhaseTracer that takes several at
// once (PhaseBatcher) in one call, when all are valid and fit Timings.
func (c *Component) RecordSpans(ctx context.Context, phases []Timing, attrs ...attribute.KeyValue) {
	if c == nil || c.off {
		return
	}
	var all Timings
	all.N = copy(all.T[:], phases)
	batch, ok := c.fast.(PhaseBatcher)
	ok = ok && all.N == len(phases)
	for _, t := range phases {
		ok = ok && t.Phase.Valid() && t.Direction <= Reply
	}
	if !ok {
		for _, t := range phases {
			c.RecordSpan(ctx, t.Phase, t.Direction, t.Start, t.End, attrs...)
		}
		return
	}
	for _, t := range phases {
		c.RecordPhase(ctx, t.Phase, t.Direction, t.End.Sub(t.Start))
	}
	batch.RecordPhaseSpans(ctx, c, all, attrs)
}

// recordSpan is RecordSpan, with err (if not nil) as the span's error.
func (c *Component) recordSpan(ctx context.Context, p Phase, d Direction, start, end time.Time, err error, attrs []attribute.KeyValue) {
	if c.metrics {
		c.phaseHist.Record(ctx, end.Sub(start).Seconds(), c.metricOpt[p][d])
	}
	if c.fast != nil && (err == nil || !c.fastAttrs) {
		// Without an exporter, a failure reaches attribution through
		// the unit's outcome; with one, a failed leaf (rare) takes the
		// OTel path below, which records its error.
		c.fast.RecordPhaseSpan(ctx, c.spanNames[p][d], c.name, p, d, start, end, attrs)
		return
	}
	base := c.spanOpts[p][d]
	opts := make([]trace.SpanStartOption, len(base), len(base)+2)
	copy(opts, base)
	opts = append(opts, trace.WithTimestamp(start))
	if len(attrs) > 0 {
		opts = append(opts, trace.WithAttributes(attrs...))
	}
	_, span := c.tracer.Start(ctx, c.spanNames[p][d], opts...)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(end))
}

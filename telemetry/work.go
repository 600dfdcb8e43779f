package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// WorkSpan is one running unit of work, returned by StartWork.
type WorkSpan struct {
	c     *Component
	ctx   context.Context
	span  trace.Span
	start time.Time
}

// StartWork starts the root span amdahl.work of one unit of work. attrs are
// span-only attributes (amdahl.work.id, sizes): they never reach metrics.
// The component's own attributes (scenario, transport, variant) go on both.
func (c *Component) StartWork(ctx context.Context, attrs ...attribute.KeyValue) (context.Context, WorkSpan) {
	if c == nil {
		return ctx, WorkSpan{start: time.Now()}
	}
	if c.fast != nil {
		// The attributes reach only exporters: set only if there is one.
		now := time.Now()
		ctx, span := c.fast.StartPhaseSpan(ctx, SpanWork, "", 0, None, now)
		if c.fastAttrs {
			span.SetAttributes(c.attrs...)
			if len(attrs) > 0 {
				span.SetAttributes(attrs...)
			}
		}
		return ctx, WorkSpan{c: c, ctx: ctx, span: span, start: now}
	}
	ctx, span := c.tracer.Start(ctx, SpanWork, c.workOpts...)
	if len(attrs) > 0 {
		span.SetAttributes(attrs...)
	}
	return ctx, WorkSpan{c: c, ctx: ctx, span: span, start: time.Now()}
}

// Span returns the root span (a no-op span when disabled).
func (w WorkSpan) Span() trace.Span {
	if w.span == nil {
		return noopSpan
	}
	return w.span
}

// Start returns when the unit of work started.
func (w WorkSpan) Start() time.Time { return w.start }

// End ends the root span with outcome o (err, if not nil, becomes the span's
// error status), records amdahl.work.duration and returns the end-to-end
// duration.
func (w WorkSpan) End(o Outcome, err error) time.Duration {
	now := time.Now()
	d := now.Sub(w.start)
	if w.c == nil {
		return d
	}
	if int(o) >= len(outcomeNames) {
		o = Failed
	}
	w.span.SetAttributes(outcomeAttrs[o]...)
	// At now, a reading of the wall clock, as the unit's phases end: an
	// SDK span ended without a time ends at its start plus the monotonic
	// time since, which a step of the wall clock in between would put
	// before the end of a phase inside it.
	w.c.endSpan(w.span, now, true, err)
	if w.c.metrics {
		opt := w.c.workMetric[o]
		if !w.span.SpanContext().IsSampled() {
			// Not attributed: amdahl.phase.critical has none of it.
			opt = w.c.workUnsampled[o]
		}
		w.c.workHist.Record(w.ctx, d.Seconds(), opt)
	}
	return d
}

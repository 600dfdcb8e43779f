package runtime

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// accountingTracer is the tracer of a run whose spans nothing but its
// attribution reads (no exporter, trace file or recorder: Config with no
// TracerProvider, which UseTelemetry leaves nil then). Its spans are the
// compact attribution.Span the collector keeps, built as the span runs
// and handed to the collector at End: no SDK span, no span processor, no
// conversion, and nothing of what only an exporter reads (events, links,
// status, attributes other than the five attribution reads). They carry
// real, sampled W3C span contexts, so trace context still propagates to
// the task hosts and the sidecar, and exemplars still name their trace.
//
// It behaves as the SDK with its default sampler (parent-based, always
// on) would for the runtime: roots are sampled, a child follows its
// parent's sampled flag.
type accountingTracer struct {
	embedded.Tracer
	provider *accountingProvider
	col      *collector
}

// accountingProvider is the accountingTracer's trace.TracerProvider.
type accountingProvider struct {
	embedded.TracerProvider
	tracer accountingTracer
}

var (
	_ trace.TracerProvider = (*accountingProvider)(nil)
	_ trace.Tracer         = (*accountingTracer)(nil)
	_ trace.Span           = (*accountingSpan)(nil)
)

// newAccountingProvider returns the tracer provider whose spans go to col.
func newAccountingProvider(col *collector) *accountingProvider {
	p := &accountingProvider{}
	p.tracer = accountingTracer{provider: p, col: col}
	return p
}

var _ telemetry.PhaseTracer = (*accountingProvider)(nil)

// Tracer implements trace.TracerProvider: every tracer is the same one.
func (p *accountingProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return &p.tracer }

// StartPhaseSpan implements telemetry.PhaseTracer: Start without the
// options.
func (p *accountingProvider) StartPhaseSpan(ctx context.Context, name, component string, ph telemetry.Phase, d telemetry.Direction, start time.Time) (context.Context, trace.Span) {
	s := p.tracer.newSpan(trace.SpanContextFromContext(ctx))
	s.sp.Name, s.sp.Component, s.sp.Phase, s.sp.Direction, s.sp.Start = name, component, ph, d, start.UnixNano()
	return trace.ContextWithSpan(ctx, s), s
}

// RecordPhaseSpan implements telemetry.PhaseTracer: the span goes to the
// collector as it is made, with no trace.Span around it.
func (p *accountingProvider) RecordPhaseSpan(ctx context.Context, name, component string, ph telemetry.Phase, d telemetry.Direction, start, end time.Time, attrs []attribute.KeyValue) {
	sp, sampled := p.tracer.child(trace.SpanContextFromContext(ctx))
	if !sampled {
		return
	}
	sp.Name, sp.Component, sp.Phase, sp.Direction, sp.Start, sp.End = name, component, ph, d, start.UnixNano(), end.UnixNano()
	for _, kv := range attrs {
		sp.SetAttribute(kv)
	}
	p.tracer.col.ended(sp)
}

// Start implements trace.Tracer.
func (t *accountingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	if cfg.NewRoot() {
		parent = trace.SpanContext{}
	}
	s := t.newSpan(parent)
	start := cfg.Timestamp()
	if start.IsZero() {
		start = time.Now()
	}
	s.sp.Start, s.sp.Name = start.UnixNano(), name
	for _, kv := range cfg.Attributes() {
		s.sp.SetAttribute(kv)
	}
	return trace.ContextWithSpan(ctx, s), s
}

// newSpan returns a span, not started yet, as a child of parent (a root
// if parent is not valid).
func (t *accountingTracer) newSpan(parent trace.SpanContext) *accountingSpan {
	s := &accountingSpan{tracer: t}
	var sampled bool
	s.sp, sampled = t.child(parent)
	flags := trace.FlagsSampled
	if !sampled {
		flags, s.ended = 0, true // not recording
	}
	s.sc = trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID(s.sp.TraceID), SpanID: trace.SpanID(s.sp.SpanID), TraceFlags: flags,
	})
	return s
}

// child returns the ids of a new span under parent (a root, in a new
// trace, if parent is not valid), and whether it is sampled: as the SDK's
// default sampler (parent-based, always on) decides, a root is, a child
// is if its parent is.
func (t *accountingTracer) child(parent trace.SpanContext) (attribution.Span, bool) {
	sp := attribution.Span{SpanID: t.col.newSpanID()}
	if !parent.IsValid() {
		sp.TraceID = t.col.newTraceID()
		return sp, true
	}
	sp.TraceID, sp.ParentID = attribution.TraceID(parent.TraceID()), attribution.SpanID(parent.SpanID())
	return sp, parent.IsSampled()
}

// accountingSpan is a span of the accountingTracer. Like every span, it is
// safe for concurrent use.
type accountingSpan struct {
	embedded.Span
	tracer *accountingTracer
	sc     trace.SpanContext

	mu    sync.Mutex
	sp    attribution.Span
	ended bool
}

// EndPhaseSpan implements telemetry.PhaseTracer.
func (p *accountingProvider) EndPhaseSpan(span trace.Span, end time.Time) {
	if s, ok := span.(*accountingSpan); ok {
		s.endAt(end)
		return
	}
	span.End(trace.WithTimestamp(end)) // not ours: cannot happen through a Component
}

// End hands the span to the collector, once.
func (s *accountingSpan) End(opts ...trace.SpanEndOption) {
	end := time.Now()
	if len(opts) > 0 {
		cfg := trace.NewSpanEndConfig(opts...)
		if ts := cfg.Timestamp(); !ts.IsZero() {
			end = ts
		}
	}
	s.endAt(end)
}

// endAt ends the span at end, once.
func (s *accountingSpan) endAt(end time.Time) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.sp.End = end.UnixNano()
	sp := s.sp
	s.mu.Unlock()
	s.tracer.col.ended(sp)
}

// IsRecording reports whether the span has not ended yet.
func (s *accountingSpan) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

// SetAttributes keeps the attributes attribution reads.
func (s *accountingSpan) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	if !s.ended {
		for _, a := range kv {
			s.sp.SetAttribute(a)
		}
	}
	s.mu.Unlock()
}

// SetName renames the span.
func (s *accountingSpan) SetName(name string) {
	s.mu.Lock()
	if !s.ended {
		s.sp.Name = name
	}
	s.mu.Unlock()
}

// SpanContext returns the span's W3C context.
func (s *accountingSpan) SpanContext() trace.SpanContext { return s.sc }

// TracerProvider returns the tracer that made the span.
func (s *accountingSpan) TracerProvider() trace.TracerProvider { return s.tracer.provider }

// Events, links, errors and status reach only exporters, and there is
// none: a unit's failure reaches attribution as amdahl.outcome.
func (s *accountingSpan) AddEvent(string, ...trace.EventOption)   {}
func (s *accountingSpan) AddLink(trace.Link)                      {}
func (s *accountingSpan) RecordError(error, ...trace.EventOption) {}
func (s *accountingSpan) SetStatus(codes.Code, string)            {}

package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// PhaseTracer is a trace.TracerProvider that also takes phase spans whole:
// the component, phase and direction as values, the times as times,
// without the span options of the OTel API (trace.WithAttributes,
// trace.WithTimestamp), which allocate on every span. A Component whose
// TracerProvider implements it starts and records its phase spans through
// it; through any other provider they are the same spans made with the
// OTel API, with the same names and attributes. spans.TracerProvider, the
// runtime's tracer when nothing but its attribution and at most the trace
// file read the spans, is one. Through its OTel API the same phases would
// allocate their span options and start config on every span
// (BenchmarkComponentUnit, ./telemetry/spans/, measures both ways), and a
// leaf would reach a spans.Holder (the runtime's record) as a whole span
// rather than as the times it keeps.
//
// A PhaseTracer may also have a method SamplesOut() bool, reporting
// whether it may start a span sampled out (its sampler can drop a root);
// when it reports false, a Component does not look for a sampled-out
// parent before each phase (samplesOuter, below).
type PhaseTracer interface {
	trace.TracerProvider
	// StartPhaseSpan starts the span name of component's phase p
	// (direction d), begun at start, as a child of the span in ctx, and
	// returns the context carrying it. The span carries amdahl.component,
	// amdahl.phase and amdahl.direction (for d other than None); p zero
	// is a span that is not a phase (amdahl.work, with component "").
	StartPhaseSpan(ctx context.Context, name, component string, p Phase, d Direction, start time.Time) (context.Context, trace.Span)
	// EndPhaseSpan ends span, which StartPhaseSpan returned, at end: the
	// time the Component read for the phase's duration.
	EndPhaseSpan(span trace.Span, end time.Time)
	// RecordPhaseSpan records such a span of a phase measured elsewhere,
	// from start to end, as a child of the span in ctx, with attrs
	// besides (amdahl.remote, amdahl.bytes).
	RecordPhaseSpan(ctx context.Context, name, component string, p Phase, d Direction, start, end time.Time, attrs []attribute.KeyValue)
	// PhaseAttributes reports whether the spans' other attributes and
	// errors are read (exported). When true, a Component also sets its
	// own attributes and StartWork's on the root span (SetAttributes),
	// and records a leaf that failed through the OTel API, with its
	// error; when false it leaves them out, as only exporters read them.
	PhaseAttributes() bool
}

// A PhaseBatcher is a PhaseTracer that also records several valid
// phases of c at once, as RecordPhaseSpan would each with c's SpanName
// (spans.TracerProvider files a task host's in their unit under one
// lock). Component.RecordSpans hands it them.
type PhaseBatcher interface {
	RecordPhaseSpans(ctx context.Context, c *Component, phases Timings, attrs []attribute.KeyValue)
}

// A PhaseTracer may also say whether it samples spans out on its own
// (SamplesOut: a sampler that can drop a root, or a child of a sampled
// parent). A Component skips a phase under a span that was sampled out
// (no clock read, no call to the tracer) only when its tracer does, or
// does not say: the check is a look-up of the span in the context for
// every phase, which a tracer that samples every unit pays for nothing.
// A phase under a remote parent sampled out still makes no span: the
// tracer returns that parent's non-recording span, as it must anyway.
type samplesOuter interface {
	SamplesOut() bool
}

// samplesOut reports whether t may sample spans out (true when it does not
// say).
func samplesOut(t PhaseTracer) bool {
	if s, ok := t.(samplesOuter); ok {
		return s.SamplesOut()
	}
	return true
}

// PhaseTracerOf returns the PhaseTracer a Component built on tp takes its
// phase spans through: tp itself if it is one; for the OTel API's no-op
// provider (trace/noop, as otelsetup gives with OTEL_SDK_DISABLED=true),
// one that makes no span and no context, since a no-op span would record
// nothing; nil for any other provider (its spans are made with the OTel
// API).
func PhaseTracerOf(tp trace.TracerProvider) PhaseTracer {
	switch tp := tp.(type) {
	case PhaseTracer:
		return tp
	case noop.TracerProvider:
		return offTracer{tp}
	}
	return nil
}

// offTracer is the PhaseTracer of the no-op provider: it returns what the
// no-op tracer's Start returns, without a new context where the no-op
// tracer's would carry the same span context as the caller's. A caller's
// span that does not record (none, a remote parent, a no-op span) is
// returned as the phase's span with the caller's context, as the no-op
// tracer does for a non-recording parent; a recording one (of another
// provider) takes the no-op tracer's Start, which carries its span
// context in a non-recording span. Ending or recording a span does
// nothing.
type offTracer struct{ noop.TracerProvider }

// StartPhaseSpan implements PhaseTracer.
func (t offTracer) StartPhaseSpan(ctx context.Context, name, _ string, _ Phase, _ Direction, _ time.Time) (context.Context, trace.Span) {
	if span := trace.SpanFromContext(ctx); !span.IsRecording() {
		return ctx, span
	}
	return t.Tracer("").Start(ctx, name)
}

// EndPhaseSpan implements PhaseTracer: a no-op span has nothing to end,
// and a caller's span returned as the phase's is the caller's to end.
func (offTracer) EndPhaseSpan(trace.Span, time.Time) {}

// RecordPhaseSpan implements PhaseTracer: nothing to record.
func (offTracer) RecordPhaseSpan(context.Context, string, string, Phase, Direction, time.Time, time.Time, []attribute.KeyValue) {
}

// PhaseAttributes implements PhaseTracer: nothing reads the attributes.
func (offTracer) PhaseAttributes() bool { return false }

// SamplesOut: the off tracer starts no span, so a Component need not look
// for a sampled-out parent before each phase (a look-up on every phase
// of a run with telemetry off: docs/measurements/telemetry-cost.md).
// Under such a parent StartPhaseSpan returns it, as under any other
// parent that does not record.
func (offTracer) SamplesOut() bool { return false }

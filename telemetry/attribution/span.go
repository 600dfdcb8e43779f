package attribution

import (
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// The span model attribution reads is package spans' (spans.Span); these
// names are it, for code that speaks of attribution's input.
type (
	// Span is spans.Span.
	Span = spans.Span
	// TraceID is spans.TraceID.
	TraceID = spans.TraceID
	// SpanID is spans.SpanID.
	SpanID = spans.SpanID
	// SpanKind is spans.SpanKind.
	SpanKind = spans.SpanKind
	// Interner is spans.Interner.
	Interner = spans.Interner
	// Limits is spans.Limits.
	Limits = spans.Limits
)

// The span kinds, as spans'.
const (
	KindUnspecified = spans.KindUnspecified
	KindInternal    = spans.KindInternal
	KindServer      = spans.KindServer
	KindClient      = spans.KindClient
	KindProducer    = spans.KindProducer
	KindConsumer    = spans.KindConsumer
)

// keyOf returns the row s belongs to: component, phase and direction (and
// the operation a rule gave it); the zero Key when s is not a phase.
func keyOf(s *Span) Key {
	if !s.Phase.Valid() && s.Op == "" {
		return Key{}
	}
	return Key{Component: s.Component, Phase: s.Phase, Direction: s.Direction, Op: s.Op}
}

// FromSDK converts spans recorded in process (otelsetup.Recorder, or a span
// processor's OnEnd). All of them are of this process (Process 0); spans
// synthesised from another process's timings carry amdahl.remote=true.
func FromSDK(in []sdktrace.ReadOnlySpan) []Span {
	out := make([]Span, 0, len(in))
	for _, s := range in {
		out = append(out, FromSDKSpan(s))
	}
	return out
}

// FromSDKSpan converts one span recorded in process.
func FromSDKSpan(s sdktrace.ReadOnlySpan) Span {
	sc := s.SpanContext()
	sp := Span{
		TraceID: TraceID(sc.TraceID()),
		SpanID:  SpanID(sc.SpanID()),
		Name:    s.Name(),
		// Wall clock only: spans synthesised from another process's timings
		// have no monotonic reading.
		Start: s.StartTime().UnixNano(),
		End:   s.EndTime().UnixNano(),
		Kind:  SpanKind(s.SpanKind()),
	}
	if p := s.Parent(); p.IsValid() {
		sp.ParentID = SpanID(p.SpanID())
	}
	for _, kv := range s.Attributes() {
		sp.SetAttribute(kv)
	}
	return sp
}

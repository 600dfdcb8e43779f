package attribution

import (
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

package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// PhaseTracer is a trace.TracerProvider that also takes phase spans whole:
// the component, phase and direction as values, the times as times,
// without the span options of the OTel API (trace.WithAttributes,
// trace.WithTimestamp), which allocate on every span. A Component whose
// TracerProvider implements it starts and records its phase spans through
// it; through any other provider they are the same spans made with the
// OTel API, with the same names and attributes. The runtime's own tracer,
// which feeds its attribution when nothing exports the spans, is one.
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

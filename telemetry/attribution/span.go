package attribution

import (
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// Deprecated aliases of package spans' names, kept only while the runtime's
// tracer and collector (moving into telemetry/spans) still use them; use
// spans.Span and the rest.
type (
	// Span is spans.Span.
	Span = spans.Span
	// TraceID is spans.TraceID.
	TraceID = spans.TraceID
	// SpanID is spans.SpanID.
	SpanID = spans.SpanID
	// Limits is spans.Limits.
	Limits = spans.Limits
)

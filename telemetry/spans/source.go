package spans

import (
	"context"

	"go.opentelemetry.io/otel/trace"
)

// Source is a stream of ended spans (a tracer provider's), for a reader
// that keeps Spans: a runtime's accounting when the OTel SDK records the
// run's spans. otelsetup.Telemetry is one; otelsetup.SDKSource makes one
// of any SDK tracer provider.
type Source interface {
	// Subscribe has fn called with every span that ends from now on, on
	// the goroutine that ends it, until cancel is called; once cancel
	// has returned, fn is not called again. fn must be quick and safe
	// for concurrent use.
	Subscribe(fn func(Span)) (cancel func())
}

// Sampler decides whether a trace's root span is sampled; its children
// follow it. A tracer of Spans asks it as an SDK provider asks its
// sampler (otelsetup.SamplerOf adapts one: OTEL_TRACES_SAMPLER's).
type Sampler interface {
	// Sample reports whether the root span name of the trace id is
	// sampled; ctx holds the span's parent context, if any (unsampled,
	// or remote).
	Sample(ctx context.Context, id trace.TraceID, name string, kind trace.SpanKind) bool
	// Description names the sampler, as the SDK's samplers do
	// ("AlwaysOnSampler").
	Description() string
}

package spans

import (
	"context"

	"go.opentelemetry.io/otel/trace"
)

// spanCtx is the context a TracerProvider's span starts its children in:
// its parent context carrying the span, as trace.ContextWithSpan makes
// it, but held in the span itself, so that starting a span allocates no
// context of its own.
type spanCtx struct {
	context.Context
	span *tracerSpan
}

// Value returns the span for the key trace.SpanFromContext asks for (the
// OTel API's own, unexported: recognised by asking a context that
// carries spanKeyProbe), else the parent's value of key.
func (c *spanCtx) Value(key any) any {
	if spanKeyProbe.Value(key) == any(spanProbe) {
		return trace.Span(c.span)
	}
	return c.Context.Value(key)
}

// spanProbe and spanKeyProbe recognise the OTel API's context key of the
// current span (spanCtx.Value).
var (
	spanProbe    = new(tracerSpan)
	spanKeyProbe = trace.ContextWithSpan(context.Background(), spanProbe)
)

// contextWith returns ctx carrying s, as trace.ContextWithSpan(ctx, s)
// does, in s's own spanCtx. Called once, before s is shared.
func (s *tracerSpan) contextWith(ctx context.Context) context.Context {
	s.ctx = spanCtx{Context: ctx, span: s}
	return &s.ctx
}

package otelsetup

import (
	"context"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// SpanOf converts one span the SDK recorded in process to the span model.
// It is of this process (Process 0); spans synthesised from another
// process's timings carry amdahl.remote=true.
func SpanOf(s sdktrace.ReadOnlySpan) spans.Span {
	sc := s.SpanContext()
	sp := spans.Span{
		TraceID: spans.TraceID(sc.TraceID()),
		SpanID:  spans.SpanID(sc.SpanID()),
		Name:    s.Name(),
		// Wall clock only: spans synthesised from another process's timings
		// have no monotonic reading.
		Start: s.StartTime().UnixNano(),
		End:   s.EndTime().UnixNano(),
		Kind:  spans.SpanKind(s.SpanKind()),
	}
	if p := s.Parent(); p.IsValid() {
		sp.ParentID = spans.SpanID(p.SpanID())
	}
	for _, kv := range s.Attributes() {
		sp.SetAttribute(kv)
	}
	return sp
}

// SpansOf converts spans the SDK recorded (a Recorder's, a span
// processor's) with SpanOf.
func SpansOf(in []sdktrace.ReadOnlySpan) []spans.Span {
	out := make([]spans.Span, 0, len(in))
	for _, s := range in {
		out = append(out, SpanOf(s))
	}
	return out
}

// SDKSource returns tp's ended spans as a spans.Source: each Subscribe
// registers a span processor on tp, and its cancel unregisters it.
func SDKSource(tp *sdktrace.TracerProvider) spans.Source { return sdkSource{tp} }

type sdkSource struct{ tp *sdktrace.TracerProvider }

func (s sdkSource) Subscribe(fn func(spans.Span)) func() {
	p := &spanFunc{fn} // a pointer: the provider finds it again by ==
	s.tp.RegisterSpanProcessor(p)
	return func() { s.tp.UnregisterSpanProcessor(p) }
}

// Subscribe implements spans.Source on the tracer provider (a runtime's
// accounting); with a nil Telemetry or the SDK disabled no span ends
// there, and cancel does nothing.
func (t *Telemetry) Subscribe(fn func(spans.Span)) (cancel func()) {
	if t == nil || t.sdkTP == nil {
		return func() {}
	}
	return SDKSource(t.sdkTP).Subscribe(fn)
}

// spanFunc is a span processor that hands every span that ends to a
// function, as a spans.Span.
type spanFunc struct{ fn func(spans.Span) }

func (*spanFunc) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (f *spanFunc) OnEnd(s sdktrace.ReadOnlySpan)                 { f.fn(SpanOf(s)) }
func (*spanFunc) Shutdown(context.Context) error                  { return nil }
func (*spanFunc) ForceFlush(context.Context) error                { return nil }

// SamplerOf returns s as a spans.Sampler (nil for nil): a root is sampled
// when s decides RecordAndSample for it.
func SamplerOf(s sdktrace.Sampler) spans.Sampler {
	if s == nil {
		return nil
	}
	return sampler{s}
}

type sampler struct{ s sdktrace.Sampler }

func (s sampler) Sample(ctx context.Context, id trace.TraceID, name string, kind trace.SpanKind) bool {
	res := s.s.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: id, Name: name, Kind: kind})
	return res.Decision == sdktrace.RecordAndSample
}

func (s sampler) Description() string { return s.s.Description() }

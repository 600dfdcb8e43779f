package otelsetup

import (
	"context"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Recorder is a span processor that keeps every ended span in memory, in end
// order: the embedded default that feeds attribution without a collector.
// It is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// OnStart does nothing: only ended spans are kept.
func (r *Recorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd keeps s.
func (r *Recorder) OnEnd(s sdktrace.ReadOnlySpan) {
	r.mu.Lock()
	r.spans = append(r.spans, s)
	r.mu.Unlock()
}

// Spans returns a copy of the spans ended so far.
func (r *Recorder) Spans() []sdktrace.ReadOnlySpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sdktrace.ReadOnlySpan(nil), r.spans...)
}

// Reset drops every kept span.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.spans = nil
	r.mu.Unlock()
}

// Shutdown keeps the spans (unlike tracetest.InMemoryExporter, so they can be
// read after the provider shut down).
func (r *Recorder) Shutdown(context.Context) error { return nil }

// ForceFlush does nothing: spans are kept synchronously.
func (r *Recorder) ForceFlush(context.Context) error { return nil }

package runtime

import (
	"context"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// collector is the span processor that assembles each unit of work: it
// keeps the spans of the traces of units in flight (whatever process
// side they describe: the parent's own phases, the child's synthesised
// from its reply, the in-process sidecar's), and when a unit's root ends
// it computes the critical path (attribution.Trees) and hands the result
// to the runtime, which folds it into bounded accumulators. Spans of other
// traces are ignored, so the spans it holds are bounded by the units in
// flight; nothing is kept per unit once it has ended.
type collector struct {
	onWork func(attribution.Work, attribution.Diagnostics)

	mu     sync.Mutex
	traces map[trace.TraceID][]attribution.Span
}

func newCollector(onWork func(attribution.Work, attribution.Diagnostics)) *collector {
	return &collector{onWork: onWork, traces: map[trace.TraceID][]attribution.Span{}}
}

// track starts collecting the spans of trace id (a unit's root).
func (c *collector) track(id trace.TraceID) {
	c.mu.Lock()
	if _, ok := c.traces[id]; !ok {
		c.traces[id] = make([]attribution.Span, 0, 16)
	}
	c.mu.Unlock()
}

// forget drops a trace whose root never ended normally (not sampled).
func (c *collector) forget(id trace.TraceID) {
	c.mu.Lock()
	delete(c.traces, id)
	c.mu.Unlock()
}

// OnStart implements sdktrace.SpanProcessor.
func (c *collector) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd implements sdktrace.SpanProcessor.
func (c *collector) OnEnd(s sdktrace.ReadOnlySpan) {
	id := s.SpanContext().TraceID()
	c.mu.Lock()
	_, tracked := c.traces[id]
	c.mu.Unlock()
	if !tracked {
		return // not a unit's trace: skip the conversion
	}
	sp := attribution.FromSDKSpan(s)
	c.mu.Lock()
	spans, ok := c.traces[id]
	if !ok {
		c.mu.Unlock()
		return
	}
	spans = append(spans, sp)
	if sp.Name != telemetry.SpanWork || !sp.ParentID.IsZero() {
		c.traces[id] = spans
		c.mu.Unlock()
		return
	}
	delete(c.traces, id)
	c.mu.Unlock()
	works, diag := attribution.Trees(spans)
	for i, w := range works {
		if i > 0 {
			diag = attribution.Diagnostics{}
		}
		c.onWork(w, diag)
	}
}

// Shutdown implements sdktrace.SpanProcessor.
func (c *collector) Shutdown(context.Context) error { return nil }

// ForceFlush implements sdktrace.SpanProcessor.
func (c *collector) ForceFlush(context.Context) error { return nil }

// e2eStats sums the end-to-end times the runtime measures itself (with or
// without telemetry) in bounded memory. Guarded by Runtime.mu.
type e2eStats struct {
	n      int
	total  time.Duration
	sketch attribution.Sketch
}

func (s *e2eStats) add(d time.Duration) {
	s.n++
	s.total += d
	s.sketch.Add(d)
}

func (s *e2eStats) mean() time.Duration {
	if s.n == 0 {
		return 0
	}
	return s.total / time.Duration(s.n)
}

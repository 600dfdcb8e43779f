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
// it computes the critical path (attribution.Trees: last-finishing-child
// walk) and hands the result to the runtime. Spans of other traces are
// ignored, so the spans it holds are bounded by the units in flight. What
// it keeps per unit after that (the attribution of each unit and its
// phase span durations, for the p99 column) grows with the run: a few
// hundred bytes per unit.
type collector struct {
	onWork  func(attribution.Work)
	groupOf func(trace.TraceID) string // the kind of the unit of a trace

	mu     sync.Mutex
	traces map[trace.TraceID][]attribution.Span
	// phase span durations by group (unit kind; "" for all) and key, for
	// the p99 column
	durations map[string]map[attribution.Key][]time.Duration
}

func newCollector(onWork func(attribution.Work), groupOf func(trace.TraceID) string) *collector {
	return &collector{onWork: onWork, groupOf: groupOf, traces: map[trace.TraceID][]attribution.Span{},
		durations: map[string]map[attribution.Key][]time.Duration{}}
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
	sp := attribution.FromSDK([]sdktrace.ReadOnlySpan{s})[0]
	group := ""
	if sp.Phase.Valid() {
		group = c.groupOf(id)
	}
	c.mu.Lock()
	spans, ok := c.traces[id]
	if !ok {
		c.mu.Unlock()
		return
	}
	spans = append(spans, sp)
	if sp.Phase.Valid() {
		k := attribution.Key{Phase: sp.Phase, Direction: sp.Direction}
		for _, g := range []string{"", group} {
			if c.durations[g] == nil {
				c.durations[g] = map[attribution.Key][]time.Duration{}
			}
			c.durations[g][k] = append(c.durations[g][k], sp.Duration())
			if group == "" {
				break
			}
		}
	}
	if sp.Name != telemetry.SpanWork || sp.ParentID != "" {
		c.traces[id] = spans
		c.mu.Unlock()
		return
	}
	delete(c.traces, id)
	c.mu.Unlock()
	for _, w := range attribution.Trees(spans) {
		c.onWork(w)
	}
}

// phaseDurations returns a copy of the phase span durations by key, of
// the units of group ("" for all).
func (c *collector) phaseDurations(group string) map[attribution.Key][]time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[attribution.Key][]time.Duration, len(c.durations[group]))
	for k, v := range c.durations[group] {
		out[k] = append([]time.Duration(nil), v...)
	}
	return out
}

// Shutdown implements sdktrace.SpanProcessor.
func (c *collector) Shutdown(context.Context) error { return nil }

// ForceFlush implements sdktrace.SpanProcessor.
func (c *collector) ForceFlush(context.Context) error { return nil }

package runtime

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
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
// it computes the unit's critical path (attribution.EachTree, as
// attribution.Trees) and hands the result to the runtime, which folds it
// into bounded accumulators. Spans of other traces are ignored, so the
// spans it holds are bounded by the units in flight; nothing is kept per
// unit once it has been accounted. Spans reach it from the SDK (OnEnd, a
// span processor) or from the runtime's accountingTracer (ended).
//
// Ending a span that is not a root only files the few fields attribution
// needs, as a compact attribution.Span, under one lock. Ending a root
// accounts for its unit there and then, on the goroutine that ended it
// (a few µs for a task unit), while its spans are still in that core's
// cache. Units are accounted one at a time (amu, so the Builder's scratch
// space is shared), but no goroutine waits for another's accounting: one
// that finds it under way leaves its unit ready, and the goroutine
// accounting takes it before it stops (drain); past maxReadyUnits units
// waiting, a goroutine ending a root does wait, so they stay bounded.
// Handing every unit to an accounting goroutine instead (woken by the
// first after it idled, then letting units gather for 10 ms) cost more:
// its wake-ups, its queue, and spans gone cold by the time it read them;
// and a goroutine sleeping on a contended lock costs a context switch
// (runtime/README.md, "Telemetry cost"). flush waits until every root
// ended before it has been accounted.
type collector struct {
	onWork func(attribution.Work)        // each unit's; Stats and Nodes valid only during the call
	onDiag func(attribution.Diagnostics) // each trace's, after its units; may be nil

	idBase    uint64        // span ids of spans made without the SDK
	idNext    atomic.Uint64 // (add, newSpanID, the accountingTracer)
	traceBase uint64        // trace ids of the accountingTracer's roots
	traceNext atomic.Uint64

	mu     sync.Mutex
	traces map[trace.TraceID][]attribution.Span
	free   [][]attribution.Span // emptied span slices, for reuse
	epoch  *epoch               // counts the roots ended since the last flush, not accounted yet
	sealed []*epoch             // earlier epochs, some of their units not accounted yet

	ready []readyUnit // under mu: roots ended, their units not taken for accounting yet
	spare []readyUnit // under mu: an emptied ready, for reuse

	amu sync.Mutex          // held by the goroutine accounting (drain)
	b   attribution.Builder // scratch space, under amu
}

// epoch counts the units whose roots ended between two flush calls and
// whose accounting has not finished. A flush seals the current epoch and
// waits for the sealed ones: it waits for the units ended before it, not
// for those ending after, so a busy run cannot keep it waiting.
type epoch struct {
	n    int
	done chan struct{} // made when sealed with n > 0; closed at n == 0
}

// maxReadyUnits bounds the units whose roots have ended and that wait to
// be accounted (drain); maxFree the span slices kept for reuse.
const (
	maxReadyUnits = 1024
	maxFree       = 256
	spansPerUnit  = 32 // a taskhost unit has about 20
)

// newCollector returns a collector that calls onWork for each unit and
// then onDiag (if not nil) with the diagnostics of its trace. onWork's
// Work shares the collector's scratch space (attribution.Builder.Reuse):
// its Stats and Nodes are valid only until onWork returns.
func newCollector(onWork func(attribution.Work), onDiag func(attribution.Diagnostics)) *collector {
	var seed [16]byte
	_, _ = rand.Read(seed[:]) // crypto/rand.Read never fails
	return &collector{
		onWork:    onWork,
		onDiag:    onDiag,
		b:         attribution.Builder{Reuse: true},
		idBase:    binary.BigEndian.Uint64(seed[:8]),
		traceBase: binary.BigEndian.Uint64(seed[8:]),
		traces:    map[trace.TraceID][]attribution.Span{},
		epoch:     &epoch{},
	}
}

// track starts collecting the spans of trace id (a unit's root).
func (c *collector) track(id trace.TraceID) {
	c.mu.Lock()
	if _, ok := c.traces[id]; !ok {
		var spans []attribution.Span
		if n := len(c.free); n > 0 {
			spans, c.free = c.free[n-1], c.free[:n-1]
		} else {
			spans = make([]attribution.Span, 0, spansPerUnit)
		}
		c.traces[id] = spans
	}
	c.mu.Unlock()
}

// forget drops a trace whose root never ended normally (not sampled).
func (c *collector) forget(id trace.TraceID) {
	c.mu.Lock()
	if spans, ok := c.traces[id]; ok {
		delete(c.traces, id)
		c.recycleLocked(spans)
	}
	c.mu.Unlock()
}

func (c *collector) recycleLocked(spans []attribution.Span) {
	if len(c.free) < maxFree && cap(spans) <= 4*spansPerUnit {
		c.free = append(c.free, spans[:0])
	}
}

// add keeps spans made without the SDK (a task host's phases, from its
// reply timings) with the other spans of trace id, if it is a unit's in
// flight. None of them may be a root.
func (c *collector) add(id trace.TraceID, spans []attribution.Span) {
	c.mu.Lock()
	if kept, ok := c.traces[id]; ok {
		c.traces[id] = append(kept, spans...)
	}
	c.mu.Unlock()
}

// newTraceID returns a trace id for a root of the accountingTracer: the
// collector's random base, a second random half, and a counter, unique in
// the run and as unlikely as the SDK's to meet another.
func (c *collector) newTraceID() attribution.TraceID {
	var id attribution.TraceID
	binary.BigEndian.PutUint64(id[:8], c.traceBase)
	binary.BigEndian.PutUint64(id[8:], c.idBase+c.traceNext.Add(1))
	return id
}

// newSpanID returns a span id for a span made without the SDK: a random
// base of the collector's plus a counter, so ids are unique in the run and
// as unlikely as the SDK's random ones to meet another.
func (c *collector) newSpanID() attribution.SpanID {
	var id attribution.SpanID
	binary.BigEndian.PutUint64(id[:], c.idBase+c.idNext.Add(1))
	if id.IsZero() {
		binary.BigEndian.PutUint64(id[:], c.idBase+c.idNext.Add(1))
	}
	return id
}

// OnStart implements sdktrace.SpanProcessor.
func (c *collector) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd implements sdktrace.SpanProcessor: it keeps the span if its trace
// is a unit's, and accounts for the unit when it is the unit's root.
func (c *collector) OnEnd(s sdktrace.ReadOnlySpan) { c.ended(attribution.FromSDKSpan(s)) }

// ended keeps an ended span (from the SDK, through OnEnd, or from the
// runtime's accountingTracer) if its trace is a unit's, and accounts for
// the unit when it is the unit's root.
func (c *collector) ended(sp attribution.Span) {
	id := trace.TraceID(sp.TraceID)
	c.mu.Lock()
	spans, ok := c.traces[id]
	if !ok {
		c.mu.Unlock()
		return // not a unit's trace, or already accounted
	}
	spans = append(spans, sp)
	if sp.Name != telemetry.SpanWork || !sp.ParentID.IsZero() {
		c.traces[id] = spans
		c.mu.Unlock()
		return
	}
	delete(c.traces, id)
	c.epoch.n++
	c.ready = append(c.ready, readyUnit{spans, c.epoch})
	full := len(c.ready) > maxReadyUnits
	c.mu.Unlock()
	c.drain(full)
}

// readyUnit is a unit whose root has ended, waiting to be accounted, and
// the epoch that counts it.
type readyUnit struct {
	spans []attribution.Span
	e     *epoch
}

// drain accounts for the units ready, unless another goroutine is doing
// so: that one then takes them too, so no goroutine ending a root waits
// for another's accounting, unless more than maxReadyUnits wait (wait):
// then it waits its turn and accounts for them, which bounds the units
// ended and not accounted. Whoever accounts looks again after it lets go
// of amu, so a unit made ready meanwhile is not left behind.
func (c *collector) drain(wait bool) {
	for {
		if wait {
			c.amu.Lock()
			wait = false
		} else if !c.amu.TryLock() {
			return
		}
		c.mu.Lock()
		batch := c.ready
		c.ready = c.spare[:0]
		c.mu.Unlock()
		for _, u := range batch {
			c.accountUnit(&c.b, u.spans)
			clear(u.spans) // drop the strings the spans hold
		}
		c.mu.Lock()
		for _, u := range batch {
			c.recycleLocked(u.spans)
			if u.e.n--; u.e.n == 0 && u.e.done != nil {
				close(u.e.done)
				c.sealed = slices.DeleteFunc(c.sealed, func(o *epoch) bool { return o == u.e })
			}
		}
		clear(batch)
		c.spare = batch[:0]
		c.mu.Unlock()
		c.amu.Unlock()

		c.mu.Lock()
		more := len(c.ready) > 0
		c.mu.Unlock()
		if !more {
			return
		}
	}
}

// accountUnit attributes the unit whose spans are spans (one trace; it
// may hold more than one unit only if a unit was nested in another's
// trace), with b's scratch space.
func (c *collector) accountUnit(b *attribution.Builder, spans []attribution.Span) {
	diag := b.EachTree(spans, c.onWork)
	if c.onDiag != nil {
		c.onDiag(diag)
	}
}

// flush waits until every unit whose root ended before the call has been
// accounted, or ctx ends.
func (c *collector) flush(ctx context.Context) error {
	c.mu.Lock()
	if e := c.epoch; e.n > 0 {
		e.done = make(chan struct{})
		c.sealed = append(c.sealed, e)
		c.epoch = &epoch{}
	}
	wait := make([]chan struct{}, 0, len(c.sealed))
	for _, e := range c.sealed {
		wait = append(wait, e.done)
	}
	c.mu.Unlock()
	for _, ch := range wait {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// close waits for the accounting of every unit whose root has ended.
// Safe to call more than once; the collector still accounts for units
// ended after it.
func (c *collector) close() { _ = c.flush(context.Background()) }

// Shutdown implements sdktrace.SpanProcessor. The runtime stops the
// accounting itself (close), after its last unit: a provider shut down
// first must not lose the run's attribution.
func (c *collector) Shutdown(context.Context) error { return nil }

// ForceFlush implements sdktrace.SpanProcessor: it waits for the
// accounting of the units ended so far.
func (c *collector) ForceFlush(ctx context.Context) error { return c.flush(ctx) }

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

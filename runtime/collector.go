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
// it hands the unit's spans to its accounting goroutine, which computes
// the critical path (attribution.EachTree, as attribution.Trees) and hands
// the result to the runtime, which folds it into bounded accumulators.
// Spans of other traces are ignored, so the spans it holds are bounded by
// the units in flight; nothing is kept per unit once it has been
// accounted.
//
// OnEnd runs inside every span's End, on the goroutine of the code being
// measured, so it only copies the few fields attribution needs into a
// compact attribution.Span under one lock; the tree and critical-path work
// happens on the accounting goroutine. The hand-off is a bounded channel:
// when the accounting falls behind by maxQueuedUnits units, the goroutine
// ending a root waits, and no unit is dropped. flush waits until every
// root ended before it has been accounted; close accounts for the rest and
// stops the goroutine.
type collector struct {
	onWork func(attribution.Work, attribution.Diagnostics)

	idBase    uint64        // span ids of spans made without the SDK
	idNext    atomic.Uint64 // (add, newSpanID, the accountingTracer)
	traceBase uint64        // trace ids of the accountingTracer's roots
	traceNext atomic.Uint64

	mu     sync.Mutex
	traces map[trace.TraceID][]attribution.Span
	free   [][]attribution.Span // emptied span slices, for reuse

	// smu orders hand-offs (read-locked) before close (write-locked);
	// closed is set once the accounting goroutine has been told to stop.
	smu    sync.RWMutex
	closed bool
	queue  chan collected
	done   chan struct{} // closed when the accounting goroutine returns
}

// collected is one item for the accounting goroutine: a unit's spans, or
// (with flushed set) a marker to acknowledge once every unit queued before
// it has been accounted.
type collected struct {
	spans   []attribution.Span
	flushed chan struct{}
}

// maxQueuedUnits bounds the units ended and not yet accounted; maxFree the
// span slices kept for reuse, maxBatch the units accounted in one pass.
const (
	maxQueuedUnits = 1024
	maxFree        = 256
	maxBatch       = 64
	spansPerUnit   = 32 // a taskhost unit has about 20
)

// newCollector starts the collector's accounting goroutine, which calls
// onWork for each unit; close stops it.
func newCollector(onWork func(attribution.Work, attribution.Diagnostics)) *collector {
	var seed [16]byte
	_, _ = rand.Read(seed[:]) // crypto/rand.Read never fails
	c := &collector{
		onWork:    onWork,
		idBase:    binary.BigEndian.Uint64(seed[:8]),
		traceBase: binary.BigEndian.Uint64(seed[8:]),
		traces:    map[trace.TraceID][]attribution.Span{},
		queue:     make(chan collected, maxQueuedUnits),
		done:      make(chan struct{}),
	}
	go c.account()
	return c
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
// is a unit's, and hands the unit's spans to the accounting goroutine when
// it is the unit's root.
func (c *collector) OnEnd(s sdktrace.ReadOnlySpan) { c.ended(attribution.FromSDKSpan(s)) }

// ended keeps an ended span (from the SDK, through OnEnd, or from the
// runtime's accountingTracer) if its trace is a unit's, and hands the
// unit's spans to the accounting goroutine when it is the unit's root.
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
	c.mu.Unlock()
	c.smu.RLock()
	defer c.smu.RUnlock()
	if c.closed {
		// Only after close, when every unit has ended: account here.
		c.accountBatch([]attribution.Span(nil), spans)
		return
	}
	c.queue <- collected{spans: spans}
}

// account is the accounting goroutine: it takes the units handed off, a
// batch at a time, until close.
func (c *collector) account() {
	defer close(c.done)
	var batch []attribution.Span
	var ids []attribution.TraceID // of the units in batch
	var held *collected           // taken from the queue, for the next batch
	for {
		var it collected
		if held != nil {
			it, held = *held, nil
		} else {
			var ok bool
			if it, ok = <-c.queue; !ok {
				return
			}
		}
		if it.flushed != nil {
			close(it.flushed)
			continue
		}
		batch, ids = append(batch[:0], it.spans...), append(ids[:0], it.spans[0].TraceID)
		c.recycle(it.spans)
		// Take what else is queued: one pass over many units reuses
		// attribution's scratch space. A flush marker, or a unit of a
		// trace already in the batch (EachTree would make one unit of
		// them), starts the next batch.
	more:
		for len(ids) < maxBatch {
			select {
			case next, ok := <-c.queue:
				if !ok {
					break more
				}
				if next.flushed != nil || slices.Contains(ids, next.spans[0].TraceID) {
					held = &next
					break more
				}
				batch, ids = append(batch, next.spans...), append(ids, next.spans[0].TraceID)
				c.recycle(next.spans)
			default:
				break more
			}
		}
		batch = c.accountBatch(batch, nil)
	}
}

func (c *collector) recycle(spans []attribution.Span) {
	c.mu.Lock()
	c.recycleLocked(spans)
	c.mu.Unlock()
}

// accountBatch attributes the units whose spans are in batch (and extra),
// each trace a unit, and returns batch emptied for reuse. The batch's
// diagnostics go with its first unit.
func (c *collector) accountBatch(batch, extra []attribution.Span) []attribution.Span {
	batch = append(batch, extra...)
	first := true
	var works []attribution.Work
	diag := attribution.EachTree(batch, func(w attribution.Work) { works = append(works, w) })
	for _, w := range works {
		d := attribution.Diagnostics{}
		if first {
			d, first = diag, false
		}
		c.onWork(w, d)
	}
	clear(batch) // drop the strings the spans hold
	return batch[:0]
}

// flush waits until every unit whose root ended before the call has been
// accounted, or ctx ends.
func (c *collector) flush(ctx context.Context) error {
	c.smu.RLock()
	if c.closed {
		c.smu.RUnlock()
		return nil
	}
	ack := make(chan struct{})
	select {
	case c.queue <- collected{flushed: ack}:
	case <-ctx.Done():
		c.smu.RUnlock()
		return ctx.Err()
	}
	c.smu.RUnlock()
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close accounts for every unit handed off and stops the accounting
// goroutine. Safe to call more than once.
func (c *collector) close() {
	c.smu.Lock()
	if !c.closed {
		c.closed = true
		close(c.queue)
	}
	c.smu.Unlock()
	<-c.done
}

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

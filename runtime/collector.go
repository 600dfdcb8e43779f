package runtime

import (
	"context"
	"encoding/binary"
	mrand "math/rand/v2"
	"sync"
	"time"

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
// accounted. Spans reach it from the SDK (OnEnd, a span processor) or
// from the runtime's accountingTracer (ended).
//
// Ending a span runs on the goroutine of the code being measured, so it
// only files the few fields attribution needs, as a compact
// attribution.Span, under one lock, in the unit's buffer (unitBuf): the
// runtime's own spans carry it, others' are looked up by trace. The tree
// and critical-path work happens on the accounting goroutine, where
// units of a shape seen before skip building the tree
// (attribution.Builder). Waking that goroutine costs more
// than accounting a unit, so it is not woken per unit: the first unit
// handed to it while it is idle wakes it, and it lets the units of the
// next gatherDelay gather before it takes them all in one pass, or fewer
// if hurryAt units are waiting first (a workload fast enough to fill the
// queue within the delay would otherwise wait for room); a longer delay
// makes larger, cheaper passes (BenchmarkTelemetryTax). The hand-off is
// bounded: when maxQueuedUnits units wait, the goroutine ending a root
// waits, and no unit is dropped. flush waits until every
// root ended before it has been accounted (without the gathering delay);
// close accounts for the rest and stops the goroutine.
//
// One goroutine accounts every unit, rather than each root's goroutine
// its own: its batches keep the accumulators and the scratch space warm
// from one unit to the next (BenchmarkTelemetryTax against
// BenchmarkUnitTelemetry; docs/measurements/telemetry-cost.md).
type collector struct {
	onWork func(attribution.Work, any)   // each unit's, with its owner (track); Stats and Nodes valid only during the call
	onDiag func(attribution.Diagnostics) // each trace's, after its units; may be nil

	mu     sync.Mutex
	traces map[trace.TraceID]*unitBuf // the units in flight, by trace
	free   [][]attribution.Span       // emptied span slices, for reuse
	freeN  int                        // the spans they hold (their capacities)
	bufs   []*unitBuf                 // buffers of units handed off, for reuse

	// The hand-off, guarded by qmu.
	qmu       sync.Mutex
	room      sync.Cond     // on qmu: pending has room, or closed
	pending   []handoff     // units ended, not taken yet
	handed    uint64        // units handed off so far
	recorded  uint64        // of them, as records (record.go)
	accounted uint64        // of them, accounted
	waiters   []flushWaiter // flush calls waiting
	idle      bool          // the goroutine waits for wake
	closed    bool          // no more hand-offs: close was called
	wake      chan struct{} // capacity 1: wakes an idle goroutine
	hurry     chan struct{} // capacity 1: ends the gathering delay
	gather    time.Duration // gatherDelay; tests change it before the first unit
	done      chan struct{} // closed when the accounting goroutine returns
}

// unitBuf is the spans of one unit in flight, guarded by collector.mu.
// The runtime's own spans carry their unit's (accountingSpan.unit), so
// filing one looks nothing up by trace. A buffer is reused once its unit
// is handed off: a span that outlives its unit finds another trace's id
// (or none) in it and is dropped, as a lookup by trace would drop it.
type unitBuf struct {
	id    trace.TraceID // zero while not in use
	spans []attribution.Span
	owner any // what track was given, handed to onWork with the unit
}

// handoff is a unit ended and not accounted yet: its spans and owner,
// or its record (a task unit's, record.go), whose spans the accounting
// makes.
type handoff struct {
	spans []attribution.Span
	owner any
	rec   *unitRecord
}

// flushWaiter is a flush waiting for the first upTo units handed off.
type flushWaiter struct {
	upTo uint64
	ch   chan struct{}
}

// maxQueuedUnits bounds the units ended and not yet accounted;
// maxFreeUnits the unit buffers kept for reuse and maxFreeSpans the spans
// the emptied slices kept for reuse hold (their capacities); spansPerUnit
// is a new slice's capacity; gatherDelay is how long the woken goroutine
// lets units gather, hurryAt how many waiting units end that early.
//
// The slices are kept small: the units that gather between two passes (a
// few hundred at 50 ms) are written on the workers' cores and read on the
// accounting goroutine's, and what they hold beyond their spans only takes
// cache from the task hosts and the workers. Every slice a pass hands back
// is kept, up to maxFreeSpans (as many units as can wait for a pass,
// 1.5 MiB of spans), so that a pass does not allocate, zero and fault in
// the next pass's slices anew; a slice of more than four units' worth (a
// fanout's) is dropped. BenchmarkTelemetryTax measures the sizes
// (docs/measurements/telemetry-cost.md).
const (
	maxQueuedUnits = 1024
	maxFreeUnits   = maxQueuedUnits
	spansPerUnit   = 16 // a taskhost unit has 12; a unit with more grows its slice
	maxFreeSpans   = maxFreeUnits * spansPerUnit
	gatherDelay    = 50 * time.Millisecond
	hurryAt        = maxQueuedUnits / 2
)

// newCollector starts the collector's accounting goroutine, which calls
// onWork for each unit, with the owner its trace was tracked with, and
// then onDiag (if not nil) with the diagnostics of its trace; close
// stops it. onWork's Work shares the goroutine's
// scratch space (attribution.Builder.Reuse): its Stats and Nodes are
// valid only until onWork returns.
func newCollector(onWork func(attribution.Work, any), onDiag func(attribution.Diagnostics)) *collector {
	c := &collector{
		onWork: onWork,
		onDiag: onDiag,
		traces: map[trace.TraceID]*unitBuf{},
		wake:   make(chan struct{}, 1),
		hurry:  make(chan struct{}, 1),
		gather: gatherDelay,
		done:   make(chan struct{}),
	}
	c.room.L = &c.qmu
	go c.account()
	return c
}

// track starts collecting the spans of trace id (a unit's root) and
// returns the unit's buffer, for its spans to carry (setUnit); owner
// (the runtime's unit) is handed to onWork with the unit's attribution.
func (c *collector) track(id trace.TraceID, owner any) *unitBuf {
	c.mu.Lock()
	defer c.mu.Unlock()
	if buf, ok := c.traces[id]; ok {
		return buf
	}
	var spans []attribution.Span
	if n := len(c.free); n > 0 {
		spans, c.free = c.free[n-1], c.free[:n-1]
		c.freeN -= cap(spans)
	} else {
		spans = make([]attribution.Span, 0, spansPerUnit)
	}
	var buf *unitBuf
	if n := len(c.bufs); n > 0 {
		buf, c.bufs = c.bufs[n-1], c.bufs[:n-1]
	} else {
		buf = new(unitBuf)
	}
	buf.id, buf.spans, buf.owner = id, spans, owner
	c.traces[id] = buf
	return buf
}

// forget drops a trace whose root never ended normally (not sampled).
func (c *collector) forget(id trace.TraceID) {
	c.mu.Lock()
	if buf, ok := c.traces[id]; ok {
		c.recycleLocked(c.releaseBufLocked(buf).spans)
	}
	c.mu.Unlock()
}

// releaseBufLocked stops tracking buf's trace and returns its spans and
// owner; buf is kept for reuse. mu is held.
func (c *collector) releaseBufLocked(buf *unitBuf) handoff {
	delete(c.traces, buf.id)
	h := handoff{spans: buf.spans, owner: buf.owner}
	buf.id, buf.spans, buf.owner = trace.TraceID{}, nil, nil
	if len(c.bufs) < maxFreeUnits {
		c.bufs = append(c.bufs, buf)
	}
	return h
}

// bufLocked returns the buffer of trace id: buf if it is that trace's
// (buf is what a span carries, or nil), else the one tracked, or nil when
// the trace is not a unit's in flight. mu is held.
func (c *collector) bufLocked(buf *unitBuf, id trace.TraceID) *unitBuf {
	if buf != nil {
		if buf.id != id {
			return nil // the span outlived its unit
		}
		return buf
	}
	return c.traces[id]
}

func (c *collector) recycleLocked(spans []attribution.Span) {
	if n := cap(spans); n <= 4*spansPerUnit && c.freeN+n <= maxFreeSpans {
		c.free = append(c.free, spans[:0])
		c.freeN += n
	}
}

// add keeps spans made without the SDK (a task host's phases, from its
// reply timings) with the other spans of trace id, if it is a unit's in
// flight: in buf, the unit's buffer, if not nil (else looked up). None of
// them may be a root.
func (c *collector) add(buf *unitBuf, id trace.TraceID, spans []attribution.Span) {
	c.mu.Lock()
	if buf = c.bufLocked(buf, id); buf != nil {
		buf.spans = append(buf.spans, spans...)
	}
	c.mu.Unlock()
}

// newTraceID returns a trace id for a root of the accountingTracer:
// random, as the SDK's are (128 bits of the runtime's per-thread
// generator: no lock or shared counter on the span's path), so two units
// of a run meet with a probability of about n²/2¹²⁹.
func (c *collector) newTraceID() attribution.TraceID {
	var id attribution.TraceID
	for id == (attribution.TraceID{}) {
		binary.BigEndian.PutUint64(id[:8], mrand.Uint64())
		binary.BigEndian.PutUint64(id[8:], mrand.Uint64())
	}
	return id
}

// newSpanID returns a span id for a span made without the SDK: random and
// never zero, as the SDK's (64 bits of the runtime's per-thread
// generator); ids matter only within a unit's trace, where two of its n
// spans meet with a probability of about n²/2⁶⁵.
func (c *collector) newSpanID() attribution.SpanID {
	var id attribution.SpanID
	for id.IsZero() {
		binary.BigEndian.PutUint64(id[:], mrand.Uint64())
	}
	return id
}

// ended keeps an ended span (from the runtime's own tracer, or from
// Config.Telemetry.Spans) if its trace is a unit's, and hands the
// unit's spans to the accounting goroutine when it is the unit's root.
// buf is the unit's buffer the span carries, or nil: then it is looked up.
func (c *collector) ended(buf *unitBuf, sp attribution.Span) {
	c.mu.Lock()
	if buf = c.bufLocked(buf, trace.TraceID(sp.TraceID)); buf == nil {
		c.mu.Unlock()
		return // not a unit's trace, or already accounted
	}
	buf.spans = append(buf.spans, sp)
	if sp.Name != telemetry.SpanWork || !sp.ParentID.IsZero() {
		c.mu.Unlock()
		return
	}
	h := c.releaseBufLocked(buf)
	c.mu.Unlock()
	c.handOff(h)
}

// handOff hands a unit ended to the accounting goroutine, waiting while
// maxQueuedUnits wait.
func (c *collector) handOff(h handoff) {
	c.qmu.Lock()
	for len(c.pending) >= maxQueuedUnits && !c.closed {
		c.room.Wait()
	}
	if c.closed {
		// Only after close, when every unit has ended: account here.
		c.qmu.Unlock()
		var b attribution.Builder
		c.accountUnit(&b, new([]attribution.Span), h)
		return
	}
	c.pending = append(c.pending, h)
	c.handed++
	if h.rec != nil {
		c.recorded++
	}
	c.wakeLocked()
	if len(c.pending) == hurryAt {
		c.hurryUp() // enough for a pass: no need to wait for more
	}
	c.qmu.Unlock()
}

// wakeLocked wakes the accounting goroutine if it is idle. qmu is held.
func (c *collector) wakeLocked() {
	if c.idle {
		c.idle = false
		c.wake <- struct{}{} // never blocks: only an idle goroutine is woken, once
	}
}

// hurryUp ends the goroutine's gathering delay, if it is in one.
func (c *collector) hurryUp() {
	select {
	case c.hurry <- struct{}{}:
	default:
	}
}

// account is the accounting goroutine: it takes the units handed off,
// all that are waiting at a time, until close.
func (c *collector) account() {
	defer close(c.done)
	var took []handoff
	var scratch []attribution.Span // a record's spans (accountUnit)
	b := attribution.Builder{Reuse: true}
	gather := time.NewTimer(time.Hour)
	gather.Stop()
	for {
		c.qmu.Lock()
		if len(c.pending) == 0 {
			if c.closed {
				c.releaseLocked(true)
				c.qmu.Unlock()
				return
			}
			c.idle = true
			c.qmu.Unlock()
			<-c.wake
			select {
			case <-c.hurry: // left from before this wake: what it asked for is checked below
			default:
			}
			c.qmu.Lock()
			hurry := len(c.waiters) > 0 || c.closed || len(c.pending) >= hurryAt
			c.qmu.Unlock()
			if !hurry {
				gather.Reset(c.gather)
				select {
				case <-gather.C:
				case <-c.hurry: // a flush, close, or hurryAt units waiting
					gather.Stop()
				}
			}
			continue
		}
		took, c.pending = c.pending, took[:0]
		c.room.Broadcast()
		c.qmu.Unlock()
		for _, h := range took {
			c.accountUnit(&b, &scratch, h)
			if h.rec == nil {
				clear(h.spans) // drop the strings the spans hold
				c.recycle(h.spans)
			}
		}
		clear(took) // drop the slices, now recycled, and the owners
		c.qmu.Lock()
		c.accounted += uint64(len(took))
		c.releaseLocked(false)
		c.qmu.Unlock()
	}
}

// releaseLocked wakes the flush calls whose units are all accounted, or
// every one (all: the goroutine is stopping). qmu is held.
func (c *collector) releaseLocked(all bool) {
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if all || w.upTo <= c.accounted {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	clear(c.waiters[len(kept):])
	c.waiters = kept
}

func (c *collector) recycle(spans []attribution.Span) {
	c.mu.Lock()
	c.recycleLocked(spans)
	c.mu.Unlock()
}

// accountUnit attributes the unit handed off (its spans are of one trace;
// they hold more than one unit only if a unit was nested in another's
// trace), with b's scratch space.
func (c *collector) accountUnit(b *attribution.Builder, scratch *[]attribution.Span, h handoff) {
	if h.rec != nil {
		// A record's spans are made in the Builder's goroutine's
		// scratch space, which the next unit's overwrite.
		*scratch = h.rec.spans((*scratch)[:0])
		h.spans = *scratch
		defer clear(*scratch)
	}
	diag := b.EachTree(h.spans, func(w attribution.Work) { c.onWork(w, h.owner) })
	if c.onDiag != nil {
		c.onDiag(diag)
	}
}

// flush waits until every unit whose root ended before the call has been
// accounted, or ctx ends.
func (c *collector) flush(ctx context.Context) error {
	c.qmu.Lock()
	if c.closed || c.accounted == c.handed {
		c.qmu.Unlock()
		return nil
	}
	w := flushWaiter{upTo: c.handed, ch: make(chan struct{})}
	c.waiters = append(c.waiters, w)
	c.wakeLocked()
	c.hurryUp()
	c.qmu.Unlock()
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close accounts for every unit handed off and stops the accounting
// goroutine. Safe to call more than once.
func (c *collector) close() {
	c.qmu.Lock()
	c.closed = true
	c.wakeLocked()
	c.hurryUp()
	c.room.Broadcast()
	c.qmu.Unlock()
	<-c.done
}

// e2eStats sums the end-to-end times the runtime measures itself (with or
// without telemetry) in bounded memory. Guarded by Runtime.mu.
type e2eStats struct {
	n      int
	total  time.Duration
	sketch attribution.FineSketch
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

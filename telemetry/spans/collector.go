package spans

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Collector assembles the spans of units of work: it keeps the spans of
// the traces of the units it tracks (Track: a unit's root and an owner),
// and when a unit's root ends it hands the unit's spans, with its owner,
// to the account func, on an accounting goroutine of its own. Spans reach
// it from a TracerProvider with the Collector (a unit's spans carry their
// unit: nothing is looked up) or from elsewhere through Ended (a Source's,
// looked up by trace). Spans of other traces are ignored, so the spans it
// holds are bounded by the units in flight, and it keeps nothing of a
// unit once it has been accounted. A span that ends after its unit's root
// reaches no unit.
//
// Ending a span runs on the goroutine of the code being measured, so it
// only files the span, under its unit's lock. Waking the accounting
// goroutine costs more than accounting a unit, so it is not woken per
// unit: the first unit handed to it while it is idle wakes it, and it
// lets the units of the next gatherDelay gather before it takes them all
// in one pass, or fewer if hurryAt units are waiting first; a longer
// delay makes larger, cheaper passes (BenchmarkTelemetryTax). One
// goroutine accounts every unit, so that its passes keep the account's
// scratch space warm. The hand-off is bounded: when maxQueuedUnits units
// wait, the goroutine ending a root waits, and no unit is dropped. Flush
// waits until every root ended before it has been accounted; Close
// accounts for the rest and stops the goroutine.
type Collector struct {
	// account takes each unit's spans (of one trace) and owner, on the
	// accounting goroutine, one unit at a time; the spans are valid only
	// during the call.
	account func(spans []Span, owner any)

	mu     sync.Mutex
	traces map[TraceID]*unit // the units in flight, by trace
	free   [][]Span          // emptied span slices, for reuse
	freeN  int               // the spans they hold (their capacities)

	// The hand-off, guarded by qmu.
	qmu       sync.Mutex
	room      sync.Cond     // on qmu: pending has room, or closed
	pending   []handoff     // units ended, not taken yet
	handed    uint64        // units handed off so far
	accounted uint64        // of them, accounted
	waiters   []flushWaiter // flush calls waiting
	idle      bool          // the goroutine waits for wake
	closed    bool          // no more hand-offs: close was called
	wake      chan struct{} // capacity 1: wakes an idle goroutine
	hurry     chan struct{} // capacity 1: ends the gathering delay
	gather    time.Duration // gatherDelay; tests change it before the first unit
	done      chan struct{} // closed when the accounting goroutine returns
	late      sync.Mutex    // accounts, one at a time, the units ended after Close
}

// unit is the spans of one unit in flight. A tracer's spans carry their
// unit (tracerSpan.unit): a tracer's root is allocated in a unit of its
// own, with the first spans started under it (its arena) and room for
// its leaves, which Track makes the unit's (until then, id zero, spans
// filed to it are looked up by trace). Its arena's spans stay where they
// are when they end, its leaves are kept compactly (leaf.go), and only
// other spans are copied whole into spans; the unit's Spans are made at
// hand-off, on the accounting goroutine (appendSpans). A unit is never
// reused: a span that outlives it finds it handed off and is dropped.
type unit struct {
	id     TraceID
	root   SpanID
	direct bool         // tracked with TrackDirect: not in Collector.traces
	n      atomic.Int32 // arena's spans taken
	arena  [unitSpans]tracerSpan

	mu      sync.Mutex
	filed   uint8  // the arena's spans ended, by bit
	spans   []Span // the other spans ended, whole
	leaves  []leaf // in leafBuf while they fit
	leafBuf [unitLeaves]leaf
	owner   any // what Track was given, handed to account with the unit
	handed  bool
}

// unitSpans is how many spans a unit allocates with itself: a task
// unit's root, dispatch and host span (the queue is a leaf).
const unitSpans = 3

// newSpan returns a new span of unit u: one of its own while they last,
// else (and for no unit) a new one.
func (u *unit) newSpan() *tracerSpan {
	if u != nil {
		if i := u.n.Add(1); i <= unitSpans {
			s := &u.arena[i-1]
			s.arena = int8(i)
			return s
		}
	}
	return new(tracerSpan)
}

// handoff is a unit ended and not accounted yet: its spans and owner,
// or what makes its spans (HandOff).
type handoff struct {
	spans []Span // whole
	owner any
	fill  Appender
	// unit, if not nil, holds more of its spans: its arena's filed and
	// its leaves, made Spans of on the accounting goroutine.
	unit   *unit
	filed  uint8
	leaves []leaf
}

// An Appender appends the spans of a unit, which it kept (a Holder), to
// dst and returns the result.
type Appender interface {
	AppendSpans(dst []Span) []Span
}

// flushWaiter is a flush waiting for the first upTo units handed off.
type flushWaiter struct {
	upTo uint64
	ch   chan struct{}
}

// maxQueuedUnits bounds the units ended and not yet accounted;
// maxFreeSpans the spans
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
	spansPerUnit   = 16 // a taskhost unit has 13; a unit with more grows its slice
	maxFreeSpans   = maxQueuedUnits * spansPerUnit
	gatherDelay    = 50 * time.Millisecond
	hurryAt        = maxQueuedUnits / 2
)

// NewCollector starts a Collector's accounting goroutine, which calls
// account for each unit, with the owner it was tracked with; Close stops
// it. account's spans are valid only until it returns.
func NewCollector(account func(spans []Span, owner any)) *Collector {
	c := &Collector{
		account: account,
		traces:  map[TraceID]*unit{},
		wake:    make(chan struct{}, 1),
		hurry:   make(chan struct{}, 1),
		gather:  gatherDelay,
		done:    make(chan struct{}),
	}
	c.room.L = &c.qmu
	go c.accountLoop()
	return c
}

// Track starts collecting the spans of the unit whose root is root (its
// trace), and hands them with owner to account when root ends. A root
// that is not sampled is not tracked. Call it before root is shared: the
// spans a TracerProvider starts under a root of its own carry its unit.
func (c *Collector) Track(root trace.Span, owner any) {
	sc := root.SpanContext()
	if !sc.IsSampled() {
		return
	}
	s, ours := root.(*tracerSpan)
	id := TraceID(sc.TraceID())
	var u *unit
	if ours && s.unit != nil && s.unit.id == (TraceID{}) {
		u = s.unit // allocated with it
	} else {
		u = new(unit) // before the lock, which every span's end by trace takes
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.traces[id]; ok {
		return // a unit nested in another's trace: its spans are that unit's
	}
	u.id, u.root, u.owner = id, SpanID(sc.SpanID()), owner
	c.traces[id] = u
	if ours {
		s.unit = u
	}
}

// TrackDirect is Track for a unit whose spans all start under its root
// through the TracerProvider with the Collector: none comes from a Source
// or starts under a parent from elsewhere (a span context that crossed a
// process), as with a task sent to a task host, whose phases come back
// in its reply. Such a unit is not filed by its trace, which spares its
// tracking the lookup's upkeep; a root that is not the TracerProvider's
// is tracked as by Track. A span of the unit that reaches the Collector
// by its trace instead (Ended, or a Source's) finds no unit and is not
// accounted: the caller must know that none does (a task host's reply
// names the span its request was sent under, so its phases are recorded
// there).
func (c *Collector) TrackDirect(root trace.Span, owner any) {
	s, ours := root.(*tracerSpan)
	sc := root.SpanContext()
	if !ours || s.unit == nil || s.unit.id != (TraceID{}) || !sc.IsSampled() {
		c.Track(root, owner)
		return
	}
	u := s.unit // allocated with it
	u.id, u.root, u.owner, u.direct = TraceID(sc.TraceID()), SpanID(sc.SpanID()), owner, true
}

// Forget stops collecting the unit of root, which Track was given: it
// will not be accounted.
func (c *Collector) Forget(root trace.Span) {
	var u *unit
	if s, ok := root.(*tracerSpan); ok && s.unit != nil && s.unit.direct {
		u = s.unit
	} else {
		id := TraceID(root.SpanContext().TraceID())
		c.mu.Lock()
		u = c.traces[id]
		delete(c.traces, id)
		c.mu.Unlock()
	}
	if u == nil {
		return
	}
	u.mu.Lock()
	spans := u.spans
	u.spans, u.leaves, u.owner, u.handed = nil, nil, nil, true
	u.mu.Unlock()
	c.recycle(spans)
}

// Ended keeps sp, a span ended elsewhere (a Source's), if its trace is a
// unit's in flight; the unit is accounted when its root ends.
func (c *Collector) Ended(sp Span) { c.ended(nil, &sp) }

// ended files sp in unit u (nil: the unit of its trace, if tracked) and
// hands the unit off when sp is its root. Nothing for a nil Collector.
func (c *Collector) ended(u *unit, sp *Span) {
	if c == nil {
		return
	}
	if u == nil || u.id == (TraceID{}) {
		c.mu.Lock()
		u = c.traces[sp.TraceID]
		c.mu.Unlock()
		if u == nil {
			return // not a unit's trace, or already accounted
		}
	}
	u.mu.Lock()
	if u.handed {
		u.mu.Unlock()
		return // the span outlived its unit
	}
	if u.spans == nil {
		u.spans = c.newSpans()
	}
	u.spans = append(u.spans, *sp)
	if sp.SpanID != u.root {
		u.mu.Unlock()
		return
	}
	c.handOffLocked(u)
}

// endedOwn files s, a span of u's arena, ended (sp, its Span, which stays
// in s), and hands the unit off when s is its root.
func (c *Collector) endedOwn(u *unit, s *tracerSpan, sp *Span) {
	if u.id == (TraceID{}) {
		c.ended(nil, sp) // not tracked: looked up by trace
		return
	}
	u.mu.Lock()
	if u.handed {
		u.mu.Unlock()
		return // the span outlived its unit
	}
	u.filed |= 1 << (s.arena - 1)
	if sp.SpanID != u.root {
		u.mu.Unlock()
		return
	}
	c.handOffLocked(u)
}

// handOffLocked hands unit u, whose root ended, to the accounting; u.mu
// is held, and unlocked.
func (c *Collector) handOffLocked(u *unit) {
	u.handed = true
	h := handoff{spans: u.spans, owner: u.owner}
	if u.filed != 0 || len(u.leaves) > 0 {
		h.unit, h.filed, h.leaves = u, u.filed, u.leaves
	}
	u.spans, u.leaves, u.owner = nil, nil, nil
	u.mu.Unlock()
	if !u.direct {
		c.mu.Lock()
		delete(c.traces, u.id)
		c.mu.Unlock()
	}
	c.handOff(h)
}

// newSpans returns an emptied span slice to reuse, or a new one.
func (c *Collector) newSpans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.free); n > 0 {
		spans := c.free[n-1]
		c.free = c.free[:n-1]
		c.freeN -= cap(spans)
		return spans
	}
	return make([]Span, 0, spansPerUnit)
}

// HandOff hands a unit ended whose spans a Holder kept to the accounting:
// fill appends them, on the accounting goroutine, to its scratch space,
// and account takes them with owner. It waits while maxQueuedUnits wait.
func (c *Collector) HandOff(owner any, fill Appender) {
	c.handOff(handoff{owner: owner, fill: fill})
}

// handOff hands a unit ended to the accounting goroutine, waiting while
// maxQueuedUnits wait.
func (c *Collector) handOff(h handoff) {
	c.qmu.Lock()
	for len(c.pending) >= maxQueuedUnits && !c.closed {
		c.room.Wait()
	}
	if c.closed {
		// Only after Close, when every unit has ended: account here.
		c.qmu.Unlock()
		c.late.Lock()
		c.accountUnit(nil, h)
		c.late.Unlock()
		return
	}
	c.pending = append(c.pending, h)
	c.handed++
	c.wakeLocked()
	if len(c.pending) == hurryAt {
		c.hurryUp() // enough for a pass: no need to wait for more
	}
	c.qmu.Unlock()
}

// wakeLocked wakes the accounting goroutine if it is idle. qmu is held.
func (c *Collector) wakeLocked() {
	if c.idle {
		c.idle = false
		c.wake <- struct{}{} // never blocks: only an idle goroutine is woken, once
	}
}

// hurryUp ends the goroutine's gathering delay, if it is in one.
func (c *Collector) hurryUp() {
	select {
	case c.hurry <- struct{}{}:
	default:
	}
}

// accountLoop is the accounting goroutine: it takes the units handed
// off, all that are waiting at a time, until Close.
func (c *Collector) accountLoop() {
	defer close(c.done)
	var took []handoff
	var scratch []Span // a Holder's unit's spans (HandOff)
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
			scratch = c.accountUnit(scratch, h)
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
func (c *Collector) releaseLocked(all bool) {
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

// recycle keeps an emptied span slice for a unit to come, within
// maxFreeSpans; a slice of more than four units' worth is dropped.
func (c *Collector) recycle(spans []Span) {
	if n := cap(spans); n > 0 && n <= 4*spansPerUnit {
		c.mu.Lock()
		if c.freeN+n <= maxFreeSpans {
			c.free = append(c.free, spans[:0])
			c.freeN += n
		}
		c.mu.Unlock()
	}
}

// accountUnit accounts the unit h, in scratch if its spans are made
// now (HandOff), and returns scratch.
func (c *Collector) accountUnit(scratch []Span, h handoff) []Span {
	if h.fill != nil {
		scratch = h.fill.AppendSpans(scratch[:0])
		c.account(scratch, h.owner)
		clear(scratch) // drop the strings the spans hold
		return scratch
	}
	if h.unit != nil {
		scratch = h.unit.appendSpans(scratch[:0], h.filed, h.leaves, h.spans)
		c.account(scratch, h.owner)
		clear(scratch)
	} else {
		c.account(h.spans, h.owner)
	}
	clear(h.spans)
	c.recycle(h.spans)
	return scratch
}

// Flush waits until every unit whose root ended before the call has been
// accounted, or ctx ends.
func (c *Collector) Flush(ctx context.Context) error {
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

// Close accounts for every unit handed off and stops the accounting
// goroutine; a unit whose root ends later is accounted by the goroutine
// that ends it. Safe to call more than once.
func (c *Collector) Close() {
	c.qmu.Lock()
	c.closed = true
	c.wakeLocked()
	c.hurryUp()
	c.room.Broadcast()
	c.qmu.Unlock()
	<-c.done
}

package amdahlconnector

import (
	"hash/maphash"
	"sync"
	"time"
	"unsafe"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// Memory accounted per span held, per unit root and per trace, for
// max_bytes: the span as held (its strings are interned and shared), a
// root's unitInfo, and a trace's state with its map entry.
const (
	spanBytes  = int(unsafe.Sizeof(spans.Span{}))
	rootBytes  = int(unsafe.Sizeof(rootInfo{}))
	traceBytes = int(unsafe.Sizeof(traceState{})) + 64
)

// maxPooledRoots bounds the unit roots a released trace's state keeps
// room for when it is pooled for the next trace.
const maxPooledRoots = 16

// maxAmdahlServices bounds the services remembered as amdahl's.
const maxAmdahlServices = 4096

// maxSpansLimit is the largest max_spans_per_trace accepted.
const maxSpansLimit = 10_000_000

// Reasons a trace is dropped or a span refused (the reason attribute of
// the health metrics, and of the log line).
const (
	reasonMaxTraces = "max_traces"
	reasonMaxBytes  = "max_bytes"
	reasonMaxSpans  = "max_spans_per_trace"
	reasonTimeout   = "timeout"
	reasonShutdown  = "shutdown"
	// reasonDropped refuses a span whose trace was dropped for a bound.
	reasonDropped = "trace_dropped"
)

// traceState is one trace held until its units can be attributed.
type traceState struct {
	id    spans.TraceID
	spans []spans.Span
	slab  *spanSlab // the pooled holder of spans' array (tracePool)
	// roots are the unitInfos of its unit roots (spanMeta.root), in
	// arrival order.
	roots []rootInfo
	bytes int64
	// created orders eviction (oldest first) and the timeout; deadline is
	// the last root's arrival plus wait (zero while no root has arrived).
	created, deadline time.Time
	// hasWork: an amdahl.work span arrived; amdahl: a span with amdahl's
	// row attributes (the trace is amdahl's: units and rows "auto").
	hasWork, amdahl bool
	// rootService is the service of the trace's root span; amdahlService
	// is set when the trace is released if that service has sent
	// amdahl.work spans (its traces without one hold no unit in "auto").
	rootService   string
	amdahlService bool
	// prev, next: the list of held traces in order of creation.
	prev, next *traceState
}

// rootInfo is the unitInfo of the root span id.
type rootInfo struct {
	id   spans.SpanID
	info unitInfo
}

// rooted reports whether a unit or trace root of the trace has arrived.
func (t *traceState) rooted() bool { return !t.deadline.IsZero() }

// info returns the unitInfo of root span id (the last to arrive of
// duplicates), or nil.
func (t *traceState) info(id spans.SpanID) *unitInfo {
	for i := len(t.roots) - 1; i >= 0; i-- {
		if t.roots[i].id == id {
			return &t.roots[i].info
		}
	}
	return nil
}

// tracePool recycles traces' states, and their span slices by size
// class: a trace's spans start in the smallest class and move to the
// next one up when full, and a released trace's slice goes back to its
// own class, so that a slice's room stays within twice its trace's
// spans (a pool of states that kept their slices would let every state
// grow to the largest trace it ever held). sync.Pool lets go of what
// stays unused across garbage collections.
type tracePool struct {
	states sync.Pool
	slabs  [numSpanClasses]sync.Pool // *spanSlab of cap minClassSpans<<class
}

// spanSlab holds a span slice in a pool (a pointer, so that putting one
// allocates nothing).
type spanSlab struct{ spans []spans.Span }

// Span slice classes: minClassSpans << class spans, class < numSpanClasses
// (8 … 1024); larger slices are made and let go as they come.
const (
	minClassSpans  = 8
	numSpanClasses = 8
)

// spanClass returns the class of a slice of capacity n, and whether n is
// a class's capacity.
func spanClass(n int) (int, bool) {
	for c := range numSpanClasses {
		if n == minClassSpans<<c {
			return c, true
		}
	}
	return 0, false
}

func (tp *tracePool) get() *traceState {
	if t, ok := tp.states.Get().(*traceState); ok {
		return t
	}
	return &traceState{}
}

// grow makes room in t.spans for one more span.
func (tp *tracePool) grow(t *traceState) {
	want := minClassSpans
	if c := cap(t.spans); c > 0 {
		want = 2 * c
	}
	var slab *spanSlab
	if c, ok := spanClass(want); ok {
		slab, _ = tp.slabs[c].Get().(*spanSlab)
	}
	if slab == nil {
		slab = &spanSlab{spans: make([]spans.Span, 0, want)}
	}
	slab.spans = append(slab.spans, t.spans...)
	tp.putSlab(t.slab, t.spans)
	t.slab, t.spans = slab, slab.spans
}

// putSlab returns slab, whose slice is now spans, to its class; nothing
// may use either any more.
func (tp *tracePool) putSlab(slab *spanSlab, spans []spans.Span) {
	if slab == nil {
		return
	}
	c, ok := spanClass(cap(spans))
	if !ok {
		return
	}
	clear(spans) // no string of a past trace kept alive
	slab.spans = spans[:0]
	tp.slabs[c].Put(slab)
}

// put returns t, which nothing may use any more.
func (tp *tracePool) put(t *traceState) {
	tp.putSlab(t.slab, t.spans)
	roots := t.roots
	if cap(roots) > maxPooledRoots {
		roots = nil
	}
	clear(roots)
	*t = traceState{roots: roots[:0]}
	tp.states.Put(t)
}

// deadlineEntry is a trace's deadline when a root arrived; stale entries
// (the trace got a later deadline, or is gone) are skipped.
type deadlineEntry struct {
	at time.Time
	id spans.TraceID
}

// buffer holds traces under the bounds of a Config. It is not safe for
// concurrent use: the connector holds its lock.
type buffer struct {
	cfg *Config

	traces     map[spans.TraceID]*traceState
	head, tail *traceState // oldest, newest
	last       *traceState // the trace of the last span added, if held
	spans      int
	bytes      int64
	// deadlines are in the order of their times (each is now + wait when
	// pushed, and now does not go back).
	deadlines []deadlineEntry
	dlHead    int

	done doneSet
	// pool recycles the states of traces dropped here and of traces
	// attributed (the connector puts those back).
	pool *tracePool
	// amdahlServices are the services that sent amdahl.work spans.
	amdahlServices map[string]struct{}

	// counts since the connector last read them (drain).
	counts bufferCounts
}

// bufferCounts are the events of the bounds, by reason.
type bufferCounts struct {
	evictedTraces map[string]int64 // traces dropped incomplete
	evictedSpans  map[string]int64 // their spans
	refusedSpans  map[string]int64
	lateSpans     int64
}

func (c *bufferCounts) reset() {
	*c = bufferCounts{evictedTraces: map[string]int64{}, evictedSpans: map[string]int64{}, refusedSpans: map[string]int64{}}
}

func (c *bufferCounts) empty() bool {
	return len(c.evictedTraces) == 0 && len(c.refusedSpans) == 0 && c.lateSpans == 0
}

func newBuffer(cfg *Config, pool *tracePool) *buffer {
	b := &buffer{cfg: cfg, traces: map[spans.TraceID]*traceState{}, done: newDoneSet(cfg.DoneTraces),
		amdahlServices: map[string]struct{}{}, pool: pool}
	b.counts.reset()
	return b
}

// add takes one span arriving at now (a copy of s: s is not retained),
// with its metadata and, for a root, its unitInfo. A span of a trace
// already attributed or dropped is counted as late; one past
// max_spans_per_trace drops its trace.
func (b *buffer) add(s *spans.Span, m spanMeta, info *unitInfo, now time.Time) {
	t := b.last // the spans of a batch come mostly trace by trace
	if t == nil || t.id != s.TraceID {
		t = b.traces[s.TraceID]
	}
	if t == nil {
		if dropped, ok := b.done.get(s.TraceID); ok {
			if dropped {
				b.counts.refusedSpans[reasonDropped]++
			} else {
				b.counts.lateSpans++
			}
			return
		}
		for len(b.traces) >= b.cfg.MaxTraces {
			b.evict(b.head, reasonMaxTraces)
		}
		t = b.pool.get()
		t.id, t.created, t.bytes = s.TraceID, now, int64(traceBytes)
		b.traces[s.TraceID] = t
		b.link(t)
		b.bytes += t.bytes
	}
	if len(t.spans) >= b.cfg.MaxSpansPerTrace {
		b.counts.refusedSpans[reasonMaxSpans]++
		b.evict(t, reasonMaxSpans)
		return
	}
	sz := int64(spanBytes + len(s.Name) + len(s.Component))
	if m.root {
		sz += int64(rootBytes)
	}
	for b.bytes+sz > b.cfg.MaxBytes && b.head != nil && b.head != t {
		b.evict(b.head, reasonMaxBytes)
	}
	if b.bytes+sz > b.cfg.MaxBytes {
		// t is the only trace left and still does not fit.
		b.counts.refusedSpans[reasonMaxBytes]++
		b.evict(t, reasonMaxBytes)
		return
	}
	if len(t.spans) == cap(t.spans) {
		b.pool.grow(t)
	}
	t.spans = append(t.spans, *s)
	if m.root {
		t.roots = append(t.roots, rootInfo{id: s.SpanID, info: *info})
		if s.Name == telemetry.SpanWork {
			if _, ok := b.amdahlServices[info.service]; !ok && len(b.amdahlServices) < maxAmdahlServices {
				b.amdahlServices[info.service] = struct{}{}
			}
		}
		if s.ParentID.IsZero() {
			t.rootService = info.service
		}
	}
	t.hasWork = t.hasWork || s.Name == telemetry.SpanWork
	t.amdahl = t.amdahl || m.amdahl
	b.last = t
	t.bytes += sz
	b.bytes += sz
	b.spans++
	if m.root {
		t.deadline = now.Add(b.cfg.Wait)
		b.deadlines = append(b.deadlines, deadlineEntry{t.deadline, t.id})
	}
}

// evict drops t incomplete, counted under reason.
func (b *buffer) evict(t *traceState, reason string) {
	b.counts.evictedTraces[reason]++
	b.counts.evictedSpans[reason] += int64(len(t.spans))
	b.forget(t, true)
	b.pool.put(t)
}

// remove forgets t, to be attributed, and remembers its id as done.
func (b *buffer) remove(t *traceState) {
	_, t.amdahlService = b.amdahlServices[t.rootService]
	b.forget(t, false)
}

// settle takes t out of the buffer: appended to out for attribution when
// it has a root, else evicted for reason.
func (b *buffer) settle(t *traceState, reason string, out []*traceState) []*traceState {
	if !t.rooted() {
		b.evict(t, reason)
		return out
	}
	b.remove(t)
	return append(out, t)
}

func (b *buffer) forget(t *traceState, dropped bool) {
	if b.last == t {
		b.last = nil
	}
	b.unlink(t)
	delete(b.traces, t.id)
	b.spans -= len(t.spans)
	b.bytes -= t.bytes
	b.done.add(t.id, dropped)
}

// expire returns the traces due at now: those whose last root arrived
// wait ago, to be attributed; a trace older than trace_timeout is
// returned too if it has a root (the wait would hold it past the timeout)
// and dropped (reason timeout) if it has none.
func (b *buffer) expire(now time.Time, out []*traceState) []*traceState {
	for b.dlHead < len(b.deadlines) && !b.deadlines[b.dlHead].at.After(now) {
		e := b.deadlines[b.dlHead]
		b.dlHead++
		if t := b.traces[e.id]; t != nil && t.deadline.Equal(e.at) {
			b.remove(t)
			out = append(out, t)
		}
	}
	if b.dlHead > 1024 && b.dlHead*2 > len(b.deadlines) {
		b.deadlines = append(b.deadlines[:0], b.deadlines[b.dlHead:]...)
		b.dlHead = 0
	}
	for b.head != nil && now.Sub(b.head.created) >= b.cfg.TraceTimeout {
		out = b.settle(b.head, reasonTimeout, out)
	}
	return out
}

// drainAll returns every trace with a root and drops the others (reason
// shutdown): nothing more will arrive.
func (b *buffer) drainAll(out []*traceState) []*traceState {
	for b.head != nil {
		out = b.settle(b.head, reasonShutdown, out)
	}
	b.deadlines, b.dlHead = nil, 0
	return out
}

func (b *buffer) link(t *traceState) {
	t.prev = b.tail
	if b.tail != nil {
		b.tail.next = t
	} else {
		b.head = t
	}
	b.tail = t
}

func (b *buffer) unlink(t *traceState) {
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		b.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		b.tail = t.prev
	}
	t.prev, t.next = nil, nil
}

// doneSet remembers the last n trace ids attributed or dropped: a ring of
// them in the order they came, and a table to find them (open
// addressing, linear probing, deletion by backward shift: no tombstones,
// so steady churn neither slows it nor grows it, and a flat array costs
// one cache miss where a map's groups cost more). The table grows with
// the ids held, to at most four slots an id.
type doneSet struct {
	ring []spans.TraceID
	next int
	full bool

	slots []doneSlot // a power of two long, at most half full
	used  int
	seed  maphash.Seed
}

// doneSlot is one slot of doneSet's table.
type doneSlot struct {
	id    spans.TraceID
	state uint8 // slotEmpty, slotDone or slotDropped
}

const (
	slotEmpty uint8 = iota
	slotDone
	slotDropped // dropped for a bound
)

// minDoneSlots is the table's size before it grows.
const minDoneSlots = 1024

func newDoneSet(n int) doneSet {
	return doneSet{ring: make([]spans.TraceID, n), slots: make([]doneSlot, minDoneSlots), seed: maphash.MakeSeed()}
}

func (d *doneSet) home(id spans.TraceID) int {
	return int(maphash.Comparable(d.seed, id) & uint64(len(d.slots)-1))
}

// find returns id's slot, or the empty slot where it would go.
func (d *doneSet) find(id spans.TraceID) int {
	mask := len(d.slots) - 1
	i := d.home(id)
	for d.slots[i].state != slotEmpty && d.slots[i].id != id {
		i = (i + 1) & mask
	}
	return i
}

// get reports whether id is done, and if so whether it was dropped.
func (d *doneSet) get(id spans.TraceID) (dropped, ok bool) {
	sl := &d.slots[d.find(id)]
	return sl.state == slotDropped, sl.state != slotEmpty
}

func (d *doneSet) add(id spans.TraceID, dropped bool) {
	state := slotDone
	if dropped {
		state = slotDropped
	}
	if i := d.find(id); d.slots[i].state != slotEmpty {
		d.slots[i].state = state
		return
	}
	if d.full {
		d.remove(d.ring[d.next])
	}
	d.ring[d.next] = id
	d.next++
	if d.next == len(d.ring) {
		d.next, d.full = 0, true
	}
	if 2*(d.used+1) > len(d.slots) {
		d.grow()
	}
	d.slots[d.find(id)] = doneSlot{id: id, state: state}
	d.used++
}

// remove empties id's slot and shifts back the slots after it that
// probed past it, so that every id stays reachable from its home slot.
func (d *doneSet) remove(id spans.TraceID) {
	mask := len(d.slots) - 1
	i := d.find(id)
	if d.slots[i].state == slotEmpty {
		return
	}
	for j := (i + 1) & mask; d.slots[j].state != slotEmpty; j = (j + 1) & mask {
		// The slot at j may move to i unless its home is cyclically in
		// (i, j]: then it was found before reaching i.
		if h := d.home(d.slots[j].id); (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			d.slots[i] = d.slots[j]
			i = j
		}
	}
	d.slots[i] = doneSlot{}
	d.used--
}

func (d *doneSet) grow() {
	old := d.slots
	d.slots = make([]doneSlot, 2*len(old))
	for _, sl := range old {
		if sl.state != slotEmpty {
			d.slots[d.find(sl.id)] = sl
		}
	}
}

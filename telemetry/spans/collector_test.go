package spans

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// TestCollectorFlush: ending a root hands its unit to the accounting
// goroutine without waiting for the accounting; flush waits for the units
// whose roots ended before it (one still being accounted holds it), but
// not for units ending after it, so a busy run cannot keep it waiting;
// and every unit is accounted once, with the owner it was tracked with.
func TestCollectorFlush(t *testing.T) {
	release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	entered := make(chan string, 2)
	accounted := map[string]int{}
	var c *Collector
	c = NewCollector(func(sp []Span, owner any) {
		w := unitOf(sp)
		name := w.Root.Component // the test's name for the unit
		if owner != "owner of "+name {
			t.Errorf("unit %s accounted with owner %v, want %q", name, owner, "owner of "+name)
		}
		entered <- name
		<-release[name]
		accounted[name]++ // the accounting goroutine's alone
	})
	root := func(name string, id byte) Span {
		tid := trace.TraceID{id}
		c.Track(rootSpan(tid, SpanID{id}), "owner of "+name)
		return Span{TraceID: TraceID(tid), SpanID: SpanID{id}, Name: telemetry.SpanWork,
			Component: name, Start: 1, End: 2}
	}

	a := root("a", 1)
	aDone := make(chan struct{})
	go func() { c.Ended(a); close(aDone) }()
	if got := <-entered; got != "a" {
		t.Fatalf("accounting %q, want a", got)
	}
	// a's root has ended, its accounting not: flush waits for it.
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("flush with unit a still being accounted: %v, want it to wait (deadline exceeded)", err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- c.Flush(context.Background()) }()
	time.Sleep(10 * time.Millisecond) // let the flush seal its epoch

	// b's root ends after that flush began, while a is being accounted:
	// ending it does not wait.
	b := root("b", 2)
	bDone := make(chan struct{})
	go func() { c.Ended(b); close(bDone) }()
	select {
	case <-bDone:
	case <-time.After(5 * time.Second):
		t.Fatal("ending b's root waited for a's accounting")
	}
	close(release["a"])
	// The accounting goroutine takes b next.
	select {
	case got := <-entered:
		if got != "b" {
			t.Fatalf("accounting %q, want b", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("unit b, handed off while a was being accounted, was never accounted")
	}
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("flush waited for unit b, whose root ended after it began")
	}
	// A flush now waits for b.
	flushed2 := make(chan error, 1)
	go func() { flushed2 <- c.Flush(context.Background()) }()
	select {
	case err := <-flushed2:
		t.Fatalf("flush returned (%v) while unit b was being accounted", err)
	case <-time.After(30 * time.Millisecond):
	}
	close(release["b"])
	<-aDone
	if err := <-flushed2; err != nil {
		t.Fatal(err)
	}
	c.Close()
	if accounted["a"] != 1 || accounted["b"] != 1 {
		t.Fatalf("accounted %v, want each unit once", accounted)
	}
	// A root ended again (a trace already accounted) is ignored.
	c.Ended(a)
	if err := c.Flush(context.Background()); err != nil || accounted["a"] != 1 {
		t.Fatalf("after a second end of a: flush %v, accounted %v", err, accounted)
	}
}

// TestCollectorConcurrentRoots: units whose roots end on many goroutines
// at once are each accounted once, and a flush after they all ended finds
// them all accounted (each accounting sleeps a little, so units queue).
func TestCollectorConcurrentRoots(t *testing.T) {
	var mu sync.Mutex
	seen := map[TraceID]int{}
	c := NewCollector(func(sp []Span, _ any) {
		w := unitOf(sp)
		mu.Lock()
		seen[w.Root.TraceID]++
		mu.Unlock()
		time.Sleep(20 * time.Microsecond)
	})
	defer c.Close()
	const goroutines, perG = 8, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				tid := trace.TraceID{byte(g), byte(i >> 8), byte(i)}
				c.Track(rootSpan(tid, SpanID{2}), nil)
				c.Ended(Span{TraceID: TraceID(tid), SpanID: SpanID{1}, ParentID: SpanID{2},
					Name: "x.send", Start: 11, End: 12})
				c.Ended(Span{TraceID: TraceID(tid), SpanID: SpanID{2}, Name: telemetry.SpanWork, Start: 10, End: 13})
			}
		}()
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("flush after every root ended: %v (a unit left unaccounted)", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != goroutines*perG {
		t.Fatalf("accounted %d units, want %d", len(seen), goroutines*perG)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("unit %x accounted %d times", id, n)
		}
	}
}

// TestCollectorBoundsQueue: while one unit is being accounted, the roots
// ending meanwhile hand their units off without waiting, up to
// maxQueuedUnits; past that, ending a root waits for the accounting (the
// units ended and not accounted stay bounded), and every unit is
// accounted once.
func TestCollectorBoundsQueue(t *testing.T) {
	hold := make(chan struct{})
	entered := make(chan struct{}, 1)
	var first sync.Once
	var n int
	c := NewCollector(func([]Span, any) {
		first.Do(func() {
			entered <- struct{}{}
			<-hold
		})
		n++ // one unit at a time: the accounting goroutine's
	})
	defer c.Close()
	var released sync.Once
	release := func() { released.Do(func() { close(hold) }) }
	defer release() // before close, should the test fail while holding
	end := func(i int) {
		tid := trace.TraceID{byte(i >> 16), byte(i >> 8), byte(i), 1}
		c.Track(rootSpan(tid, SpanID{1}), nil)
		c.Ended(Span{TraceID: TraceID(tid), SpanID: SpanID{1}, Name: telemetry.SpanWork, Start: 1, End: 2})
	}
	go end(0)
	<-entered
	for i := 1; i <= maxQueuedUnits; i++ {
		end(i) // returns at once: handed off
	}
	past := make(chan struct{})
	go func() { end(maxQueuedUnits + 1); close(past) }()
	select {
	case <-past:
		t.Fatalf("ending a root with %d units queued did not wait for the accounting", maxQueuedUnits+1)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	select {
	case <-past:
	case <-time.After(10 * time.Second):
		t.Fatal("ending a root past the bound still waits after the accounting went on")
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := maxQueuedUnits + 2; n != want {
		t.Fatalf("accounted %d units, want %d", n, want)
	}
}

// TestCollectorHurries: the woken accounting goroutine lets units gather
// (here for an hour), but no longer than until hurryAt of them wait.
func TestCollectorHurries(t *testing.T) {
	var n atomic.Int64
	c := NewCollector(func([]Span, any) { n.Add(1) })
	defer c.Close()
	c.gather = time.Hour // before the first unit: read when it wakes the goroutine
	for idle := false; !idle; time.Sleep(time.Millisecond) {
		c.qmu.Lock()
		idle = c.idle // started, and waiting for a unit
		c.qmu.Unlock()
	}
	end := func(i int) {
		tid := trace.TraceID{byte(i >> 16), byte(i >> 8), byte(i), 2}
		c.Track(rootSpan(tid, SpanID{1}), nil)
		c.Ended(Span{TraceID: TraceID(tid), SpanID: SpanID{1}, Name: telemetry.SpanWork, Start: 1, End: 2})
	}
	for i := 1; i < hurryAt; i++ {
		end(i)
	}
	time.Sleep(100 * time.Millisecond)
	if got := n.Load(); got != 0 {
		t.Fatalf("%d of %d units accounted while gathering: want none before the gathering ends", got, hurryAt-1)
	}
	end(hurryAt)
	deadline := time.Now().Add(10 * time.Second)
	for n.Load() < hurryAt {
		if time.Now().After(deadline) {
			t.Fatalf("%d units waiting, %d accounted after 10 s: want the gathering cut short at %d", hurryAt, n.Load(), hurryAt)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestNewIDs: the ids of spans and traces made without the SDK are
// never zero and do not repeat (100,000 of each, from 4 goroutines at
// once, as the runtime's workers draw them), and they are not sequential
// (a trace file shows them: random, as the SDK's).
func TestNewIDs(t *testing.T) {
	const per, workers = 25_000, 4
	spans := make([][]SpanID, workers)
	traces := make([][]TraceID, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range per {
				spans[w] = append(spans[w], NewSpanID())
				traces[w] = append(traces[w], NewTraceID())
			}
		})
	}
	wg.Wait()
	seenS, seenT := map[SpanID]bool{}, map[TraceID]bool{}
	steps := 0
	for w := range workers {
		for i, id := range spans[w] {
			if id.IsZero() || seenS[id] {
				t.Fatalf("span id %s: zero or repeated", id)
			}
			seenS[id] = true
			if i > 0 && binary.BigEndian.Uint64(id[:])-binary.BigEndian.Uint64(spans[w][i-1][:]) == 1 {
				steps++
			}
			tid := traces[w][i]
			if tid == (TraceID{}) || seenT[tid] {
				t.Fatalf("trace id %s: zero or repeated", tid)
			}
			seenT[tid] = true
		}
	}
	if steps > 10 {
		t.Errorf("%d of %d span ids follow the one before by 1: a counter, not random", steps, workers*per)
	}
}

// TestCollectorKeepsSlicesBounded: every emptied span slice a pass hands
// back is kept for the next units, up to maxFreeSpans spans in all, and a
// fanout's large slice is not kept at all.
func TestCollectorKeepsSlicesBounded(t *testing.T) {
	c := NewCollector(func([]Span, any) {})
	defer c.Close()
	kept := func() (int, int) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.free), c.freeN
	}
	c.recycle(make([]Span, 0, 8*spansPerUnit))
	if n, held := kept(); n != 0 || held != 0 {
		t.Fatalf("a slice of %d spans kept: %d slices, %d spans", 8*spansPerUnit, n, held)
	}
	for range 2 * maxQueuedUnits {
		c.recycle(make([]Span, 3, spansPerUnit))
	}
	if n, held := kept(); n != maxQueuedUnits || held != maxFreeSpans {
		t.Fatalf("after %d slices of %d: %d kept holding %d spans, want %d holding %d", 2*maxQueuedUnits, spansPerUnit, n, held, maxQueuedUnits, maxFreeSpans)
	}
	c.Track(rootSpan(trace.TraceID{1}, SpanID{1}), nil)
	if n, held := kept(); n != maxQueuedUnits || held != maxFreeSpans {
		t.Errorf("a unit tracked took a slice before it had a span: %d kept holding %d spans", n, held)
	}
	c.Ended(Span{TraceID: TraceID{1}, SpanID: SpanID{2}, ParentID: SpanID{1}})
	c.mu.Lock()
	buf := c.traces[TraceID{1}]
	c.mu.Unlock()
	if len(buf.spans) != 1 || cap(buf.spans) != spansPerUnit {
		t.Errorf("a tracked unit's slice: len %d cap %d, want an emptied one of %d with its span", len(buf.spans), cap(buf.spans), spansPerUnit)
	}
	if n, held := kept(); n != maxQueuedUnits-1 || held != maxFreeSpans-spansPerUnit {
		t.Errorf("after a unit took one: %d kept holding %d spans, want %d holding %d", n, held, maxQueuedUnits-1, maxFreeSpans-spansPerUnit)
	}
}

// rootSpan is a unit's root span, to track: sampled, of trace tid, with
// span id sid.
func rootSpan(tid trace.TraceID, sid SpanID) trace.Span {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID(sid), TraceFlags: trace.FlagsSampled})
	return trace.SpanFromContext(trace.ContextWithSpanContext(context.Background(), sc))
}

// unitOf is what the tests read of a unit's spans: its root (the span
// with no parent).
func unitOf(sp []Span) (w struct{ Root Span }) {
	for _, s := range sp {
		if s.ParentID.IsZero() {
			w.Root = s
		}
	}
	return w
}

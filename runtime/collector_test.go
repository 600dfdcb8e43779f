package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// TestCollectorFlush: a unit is accounted on the goroutine that ends its
// root; flush waits for the units whose roots ended before it (one still
// being accounted holds it), but not for units ending after it, so a
// busy run cannot keep it waiting; and every unit is accounted once.
func TestCollectorFlush(t *testing.T) {
	release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	entered := make(chan string, 2)
	accounted := map[string]int{}
	var c *collector
	c = newCollector(func(w attribution.Work) {
		name := string(w.Root.Component) // the test's name for the unit
		entered <- name
		<-release[name]
		accounted[name]++ // under the collector's amu
	}, nil)
	root := func(name string, id byte) (attribution.Span, trace.TraceID) {
		tid := trace.TraceID{id}
		c.track(tid)
		return attribution.Span{TraceID: attribution.TraceID(tid), SpanID: attribution.SpanID{id}, Name: telemetry.SpanWork,
			Component: name, Start: 1, End: 2}, tid
	}

	a, _ := root("a", 1)
	aDone := make(chan struct{})
	go func() { c.ended(a); close(aDone) }()
	if got := <-entered; got != "a" {
		t.Fatalf("accounting %q, want a", got)
	}
	// a's root has ended, its accounting not: flush waits for it.
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("flush with unit a still being accounted: %v, want it to wait (deadline exceeded)", err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- c.flush(context.Background()) }()
	time.Sleep(10 * time.Millisecond) // let the flush seal its epoch

	// b ends after that flush began; its accounting blocks too.
	b, _ := root("b", 2)
	bDone := make(chan struct{})
	go func() { c.ended(b); close(bDone) }()
	// Wait until b's root has been taken for accounting (it then waits
	// for a's accounting to finish).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		taken := len(c.traces) == 0
		c.mu.Unlock()
		if taken {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("unit b's root was not taken for accounting")
		}
	}
	close(release["a"])
	<-aDone
	if got := <-entered; got != "b" {
		t.Fatalf("accounting %q, want b", got)
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
	go func() { flushed2 <- c.flush(context.Background()) }()
	select {
	case err := <-flushed2:
		t.Fatalf("flush returned (%v) while unit b was being accounted", err)
	case <-time.After(30 * time.Millisecond):
	}
	close(release["b"])
	<-bDone
	if err := <-flushed2; err != nil {
		t.Fatal(err)
	}
	c.close()
	if accounted["a"] != 1 || accounted["b"] != 1 {
		t.Fatalf("accounted %v, want each unit once", accounted)
	}
	// A root ended again (a trace already accounted) is ignored.
	c.ended(a)
	if err := c.flush(context.Background()); err != nil || accounted["a"] != 1 {
		t.Fatalf("after a second end of a: flush %v, accounted %v", err, accounted)
	}
}

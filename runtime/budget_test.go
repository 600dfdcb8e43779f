package runtime

import (
	"context"
	"errors"
	goruntime "runtime"
	"testing"
)

// TestByteBudget: requests are admitted first come, first served while
// their bytes are free; one larger than the budget takes all of it; a
// waiter whose context ends takes nothing and lets the ones behind it in.
func TestByteBudget(t *testing.T) {
	ctx := context.Background()
	b := newByteBudget(100)
	if err := b.acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	if got := b.take(500); got != 100 {
		t.Fatalf("take(500) = %d, want the whole budget, 100", got)
	}
	big := make(chan error, 1)
	go func() { big <- b.acquire(ctx, 500) }() // waits: needs all 100
	waitWaiters(t, b, 1)
	cctx, cancel := context.WithCancel(ctx)
	small := make(chan error, 1)
	go func() { small <- b.acquire(cctx, 10) }() // fits, but waits behind big
	waitWaiters(t, b, 2)
	select {
	case err := <-small:
		t.Fatalf("a small request overtook the waiting large one: %v", err)
	default:
	}
	cancel()
	if err := <-small; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
	}
	b.release(60)
	if err := <-big; err != nil {
		t.Fatal(err)
	}
	b.release(b.take(500))
	b.mu.Lock()
	free, waiting := b.free, len(b.waiters)
	b.mu.Unlock()
	if free != 100 || waiting != 0 {
		t.Errorf("after everything was released: %d free, %d waiting; want 100, 0", free, waiting)
	}
}

// waitWaiters waits until b has n waiters.
func waitWaiters(t *testing.T, b *byteBudget, n int) {
	t.Helper()
	for {
		b.mu.Lock()
		got := len(b.waiters)
		b.mu.Unlock()
		if got >= n {
			return
		}
		goruntime.Gosched()
	}
}

package runtime

import (
	"context"
	"sync"
)

// byteBudget admits work by its bytes: acquire takes n bytes of the
// budget, waiting (first come, first served) while they are not free;
// release gives them back. A request larger than the whole budget takes
// all of it, so it runs alone rather than never. Safe for concurrent use.
type byteBudget struct {
	mu      sync.Mutex
	size    int64
	free    int64
	waiters []*budgetWaiter
}

type budgetWaiter struct {
	n     int64
	ready chan struct{} // closed when granted
}

func newByteBudget(size int64) *byteBudget { return &byteBudget{size: size, free: size} }

// take returns what acquire(n) takes, and release must give back.
func (b *byteBudget) take(n int64) int64 { return max(0, min(n, b.size)) }

// acquire takes b.take(n) bytes, waiting for them until ctx ends (then it
// returns ctx's error and takes nothing).
func (b *byteBudget) acquire(ctx context.Context, n int64) error {
	n = b.take(n)
	b.mu.Lock()
	if len(b.waiters) == 0 && b.free >= n {
		b.free -= n
		b.mu.Unlock()
		return nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		for i, x := range b.waiters {
			if x == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				b.grant() // w may have held up smaller ones behind it
				b.mu.Unlock()
				return ctx.Err()
			}
		}
		b.mu.Unlock()
		// Granted meanwhile: give it back.
		b.release(n)
		return ctx.Err()
	}
}

// release gives back n bytes taken by acquire (b.take(n) of a request).
func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.free += n
	b.grant()
	b.mu.Unlock()
}

// grant admits waiters in order while the first fits; b.mu is held.
func (b *byteBudget) grant() {
	for len(b.waiters) > 0 && b.free >= b.waiters[0].n {
		w := b.waiters[0]
		b.waiters = b.waiters[1:]
		b.free -= w.n
		close(w.ready)
	}
}

package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrClosed is returned by operations on a closed Runtime or pool.
var ErrClosed = errors.New("runtime: closed")

// pool is the node pool: at most n task hosts, spawned lazily, reused
// across tasks, one task at a time each. Acquisition is first come, first
// served (waiters queue on a channel, which Go serves in FIFO order), and
// idle hosts are handed out least recently used first, so work spreads
// over every host.
type pool struct {
	cfg   *hostConfig
	slots chan struct{} // one token per host that may exist

	mu     sync.Mutex
	idle   []*host // LRU order: front is the least recently used
	all    map[int]*host
	nextID int
	closed bool

	spawned  atomic.Int64
	replaced atomic.Int64 // hosts discarded because they died or were killed
}

func newPool(n int, cfg *hostConfig) *pool {
	p := &pool{cfg: cfg, slots: make(chan struct{}, n), all: map[int]*host{}}
	for range n {
		p.slots <- struct{}{}
	}
	return p
}

// acquire returns a live idle host, or spawns one, waiting while n hosts
// are busy. The caller must release it.
func (p *pool) acquire(ctx context.Context) (*host, error) {
	select {
	case <-p.slots:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for a task host: %w", ctx.Err())
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			p.slots <- struct{}{}
			return nil, ErrClosed
		}
		if len(p.idle) == 0 {
			p.nextID++
			id := p.nextID
			p.mu.Unlock()
			h, err := startHost(ctx, id, p.cfg)
			if err != nil {
				p.slots <- struct{}{}
				return nil, err
			}
			p.spawned.Add(1)
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				_ = h.stop(context.Background())
				p.slots <- struct{}{}
				return nil, ErrClosed
			}
			p.all[id] = h
			p.mu.Unlock()
			return h, nil
		}
		h := p.idle[0]
		p.idle = p.idle[1:]
		if h.dead.Load() {
			// It died while idle: reap it, then take another or spawn.
			delete(p.all, h.id)
			p.mu.Unlock()
			p.replaced.Add(1)
			h.log.Warn("runtime: idle task host died; replacing it" + h.exitNote())
			_ = h.stop(context.Background())
			continue
		}
		p.mu.Unlock()
		return h, nil
	}
}

// release returns h to the pool; a dead host is reaped and its slot freed
// for a replacement, spawned by the next acquire.
func (p *pool) release(h *host) {
	p.mu.Lock()
	if h.dead.Load() || p.closed {
		delete(p.all, h.id)
		closed := p.closed
		p.mu.Unlock()
		if !closed {
			p.replaced.Add(1)
		}
		// Reap without holding the slot's waiter: stop of a dead host is quick.
		_ = h.stop(context.Background())
		p.slots <- struct{}{}
		return
	}
	p.idle = append(p.idle, h)
	p.mu.Unlock()
	p.slots <- struct{}{}
}

// hosts returns the live hosts (tests, summaries).
func (p *pool) hosts() []*host {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*host, 0, len(p.all))
	for _, h := range p.all {
		out = append(out, h)
	}
	return out
}

// close stops every host (gracefully, see host.stop), idle or not, and
// waits for them. Busy hosts are stopped too: their tasks fail. Safe to
// call more than once.
func (p *pool) close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	hs := make([]*host, 0, len(p.all))
	for _, h := range p.all {
		hs = append(hs, h)
	}
	p.idle = nil
	p.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(hs))
	for i, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.stop(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

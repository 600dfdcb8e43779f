package ipc

import (
	"context"
	"sync"
)

// queue is the outbound queue between senders and the writer goroutine,
// bounded in bytes and packets.
type queue struct {
	mu         sync.Mutex
	items      []*item
	bytes      int
	maxBytes   int
	maxPackets int
	space      chan struct{} // closed when space is freed, then replaced
	ready      chan struct{} // capacity 1: wakes the writer
	failed     error
	m          *metrics
}

func (q *queue) init(maxBytes, maxPackets int, m *metrics) {
	q.maxBytes, q.maxPackets, q.m = maxBytes, maxPackets, m
	q.space = make(chan struct{})
	q.ready = make(chan struct{}, 1)
}

func (q *queue) err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.failed
}

// push appends it, blocking while the queue is full. A packet larger than
// the byte bound is admitted when the queue is empty.
func (q *queue) push(ctx context.Context, it *item, closing <-chan struct{}) error {
	n := len(it.frame)
	for {
		q.mu.Lock()
		if q.failed != nil {
			err := q.failed
			q.mu.Unlock()
			return err
		}
		if len(q.items) == 0 || (q.bytes+n <= q.maxBytes && len(q.items) < q.maxPackets) {
			q.items = append(q.items, it)
			q.bytes += n
			q.mu.Unlock()
			q.m.queueDepth.Add(ctx, 1, q.m.plainAdd)
			q.m.queueSize.Add(ctx, int64(n), q.m.plainAdd)
			select {
			case q.ready <- struct{}{}:
			default:
			}
			return nil
		}
		space := q.space
		q.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return ctx.Err()
		case <-closing:
			return ErrClosed
		}
	}
}

// pop waits for the next item; false once closing.
func (q *queue) pop(closing <-chan struct{}) (*item, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			it := q.items[0]
			q.items[0] = nil
			q.items = q.items[1:]
			q.bytes -= len(it.frame)
			close(q.space)
			q.space = make(chan struct{})
			q.mu.Unlock()
			ctx := context.Background()
			q.m.queueDepth.Add(ctx, -1, q.m.plainAdd)
			q.m.queueSize.Add(ctx, -int64(len(it.frame)), q.m.plainAdd)
			return it, true
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-closing:
			return nil, false
		}
	}
}

// fail makes every later push return err and fails the queued items.
func (q *queue) fail(err error) {
	q.mu.Lock()
	if q.failed == nil {
		q.failed = err
	}
	batch, n := q.items, q.bytes
	q.items = nil
	q.bytes = 0
	q.mu.Unlock()
	ctx := context.Background()
	q.m.queueDepth.Add(ctx, -int64(len(batch)), q.m.plainAdd)
	q.m.queueSize.Add(ctx, -int64(n), q.m.plainAdd)
	for _, it := range batch {
		if it.done != nil {
			it.done <- err
		}
	}
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

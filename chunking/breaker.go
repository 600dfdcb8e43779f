package chunking

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrSidecarUnavailable matches the error of a call refused by an open
// Breaker: the sidecar has been unreachable for longer than
// BreakerConfig.OpenAfter and no probe has reached it since.
var ErrSidecarUnavailable = errors.New("sidecar unavailable")

// BreakerConfig configures a Breaker.
type BreakerConfig struct {
	// OpenAfter is how long the sidecar must have been unreachable (every
	// call since the first failure answered Unavailable, none answered by
	// the sidecar) before the breaker opens. Must be > 0.
	OpenAfter time.Duration
	// ProbeInterval is the time between probes while the breaker is open.
	// Must be > 0.
	ProbeInterval time.Duration
	// Probe checks whether the sidecar is reachable again; nil closes the
	// breaker. It is called on the breaker's own goroutine, one call at a
	// time, with a context that ends after ProbeInterval or at Close.
	Probe func(ctx context.Context) error
	// OnChange, if not nil, is called (on the breaker's goroutine or on a
	// caller's of Record, never under the breaker's lock) each time the
	// breaker opens or closes; err is the last failure when it opens.
	OnChange func(open bool, err error)
}

// Breaker is a circuit breaker on a connection to a sidecar. Callers ask
// Allow before a call and Record its outcome. A call answered by the
// sidecar (any status but Unavailable or Canceled, including errors such as
// NotFound) shows it reachable; Unavailable shows it not. Once it has been
// unreachable for OpenAfter without an answer in between, the breaker
// opens: Allow refuses every call at once with an error matching
// ErrSidecarUnavailable, and the breaker probes the sidecar every
// ProbeInterval until a probe succeeds, which closes it.
//
// A Breaker is safe for concurrent use. Close stops its timer and probe
// goroutine and waits for them; it is idempotent.
type Breaker struct {
	cfg BreakerConfig

	mu      sync.Mutex
	since   time.Time   // first failure since the last answer; zero when healthy
	last    error       // the last failure
	timer   *time.Timer // fires at since+OpenAfter
	open    bool
	opened  chan struct{} // closed when the breaker opens; replaced when it closes
	closed  bool
	probing sync.WaitGroup
	stop    chan struct{}
	base    context.Context // of the probes; ends at Close
	end     context.CancelFunc
}

// NewBreaker returns a closed Breaker. It errors on a zero or negative
// OpenAfter or ProbeInterval, or a nil Probe.
func NewBreaker(cfg BreakerConfig) (*Breaker, error) {
	if cfg.OpenAfter <= 0 {
		return nil, fmt.Errorf("chunking: breaker: OpenAfter is %v, want > 0", cfg.OpenAfter)
	}
	if cfg.ProbeInterval <= 0 {
		return nil, fmt.Errorf("chunking: breaker: ProbeInterval is %v, want > 0", cfg.ProbeInterval)
	}
	if cfg.Probe == nil {
		return nil, errors.New("chunking: breaker: nil Probe")
	}
	base, end := context.WithCancel(context.Background())
	return &Breaker{cfg: cfg, opened: make(chan struct{}), stop: make(chan struct{}), base: base, end: end}, nil
}

// Allow returns nil if a call may go to the sidecar, or, while the
// breaker is open, an error matching ErrSidecarUnavailable. A nil
// Breaker allows every call.
func (b *Breaker) Allow() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return nil
	}
	return fmt.Errorf("%w: unreachable since %s (%v ago; circuit breaker open after %v, probing every %v): %w",
		ErrSidecarUnavailable, b.since.Format(time.RFC3339Nano), time.Since(b.since).Round(time.Millisecond),
		b.cfg.OpenAfter, b.cfg.ProbeInterval, b.last)
}

// Opened returns a channel closed when the breaker opens (already closed
// while it is open), so a caller waiting out a backoff can stop at once.
// A nil Breaker's never closes.
func (b *Breaker) Opened() <-chan struct{} {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.opened
}

// IsOpen reports whether the breaker is open.
func (b *Breaker) IsOpen() bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}

// unreachable reports whether err says the sidecar could not be reached,
// and answered whether the sidecar itself answered (any other status).
func unreachable(err error) (unreach, answered bool) {
	if err == nil {
		return false, true
	}
	if errors.Is(err, ErrSidecarUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false, false
	}
	s, ok := status.FromError(err)
	if !ok {
		return false, false
	}
	switch s.Code() {
	case codes.Unavailable:
		return true, false
	case codes.Canceled, codes.DeadlineExceeded, codes.Unknown:
		// The caller's end, or no status from the sidecar: says nothing.
		return false, false
	}
	return false, true
}

// Record reports the outcome of a call to the sidecar. A nil Breaker
// ignores it.
func (b *Breaker) Record(err error) {
	if b == nil {
		return
	}
	unreach, answered := unreachable(err)
	if !unreach && !answered {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.open {
		// While open, only a probe closes it: a call that raced the
		// opening says nothing newer than the probe will.
		return
	}
	if answered {
		b.since, b.last = time.Time{}, nil
		if b.timer != nil {
			b.timer.Stop()
		}
		return
	}
	b.last = err
	if b.since.IsZero() {
		b.since = time.Now()
		if b.timer == nil {
			b.timer = time.AfterFunc(b.cfg.OpenAfter, b.expire)
		} else {
			b.timer.Reset(b.cfg.OpenAfter)
		}
	}
}

// expire opens the breaker if no answer came since the first failure.
func (b *Breaker) expire() {
	b.mu.Lock()
	if b.closed || b.open || b.since.IsZero() || time.Since(b.since) < b.cfg.OpenAfter {
		b.mu.Unlock()
		return
	}
	b.open = true
	close(b.opened)
	last := b.last
	b.probing.Add(1)
	b.mu.Unlock()
	if b.cfg.OnChange != nil {
		b.cfg.OnChange(true, last)
	}
	go b.probe()
}

// probe runs while the breaker is open: every ProbeInterval one Probe,
// until one succeeds (closing the breaker) or Close.
func (b *Breaker) probe() {
	defer b.probing.Done()
	t := time.NewTicker(b.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(b.base, b.cfg.ProbeInterval)
		err := b.cfg.Probe(ctx)
		cancel()
		if err != nil {
			b.mu.Lock()
			b.last = err
			b.mu.Unlock()
			continue
		}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return
		}
		b.open, b.since, b.last = false, time.Time{}, nil
		b.opened = make(chan struct{})
		b.mu.Unlock()
		if b.cfg.OnChange != nil {
			b.cfg.OnChange(false, nil)
		}
		return
	}
}

// Close stops the breaker's timer and probes and waits for a probe in
// progress. Allow keeps answering as the breaker last stood.
func (b *Breaker) Close() {
	if b == nil {
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	close(b.stop)
	b.end()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
	b.probing.Wait()
}

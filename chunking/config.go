package chunking

import (
	"cmp"
	"fmt"
	"time"
)

// Size limits of a chunk, in bytes (durabletask-dotnet
// CompleteOrchestrationWorkItemChunkSizeInBytes).
const (
	// DefaultMaxChunkBytes is ⌊3.9 MiB⌋, 104,858 bytes below gRPC's common
	// 4 MiB receive limit; it is also the largest accepted value.
	DefaultMaxChunkBytes = 4_089_446
	// MinMaxChunkBytes is the smallest accepted limit (1 MiB).
	MinMaxChunkBytes = 1 << 20
)

// Algorithm selects the planner implementation.
type Algorithm uint8

const (
	// Cached sizes every action once and reuses the sizes (the default).
	Cached Algorithm = iota
	// Legacy is the pre-optimisation durabletask-dotnet algorithm: validation
	// sizing, whole-response sizing, then sizing again while packing. It
	// produces the same chunks and exists for A/B runs and benchmarks.
	Legacy
)

// String returns "cached" or "legacy".
func (a Algorithm) String() string {
	switch a {
	case Cached:
		return "cached"
	case Legacy:
		return "legacy"
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm parses the setting chunking.algorithm.
func ParseAlgorithm(s string) (Algorithm, error) {
	switch s {
	case "cached":
		return Cached, nil
	case "legacy":
		return Legacy, nil
	}
	return 0, fmt.Errorf("chunking.algorithm: invalid value %q (valid: cached, legacy)", s)
}

// Accounting selects what counts toward a chunk's size.
type Accounting uint8

const (
	// Wire counts the envelope and the per-action framing, so that every
	// chunk's serialized size is at most the limit (the default).
	Wire Accounting = iota
	// Payload counts only the actions' own sizes, exactly as .NET does; a
	// chunk of many tiny actions can then exceed the limit on the wire.
	Payload
)

// String returns "wire" or "payload".
func (a Accounting) String() string {
	switch a {
	case Wire:
		return "wire"
	case Payload:
		return "payload"
	}
	return fmt.Sprintf("accounting(%d)", uint8(a))
}

// ParseAccounting parses the setting chunking.accounting.
func ParseAccounting(s string) (Accounting, error) {
	switch s {
	case "wire":
		return Wire, nil
	case "payload":
		return Payload, nil
	}
	return 0, fmt.Errorf("chunking.accounting: invalid value %q (valid: wire, payload)", s)
}

// RetryPolicy is the per-call retry budget of the sender (durabletask-dotnet
// ExecuteWithRetryAsync). Each chunk, the failure completion and the abandon
// call get a fresh budget.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts including the first; 0 means 10.
	MaxAttempts int
	// BaseDelay is the delay before the first retry; 0 means 200 ms. The
	// delay before retry n is min(MaxDelay, BaseDelay·2^(n-1)).
	BaseDelay time.Duration
	// MaxDelay caps the delay; 0 means 15 s.
	MaxDelay time.Duration
	// Jitter adds U[0, Jitter)·delay; 0 means 0.2. Negative disables jitter.
	Jitter float64
}

// DefaultRetryPolicy is the .NET schedule: 10 attempts, 200 ms·2^k capped
// at 15 s, +0–20 % jitter.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 10, BaseDelay: 200 * time.Millisecond, MaxDelay: 15 * time.Second, Jitter: 0.2}

func (p RetryPolicy) withDefaults() (RetryPolicy, error) {
	d := DefaultRetryPolicy
	if p.MaxAttempts < 0 {
		return p, fmt.Errorf("chunking.retry.attempts: %d is negative", p.MaxAttempts)
	}
	if p.BaseDelay < 0 || p.MaxDelay < 0 {
		return p, fmt.Errorf("chunking.retry delays: negative duration (base %v, max %v)", p.BaseDelay, p.MaxDelay)
	}
	if p.Jitter > 1 {
		return p, fmt.Errorf("chunking.retry.jitter: %v is above 1", p.Jitter)
	}
	p.MaxAttempts = cmp.Or(p.MaxAttempts, d.MaxAttempts)
	p.BaseDelay = cmp.Or(p.BaseDelay, d.BaseDelay)
	p.MaxDelay = cmp.Or(p.MaxDelay, d.MaxDelay)
	if p.Jitter == 0 {
		p.Jitter = d.Jitter
	} else if p.Jitter < 0 {
		p.Jitter = 0
	}
	return p, nil
}

// delay returns the backoff before retry n (n ≥ 1); u is uniform in [0,1).
func (p RetryPolicy) delay(n int, u float64) time.Duration {
	d := p.BaseDelay
	for i := 1; i < n && d < p.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, p.MaxDelay)
	return d + time.Duration(u*p.Jitter*float64(d))
}

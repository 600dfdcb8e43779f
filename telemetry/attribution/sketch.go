package attribution

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Sketch estimates quantiles of durations in bounded memory: a log-bucket
// histogram (the DDSketch idea) whose every quantile is within 1 %
// (relative) of a true sample value. Durations from 1 ns to about 300 days
// use at most ~2,000 buckets (16 KiB); the zero value is ready to use. Not
// safe for concurrent use.
type Sketch struct {
	counts []uint64 // counts[i]: values v ≥ exactBelow with bucket(v) == i
	small  []uint64 // small[v]: values v < exactBelow ns, kept exactly
	n      uint64
	min    time.Duration
	max    time.Duration
}

const sketchGamma = 1.02 // relative accuracy (γ-1)/(γ+1) ≈ 1 %

// exactBelow: durations under it (ns) are counted exactly, where a
// bucket's 1 % is less than the nanosecond they are rounded to.
const exactBelow = 128

var sketchLogGamma = math.Log(sketchGamma)

// sketchBucket returns the bucket of d > 0: ⌈log_γ d⌉, as
// sketchBucketLog computes it, without a logarithm for d below
// 1<<slotMaxLen ns (about 4.6 minutes). The leading bit of d and the
// slotBits bits after it pick a slot whose values differ by a ratio of at
// most 65/64 < γ, so a slot holds at most one bucket boundary: its first
// bucket and that boundary are looked up. Both were computed with
// sketchBucketLog itself, so the two functions agree on every value
// (TestSketchBucketTable). The table is 16 KiB, so that a run's few
// hundred slots in use stay in the core's cache.
func sketchBucket(d time.Duration) int {
	n := bits.Len64(uint64(d))
	if n > slotMaxLen || n < slotMinLen {
		return sketchBucketLog(d)
	}
	t := slotTable.Load()
	if t == nil {
		t = buildSlots()
	}
	sh := n - 1 - slotBits
	s := t[(n-slotMinLen)<<slotBits|int(uint64(d)>>sh)&(1<<slotBits-1)]
	if uint64(d)&(1<<sh-1) >= uint64(s.next) {
		return int(s.bucket) + 1
	}
	return int(s.bucket)
}

// sketchBucketLog is the definition of a duration's bucket.
func sketchBucketLog(d time.Duration) int {
	return int(math.Ceil(math.Log(float64(d)) / sketchLogGamma))
}

// The slots of sketchBucket: values whose leading bit is bit n-1, for
// slotMinLen ≤ n ≤ slotMaxLen, in 1<<slotBits slots per power of two. A
// slot's values are lo to lo+2^(n-1-slotBits)-1, so an offset in it fits
// 31 bits.
const (
	slotBits   = 6
	slotMinLen = 8 // bits.Len64(exactBelow)
	slotMaxLen = 38
	numSlots   = (slotMaxLen - slotMinLen + 1) << slotBits
	noBoundary = math.MaxUint32 // above every offset in a slot
)

// sketchSlot: the slot's values whose offset in the slot is below next
// are in bucket, the others in bucket+1.
type sketchSlot struct {
	bucket uint32
	next   uint32
}

var (
	slotTable atomic.Pointer[[numSlots]sketchSlot]
	slotOnce  sync.Once
)

// buildSlots makes the table once (1,984 slots) and returns it.
func buildSlots() *[numSlots]sketchSlot {
	slotOnce.Do(func() {
		t := new([numSlots]sketchSlot)
		for n := slotMinLen; n <= slotMaxLen; n++ {
			for j := range 1 << slotBits {
				lo := int64(1<<slotBits|j) << (n - 1 - slotBits)
				hi := lo + 1<<(n-1-slotBits) // exclusive
				b := sketchBucketLog(time.Duration(lo))
				s := sketchSlot{bucket: uint32(b), next: noBoundary}
				if sketchBucketLog(time.Duration(hi-1)) > b {
					// The first value past γ^b, then corrected against
					// sketchBucketLog's own rounding.
					next := min(max(int64(math.Floor(math.Pow(sketchGamma, float64(b))))+1, lo+1), hi-1)
					for next > lo+1 && sketchBucketLog(time.Duration(next-1)) > b {
						next--
					}
					for sketchBucketLog(time.Duration(next)) == b {
						next++
					}
					s.next = uint32(next - lo)
				}
				t[(n-slotMinLen)<<slotBits|j] = s
			}
		}
		slotTable.Store(t)
	})
	return slotTable.Load()
}

// Add records one duration.
func (s *Sketch) Add(d time.Duration) {
	if s.n == 0 || d < s.min {
		s.min = d
	}
	if s.n == 0 || d > s.max {
		s.max = d
	}
	s.n++
	if d < exactBelow {
		if s.small == nil {
			s.small = make([]uint64, exactBelow)
		}
		s.small[max(d, 0)]++
		return
	}
	i := sketchBucket(d)
	if i >= len(s.counts) {
		s.counts = append(s.counts, make([]uint64, i+1-len(s.counts))...)
	}
	s.counts[i]++
}

// Count returns how many durations were added.
func (s *Sketch) Count() uint64 { return s.n }

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of the durations added (the
// value of rank ⌈q·n⌉), within 1 % relative; 0 when empty. The extremes are
// exact.
func (s *Sketch) Quantile(q float64) time.Duration {
	if s.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(s.n)))
	if rank <= 1 {
		return s.min
	}
	if rank >= s.n {
		return s.max
	}
	var seen uint64
	for v, c := range s.small {
		seen += c
		if seen >= rank {
			return time.Duration(v)
		}
	}
	for i, c := range s.counts {
		seen += c
		if seen >= rank {
			// The bucket's midpoint in relative terms: (γ^(i-1), γ^i].
			v := 2 * math.Pow(sketchGamma, float64(i)) / (sketchGamma + 1)
			return min(max(time.Duration(math.Round(v)), s.min), s.max)
		}
	}
	return s.max
}

// Merge adds o's durations to s.
func (s *Sketch) Merge(o *Sketch) {
	if o.n == 0 {
		return
	}
	if s.n == 0 || o.min < s.min {
		s.min = o.min
	}
	if s.n == 0 || o.max > s.max {
		s.max = o.max
	}
	s.n += o.n
	if o.small != nil {
		if s.small == nil {
			s.small = make([]uint64, exactBelow)
		}
		for i, c := range o.small {
			s.small[i] += c
		}
	}
	if len(o.counts) > len(s.counts) {
		s.counts = append(s.counts, make([]uint64, len(o.counts)-len(s.counts))...)
	}
	for i, c := range o.counts {
		s.counts[i] += c
	}
}

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
// safe for concurrent use. FineSketch is the same with buckets 20 times
// narrower, for the end-to-end times A/B runs compare.
type Sketch struct {
	counts []uint64 // counts[i]: values v ≥ exactBelow with bucket(v) == base+i
	base   int
	small  []uint64 // small[v]: values v < exactBelow ns, kept exactly
	n      uint64
	min    time.Duration
	max    time.Duration
}

// FineSketch is a Sketch whose every quantile is within 0.05 % (relative)
// of a true sample value: buckets of γ = 1.001 rather than 1.02. A
// Sketch's steps of 2 % are as large as the effects an A/B comparison of
// end-to-end medians looks for (a run's p50 moves from one bucket's
// estimate to the next, never in between), so end-to-end times are kept
// in FineSketches: one per run, or per report. Its buckets are counted
// from the first one used, about 700 per doubling of the range the
// durations span (e2e times from 100 µs to 100 ms: about 6,900, 55 KiB;
// from 128 ns, below which durations are counted exactly, to 300 days:
// about 33,000, 260 KiB; to the largest: 39,000, 310 KiB). The zero
// value is ready to use; not safe for concurrent use.
type FineSketch struct{ s Sketch }

// fineGamma is FineSketch's γ: accuracy (γ-1)/(γ+1) ≈ 0.05 %.
const fineGamma = 1.001

var fineLogGamma = math.Log(fineGamma)

// fineBucket returns the FineSketch bucket of d > 0, ⌈log_γ d⌉. One
// logarithm an Add: FineSketch holds one duration per unit of work.
func fineBucket(d time.Duration) int {
	return int(math.Ceil(math.Log(float64(d)) / fineLogGamma))
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
	if s.note(d) {
		s.addBucket(sketchBucket(d))
	}
}

// Add records one duration.
func (s *FineSketch) Add(d time.Duration) {
	if s.s.note(d) {
		s.s.addBucket(fineBucket(d))
	}
}

// note counts d, keeps the extremes, and counts d exactly if it is small;
// it reports whether d is for a bucket instead.
func (s *Sketch) note(d time.Duration) bool {
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
		return false
	}
	return true
}

// addBucket counts one value in bucket i.
func (s *Sketch) addBucket(i int) {
	s.grow(i, i)
	s.counts[i-s.base]++
}

// grow makes counts cover buckets lo to hi.
func (s *Sketch) grow(lo, hi int) {
	if len(s.counts) == 0 {
		s.base = lo
		s.counts = make([]uint64, hi+1-lo, hi+1-lo+8)
		return
	}
	if lo < s.base {
		// Room below for later minima as well, as append leaves room
		// above: durations that keep falling (a run warming up) cost
		// a copy per doubling, not one per bucket.
		lo = max(lo-len(s.counts)/2, 0)
		s.counts = append(make([]uint64, s.base-lo, s.base-lo+len(s.counts)), s.counts...)
		s.base = lo
	}
	if end := s.base + len(s.counts); hi >= end {
		s.counts = append(s.counts, make([]uint64, hi+1-end)...)
	}
}

// Count returns how many durations were added.
func (s *Sketch) Count() uint64 { return s.n }

// Count returns how many durations were added.
func (s *FineSketch) Count() uint64 { return s.s.n }

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of the durations added (the
// value of rank ⌈q·n⌉), within 1 % relative; 0 when empty. The extremes are
// exact.
func (s *Sketch) Quantile(q float64) time.Duration { return s.quantile(q, sketchGamma) }

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of the durations added (the
// value of rank ⌈q·n⌉), within 0.05 % relative; 0 when empty. The extremes
// are exact.
func (s *FineSketch) Quantile(q float64) time.Duration { return s.s.quantile(q, fineGamma) }

// quantile is Quantile for buckets of γ = gamma.
func (s *Sketch) quantile(q, gamma float64) time.Duration {
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
			return min(max(bucketValue(s.base+i, gamma), s.min), s.max)
		}
	}
	return s.max
}

// bucketValue is the estimate of the values in bucket i of γ = gamma,
// (γ^(i-1), γ^i]: its midpoint in relative terms.
func bucketValue(i int, gamma float64) time.Duration {
	return time.Duration(math.Round(2 * math.Pow(gamma, float64(i)) / (gamma + 1)))
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
	if len(o.counts) == 0 {
		return
	}
	s.grow(o.base, o.base+len(o.counts)-1)
	for i, c := range o.counts {
		s.counts[o.base+i-s.base] += c
	}
}

// Merge adds o's durations to s.
func (s *FineSketch) Merge(o *FineSketch) { s.s.Merge(&o.s) }

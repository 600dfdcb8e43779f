package attribution

import (
	"math"
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

func sketchBucket(d time.Duration) int {
	return int(math.Ceil(math.Log(float64(d)) / sketchLogGamma))
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

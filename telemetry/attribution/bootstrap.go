package attribution

import (
	"math"
	"math/rand/v2"
	"slices"
)

// resample draws a bootstrap sample of s as a count per unit: the given
// runs (drawn for both sides of a pair) whole; or runs with replacement
// and, in each drawn run, its units with replacement; or the units of all
// runs pooled.
//
// Pairs are drawn whole: the pair is the independent cluster, and its
// value already holds the variation of its units. Drawing the units of
// each side again, independently, would add that variation a second time
// and undo the pairing of units — the same items, in the same order, on
// both sides — widening the intervals without cause.
func resample(rng *rand.Rand, s *side, byRuns bool, runs []int) []int32 {
	counts := make([]int32, s.units())
	if !byRuns {
		n := len(counts)
		for range n {
			counts[rng.IntN(n)]++
		}
		return counts
	}
	n := len(s.runStart) - 1
	for i := range n {
		r := rng.IntN(n)
		if runs != nil {
			r = runs[i]
		}
		lo, hi := s.runStart[r], s.runStart[r+1]
		if runs != nil {
			for u := lo; u < hi; u++ {
				counts[u]++
			}
			continue
		}
		for range hi - lo {
			counts[lo+rng.IntN(hi-lo)]++
		}
	}
	return counts
}

// resamplePair draws a bootstrap sample of each side; paired, both sides
// take the same runs (run i of each ran back to back).
func resamplePair(rng *rand.Rand, b, c *side, byRuns, paired bool) ([]int32, []int32) {
	var runs []int
	if paired {
		runs = make([]int, len(b.runStart)-1)
		for i := range runs {
			runs[i] = rng.IntN(len(runs))
		}
	}
	return resample(rng, b, byRuns, runs), resample(rng, c, byRuns, runs)
}

// replaySum is the weighted sum of the units' replayed e2e (ns) with the
// rows' durations scaled by factor.
func replaySum(s *side, counts []int32, factor []float64) float64 {
	var sum float64
	var scratch []int64
	for u, n := range counts {
		if n == 0 {
			continue
		}
		pl := s.plans[u]
		if len(scratch) < len(pl.nodes) {
			scratch = make([]int64, len(pl.nodes))
		}
		sum += float64(n) * float64(pl.e2e(factor, scratch))
	}
	return sum
}

// ones weighs every unit once: the point estimate.
func ones(s *side) []int32 { return slices.Repeat([]int32{1}, s.units()) }

func totals(s *side, counts []int32, nk int) sums {
	t := sums{critical: make([]float64, nk), naive: make([]float64, nk), span: make([]float64, nk)}
	for u, c := range counts {
		if c == 0 {
			continue
		}
		w := float64(c)
		t.n += w
		t.e2e += w * s.e2e[u]
		for j := s.statOff[u]; j < s.statOff[u+1]; j++ {
			k := s.statK[j]
			t.critical[k] += w * s.critical[j]
			t.naive[k] += w * s.naive[j]
			t.span[k] += w * s.spans[j]
		}
	}
	return t
}

// estimate computes, for one (re)sample of each side, the vector
// [measured, first order, replay, then per key q, r, q·r, shift].
func estimate(b, c *side, bs, cs []int32, keys []Key, target []bool, hasTarget bool) []float64 {
	nk := len(keys)
	bt, ct := totals(b, bs, nk), totals(c, cs, nk)
	v := make([]float64, 3+4*nk)
	bMean, cMean := bt.e2e/bt.n, ct.e2e/ct.n
	v[0] = 1 - cMean/bMean
	factor := make([]float64, nk)
	first := 0.0
	for i := range keys {
		q := bt.critical[i] / bt.e2e
		r := math.NaN()
		factor[i] = 1
		// The row's own work per unit: its span time per unit of work (the
		// spans' count may change with the change: more chunks, fewer
		// packets). A row absent from the candidate did no work there (r = 1).
		if bt.naive[i] > 0 {
			f := (ct.naive[i] / ct.n) / (bt.naive[i] / bt.n)
			if !math.IsNaN(f) && !math.IsInf(f, 0) {
				r = 1 - f
				if target[i] {
					factor[i] = f
				}
			}
		}
		if !keys[i].IsRow() {
			r = math.NaN() // "other" has no spans of its own
		}
		v[3+4*i] = q
		v[4+4*i] = r
		v[5+4*i] = q * r
		if target[i] && !math.IsNaN(r) {
			first += q * r
		}
		v[6+4*i] = (bt.critical[i]/bt.n - ct.critical[i]/ct.n) / bMean
	}
	v[1], v[2] = math.NaN(), math.NaN()
	if hasTarget {
		v[1] = first
		v[2] = 1 - replaySum(b, bs, factor)/bt.e2e
	}
	return v
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

package attribution

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Causal is the measured causal weight of a row: a causal experiment made
// the row's spans longer on purpose (amdahl's perturb.<component>.<phase>
// settings) and Weight = Δ mean e2e / Δ the row's own work per unit, the
// fraction of each added nanosecond that reached end-to-end time (Coz's
// idea). CriticalShare, q / naive share in the baseline, is what the
// critical path claims for the same row: where the two disagree, the path
// is wrong or the row overlaps other work.
type Causal struct {
	Row           string   `json:"row"`
	Weight        Interval `json:"causal_weight"`
	Added         float64  `json:"added_per_work_ns"` // Δ own work per unit, in ns
	CriticalShare float64  `json:"critical_share"`
}

// CausalWeight computes the causal weight of the rows sel matches (as a
// target selector) from a baseline and a perturbed candidate, with a
// bootstrap interval over runs or units as in Compare; of paired runs
// (opt.Paired), the mean of the pairs' own weights with Student's t
// interval.
func CausalWeight(base, cand Side, sel string, opt CompareOptions) (Causal, error) {
	opt = opt.orDefaults()
	keyIndex, keys := rowKeys(base, cand)
	var match []int
	for i, k := range keys {
		if k.IsRow() && matchTarget(sel, k) {
			match = append(match, i)
		}
	}
	if len(match) == 0 {
		return Causal{}, fmt.Errorf("causal weight: %q matches no row", sel)
	}
	name := keys[match[0]].String() // the row's name; the selector's when it matched several
	if len(match) > 1 {
		name = sel
	}
	b, c := flatten(base, keyIndex, false), flatten(cand, keyIndex, false)
	byRuns := len(base.Runs) >= 2 && len(cand.Runs) >= 2
	paired := opt.Paired && byRuns && len(base.Runs) == len(cand.Runs)
	est := func(bs, cs []int32) (float64, float64, float64) {
		bt, ct := totals(b, bs, len(keys)), totals(c, cs, len(keys))
		var bo, co, crit float64
		for _, i := range match {
			bo += bt.naive[i]
			co += ct.naive[i]
			crit += bt.critical[i]
		}
		added := co/ct.n - bo/bt.n
		return (ct.e2e/ct.n - bt.e2e/bt.n) / added, added, crit / bo
	}
	w, added, share := est(ones(b), ones(c))
	if paired {
		// Each pair's own weight, Student's t over the pairs (as the
		// measured gain of paired runs: the pairs are the independent
		// draws).
		ws := make([]float64, 0, len(base.Runs))
		for r := range len(base.Runs) {
			if v, _, _ := est(onlyRun(b, r), onlyRun(c, r)); !math.IsNaN(v) && !math.IsInf(v, 0) {
				ws = append(ws, v)
			}
		}
		return Causal{Row: name, Weight: meanT(ws, opt.Level), Added: added, CriticalShare: share}, nil
	}
	vals := make([]float64, 0, opt.Iterations)
	for it := range opt.Iterations {
		bs, cs := resamplePair(rand.New(rand.NewPCG(opt.Seed, uint64(it)+1)), b, c, byRuns, paired)
		if v, _, _ := est(bs, cs); !math.IsNaN(v) && !math.IsInf(v, 0) {
			vals = append(vals, v)
		}
	}
	clusters := min(b.units(), c.units())
	if byRuns {
		clusters = min(len(base.Runs), len(cand.Runs))
	}
	lo, hi := percentileInterval(vals, opt.Level, clusters)
	return Causal{Row: name, Weight: Interval{w, lo, hi}, Added: added, CriticalShare: share}, nil
}

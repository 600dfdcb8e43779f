package attribution

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// Interval is an estimate with its confidence interval [Lo, Hi]. NaN
// stands for "not defined" (a row absent on one side) and is null in JSON.
type Interval struct {
	Value, Lo, Hi float64
}

// Contains reports whether v lies in [Lo, Hi].
func (i Interval) Contains(v float64) bool { return i.Lo <= v && v <= i.Hi }

// Defined reports whether the estimate exists.
func (i Interval) Defined() bool { return !math.IsNaN(i.Value) }

// HalfWidth is half the interval's width.
func (i Interval) HalfWidth() float64 { return (i.Hi - i.Lo) / 2 }

// MarshalJSON writes {"value":…,"lo":…,"hi":…}, null where undefined.
func (i Interval) MarshalJSON() ([]byte, error) {
	num := func(f float64) any {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return f
	}
	return json.Marshal(map[string]any{"value": num(i.Value), "lo": num(i.Lo), "hi": num(i.Hi)})
}

var undefined = Interval{math.NaN(), math.NaN(), math.NaN()}

// MaxIterations bounds the bootstrap's resamples.
const MaxIterations = 100_000

// Side is one arm of an A/B comparison: one or more runs, each a set of
// units of work.
type Side struct {
	Runs [][]Work
}

func (s Side) works() int {
	n := 0
	for _, r := range s.Runs {
		n += len(r)
	}
	return n
}

// CompareOptions tune Compare; the zero value is usable.
type CompareOptions struct {
	// Target selects the rows the change is about: a component ("ipc"), a
	// component and phase ("ipc.send"), a row ("ipc.send/request"), or a
	// phase and direction of any component ("send/request"). Empty: no
	// target, so no prediction (the table and the measured gain only).
	Target []string
	// Paired: run i of the baseline and run i of the candidate were made
	// under the same conditions (interleaved), on the same items, so the
	// bootstrap draws pairs of runs, whole: a drift of the machine's speed
	// over the experiment then cancels out instead of widening the
	// intervals. The measured gain is then over pairs: the mean log ratio
	// of the runs' mean e2e with Student's t interval (pairedGain).
	// Needs the same number of runs (two or more) on both sides.
	Paired bool
	// IgnoreUnmatched drops target selectors that match no row instead of
	// failing (targets derived from settings, which name rows a scenario
	// may not have).
	IgnoreUnmatched bool
	// ByPhase folds rows of different components into one per phase and
	// direction.
	ByPhase bool
	// Iterations of the bootstrap (default 400), Level of the intervals
	// (default 0.95), Seed of the resampling (results are reproducible).
	Iterations int
	Level      float64
	Seed       uint64
}

// CompareRow is one row of a Comparison.
type CompareRow struct {
	Key    Key    `json:"-"`
	Name   string `json:"row"`
	Target bool   `json:"target"`
	// Q is the row's share of the baseline's e2e on its critical path.
	Q Interval `json:"q"`
	// BaseOwn and CandOwn are the row's own work per unit of work on each
	// side: the sum of its span durations per unit (overlap counted); R =
	// 1 - CandOwn/BaseOwn. BaseMean and CandMean are the mean span
	// durations (equal ratios while the spans per unit do not change).
	BaseOwn   time.Duration `json:"baseline_own_per_work_ns"`
	CandOwn   time.Duration `json:"candidate_own_per_work_ns"`
	BaseMean  time.Duration `json:"baseline_mean_ns"`
	CandMean  time.Duration `json:"candidate_mean_ns"`
	BaseSpans int           `json:"baseline_spans"`
	CandSpans int           `json:"candidate_spans"`
	R         Interval      `json:"r"`
	QR        Interval      `json:"qr"`
	// BaseCritical and CandCritical are the row's critical time per unit
	// on each side; Shift = (BaseCritical - CandCritical) / baseline mean
	// e2e is the part of the measured gain the row's critical time
	// accounts for (the shifts of all rows add up to the measured gain).
	BaseCritical time.Duration `json:"baseline_critical_per_work_ns"`
	CandCritical time.Duration `json:"candidate_critical_per_work_ns"`
	Shift        Interval      `json:"shift"`
}

// Comparison is an A/B attribution: per row q (baseline), r (the row's own
// improvement) and q·r; the predicted end-to-end gain of the target rows,
// first order and by critical-path replay; and the measured gain — each
// with a bootstrap interval — and a verdict in words.
type Comparison struct {
	Rows   []CompareRow `json:"rows"`
	Target []string     `json:"target"`
	// FirstOrder is Σ q·r over the target rows; Replay is 1 - mean replayed
	// e2e / mean e2e of the baseline's units with the target rows' spans
	// scaled by CandMean/BaseMean; Measured is 1 - mean e2e(candidate) /
	// mean e2e(baseline) (of paired runs: 1 - the geometric mean over
	// pairs of that ratio per pair). None is computed from another.
	FirstOrder Interval `json:"predicted_first_order"`
	Replay     Interval `json:"predicted_replay"`
	Measured   Interval `json:"measured"`
	// BaseE2E and CandE2E are the mean e2e of each side.
	BaseE2E time.Duration `json:"baseline_e2e_mean_ns"`
	CandE2E time.Duration `json:"candidate_e2e_mean_ns"`
	// Consistent: the measured interval holds the replay's prediction.
	Consistent bool `json:"consistent"`
	// How the intervals were made: Level, Iterations, and what was
	// resampled ("units", or "runs" with the units inside each run).
	Level      float64  `json:"level"`
	Iterations int      `json:"iterations"`
	Resampled  string   `json:"resampled"`
	BaseRuns   int      `json:"baseline_runs"`
	CandRuns   int      `json:"candidate_runs"`
	BaseWorks  int      `json:"baseline_works"`
	CandWorks  int      `json:"candidate_works"`
	Verdict    []string `json:"verdict"`
}

// side is one arm as flat per-unit arrays (compressed rows), so that a
// bootstrap resample is a sequential pass weighted by draw counts.
type side struct {
	runStart []int // units of run r are [runStart[r], runStart[r+1])
	e2e      []float64
	statOff  []int32 // unit u's stats are [statOff[u], statOff[u+1])
	statK    []int32
	critical []float64
	naive    []float64
	spans    []float64
	plans    []*replayPlan // baseline only
}

func (s *side) units() int { return len(s.e2e) }

// sums are a (resampled) side's totals.
type sums struct {
	n                     float64
	e2e                   float64
	critical, naive, span []float64
}

// Compare computes the A/B attribution of a baseline and a candidate.
// Intervals come from a bootstrap: over runs (then units within each run)
// when both sides hold at least two runs, since units of one run share
// its conditions and are not independent; over units otherwise, in which
// case the intervals leave out run-to-run variation and the verdict says
// so.
func Compare(base, cand Side, opt CompareOptions) (Comparison, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return Comparison{}, err
	}
	if base.works() == 0 || cand.works() == 0 {
		return Comparison{}, errors.New("compare: a side has no units of work")
	}
	if opt.ByPhase {
		base, cand = foldSide(base), foldSide(cand)
	}
	// The rows: every key of either side.
	keyIndex, keys := rowKeys(base, cand)
	target, targetNames, err := targetRows(keys, opt)
	if err != nil {
		return Comparison{}, err
	}
	hasTarget := len(targetNames) > 0
	b := flatten(base, keyIndex, hasTarget)
	c := flatten(cand, keyIndex, false)
	byRuns := len(base.Runs) >= 2 && len(cand.Runs) >= 2
	paired := opt.Paired && byRuns && len(base.Runs) == len(cand.Runs)
	if opt.Paired && !paired {
		return Comparison{}, fmt.Errorf("compare: paired runs need the same number of runs (two or more) on both sides, got %d and %d", len(base.Runs), len(cand.Runs))
	}
	out := Comparison{Target: targetNames, Level: opt.Level, Iterations: opt.Iterations,
		BaseRuns: len(base.Runs), CandRuns: len(cand.Runs), BaseWorks: b.units(), CandWorks: c.units(), Resampled: "units"}
	if byRuns {
		out.Resampled = "runs"
	}
	if paired {
		out.Resampled = "pairs of runs"
	}
	// Point estimates from all units, then the intervals.
	est := estimate(b, c, ones(b), ones(c), keys, target, hasTarget)
	if paired {
		// Every figure per pair, then Student's t over the pairs.
		perPair := make([][]float64, len(base.Runs))
		for r := range perPair {
			perPair[r] = estimate(b, c, onlyRun(b, r), onlyRun(c, r), keys, target, hasTarget)
		}
		fillPaired(&out, perPair, est, b, c, keys, target, opt.Level)
	} else {
		draws := bootstrapDraws(b, c, keys, target, hasTarget, opt, byRuns)
		// The independent clusters the bootstrap resamples: runs (the
		// smaller side), or units.
		clusters := min(b.units(), c.units())
		if byRuns {
			clusters = min(len(base.Runs), len(cand.Runs))
		}
		ci := func(j int) Interval {
			v := est[j]
			if math.IsNaN(v) {
				return undefined
			}
			vals := make([]float64, 0, len(draws))
			for _, d := range draws {
				if !math.IsNaN(d[j]) {
					vals = append(vals, d[j])
				}
			}
			lo, hi := percentileInterval(vals, opt.Level, clusters)
			return Interval{v, lo, hi}
		}
		// Layout of an estimate vector: measured, first order, replay, then
		// per key q, r, q·r, shift.
		out.Measured, out.FirstOrder, out.Replay = ci(0), ci(1), ci(2)
		fillRows(&out, b, c, keys, target, ci)
	}
	slices.SortFunc(out.Rows, func(x, y CompareRow) int { return compareKeys(x.Key, y.Key) })
	out.Consistent = hasTarget && out.Measured.Contains(out.Replay.Value)
	out.Verdict = verdict(out)
	return out, nil
}

// withDefaults checks opt's iterations and level, and fills in their
// defaults (orDefaults).
func (opt CompareOptions) withDefaults() (CompareOptions, error) {
	if opt.Iterations < 0 || opt.Iterations > MaxIterations {
		return opt, fmt.Errorf("compare: %d bootstrap iterations: want 1 to %d (0 for 400)", opt.Iterations, MaxIterations)
	}
	if !(opt.Level >= 0 && opt.Level < 1) { // NaN too
		return opt, fmt.Errorf("compare: interval level %v: want between 0 and 1 (0 for 0.95)", opt.Level)
	}
	return opt.orDefaults(), nil
}

// orDefaults is opt with the default iterations (400) where opt's are not
// positive, and the default level (0.95) where opt's is not in (0, 1).
func (opt CompareOptions) orDefaults() CompareOptions {
	if opt.Iterations <= 0 {
		opt.Iterations = 400
	}
	if !(opt.Level > 0 && opt.Level < 1) {
		opt.Level = 0.95
	}
	return opt
}

// targetRows marks the rows among keys that opt.Target selects, and
// returns their names, sorted. A selector that matches no row is an
// error naming the rows, unless opt.IgnoreUnmatched.
func targetRows(keys []Key, opt CompareOptions) (target []bool, names []string, err error) {
	target = make([]bool, len(keys))
	names = []string{} // JSON: [] with no target, not null
	for _, sel := range opt.Target {
		sel = strings.TrimSpace(sel)
		if sel == "" {
			continue
		}
		found := false
		for i, k := range keys {
			if k.IsRow() && matchTarget(sel, k) {
				target[i], found = true, true
			}
		}
		if !found && !opt.IgnoreUnmatched {
			var rows []string
			for _, k := range keys {
				if k.IsRow() {
					rows = append(rows, k.String())
				}
			}
			slices.Sort(rows)
			return nil, nil, fmt.Errorf("compare: target %q matches no row (rows: %s)", sel, strings.Join(rows, ", "))
		}
	}
	for i, k := range keys {
		if target[i] {
			names = append(names, k.String())
		}
	}
	slices.Sort(names)
	return target, names, nil
}

// bootstrapDraws is opt.Iterations estimates of resampled sides (over
// runs when byRuns, else over units), on two goroutines; draw i's
// resampling is seeded by opt.Seed and i alone, so the result does not
// depend on the schedule. Pairs of runs are not resampled: Compare gives
// them Student's t over the pairs instead.
func bootstrapDraws(b, c *side, keys []Key, target []bool, hasTarget bool, opt CompareOptions, byRuns bool) [][]float64 {
	draws := make([][]float64, opt.Iterations)
	var wg sync.WaitGroup
	workers := 2
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := g; it < opt.Iterations; it += workers {
				bs, cs := resamplePair(rand.New(rand.NewPCG(opt.Seed, uint64(it)+1)), b, c, byRuns, false)
				draws[it] = estimate(b, c, bs, cs, keys, target, hasTarget)
			}
		}()
	}
	wg.Wait()
	return draws
}

// onlyRun weighs the units of run r once and the others not at all.
func onlyRun(s *side, r int) []int32 {
	c := make([]int32, s.units())
	for u := s.runStart[r]; u < s.runStart[r+1]; u++ {
		c[u] = 1
	}
	return c
}

// fillPaired sets the figures of paired runs: each one's value per pair
// (perPair[r], laid out as estimate's), and Student's t interval over the
// pairs around their mean — the measured gain and r over the pairs' log
// ratios. A figure undefined on the pooled runs (est) stays so.
func fillPaired(out *Comparison, perPair [][]float64, est []float64, b, c *side, keys []Key, target []bool, level float64) {
	ci := func(j int) Interval {
		if math.IsNaN(est[j]) {
			return undefined
		}
		vals := make([]float64, 0, len(perPair))
		for _, p := range perPair {
			if !math.IsNaN(p[j]) && !math.IsInf(p[j], 0) {
				vals = append(vals, p[j])
			}
		}
		return meanT(vals, level)
	}
	out.Measured, out.FirstOrder, out.Replay = pairedGain(b, c, level), ci(1), ci(2)
	// r is a ratio, 1 - own(C)/own(B): like the measured gain, over the
	// pairs' log ratios, so that one pair's 10× does not outweigh nine
	// pairs' 0.9×.
	rci := func(j int) Interval {
		if math.IsNaN(est[j]) {
			return undefined
		}
		logs := make([]float64, len(perPair))
		for i, p := range perPair {
			logs[i] = math.Log(1 - p[j])
		}
		return logGain(logs, level)
	}
	fillRows(out, b, c, keys, target, func(j int) Interval {
		if j >= 3 && (j-3)%4 == 1 {
			return rci(j)
		}
		return ci(j)
	})
}

// fillRows sets the rows of a comparison from the pooled sides and ci(j),
// the interval of figure j of an estimate vector.
func fillRows(out *Comparison, b, c *side, keys []Key, target []bool, ci func(int) Interval) {
	nk := len(keys)
	out.BaseE2E = time.Duration(mean(b.e2e))
	out.CandE2E = time.Duration(mean(c.e2e))
	bt, ct := totals(b, ones(b), nk), totals(c, ones(c), nk)
	for i, k := range keys {
		row := CompareRow{Key: k, Name: k.String(), Target: target[i],
			Q: ci(3 + 4*i), R: ci(4 + 4*i), QR: ci(5 + 4*i), Shift: ci(6 + 4*i),
			BaseSpans: int(bt.span[i]), CandSpans: int(ct.span[i]),
			BaseCritical: time.Duration(bt.critical[i] / bt.n), CandCritical: time.Duration(ct.critical[i] / ct.n)}
		row.BaseOwn, row.CandOwn = time.Duration(bt.naive[i]/bt.n), time.Duration(ct.naive[i]/ct.n)
		if bt.span[i] > 0 {
			row.BaseMean = time.Duration(bt.naive[i] / bt.span[i])
		}
		if ct.span[i] > 0 {
			row.CandMean = time.Duration(ct.naive[i] / ct.span[i])
		}
		out.Rows = append(out.Rows, row)
	}
}

// pairedGain is the measured gain of paired runs: the mean over pairs of
// the log ratio of the runs' mean e2e, d = mean log(candidate/baseline),
// with Student's t interval over the pairs, as a gain 1 - e^d. Each pair
// counts once, whatever the machine's speed while it ran (a pooled ratio
// of means would let the slowest pairs, the noisiest, weigh most); the
// log makes a pair 10 % faster and one 10 % slower cancel. The pairs are
// the independent draws: the units of a run share its conditions and are
// not counted as draws. With every run's mean the same on both sides the
// interval is a point.
func pairedGain(b, c *side, level float64) Interval {
	n := len(b.runStart) - 1
	bm, cm := make([]float64, n), make([]float64, n)
	for r := range n {
		bm[r] = mean(b.e2e[b.runStart[r]:b.runStart[r+1]])
		cm[r] = mean(c.e2e[c.runStart[r]:c.runStart[r+1]])
	}
	return logRatioGain(bm, cm, level)
}

// logRatioGain is 1 - e^d, d the mean of log(cand[i]/base[i]) over pairs,
// with Student's t interval; pairs where either value is not positive (a
// run with no units) are left out; undefined with fewer than two pairs.
func logRatioGain(base, cand []float64, level float64) Interval {
	logs := make([]float64, len(base))
	for i := range base {
		logs[i] = math.Log(cand[i] / base[i])
	}
	return logGain(logs, level)
}

// logGain is 1 - e^d, d the mean of the finite values of logs (which it
// overwrites), with Student's t interval.
func logGain(logs []float64, level float64) Interval {
	logs = slices.DeleteFunc(logs, func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) })
	t := meanT(logs, level)
	return Interval{Value: 1 - math.Exp(t.Value), Lo: 1 - math.Exp(t.Hi), Hi: 1 - math.Exp(t.Lo)}
}

// meanT is the mean of xs with Student's t interval at level; undefined
// with fewer than two values.
func meanT(xs []float64, level float64) Interval {
	if len(xs) < 2 {
		return undefined
	}
	m := mean(xs)
	ss := 0.0
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	half := studentQuantile(1-(1-level)/2, len(xs)-1) * math.Sqrt(ss/float64(len(xs)-1)/float64(len(xs)))
	return Interval{Value: m, Lo: m - half, Hi: m + half}
}

// rowKeys indexes the rows of the sides' units: keys in order of first
// appearance, and each unit row's index among them. Past MaxRows, rows
// fold into one per phase and direction (overflowKey).
func rowKeys(sides ...Side) (map[Key]int, []Key) {
	keyIndex := map[Key]int{}
	var keys []Key
	for _, s := range sides {
		for _, run := range s.Runs {
			for _, w := range run {
				for _, st := range w.Stats {
					if _, ok := keyIndex[st.Key]; ok {
						continue
					}
					k := st.Key
					if len(keys) >= MaxRows {
						k = overflowKey(k)
					}
					j, ok := keyIndex[k]
					if !ok {
						j = len(keys)
						keys = append(keys, k)
					}
					keyIndex[st.Key], keyIndex[k] = j, j
				}
			}
		}
	}
	return keyIndex, keys
}

// matchTarget reports whether selector sel names row k.
func matchTarget(sel string, k Key) bool {
	switch sel {
	case k.Component, k.String(), k.ByPhase().String(), k.Phase.String():
		return sel != ""
	}
	return k.Component != "" && sel == k.Component+"."+k.Phase.String()
}

func flatten(s Side, keyIndex map[Key]int, plans bool) *side {
	out := &side{statOff: []int32{0}}
	for _, run := range s.Runs {
		out.runStart = append(out.runStart, len(out.e2e))
		for _, w := range run {
			out.e2e = append(out.e2e, float64(w.E2E()))
			for _, x := range w.Stats {
				out.statK = append(out.statK, int32(keyIndex[x.Key]))
				out.critical = append(out.critical, float64(x.Critical))
				out.naive = append(out.naive, float64(x.Naive))
				out.spans = append(out.spans, float64(x.Count))
			}
			out.statOff = append(out.statOff, int32(len(out.statK)))
			if plans {
				out.plans = append(out.plans, newReplayPlan(w, keyIndex))
			}
		}
	}
	out.runStart = append(out.runStart, len(out.e2e))
	return out
}

// foldSide merges rows of different components that share a phase and
// direction.
func foldSide(s Side) Side {
	out := Side{Runs: make([][]Work, len(s.Runs))}
	for i, run := range s.Runs {
		out.Runs[i] = make([]Work, len(run))
		for j, w := range run {
			out.Runs[i][j] = foldWork(w)
		}
	}
	return out
}

func foldWork(w Work) Work {
	f := Work{Root: w.Root, Nodes: slices.Clone(w.Nodes)}
	for i := range f.Nodes {
		f.Nodes[i].Key = f.Nodes[i].Key.ByPhase()
	}
	for _, s := range w.Stats {
		k := s.Key.ByPhase()
		found := false
		for i := range f.Stats {
			if f.Stats[i].Key == k {
				f.Stats[i].Critical += s.Critical
				f.Stats[i].Naive += s.Naive
				f.Stats[i].Count += s.Count
				found = true
			}
		}
		if !found {
			s.Key = k
			f.Stats = append(f.Stats, s)
		}
	}
	slices.SortFunc(f.Stats, func(a, b KeyStat) int { return compareKeys(a.Key, b.Key) })
	return f
}

// MeanGain returns 1 - mean(cand)/mean(base) (for run wall times: the
// candidate's gain) with a percentile bootstrap interval, each side's
// values resampled independently (they are whole runs); with opt.Paired
// (same length), the gain over pairs as the measured gain of paired runs
// is (1 - e^d, d the mean log ratio, Student's t interval). Iterations,
// Level and Seed are taken from opt; NaN when a side is empty.
func MeanGain(base, cand []float64, opt CompareOptions) Interval {
	if len(base) == 0 || len(cand) == 0 || opt.Paired && len(base) != len(cand) {
		return undefined
	}
	opt = opt.orDefaults()
	if opt.Paired {
		return logRatioGain(base, cand, opt.Level)
	}
	gain := func(b, c []float64) float64 { return 1 - mean(c)/mean(b) }
	rng := rand.New(rand.NewPCG(opt.Seed, 0x6a17))
	draw := func(xs []float64) []float64 {
		out := make([]float64, len(xs))
		for i := range out {
			out[i] = xs[rng.IntN(len(xs))]
		}
		return out
	}
	vals := make([]float64, opt.Iterations)
	for i := range vals {
		vals[i] = gain(draw(base), draw(cand))
	}
	lo, hi := percentileInterval(vals, opt.Level, min(len(base), len(cand)))
	return Interval{gain(base, cand), lo, hi}
}

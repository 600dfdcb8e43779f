package attribution

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// WhatIf is the predicted effect of making some rows faster, without
// running anything: the critical-path replay of recorded units with those
// rows' spans scaled, and the first-order Σ q·r beside it.
type WhatIf struct {
	// Rows are the rows changed, with the factor their spans' durations
	// are multiplied by (0.5: twice as fast).
	Rows    []string  `json:"rows"`
	Factors []float64 `json:"factors"`
	// E2E is the units' mean e2e as recorded; Replayed as replayed.
	E2E      time.Duration `json:"e2e_mean_ns"`
	Replayed time.Duration `json:"replayed_e2e_mean_ns"`
	// Gain is 1 - Replayed/E2E (with its bootstrap interval); FirstOrder
	// is Σ q·(1 - factor) over the rows.
	Gain       Interval `json:"gain"`
	FirstOrder float64  `json:"first_order"`
	Works      int      `json:"works"`
	Resampled  string   `json:"resampled"`
	Level      float64  `json:"level"`
}

// ParseWhatIf parses "ROWS=Nx" (ROWS a target selector as in
// CompareOptions.Target; N× as fast, so 2x halves the spans, 0.5x doubles
// them) into the selector and the factor on durations.
func ParseWhatIf(s string) (string, float64, error) {
	sel, v, ok := strings.Cut(s, "=")
	sel = strings.TrimSpace(sel)
	if !ok || sel == "" || !strings.HasSuffix(v, "x") {
		return "", 0, fmt.Errorf("what-if %q: want ROWS=Nx, for example ipc.send=2x (twice as fast) or taskhost.execute=0.5x", s)
	}
	n, err := strconv.ParseFloat(strings.TrimSuffix(v, "x"), 64)
	if err != nil || n <= 0 || math.IsInf(n, 0) || n > 1e6 {
		return "", 0, fmt.Errorf("what-if %q: the speed-up must be a number above 0 and at most 1e6, followed by x", s)
	}
	return sel, 1 / n, nil
}

// Replay predicts the effect of scaling the spans of the rows matched by
// each selector (factors: selector → factor on durations) over s's units.
func Replay(s Side, factors map[string]float64, opt CompareOptions) (WhatIf, error) {
	if s.works() == 0 {
		return WhatIf{}, errors.New("what-if: no units of work")
	}
	if len(factors) == 0 {
		return WhatIf{}, errors.New("what-if: no rows to change")
	}
	if opt.Iterations < 0 || opt.Iterations > MaxIterations {
		return WhatIf{}, fmt.Errorf("what-if: %d bootstrap iterations: want 1 to %d (0 for 400)", opt.Iterations, MaxIterations)
	}
	opt = opt.orDefaults()
	if opt.ByPhase {
		s = foldSide(s)
	}
	keyIndex, keys := rowKeys(s)
	factor := slices.Repeat([]float64{1}, len(keys))
	var out WhatIf
	for _, sel := range slices.Sorted(maps.Keys(factors)) {
		found := false
		for i, k := range keys {
			if k.IsRow() && matchTarget(sel, k) {
				factor[i], found = factors[sel], true
				out.Rows = append(out.Rows, k.String())
				out.Factors = append(out.Factors, factors[sel])
			}
		}
		if !found {
			return WhatIf{}, fmt.Errorf("what-if: %q matches no row", sel)
		}
	}
	b := flatten(s, keyIndex, true)
	byRuns := len(s.Runs) >= 2
	out.Works, out.Resampled, out.Level = b.units(), "units", opt.Level
	if byRuns {
		out.Resampled = "runs"
	}
	gain := func(counts []int32) (float64, float64, float64) {
		var e2e float64
		for u, n := range counts {
			e2e += float64(n) * b.e2e[u]
		}
		replayed := replaySum(b, counts, factor)
		return 1 - replayed/e2e, e2e, replayed
	}
	g, e2e, replayed := gain(ones(b))
	n := float64(b.units())
	out.E2E, out.Replayed = time.Duration(e2e/n), time.Duration(replayed/n)
	t := totals(b, ones(b), len(keys))
	for i := range keys {
		out.FirstOrder += t.critical[i] / t.e2e * (1 - factor[i])
	}
	vals := make([]float64, opt.Iterations)
	for it := range vals {
		rng := rand.New(rand.NewPCG(opt.Seed, uint64(it)+1))
		vals[it], _, _ = gain(resample(rng, b, byRuns, nil))
	}
	clusters := b.units()
	if byRuns {
		clusters = len(s.Runs)
	}
	lo, hi := percentileInterval(vals, opt.Level, clusters)
	out.Gain = Interval{g, lo, hi}
	return out, nil
}

// Text is the what-if in one sentence.
func (w WhatIf) Text() string {
	var parts []string
	for i, r := range w.Rows {
		parts = append(parts, fmt.Sprintf("%s %.3g× as fast", r, 1/w.Factors[i]))
	}
	return fmt.Sprintf("what if %s: e2e %v → %v, a gain of %s ± %.1f (critical-path replay of %d units; first order Σq·r %s; %.0f %% interval over %s).",
		strings.Join(parts, ", "), round(w.E2E), round(w.Replayed), pctSigned(w.Gain.Value), 100*w.Gain.HalfWidth(), w.Works,
		pctSigned(w.FirstOrder), 100*w.Level, w.Resampled)
}

package attribution

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// serialUnit is a unit whose phases run one after another (ms).
func serialUnit(trace string, dispatch, ser, send, exec float64) []spans.Span {
	a, b, c := dispatch, dispatch+ser, dispatch+ser+send
	return build(trace, []sp{
		{"w", "", 0, 0, 0, c + exec, false},
		{"d", "w", D, 0, 0, a, false},
		{"s", "w", S, req, a, b, false},
		{"n", "w", Se, req, b, c, false},
		{"e", "w", E, 0, c, c + exec, false},
	})
}

func sideOf(t *testing.T, runs ...[]spans.Span) Side {
	t.Helper()
	var s Side
	for _, r := range runs {
		works, _ := Trees(r)
		s.Runs = append(s.Runs, works)
	}
	return s
}

func row(t *testing.T, c Comparison, name string) CompareRow {
	t.Helper()
	for _, r := range c.Rows {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no row %s in %+v", name, c.Rows)
	return CompareRow{}
}

// The target (send) gets 2× faster while dispatch, not targeted, gets
// slower: the prediction comes from send's own spans, the measurement from
// e2e, and they disagree — the verdict names dispatch.
func TestCompareTargetFasterOtherSlower(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var base, cand []spans.Span
	for i := range 200 {
		j := 1 + 0.1*rng.NormFloat64()
		base = append(base, serialUnit(fmt.Sprint("b", i), 10*j, 5, 40*j, 45)...)
		cand = append(cand, serialUnit(fmt.Sprint("c", i), 30*j, 5, 20*j, 45)...)
	}
	c, err := Compare(sideOf(t, base), sideOf(t, cand), CompareOptions{Target: []string{"x.send"}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	send := row(t, c, "x.send/request")
	if !send.Target || math.Abs(send.R.Value-0.5) > 1e-9 || math.Abs(send.Q.Value-0.4) > 0.01 {
		t.Errorf("send: target %v r %v q %v, want a target with r 0.5, q 0.4", send.Target, send.R.Value, send.Q.Value)
	}
	// Predicted: 0.4 × 0.5 = 20 %; measured: 100 → 100 (dispatch +20, send -20).
	if math.Abs(c.FirstOrder.Value-0.2) > 0.01 || math.Abs(c.Replay.Value-0.2) > 0.01 {
		t.Errorf("predicted first order %v replay %v, want 0.2", c.FirstOrder.Value, c.Replay.Value)
	}
	if math.Abs(c.Measured.Value) > 0.01 || !c.Measured.Contains(0) {
		t.Errorf("measured %+v, want ≈ 0 with 0 inside", c.Measured)
	}
	if c.Consistent {
		t.Errorf("consistent, want not: the untargeted dispatch ate the gain")
	}
	text := strings.Join(c.Verdict, "\n")
	for _, want := range []string{"x.send/request got 2.00× faster", "not consistent", "x.dispatch +20."} {
		if !strings.Contains(text, want) {
			t.Errorf("verdict lacks %q:\n%s", want, text)
		}
	}
	var buf bytes.Buffer
	if err := c.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "* x.send/request") || !strings.Contains(buf.String(), "critical-path replay") {
		t.Errorf("table:\n%s", buf.String())
	}
	if _, err := json.Marshal(c); err != nil {
		t.Errorf("json: %v", err)
	}
}

// The target runs beside a longer untargeted phase and finishes last only
// by a little: it holds the whole critical path (q = 1), so Σ q·r predicts
// half the e2e, but halving it leaves the other phase critical. The replay
// predicts what is measured.
func TestReplayCatchesOverlap(t *testing.T) {
	var base, cand []spans.Span
	for i := range 50 {
		base = append(base, build(fmt.Sprint("b", i), []sp{{"w", "", 0, 0, 0, 100, false}, {"t", "w", Se, req, 0, 100, false}, {"u", "w", E, 0, 0, 95, false}})...)
		cand = append(cand, build(fmt.Sprint("c", i), []sp{{"w", "", 0, 0, 0, 95, false}, {"t", "w", Se, req, 0, 50, false}, {"u", "w", E, 0, 0, 95, false}})...)
	}
	c, err := Compare(sideOf(t, base), sideOf(t, cand), CompareOptions{Target: []string{"send/request"}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(c.FirstOrder.Value-0.5) > 1e-9 {
		t.Errorf("first order %v, want 0.5 (q 1 × r 0.5)", c.FirstOrder.Value)
	}
	if math.Abs(c.Replay.Value-0.05) > 1e-9 || math.Abs(c.Measured.Value-0.05) > 1e-9 {
		t.Errorf("replay %v measured %v, want 0.05 and 0.05", c.Replay.Value, c.Measured.Value)
	}
	if !c.Consistent {
		t.Errorf("not consistent: %v", c.Verdict)
	}
}

// A row present on one side only is a row with an empty cell, not dropped.
func TestCompareRowOnOneSide(t *testing.T) {
	base := build("b", []sp{{"w", "", 0, 0, 0, 10, false}, {"a", "w", Se, req, 0, 10, false}})
	cand := build("c", []sp{{"w", "", 0, 0, 0, 10, false}, {"a", "w", Se, req, 0, 5, false}, {"n", "w", De, rep, 5, 10, false}})
	c, err := Compare(sideOf(t, base), sideOf(t, cand), CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := row(t, c, "x.deserialize/reply")
	if r.R.Defined() || r.CandSpans != 1 || r.BaseSpans != 0 {
		t.Errorf("candidate-only row %+v, want undefined r, 1 candidate span", r)
	}
	var buf bytes.Buffer
	if err := c.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "x.deserialize/reply") {
		t.Errorf("table lacks the candidate-only row:\n%s", buf.String())
	}
	if _, err := Compare(sideOf(t, base), sideOf(t, cand), CompareOptions{Target: []string{"nope"}}); err == nil || !strings.Contains(err.Error(), "x.send/request") {
		t.Errorf("unknown target: %v, want an error listing the rows", err)
	}
}

// simulate draws n units of serial phases with log-normal durations; the
// candidate's send is scaled by sendScale. Returns the true e2e gain.
func simulate(rng *rand.Rand, name string, n int, sendScale float64) []spans.Span {
	ln := func(mean, sigma float64) float64 {
		return mean * math.Exp(sigma*rng.NormFloat64()-sigma*sigma/2)
	}
	var out []spans.Span
	for i := range n {
		out = append(out, serialUnit(fmt.Sprint(name, i), ln(5, 0.5), ln(1, 0.3), ln(3, 0.6)*sendScale, ln(4, 0.4))...)
	}
	return out
}

// Bootstrap coverage: with a known true effect, the 95 % intervals of the
// measured gain and of the replay's prediction hold it in at least 90 of
// 100 simulations; in A/A simulations the measured interval holds 0.
func TestBootstrapCoverage(t *testing.T) {
	if testing.Short() {
		t.Skip("coverage simulation")
	}
	const sims, units = 100, 300
	// E[e2e] = 5 + 1 + 3 + 4 = 13 ms; halving send saves 1.5 ms.
	truth := 1.5 / 13
	var measured, replay, aa int
	for s := range sims {
		rng := rand.New(rand.NewPCG(uint64(s), 99))
		base := sideOf(t, simulate(rng, "b", units, 1))
		cand := sideOf(t, simulate(rng, "c", units, 0.5))
		c, err := Compare(base, cand, CompareOptions{Target: []string{"x.send"}, Iterations: 200, Seed: uint64(s)})
		if err != nil {
			t.Fatal(err)
		}
		if c.Measured.Contains(truth) {
			measured++
		}
		if c.Replay.Contains(truth) {
			replay++
		}
		same := sideOf(t, simulate(rng, "a", units, 1))
		a, err := Compare(base, same, CompareOptions{Target: []string{"x.send"}, Iterations: 200, Seed: uint64(s)})
		if err != nil {
			t.Fatal(err)
		}
		if a.Measured.Contains(0) {
			aa++
		}
	}
	t.Logf("coverage over %d simulations: measured %d, replay %d, A/A holds 0: %d", sims, measured, replay, aa)
	if measured < 90 || replay < 90 || aa < 90 {
		t.Errorf("coverage: measured %d, replay %d, A/A %d of %d; want ≥ 90 each", measured, replay, aa, sims)
	}
}

// With several runs per side, the bootstrap resamples runs: a run-level
// shift common to all of a run's units widens the interval.
func TestCompareOverRuns(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var b, c []spans.Span
	var bs, cs Side
	for r := range 4 {
		b = simulate(rng, fmt.Sprint("b", r, "-"), 100, 1)
		c = simulate(rng, fmt.Sprint("c", r, "-"), 100, 1)
		bs = Side{Runs: append(bs.Runs, sideOf(t, b).Runs...)}
		cs = Side{Runs: append(cs.Runs, sideOf(t, c).Runs...)}
	}
	cmp, err := Compare(bs, cs, CompareOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if cmp.Resampled != "runs" || cmp.BaseRuns != 4 {
		t.Errorf("resampled %q over %d runs, want runs over 4", cmp.Resampled, cmp.BaseRuns)
	}
}

// A drift of the machine's speed over an interleaved experiment (each pair
// of runs slower than the last) widens unpaired intervals; pairing the
// runs cancels it.
func TestPairedRunsCancelDrift(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var bs, cs Side
	for r := range 6 {
		drift := 1 + 0.3*float64(r) // the machine gets slower
		for i, s := range []*Side{&bs, &cs} {
			var spans []spans.Span
			for u := range 100 {
				j := drift * (1 + 0.05*rng.NormFloat64())
				spans = append(spans, serialUnit(fmt.Sprint("r", r, "s", i, "u", u), 5*j, 1*j, 3*j, 4*j)...)
			}
			*s = Side{Runs: append(s.Runs, sideOf(t, spans).Runs...)}
		}
	}
	unpaired, err := Compare(bs, cs, CompareOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	paired, err := Compare(bs, cs, CompareOptions{Seed: 1, Paired: true})
	if err != nil {
		t.Fatal(err)
	}
	if paired.Resampled != "pairs of runs" || !paired.Measured.Contains(0) {
		t.Errorf("paired: %q, measured %+v; want pairs of runs holding 0", paired.Resampled, paired.Measured)
	}
	if paired.Measured.HalfWidth() > unpaired.Measured.HalfWidth()/3 {
		t.Errorf("paired half-width %.4f, unpaired %.4f: want pairing to cut it at least threefold", paired.Measured.HalfWidth(), unpaired.Measured.HalfWidth())
	}
	if _, err := Compare(bs, Side{Runs: cs.Runs[:3]}, CompareOptions{Paired: true}); err == nil {
		t.Error("paired with 6 and 3 runs: no error")
	}
}

// A what-if replays recorded units with a row made faster: on serial units
// it is Σ q·r exactly; where the row overlaps a longer one, the replay sees
// that speeding it up moves nothing.
func TestWhatIf(t *testing.T) {
	var serial, overlap []spans.Span
	for i := range 20 {
		serial = append(serial, serialUnit(fmt.Sprint("s", i), 10, 5, 40, 45)...)
		overlap = append(overlap, build(fmt.Sprint("o", i), []sp{{"w", "", 0, 0, 0, 100, false}, {"t", "w", Se, req, 0, 100, false}, {"u", "w", E, 0, 0, 95, false}})...)
	}
	sel, f, err := ParseWhatIf("x.send=2x")
	if err != nil || sel != "x.send" || f != 0.5 {
		t.Fatalf("ParseWhatIf: %q %v %v", sel, f, err)
	}
	w, err := Replay(sideOf(t, serial), map[string]float64{sel: f}, CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(w.Gain.Value-0.2) > 1e-9 || math.Abs(w.FirstOrder-0.2) > 1e-9 || !strings.Contains(w.Text(), "x.send/request 2× as fast") {
		t.Errorf("serial: gain %v first order %v, want 0.2 and 0.2; %s", w.Gain.Value, w.FirstOrder, w.Text())
	}
	w, err = Replay(sideOf(t, overlap), map[string]float64{sel: f}, CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(w.Gain.Value-0.05) > 1e-9 || math.Abs(w.FirstOrder-0.5) > 1e-9 {
		t.Errorf("overlap: gain %v first order %v, want 0.05 and 0.5", w.Gain.Value, w.FirstOrder)
	}
	for _, bad := range []string{"x.send", "x.send=2", "x.send=0x", "=2x", "x.send=-1x"} {
		if _, _, err := ParseWhatIf(bad); err == nil {
			t.Errorf("ParseWhatIf(%q): no error", bad)
		}
	}
	if _, err := Replay(sideOf(t, serial), map[string]float64{"nope": 0.5}, CompareOptions{}); err == nil {
		t.Error("unknown row: no error")
	}
}

// A causal experiment on serial units: every nanosecond added to the send
// reaches e2e (weight 1, as its critical share says); added to a phase
// that runs beside a longer one, none does (weight 0), while its critical
// share is 0 too.
func TestCausalWeight(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	mk := func(name string, extra float64) []spans.Span {
		var out []spans.Span
		for i := range 100 {
			j := 1 + 0.1*rng.NormFloat64()
			out = append(out, build(fmt.Sprint(name, i), []sp{{"w", "", 0, 0, 0, 10*j + extra, false},
				{"s", "w", Se, req, 0, 4*j + extra, false}, {"e", "w", E, 0, 4*j + extra, 10*j + extra, false},
				{"p", "w", De, req, 0, 2 + extra, false}})...)
		}
		return out
	}
	base, cand := sideOf(t, mk("b", 0)), sideOf(t, mk("c", 1))
	c, err := CausalWeight(base, cand, "x.send", CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Weight.Contains(1) || math.Abs(c.CriticalShare-1) > 1e-9 || math.Abs(c.Added-1e6) > 1e5 {
		t.Errorf("send: weight %+v share %v added %v; want 1 inside, share 1, ≈ 1ms added", c.Weight, c.CriticalShare, c.Added)
	}
	// Deserialize (0–2 ms, beside the 4 ms send) made 1 ms longer moves
	// nothing — but in mk the send moved too; measure it alone.
	mk2 := func(name string, extra float64) []spans.Span {
		var out []spans.Span
		for i := range 100 {
			j := 1 + 0.1*rng.NormFloat64()
			out = append(out, build(fmt.Sprint(name, i), []sp{{"w", "", 0, 0, 0, 10 * j, false},
				{"s", "w", Se, req, 0, 4 * j, false}, {"e", "w", E, 0, 4 * j, 10 * j, false},
				{"p", "w", De, req, 0, 2 + extra, false}})...)
		}
		return out
	}
	c, err = CausalWeight(sideOf(t, mk2("b2", 0)), sideOf(t, mk2("c2", 1)), "x.deserialize", CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Weight.Hi > 0.5 || c.CriticalShare != 0 {
		t.Errorf("overlapped deserialize: weight %+v share %v; want ≈ 0 and share 0", c.Weight, c.CriticalShare)
	}
}

// pairedSim is an interleaved experiment as ab runs it: pairs of runs, the
// two runs of a pair on the same items (the same seed: item u has the same
// size on both sides), sharing the pair's machine speed, each side with a
// small speed of its own (what interleaving leaves of the machine's drift)
// and every unit a noise of its own. The candidate's send phase is scaled
// by sendScale; with every phase of a unit scaled alike, the true gain is
// (1 - sendScale)·3/13.
func pairedSim(rng *rand.Rand, pairs, units int, sendScale float64) (Side, Side) {
	ln := func(sigma float64) float64 { return math.Exp(sigma*rng.NormFloat64() - sigma*sigma/2) }
	var bs, cs Side
	for p := range pairs {
		machine := ln(0.3)
		size := make([]float64, units)
		for u := range size {
			size[u] = ln(1) // heavy-tailed item sizes, shared by both sides
		}
		for i, s := range []*Side{&bs, &cs} {
			scale := 1.0
			if i == 1 {
				scale = sendScale
			}
			own := machine * ln(0.03)
			var spans []spans.Span
			for u := range units {
				j := own * size[u] * ln(0.2)
				spans = append(spans, serialUnit(fmt.Sprint("p", p, "s", i, "u", u), 5*j, 1*j, 3*j*scale, 4*j)...)
			}
			works, _ := Trees(spans)
			s.Runs = append(s.Runs, works)
		}
	}
	return bs, cs
}

// Paired intervals are honest and no wider than they need be: over many
// simulated interleaved experiments the 95 % intervals of the measured
// gain, of the replay's prediction and of the target row's r hold the
// truth (0 in A/A, a known gain otherwise) in 90 to 99 % of them. Drawing each side's units again inside a drawn pair (as the
// bootstrap over runs does) would count the items' spread, which the
// pairing cancels, a second time: the intervals then hold 0 every time,
// far wider than the noise.
func TestPairedBootstrapCoverage(t *testing.T) {
	sims := 80
	if testing.Short() {
		sims = 30
	}
	const pairs, units = 10, 20
	truth := 0.5 * 3 / 13
	var aa, ab, replay, r int
	var width float64
	for s := range sims {
		rng := rand.New(rand.NewPCG(uint64(s), 11))
		b, c := pairedSim(rng, pairs, units, 1)
		cmp, err := Compare(b, c, CompareOptions{Paired: true, Iterations: 20, Seed: uint64(s)})
		if err != nil {
			t.Fatal(err)
		}
		if cmp.Measured.Contains(0) {
			aa++
		}
		width += cmp.Measured.HalfWidth() / float64(sims)
		b, c = pairedSim(rng, pairs, units, 0.5)
		if cmp, err = Compare(b, c, CompareOptions{Paired: true, Target: []string{"x.send"}, Iterations: 20, Seed: uint64(s)}); err != nil {
			t.Fatal(err)
		}
		if cmp.Measured.Contains(truth) {
			ab++
		}
		if cmp.Replay.Contains(truth) {
			replay++
		}
		if row(t, cmp, "x.send/request").R.Contains(0.5) {
			r++
		}
	}
	t.Logf("%d simulations of %d pairs: A/A intervals hold 0 in %d (mean half-width %.2f pp); A/B intervals hold the truth %.3f in %d, the replay's in %d, send's r = 0.5 in %d",
		sims, pairs, aa, 100*width, truth, ab, replay, r)
	lo, hi := sims*90/100, sims*99/100
	for name, n := range map[string]int{"A/A": aa, "A/B": ab, "replay": replay, "r": r} {
		if n < lo || n > hi {
			t.Errorf("coverage of %s: %d of %d; want %d to %d", name, n, sims, lo, hi)
		}
	}
}

// TestCompareOptionsRefused: iterations and a level out of range are
// refused with the bound, a NaN level too (no comparison holds for it, so
// it would pass a check written as "< 0 || >= 1"); zero takes the
// defaults.
func TestCompareOptionsRefused(t *testing.T) {
	var base, cand []spans.Span
	for i := range 20 {
		base = append(base, serialUnit(fmt.Sprint("b", i), 10, 5, 40, 45)...)
		cand = append(cand, serialUnit(fmt.Sprint("c", i), 10, 5, 20, 45)...)
	}
	b, c := sideOf(t, base), sideOf(t, cand)
	for _, tc := range []struct {
		opt  CompareOptions
		want string
	}{
		{CompareOptions{Iterations: -1}, "bootstrap iterations"},
		{CompareOptions{Iterations: MaxIterations + 1}, "bootstrap iterations"},
		{CompareOptions{Level: -0.5}, "interval level"},
		{CompareOptions{Level: 1}, "interval level"},
		{CompareOptions{Level: math.NaN()}, "interval level"},
	} {
		if _, err := Compare(b, c, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compare with %+v: error %v, want one that says %q", tc.opt, err, tc.want)
		}
	}
	got, err := Compare(b, c, CompareOptions{Iterations: 0, Level: 0, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got.Level != 0.95 || got.Iterations != 400 {
		t.Errorf("defaults: level %v, iterations %d; want 0.95, 400", got.Level, got.Iterations)
	}
}

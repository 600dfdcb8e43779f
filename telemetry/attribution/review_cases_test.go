package attribution

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

func asNear(spans []spans.Span) []spans.Span {
	out := slices.Clone(spans)
	for i := range out {
		out[i].Remote = false
	}
	return out
}

// Two round trips under one near parent, one clock (no skew): placement
// leaves the trace alone, so q equals the walk without placement.
func TestTwoRoundTripsUnderOneParent(t *testing.T) {
	spans := build("twohops", []sp{
		{"w", "", 0, 0, 0, 30, false},
		{"h", "w", 0, 0, 0, 30, false},
		{"s1", "h", S, req, 0, 1, false},
		{"se1", "h", Se, req, 1, 2, false},
		{"f1", "h", R, req, 2, 3, true},
		{"f2", "h", E, 0, 3, 8, true},
		{"f3", "h", S, rep, 8, 9, true},
		{"r1", "h", R, rep, 9, 10, false},
		{"se2", "h", Se, req, 11, 12, false},
		{"f4", "h", R, req, 12, 13, true},
		{"f5", "h", E, 0, 13, 28, true},
		{"f6", "h", S, rep, 28, 29, true},
		{"r2", "h", R, rep, 29, 30, false},
	})
	want, _ := one(t, asNear(spans))
	got, d := one(t, spans)
	checkSum(t, got)
	wq, gq := qs(want), qs(got)
	for k, v := range wq {
		if math.Abs(gq[k]-v) > 1e-9 {
			t.Errorf("%v q %.3f, want %.3f (placed %d, clipped %d on a skew-free trace)", k, gq[k], v, d.Placed, d.Clipped)
		}
	}
	if d.Unplaced != 1 {
		t.Errorf("unplaced %d, want 1", d.Unplaced)
	}
}

// A third process under a far span (host → sidecar), its clock 5 ms
// behind, is placed within its own parent's window too.
func TestFarUnderFarIsPlaced(t *testing.T) {
	mk := func(skew float64) []spans.Span {
		s := build(fmt.Sprint("farfar", skew), []sp{
			{"w", "", 0, 0, 0, 20, false},
			{"se", "w", Se, req, 0, 2, false},
			{"F", "w", E, 0, 2, 18, false},
			{"G", "F", R, req, 4 + skew, 16 + skew, false},
		})
		for i := range s {
			s[i].Process = 1
		}
		s[2].Process, s[3].Process = 2, 3 // F in process 2, G in process 3
		return s
	}
	clean, _ := one(t, mk(0))
	for _, skew := range []float64{-5, 5} {
		skewed, _ := one(t, mk(skew))
		cq, sq := qs(clean), qs(skewed)
		for k, v := range cq {
			if math.Abs(sq[k]-v) > 0.01 {
				t.Errorf("skew %v: %v q %.3f with a skewed third clock, want %.3f", skew, k, sq[k], v)
			}
		}
	}
}

// An upstream server span whose own parent is not in the file, with the
// unit under it: not attached to its own descendant (a loop).
func TestOrphanAboveRoot(t *testing.T) {
	w, d := one(t, build("orphanabove", []sp{
		{"srv", "client", 0, 0, 0, 100, false}, // parent "client" missing
		{"w", "srv", 0, 0, 0, 100, false},
		{"a", "w", S, req, 0, 40, false},
		{"b", "w", Se, req, 40, 100, false},
	}))
	if d.Cycles != 0 || w.Stat(key(Se, req)).Critical != 60*time.Millisecond {
		t.Errorf("cycles %d, send critical %v; want 0 and 60ms (stats %+v)", d.Cycles, w.Stat(key(Se, req)).Critical, w.Stats)
	}
}

// A chunked send: 4 spans of 1 ms in the baseline, one of 3 ms in the
// candidate; the row's own work per unit fell 4 → 3 ms (r = 0.25), e2e
// 10 → 9 ms. A per-span r (1 - 3/1 = -2) would predict a loss.
func TestRWhenSpansPerUnitChange(t *testing.T) {
	var base, cand []spans.Span
	for i := range 50 {
		base = append(base, build(fmt.Sprint("b", i), []sp{{"w", "", 0, 0, 0, 10, false}, {"d", "w", D, 0, 0, 2, false},
			{"c1", "w", Se, req, 2, 3, false}, {"c2", "w", Se, req, 3, 4, false}, {"c3", "w", Se, req, 4, 5, false}, {"c4", "w", Se, req, 5, 6, false},
			{"e", "w", E, 0, 6, 10, false}})...)
		cand = append(cand, build(fmt.Sprint("c", i), []sp{{"w", "", 0, 0, 0, 9, false}, {"d", "w", D, 0, 0, 2, false},
			{"c1", "w", Se, req, 2, 5, false}, {"e", "w", E, 0, 5, 9, false}})...)
	}
	c, err := Compare(sideOf(t, base), sideOf(t, cand), CompareOptions{Target: []string{"x.send"}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r := row(t, c, "x.send/request").R.Value; math.Abs(r-0.25) > 1e-9 {
		t.Errorf("r %v, want 0.25", r)
	}
	if math.Abs(c.Replay.Value-0.1) > 1e-9 || math.Abs(c.Measured.Value-0.1) > 1e-9 || !c.Consistent {
		t.Errorf("replay %.3f, measured %.3f, consistent %v; want 0.1, 0.1, true", c.Replay.Value, c.Measured.Value, c.Consistent)
	}
}

// Depth is judged on the tree, not on the order spans are visited: on a
// chain twice MaxTreeDepth deep, exactly the spans below the bound are
// left out, whatever the trace.
func TestTooDeepIsExact(t *testing.T) {
	for k := range 5 {
		chain := []sp{{"w", "", 0, 0, 0, 100, false}}
		for i := 0; i < 2*MaxTreeDepth; i++ {
			p := "w"
			if i > 0 {
				p = fmt.Sprint(i - 1)
			}
			chain = append(chain, sp{fmt.Sprint(i), p, E, 0, 0, 100, false})
		}
		w, d := one(t, build(fmt.Sprint("deep", k), chain))
		if d.TooDeep != MaxTreeDepth || len(w.Nodes) != MaxTreeDepth+1 {
			t.Errorf("trace %d: too deep %d, nodes %d; want %d and %d", k, d.TooDeep, len(w.Nodes), MaxTreeDepth, MaxTreeDepth+1)
		}
	}
}

// Two siblings ending together: the walk breaks the tie by the later
// start (the send is on the path, q 0.25), but the replay sees the join:
// the next span waited for both, so a faster send alone gains nothing.
func TestTieBreakAgreesWithReplay(t *testing.T) {
	for _, name := range []string{"t1", "t2", "t3", "t4", "t5", "t6"} {
		w, _ := one(t, build(name, []sp{{"w", "", 0, 0, 0, 20, false}, {"a", "w", E, 0, 0, 10, false}, {"b", "w", Se, req, 5, 10, false}, {"c", "w", De, rep, 10, 20, false}}))
		got := newReplayPlan(w, map[Key]int{key(Se, req): 0}).e2e([]float64{0.5}, nil)
		if q := qs(w)[key(Se, req)]; q != 0.25 || got != 20*time.Millisecond {
			t.Errorf("%s: q(send) %.2f, replay with send ×0.5 %v; want 0.25 and 20ms", name, q, got)
		}
	}
}

// Property over random trees with far spans of three processes,
// zero-length, inverted and equal times: critical times add up to e2e,
// none negative; the replay with no change is e2e; smaller factors never
// replay longer.
func TestRandomTreesWithProcesses(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for n := 0; n < 3000; n++ {
		total := 1 + rng.IntN(30)
		spans := []sp{{"w", "", 0, 0, 0, float64(total), false}}
		procs := []uint32{1}
		for i := 0; i < rng.IntN(25); i++ {
			pi := rng.IntN(len(spans))
			a, b := rng.IntN(total+10)-5, rng.IntN(total+10)-5
			if a > b && rng.IntN(3) > 0 {
				a, b = b, a
			}
			spans = append(spans, sp{fmt.Sprint(i), spans[pi].id, telemetry.Phase(1 + rng.IntN(telemetry.NumPhases)), telemetry.Direction(rng.IntN(3)),
				float64(a), float64(b), rng.IntN(4) == 0})
			pr := procs[pi]
			if rng.IntN(4) == 0 {
				pr = uint32(1 + rng.IntN(3))
			}
			procs = append(procs, pr)
		}
		ss := build(fmt.Sprint("f", n), spans)
		for i := range ss {
			ss[i].Process = procs[i]
		}
		w, _ := one(t, ss)
		checkSum(t, w)
		ki := map[Key]int{}
		for _, s := range w.Stats {
			ki[s.Key] = len(ki)
		}
		plan := newReplayPlan(w, ki)
		if got := plan.e2e(nil, nil); got != w.E2E() {
			t.Fatalf("tree %d: replay %v, want %v", n, got, w.E2E())
		}
		g := make([]float64, len(ki))
		for i := range g {
			g[i] = rng.Float64() * 2
		}
		h := slices.Clone(g)
		for i := range h {
			h[i] *= 0.5
		}
		if a, b := plan.e2e(h, nil), plan.e2e(g, nil); a > b {
			t.Fatalf("tree %d: smaller factors replay longer: %v > %v", n, a, b)
		}
		if t.Failed() {
			t.Fatalf("tree %d: %v", n, spans)
		}
	}
}

// Components are free text from the input: rows past MaxRows fold into
// one per phase and direction, so neither a report nor a comparison grows
// without bound.
func TestRowsAreBounded(t *testing.T) {
	var all []spans.Span
	all = append(all, spans.Span{TraceID: traceID("q"), SpanID: spanID("q", "w"), Name: telemetry.SpanWork, Start: ms(0), End: ms(100)})
	for i := range 3 * MaxRows {
		all = append(all, spans.Span{TraceID: traceID("q"), SpanID: spanID("q", fmt.Sprint(i)), ParentID: spanID("q", "w"),
			Name: "x", Component: fmt.Sprint("c", i), Phase: E, Start: ms(0), End: ms(1)})
	}
	works, _ := Trees(all)
	rep := Summarize(works)
	if len(rep.Rows) > MaxRows+2 {
		t.Errorf("%d rows, want at most %d", len(rep.Rows), MaxRows+2)
	}
	c, err := Compare(Side{Runs: [][]Work{works}}, Side{Runs: [][]Work{works}}, CompareOptions{Iterations: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rows) > MaxRows+2 {
		t.Errorf("comparison: %d rows, want at most %d", len(c.Rows), MaxRows+2)
	}
}

// A target row that vanished in the candidate did no work there: r = 1,
// and the verdict says so (no "+Inf×").
func TestTargetRowGoneInCandidate(t *testing.T) {
	base := build("b", []sp{{"w", "", 0, 0, 0, 10, false}, {"a", "w", Se, req, 0, 4, false}, {"e", "w", E, 0, 4, 10, false}})
	cand := build("c", []sp{{"w", "", 0, 0, 0, 6, false}, {"e", "w", E, 0, 0, 6, false}})
	c, err := Compare(sideOf(t, base), sideOf(t, cand), CompareOptions{Target: []string{"x.send"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := row(t, c, "x.send/request").R.Value; r != 1 || math.Abs(c.Replay.Value-0.4) > 1e-9 {
		t.Errorf("r %v replay %v, want 1 and 0.4", r, c.Replay.Value)
	}
	for _, v := range c.Verdict {
		if strings.Contains(v, "Inf") || strings.Contains(v, "NaN") {
			t.Errorf("verdict %q", v)
		}
	}
}

// A child that ran outside its parent's window is cut to it and counted
// (Diagnostics.Outside), once with its subtree, on a tree built anew and
// on one of a shape seen before (Builder); a child inside it is not. The
// case is the sidecar's execute beginning after its parent, deserialize,
// has ended: uncut, its time would count in no row, with no diagnostic.
func TestOutsideParentCounted(t *testing.T) {
	mk := func(trace, execParent string) []spans.Span {
		return build(trace, []sp{
			{"w", "", 0, 0, 0, 10, false},
			{"call", "w", 0, 0, 1, 9, false},
			{"de", "call", De, req, 2, 4, false},
			{"ex", execParent, E, 0, 5, 6, false},
			{"exs", "ex", S, rep, 5.2, 5.8, false}, // cut with its parent: counted once
		})
	}
	for _, tc := range []struct {
		execParent  string
		wantOutside int
		wantExec    time.Duration
	}{{"de", 1, 0}, {"call", 0, time.Millisecond}} {
		w, d := one(t, mk("outside-"+tc.execParent, tc.execParent))
		checkSum(t, w)
		var exec time.Duration
		for _, s := range w.Stats {
			if s.Key.Phase == E || s.Key.Phase == S {
				exec += s.Critical
			}
		}
		if d.Outside != tc.wantOutside || exec != tc.wantExec {
			t.Errorf("execute under %s: %d spans cut to their parent, execute's subtree's critical time %v; want %d and %v",
				tc.execParent, d.Outside, exec, tc.wantOutside, tc.wantExec)
		}
		// Three units of one shape: the second and third skip building
		// the tree, and are counted as the first.
		b := Builder{Reuse: true}
		var all Diagnostics
		for i := range 3 {
			all.Add(b.EachTree(mk(fmt.Sprint("outside-", tc.execParent, i), tc.execParent), func(Work) {}))
		}
		if all.Outside != 3*tc.wantOutside {
			t.Errorf("execute under %s, three units through a Builder: %d spans cut, want %d", tc.execParent, all.Outside, 3*tc.wantOutside)
		}
	}
}

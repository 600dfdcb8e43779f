package attribution

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

const t0 = int64(1_700_000_000_000_000_000)

func ms(n float64) int64 { return t0 + int64(n*float64(time.Millisecond)) }

// sp describes a span for build: id "w" is the unit's root.
type sp struct {
	id, parent string
	phase      telemetry.Phase
	dir        telemetry.Direction
	start, end float64 // ms
	remote     bool
}

func traceID(name string) spans.TraceID {
	h := sha256.Sum256([]byte("trace/" + name))
	return spans.TraceID(h[:16])
}

func spanID(trace, name string) spans.SpanID {
	if name == "" {
		return spans.SpanID{}
	}
	h := sha256.Sum256([]byte(trace + "/" + name))
	return spans.SpanID(h[:8])
}

func build(trace string, in []sp) []spans.Span {
	var out []spans.Span
	for _, s := range in {
		name, comp := "x."+s.phase.String(), "x"
		if s.remote {
			name, comp = "far."+s.phase.String(), "far"
		}
		if s.id == "w" || strings.HasPrefix(s.id, "work") {
			name, comp = telemetry.SpanWork, ""
		}
		out = append(out, spans.Span{TraceID: traceID(trace), SpanID: spanID(trace, s.id), ParentID: spanID(trace, s.parent),
			Name: name, Component: comp, Start: ms(s.start), End: ms(s.end), Phase: s.phase, Direction: s.dir, Remote: s.remote})
	}
	return out
}

func key(p telemetry.Phase, d telemetry.Direction) Key {
	if !p.Valid() {
		return Key{}
	}
	return Key{Component: "x", Phase: p, Direction: d}
}

func one(t *testing.T, spans []spans.Span) (Work, Diagnostics) {
	t.Helper()
	works, d := Trees(spans)
	if len(works) != 1 {
		t.Fatalf("got %d works, want 1", len(works))
	}
	return works[0], d
}

const (
	D, S, Se, R, De, E = telemetry.Dispatch, telemetry.Serialize, telemetry.Send, telemetry.Receive, telemetry.Deserialize, telemetry.Execute
	req, rep           = telemetry.Request, telemetry.Reply
)

func checkSum(t *testing.T, w Work) {
	t.Helper()
	var sum time.Duration
	for _, s := range w.Stats {
		if s.Critical < 0 {
			t.Errorf("%v: negative critical time %v", s.Key, s.Critical)
		}
		sum += s.Critical
	}
	if sum != w.E2E() {
		t.Errorf("critical sum %v, want root duration %v", sum, w.E2E())
	}
	if !slices.IsSortedFunc(w.Stats, func(a, b KeyStat) int { return compareKeys(a.Key, b.Key) }) {
		t.Errorf("rows not in key order: %v", w.Stats)
	}
	for i, n := range w.Nodes {
		switch {
		case !n.Key.Phase.Valid() && n.Row != -1:
			t.Errorf("node %d (%v, not a phase): row %d, want -1", i, n.Key, n.Row)
		case n.Key.Phase.Valid() && (n.Row < 0 || int(n.Row) >= len(w.Stats) || w.Stats[n.Row].Key != n.Key):
			t.Errorf("node %d (%v): row %d is not its key's in %v", i, n.Key, n.Row, w.Stats)
		}
	}
}

func TestCriticalPath(t *testing.T) {
	other := Key{}
	for _, tc := range []struct {
		name      string
		spans     []sp
		critical  map[Key]float64 // ms
		naiveSend float64
	}{
		{"sequential", []sp{{"w", "", 0, 0, 0, 100, false}, {"a", "w", D, 0, 0, 10, false}, {"b", "w", S, req, 10, 30, false}, {"c", "w", Se, req, 30, 60, false}, {"d", "w", E, 0, 60, 100, false}},
			map[Key]float64{key(D, 0): 10, key(S, req): 20, key(Se, req): 30, key(E, 0): 40}, 30},
		{"parallel sends: the last to finish is critical", []sp{{"w", "", 0, 0, 0, 100, false}, {"a", "w", Se, req, 0, 90, false}, {"b", "w", Se, req, 0, 50, false}},
			map[Key]float64{key(Se, req): 90, other: 10}, 140},
		{"child overflowing its parent is clipped", []sp{{"w", "", 0, 0, 0, 100, false}, {"a", "w", Se, req, 50, 120, false}},
			map[Key]float64{key(Se, req): 50, other: 50}, 70},
		{"nested", []sp{{"w", "", 0, 0, 0, 100, false}, {"a", "w", Se, req, 10, 90, false}, {"b", "a", R, req, 20, 80, false}},
			map[Key]float64{other: 20, key(Se, req): 20, key(R, req): 60}, 80},
		{"overlap chain", []sp{{"w", "", 0, 0, 0, 100, false}, {"a", "w", S, req, 0, 40, false}, {"b", "w", Se, req, 30, 70, false}, {"c", "w", De, req, 60, 100, false}},
			// c critical 60-100; before 60, b ends at 70 > 60: skipped; a ends 40: critical 0-40; gap 40-60 is the root's.
			map[Key]float64{key(De, req): 40, other: 20, key(S, req): 40}, 40},
		{"non-phase spans inherit the enclosing phase", []sp{{"w", "", 0, 0, 0, 100, false}, {"a", "w", Se, req, 10, 90, false}, {"g", "a", 0, 0, 20, 80, false}, {"b", "g", De, req, 40, 60, false}},
			map[Key]float64{other: 20, key(Se, req): 60, key(De, req): 20}, 80},
		{"non-phase span at the root is other", []sp{{"w", "", 0, 0, 0, 100, false}, {"g", "w", 0, 0, 0, 50, false}, {"b", "g", E, 0, 10, 20, false}, {"c", "w", Se, req, 50, 100, false}},
			map[Key]float64{other: 40, key(E, 0): 10, key(Se, req): 50}, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := one(t, build("t1", tc.spans))
			checkSum(t, w)
			crit := map[Key]time.Duration{} // the gaps summed into "other"
			for _, s := range w.Stats {
				k := s.Key
				if k.Gap {
					k = other
				}
				crit[k] += s.Critical
			}
			for k, d := range crit {
				if d != 0 && tc.critical[k] == 0 {
					t.Errorf("%v: got %v on the critical path, want none", k, d)
				}
			}
			for k, want := range tc.critical {
				if got := crit[k]; got != time.Duration(want*float64(time.Millisecond)) {
					t.Errorf("%v: got %v, want %vms", k, got, want)
				}
			}
			if got := w.Stat(key(Se, req)).Naive; got != time.Duration(tc.naiveSend*float64(time.Millisecond)) {
				t.Errorf("naive send %v, want %vms", got, tc.naiveSend)
			}
		})
	}
}

// randomUnit returns a unit's root ("w", up to 1 s) and fewer than most
// spans under it: random parents, phases, directions and windows (some
// outside their parent's), a quarter of them remote.
func randomUnit(rng *rand.Rand, most int) []sp {
	total := 1 + rng.IntN(1000)
	spans := []sp{{"w", "", 0, 0, 0, float64(total), false}}
	for i := range rng.IntN(most) {
		parent := spans[rng.IntN(len(spans))]
		a, b := rng.IntN(total+50), rng.IntN(total+50)
		if a > b {
			a, b = b, a
		}
		spans = append(spans, sp{fmt.Sprint(i), parent.id, telemetry.Phase(1 + rng.IntN(telemetry.NumPhases)), telemetry.Direction(rng.IntN(3)),
			float64(a), float64(b), rng.IntN(4) == 0})
	}
	return spans
}

// Property: for random trees, critical times add up to the root's duration
// exactly, and a replay that scales nothing gives back the unit's e2e.
func TestCriticalSumsToRootAndReplayIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 500; n++ {
		spans := randomUnit(rng, 20)
		w, _ := one(t, build(fmt.Sprint("t", n), spans))
		checkSum(t, w)
		plan := newReplayPlan(w, map[Key]int{})
		if got := plan.e2e(nil, nil); got != w.E2E() {
			t.Fatalf("tree %d: replay with no change gives %v, want e2e %v (%v)", n, got, w.E2E(), spans)
		}
	}
}

func TestRobustInput(t *testing.T) {
	unit := []sp{{"w", "", 0, 0, 0, 100, false}, {"a", "w", S, req, 0, 40, false}, {"b", "w", Se, req, 40, 100, false}}
	t.Run("a trace exported twice counts once", func(t *testing.T) {
		spans := append(build("t", unit), build("t", unit)...)
		works, d := Trees(spans)
		if len(works) != 1 || d.Duplicates != 3 {
			t.Fatalf("got %d works, %d duplicates; want 1 and 3", len(works), d.Duplicates)
		}
		rep := Summarize(works)
		var naive float64
		for _, r := range rep.Rows {
			naive += r.Naive
		}
		if math.Abs(naive-1) > 1e-9 {
			t.Errorf("naive shares sum to %v, want 1", naive)
		}
	})
	t.Run("an orphan is counted and attached to its trace's unit", func(t *testing.T) {
		spans := build("t", append(unit, sp{"o", "lost", E, 0, 100, 100, false}))
		spans = append(spans, build("t", []sp{{"late", "gone", E, 0, 20, 30, false}})...)
		w, d := one(t, spans)
		if d.Orphans != 2 || d.Attached != 2 {
			t.Errorf("orphans %d attached %d, want 2 and 2", d.Orphans, d.Attached)
		}
		if got := w.Stat(key(E, 0)).Count; got != 2 {
			t.Errorf("execute spans in the unit %d, want the 2 orphans", got)
		}
		checkSum(t, w)
	})
	t.Run("a nested amdahl.work is a phase-less child, not a second unit", func(t *testing.T) {
		spans := build("t", []sp{{"w", "", 0, 0, 0, 100, false}, {"a", "w", Se, req, 0, 50, false}, {"work2", "a", 0, 0, 10, 40, false}, {"c", "work2", E, 0, 20, 30, false}})
		w, d := one(t, spans)
		if d.Nested != 1 {
			t.Errorf("nested %d, want 1", d.Nested)
		}
		if got := w.Stat(key(E, 0)).Critical; got != 10*time.Millisecond {
			t.Errorf("inner execute critical %v, want 10ms", got)
		}
		if got := w.Stat(key(Se, req)).Critical; got != 40*time.Millisecond {
			t.Errorf("send critical %v, want 40ms (its own 20 and the nested root's 20)", got)
		}
		checkSum(t, w)
	})
	t.Run("a span that is its own parent neither hangs nor counts", func(t *testing.T) {
		spans := build("t", append(unit, sp{"loop", "loop", E, 0, 0, 10, false}, sp{"x", "y", E, 0, 0, 1, false}, sp{"y", "x", E, 0, 0, 1, false}))
		w, d := one(t, spans)
		if d.Cycles != 3 {
			t.Errorf("cycles %d, want 3", d.Cycles)
		}
		checkSum(t, w)
		root := build("u", []sp{{"w", "w", 0, 0, 0, 10, false}})
		if works, d := Trees(root); len(works) != 0 || d.Cycles != 1 {
			t.Errorf("a root that is its own parent: %d works, %d cycles; want 0 and 1", len(works), d.Cycles)
		}
	})
	t.Run("deep chains are bounded", func(t *testing.T) {
		chain := []sp{{"w", "", 0, 0, 0, 100, false}}
		for i := 0; i < MaxTreeDepth+10; i++ {
			p := "w"
			if i > 0 {
				p = fmt.Sprint(i - 1)
			}
			chain = append(chain, sp{fmt.Sprint(i), p, E, 0, 0, 100, false})
		}
		_, d := one(t, build("t", chain))
		if d.TooDeep == 0 {
			t.Errorf("too deep %d, want > 0", d.TooDeep)
		}
	})
	t.Run("spans of a trace with no unit are counted", func(t *testing.T) {
		spans := append(build("t", unit), build("u", []sp{{"a", "", E, 0, 0, 1, false}})...)
		_, d := one(t, spans)
		if d.Unrooted != 1 {
			t.Errorf("unrooted %d, want 1", d.Unrooted)
		}
	})
}

// hop is a unit with one round trip to another process: the near side
// serializes and sends, the far side receives, deserializes, executes and
// serializes its reply, the near side receives and deserializes it. The
// far side's spans are shifted by skew ms (its clock).
func hop(trace string, skew float64) []spans.Span {
	f := func(a float64) float64 { return a + skew }
	return build(trace, []sp{
		{"w", "", 0, 0, 0, 20, false},
		{"d", "w", D, 0, 0, 2, false},
		{"h", "w", 0, 0, 2, 19.5, false}, // the host span, near side
		{"s1", "h", S, req, 2, 3, false},
		{"s2", "h", Se, req, 3, 8, false}, // 25 % of the unit
		{"f1", "h", R, req, f(8.3), f(8.8), true},
		{"f2", "h", De, req, f(8.8), f(9.5), true},
		{"f3", "h", E, 0, f(9.5), f(15), true},
		{"f4", "h", S, rep, f(15), f(15.5), true},
		{"r1", "h", R, rep, 15.8, 16.5, false},
		{"r2", "h", De, rep, 16.5, 19, false},
		{"x", "w", E, 0, 19.5, 20, false},
	})
}

// qs is each row's q in w, the gaps summed into "other" (where in the
// time no span covers a skewed clock puts a far side is not known).
func qs(w Work) map[Key]float64 {
	out := map[Key]float64{}
	for _, s := range w.Stats {
		k := s.Key
		if k.Gap {
			k = Key{}
		}
		out[k] += float64(s.Critical) / float64(w.E2E())
	}
	return out
}

func TestSkewedFarSideKeepsItsPhases(t *testing.T) {
	clean, _ := one(t, hop("clean", 0))
	want := qs(clean)
	if want[key(Se, req)] < 0.24 {
		t.Fatalf("the skew-free send has q %v, want 0.25", want[key(Se, req)])
	}
	for _, skew := range []float64{-5, -2, -1, -0.25, 0.25, 1, 2, 5} {
		w, d := one(t, hop(fmt.Sprint("skew", skew), skew))
		checkSum(t, w)
		got := qs(w)
		for k, v := range want {
			if math.Abs(got[k]-v) > 0.01 {
				t.Errorf("skew %+vms: %v q %.3f, want %.3f ± 0.01 (placed %d)", skew, k, got[k], v, d.Placed)
			}
		}
	}
}

// Without causal placement, a far side starting 2 ms early erases the send
// from the path; this is the failure the placement fixes, shown on the walk
// alone.
func TestSkewWithoutPlacementErasesTheSend(t *testing.T) {
	spans := hop("raw", -2)
	for i := range spans {
		spans[i].Remote = false
	}
	w, _ := one(t, spans)
	if q := qs(w)[key(Se, req)]; q > 0.1 {
		t.Fatalf("without placement the send keeps q %.2f; the test no longer shows the failure", q)
	}
}

// A near-side send whose end was recorded late (its goroutine resumed
// after the far side had already run) no longer hides the far side.
func TestLateSendEndDoesNotHideTheFarSide(t *testing.T) {
	w, d := one(t, build("late", []sp{
		{"w", "", 0, 0, 0, 20, false},
		{"h", "w", 0, 0, 0, 20, false},
		{"s", "h", Se, req, 0, 16, false}, // really done by 2
		{"f1", "h", R, req, 2, 3, true},
		{"f2", "h", E, 0, 3, 15, true},
		{"r", "h", R, rep, 17, 20, false},
	}))
	checkSum(t, w)
	if got := w.Stat(Key{Component: "far", Phase: E}).Critical; got != 12*time.Millisecond {
		t.Errorf("execute critical %v, want 12ms (clipped %d)", got, d.Clipped)
	}
	if got := w.Stat(key(Se, req)).Critical; got != 2*time.Millisecond {
		t.Errorf("send critical %v, want 2ms", got)
	}
}

func TestReportRowsByComponent(t *testing.T) {
	spans := build("t", []sp{{"w", "", 0, 0, 0, 100, false}, {"a", "w", Se, req, 0, 40, false}, {"b", "w", Se, req, 40, 100, true}})
	works, _ := Trees(spans)
	rep := Summarize(works)
	var names []string
	for _, r := range rep.Rows {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, " "); got != "far.send/request x.send/request" {
		t.Errorf("rows %q, want far.send/request x.send/request", got)
	}
	var a Accumulator
	a.Add(works[0])
	folded := a.Report(true)
	if len(folded.Rows) != 1 || folded.Rows[0].Name != "send/request" || folded.Rows[0].Q != 1 {
		t.Errorf("folded rows %+v, want one send/request with q 1", folded.Rows)
	}
	var buf bytes.Buffer
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"work items 1", "x.send/request", "40.0%", "far.send/request", "60.0%"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestAccumulatorMerge: merging accumulators gives the report of adding
// every unit to one; the rows of units found by key (Accumulator's recent
// rows) are the rows a map lookup finds, across many keys.
func TestAccumulatorMerge(t *testing.T) {
	var all, even, odd Accumulator
	for i := range 60 {
		// Units with different components, so that rows come and go
		// from the recent rows.
		comp := fmt.Sprintf("c%d", i%37)
		w, _ := one(t, build(fmt.Sprint(i), []sp{{"w", "", 0, 0, 0, 100 + float64(i), false},
			{"a", "w", Se, req, 0, 40, false}, {"b", "w", Se, req, 40, 90, true}}))
		for j := range w.Stats {
			if w.Stats[j].Key.Component == "x" {
				w.Stats[j].Key.Component = comp
			}
		}
		for j := range w.Nodes {
			if w.Nodes[j].Key.Component == "x" {
				w.Nodes[j].Key.Component = comp
			}
		}
		all.Add(w)
		if i%2 == 0 {
			even.Add(w)
		} else {
			odd.Add(w)
		}
	}
	all.AddDiagnostics(Diagnostics{Spans: 7, Orphans: 2})
	odd.AddDiagnostics(Diagnostics{Spans: 7, Orphans: 2})
	var merged Accumulator
	merged.Merge(&even)
	merged.Merge(&odd)
	want, got := all.Report(false), merged.Report(false)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merged report differs from one accumulator's:\n got %+v\nwant %+v", got, want)
	}
	if len(want.Rows) != 37+2 {
		t.Errorf("%d rows, want 39 (37 components, far, other)", len(want.Rows))
	}
	for _, r := range want.Rows {
		var k int
		if _, err := fmt.Sscanf(r.Key.Component, "c%d", &k); err != nil {
			continue
		}
		n := 1 // units i < 60 with i%37 == k
		if k < 60-37 {
			n = 2
		}
		if r.Spans != n {
			t.Errorf("row %s: %d spans, want %d", r.Name, r.Spans, n)
		}
	}
}

// TestBuilderReuse: a Builder with Reuse, handed one unit at a time as
// the runtime's accounting does, gives every unit the same Work as a
// fresh EachTree, though its Works share scratch space; and a copy taken
// inside fn is not overwritten by the next unit.
func TestBuilderReuse(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	b := Builder{Reuse: true}
	var kept []Work // copies, as fn must take them
	var want []Work
	var unit []sp
	for n := range 600 {
		// Half the units repeat the last one's shape with other times
		// (the rows' order is reused when their keys repeat).
		if n%2 == 0 || unit == nil {
			unit = randomUnit(rng, 25)
		} else {
			for i := 1; i < len(unit); i++ {
				unit[i].start, unit[i].end = max(unit[i].start+float64(rng.IntN(21)-10), 0), unit[i].end+float64(rng.IntN(21)-10)
			}
		}
		in := build(fmt.Sprint("r", n), unit)
		fresh, wantDiag := Trees(in)
		want = append(want, fresh...)
		got := 0
		diag := b.EachTree(in, func(w Work) {
			got++
			checkSum(t, w)
			if !reflect.DeepEqual(w, fresh[0]) {
				t.Fatalf("unit %d: reused builder gives %+v, want %+v", n, w, fresh[0])
			}
			kept = append(kept, Work{Root: w.Root, Stats: slices.Clone(w.Stats), Nodes: slices.Clone(w.Nodes)})
		})
		if got != len(fresh) || diag != wantDiag {
			t.Fatalf("unit %d: %d works, diagnostics %+v; want %d, %+v", n, got, diag, len(fresh), wantDiag)
		}
	}
	if !reflect.DeepEqual(kept, want) {
		t.Fatal("a Work copied inside fn changed after later units")
	}
}

// TestPhaseRoot: a unit's root that carries a row (not what amdahl makes,
// but someone else's trace does: a server span) files its own time in its
// own row, and its span counts in the row like any other.
func TestPhaseRoot(t *testing.T) {
	w, _ := one(t, build("proot", []sp{{"w", "", S, req, 0, 100, false}, {"a", "w", S, req, 10, 30, false}}))
	checkSum(t, w)
	root := Key{Phase: S, Direction: req} // build gives the root no component
	if got := w.Stat(root); got.Critical != 80*time.Millisecond || got.Count != 1 || got.Naive != 100*time.Millisecond {
		t.Errorf("the root's row %+v, want critical 80ms, 1 span, naive 100ms", got)
	}
	if got := w.Stat(key(S, req)); got.Critical != 20*time.Millisecond || got.Count != 1 || got.Naive != 20*time.Millisecond {
		t.Errorf("the child's row %+v, want critical 20ms, 1 span, naive 20ms", got)
	}
}

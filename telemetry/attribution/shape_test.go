package attribution

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// shapeUnit is a task-shaped unit: a dispatch with two queue spans alike
// (twins: same name, component, phase, direction and parent), and a host
// round trip whose far side is placed.
func shapeUnit(trace string, jitter float64) []spans.Span {
	return build(trace, []sp{{"w", "", 0, 0, 0, 100, false}, {"d", "w", D, 0, 0, 30, false},
		{"q1", "d", telemetry.Queue, req, 0, 10 + jitter, false}, {"q2", "d", telemetry.Queue, req, 12, 25, false},
		{"h", "w", 0, 0, 30, 96, false},
		{"s", "h", S, req, 30, 32 + jitter, false}, {"se", "h", Se, req, 32, 40, false},
		{"r", "h", R, req, 41 - jitter, 43, true}, {"e", "h", E, 0, 45, 80 + jitter, true},
		{"r2", "h", R, rep, 84, 90, false}, {"de2", "h", De, rep, 90, 95 - jitter, false}})
}

// TestKnownShape: a Builder attributes a unit of a shape it has seen from
// its times alone (shape.go), giving the Work the general path gives;
// and a unit that only looks like one (a duplicate among look-alike
// spans, a loop through the root, a span moved to another parent, a
// changed row) goes the general path, with its diagnostics.
func TestKnownShape(t *testing.T) {
	b := Builder{Reuse: true}
	check := func(name string, in []spans.Span, wantKnown bool) {
		t.Helper()
		want, wantDiag := Trees(in)
		var got []Work
		before := b.b.known
		diag := b.EachTree(in, func(w Work) {
			checkSum(t, w)
			got = append(got, Work{Root: w.Root, Stats: slices.Clone(w.Stats), Nodes: slices.Clone(w.Nodes)})
		})
		if known := b.b.known > before; known != wantKnown {
			t.Errorf("%s: attributed by a known shape %v, want %v", name, known, wantKnown)
		}
		if !reflect.DeepEqual(got, want) || diag != wantDiag {
			t.Errorf("%s: builder gives %+v, %+v\nwant %+v, %+v", name, got, diag, want, wantDiag)
		}
	}
	check("first unit", shapeUnit("k0", 0), false)
	for i := 1; i < 20; i++ {
		check(fmt.Sprint("unit ", i), shapeUnit(fmt.Sprint("k", i), float64(i%3)), true)
	}

	// q2 replaced by a copy of q1: a duplicate, which the general path
	// drops.
	dup := shapeUnit("dup", 1)
	dup[3] = dup[2]
	check("duplicate look-alike", dup, false)

	// The root's parent is one of its own spans: a loop.
	loop := shapeUnit("loop", 1)
	loop[0].ParentID = loop[4].SpanID
	check("loop through the root", loop, false)

	// q2 under the root instead of the dispatch.
	moved := shapeUnit("moved", 1)
	moved[3].ParentID = moved[0].SpanID
	check("span moved", moved, false)

	// se in another component: another row.
	other := shapeUnit("other", 1)
	other[6].Component = "y"
	check("another row", other, false)

	// Its shape is now known too, and the first is still kept.
	check("another row again", shapeUnit("k20", 2), true)
	other2 := shapeUnit("other2", 2)
	other2[6].Component = "y"
	check("another row, second unit", other2, true)
}

// TestAccumulatorNodeRows: a Work whose nodes do not say their row (made
// by hand, Row zero) adds the same as one from a Builder.
func TestAccumulatorNodeRows(t *testing.T) {
	var built, bare Accumulator
	for i := range 50 {
		works, _ := Trees(shapeUnit(fmt.Sprint("n", i), float64(i%3)))
		for _, w := range works {
			built.Add(w)
			w.Nodes = slices.Clone(w.Nodes)
			for j := range w.Nodes {
				w.Nodes[j].Row = 0
			}
			bare.Add(w)
		}
	}
	if got, want := bare.Report(false), built.Report(false); !reflect.DeepEqual(got, want) {
		t.Errorf("nodes without rows give %+v\nwant %+v", got, want)
	}
}

// TestAccumulatorKeySets: units whose Stats take several sets of keys,
// in turn (more sets than the Accumulator keeps), add up to what each
// set's units give alone: a kept set's rows are never another's.
func TestAccumulatorKeySets(t *testing.T) {
	key := func(c string) Key { return Key{Component: c, Phase: telemetry.Execute} }
	gap := func(from, to string) Key { return Key{Gap: true, Component: from, Op: to} }
	sets := [][]Key{
		{key("a"), key("b"), gap("a", "b")},
		{key("a"), key("b"), gap("b", "end")},
		{key("a"), key("b")},
		{key("a"), gap("start", "a")},
		{key("b"), key("a"), gap("a", "b")},
		{key("c")},
	}
	var mixed Accumulator
	want := map[Key]time.Duration{}
	// Random order: a set comes back while it is still among the last
	// four (a hit, moved to the front from any place) and after it has
	// been evicted (a miss reusing the least recent set's room).
	rng := rand.New(rand.NewPCG(1, 2))
	const units = 40 * 6
	for i := range units {
		keys := sets[rng.IntN(len(sets))]
		w := Work{Root: spans.Span{Start: 0, End: int64(100 * time.Microsecond)}}
		for j, k := range keys {
			d := time.Duration(units * (1000*(i+1) + j)) // a whole number of ns per unit
			w.Stats = append(w.Stats, KeyStat{Key: k, Critical: d, Count: 1})
			want[k] += d
		}
		mixed.Add(w)
	}
	r := mixed.Report(false)
	got := map[Key]time.Duration{}
	for _, row := range append(r.Rows, r.Gaps...) {
		got[row.Key] = row.CriticalPerWork * time.Duration(r.Works)
	}
	for k, d := range want {
		if got[k] != d {
			t.Errorf("row %v: critical %v, want %v", k, got[k], d)
		}
	}
}

package attribution

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// flat lists a graph's frames as "stack self critical" lines, stacks
// joined by ";" (the folded-stack format of flame graphs).
func flat(fr Frame, prefix string, out *[]string) {
	name := prefix + fr.Name
	*out = append(*out, fmt.Sprintf("%s %v %v", name, fr.Self, fr.Critical))
	for _, c := range fr.Children {
		flat(c, name+";", out)
	}
}

func TestFlameStacks(t *testing.T) {
	// Send (10-90) holds a non-phase span g (20-80) holding deserialize
	// (40-60): the path is execute 0-5, other 5-10, send 10-40,
	// deserialize 40-60 (under send: g inherits send), send 60-90, other
	// 90-100. Two such units.
	spans := build("f1", []sp{{"w", "", 0, 0, 0, 100, false}, {"e", "w", E, 0, 0, 5, false}, {"a", "w", Se, req, 10, 90, false},
		{"g", "a", 0, 0, 20, 80, false}, {"b", "g", De, req, 40, 60, false}})
	w, _ := one(t, spans)
	var f Flame
	f.Add(w)
	f.Add(w)
	g := f.Graph(false)
	var got []string
	flat(g.Root, "", &got)
	want := []string{
		"e2e 30ms 200ms",
		"e2e;x.send/request 120ms 160ms",
		"e2e;x.send/request;x.deserialize/request 40ms 40ms",
		"e2e;x.execute 10ms 10ms",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if g.Units != 2 || g.Folded != 0 || g.NoTree != 0 {
		t.Errorf("units %d folded %v no tree %d, want 2, 0, 0", g.Units, g.Folded, g.NoTree)
	}
}

// selfByKey sums the Self of every frame of each row.
func selfByKey(fr Frame, out map[Key]time.Duration) {
	out[fr.Key] += fr.Self
	for _, c := range fr.Children {
		selfByKey(c, out)
	}
}

// Property: over random trees (far-side spans placed, children clipped),
// the frames of each row add up to the row's critical time, the root to
// the units' e2e, and each frame's Critical to its Self and children.
func TestFlameAddsUpToStats(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var f Flame
	var acc Accumulator
	for n := 0; n < 300; n++ {
		total := 1 + rng.IntN(1000)
		spans := []sp{{"w", "", 0, 0, 0, float64(total), false}}
		for i := 0; i < rng.IntN(20); i++ {
			parent := spans[rng.IntN(len(spans))]
			a, b := rng.IntN(total+50), rng.IntN(total+50)
			if a > b {
				a, b = b, a
			}
			ph := telemetry.Phase(rng.IntN(telemetry.NumPhases + 1)) // 0: not a phase
			spans = append(spans, sp{fmt.Sprint(i), parent.id, ph, telemetry.Direction(rng.IntN(3)), float64(a), float64(b), rng.IntN(4) == 0})
		}
		w, _ := one(t, build(fmt.Sprint("t", n), spans))
		var one Flame
		one.Add(w)
		got := map[Key]time.Duration{}
		selfByKey(one.Graph(false).Root, got)
		want := map[Key]time.Duration{}
		for _, s := range w.Stats {
			k := s.Key
			if k.Gap { // the flame graph's "other" holds every gap
				k = Key{}
			}
			want[k] += s.Critical
		}
		for k, d := range want {
			if got[k] != d {
				t.Fatalf("tree %d: frames of %v add up to %v, want its critical %v (%v)", n, k, got[k], d, spans)
			}
		}
		f.Add(w)
		acc.Add(w)
	}
	for _, byPhase := range []bool{false, true} {
		g := f.Graph(byPhase)
		rep := acc.Report(byPhase)
		if g.Root.Critical != rep.E2ETotal {
			t.Errorf("byPhase %v: root critical %v, want e2e total %v", byPhase, g.Root.Critical, rep.E2ETotal)
		}
		got := map[Key]time.Duration{}
		selfByKey(g.Root, got)
		for _, r := range rep.Rows {
			if r.Gap != nil {
				continue // in the flame graph's "other"
			}
			if want := r.CriticalPerWork * time.Duration(rep.Works); got[r.Key]/time.Duration(rep.Works) != r.CriticalPerWork {
				t.Errorf("byPhase %v: %s frames %v, want %v", byPhase, r.Name, got[r.Key], want)
			}
		}
		var check func(fr Frame)
		check = func(fr Frame) {
			sum := fr.Self
			for _, c := range fr.Children {
				sum += c.Critical
				check(c)
			}
			if sum != fr.Critical {
				t.Errorf("frame %s: self + children %v, critical %v", fr.Name, sum, fr.Critical)
			}
		}
		check(g.Root)
	}
}

func TestFlameBoundedFrames(t *testing.T) {
	var f Flame
	// Each unit a distinct stack of depth 2: component c<i>.send holding
	// c<i>.receive; past MaxFrames the new stacks fold into what exists.
	for i := 0; i < MaxFrames; i++ {
		c := fmt.Sprint("c", i)
		spans := []spans.Span{
			{TraceID: traceID(c), SpanID: spanID(c, "w"), Name: telemetry.SpanWork, Start: ms(0), End: ms(10)},
			{TraceID: traceID(c), SpanID: spanID(c, "a"), ParentID: spanID(c, "w"), Component: c, Phase: Se, Direction: req, Start: ms(0), End: ms(10)},
			{TraceID: traceID(c), SpanID: spanID(c, "b"), ParentID: spanID(c, "a"), Component: c, Phase: R, Direction: req, Start: ms(2), End: ms(8)},
		}
		w, _ := one(t, spans)
		f.Add(w)
	}
	g := f.Graph(false)
	n := 0
	var count func(fr Frame)
	count = func(fr Frame) {
		n++
		for _, c := range fr.Children {
			count(c)
		}
	}
	count(g.Root)
	if n-1 != MaxFrames {
		t.Errorf("%d frames, want MaxFrames %d", n-1, MaxFrames)
	}
	// The first MaxFrames/2 units made both their frames; every later
	// unit's path (10 ms) folded into the root.
	want := time.Duration(MaxFrames/2) * 10 * time.Millisecond
	if g.Folded != want {
		t.Errorf("folded %v, want %v", g.Folded, want)
	}
	if g.Root.Critical != time.Duration(MaxFrames)*10*time.Millisecond {
		t.Errorf("root critical %v: folded time must stay in the graph", g.Root.Critical)
	}
}

func TestFlameWithoutTree(t *testing.T) {
	w, _ := one(t, build("nt", []sp{{"w", "", 0, 0, 0, 100, false}, {"a", "w", Se, req, 10, 90, false}}))
	w.Nodes = nil
	var f Flame
	f.Add(w)
	g := f.Graph(false)
	if g.NoTree != 1 || g.Units != 0 || g.Root.Critical != 0 {
		t.Errorf("got %+v, want one unit without tree and an empty graph", g)
	}
	if h := f.E2EHistogram(10); len(h) != 1 || h[0].Count != 1 {
		t.Errorf("histogram %+v, want the unit's e2e", h)
	}
}

func TestSketchHistogram(t *testing.T) {
	var s Sketch
	if s.Histogram(10) != nil {
		t.Error("empty sketch: want no bins")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	var vals []time.Duration
	for i := 0; i < 10_000; i++ {
		v := time.Duration(50 + rng.ExpFloat64()*float64(time.Millisecond))
		vals = append(vals, v)
		s.Add(v)
	}
	h := s.Histogram(20)
	if len(h) != 20 || h[0].Lo != s.Quantile(0) || h[19].Hi != s.Quantile(1) {
		t.Fatalf("bins %d from %v to %v, want 20 from the min %v to the max %v", len(h), h[0].Lo, h[len(h)-1].Hi, s.Quantile(0), s.Quantile(1))
	}
	var sum uint64
	for i, b := range h {
		sum += b.Count
		if i > 0 && b.Lo != h[i-1].Hi {
			t.Errorf("bin %d starts at %v, the last ended at %v", i, b.Lo, h[i-1].Hi)
		}
		// Each bin's count is the values in it, give or take those within
		// 2 % of an edge (each is binned at its estimate, within 1 %).
		var inner, near uint64
		for _, v := range vals {
			if float64(v) >= float64(b.Lo)*1.02 && float64(v) <= float64(b.Hi)*0.98 {
				inner++
			}
			if float64(v) >= float64(b.Lo)*0.98 && float64(v) <= float64(b.Hi)*1.02 {
				near++
			}
		}
		if b.Count > near || b.Count < inner {
			t.Errorf("bin %d [%v, %v): %d, want %d to %d", i, b.Lo, b.Hi, b.Count, inner, near)
		}
	}
	if sum != s.Count() {
		t.Errorf("counts add up to %d, want %d", sum, s.Count())
	}
	var one Sketch
	one.Add(5)
	one.Add(5)
	if h := one.Histogram(10); len(h) != 1 || h[0].Count != 2 || h[0].Lo != 5 {
		t.Errorf("equal values: %+v, want one bin of 2 at 5ns", h)
	}
}

// BenchmarkFlameAdd: the cost of filing a unit's critical path in a Flame
// (amdahl run --out does it for every unit, on the runtime's accounting
// goroutine) as a ratio to the Accumulator's Add of the same units, in
// the same run.
func BenchmarkFlameAdd(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	var works []Work
	for n := 0; n < 200; n++ {
		// A unit shaped like a task unit: dispatch holding queue, request
		// phases, a far-side group under the send, reply phases.
		spans := []sp{{"w", "", 0, 0, 0, 100, false}, {"d", "w", D, 0, 0, 30, false}, {"q", "d", telemetry.Queue, 0, 0, 25, false},
			{"s", "w", S, req, 30, 32, false}, {"se", "w", Se, req, 32, 40, false},
			{"r", "se", R, req, 41, 43, true}, {"de", "se", De, req, 43, 45, true}, {"e", "se", E, 0, 45, 80, true}, {"s2", "se", S, rep, 80, 82, true},
			{"r2", "w", R, rep, 84, 90, false}, {"de2", "w", De, rep, 90, 95, false}}
		for i := range spans {
			spans[i].end += float64(rng.IntN(3))
		}
		w, _ := Trees(build(fmt.Sprint("b", n), spans))
		works = append(works, w...)
	}
	var tAcc, tFlame time.Duration
	for b.Loop() {
		var a Accumulator
		var f Flame
		t0 := time.Now()
		for _, w := range works {
			a.Add(w)
		}
		t1 := time.Now()
		for _, w := range works {
			f.Add(w)
		}
		tAcc, tFlame = tAcc+t1.Sub(t0), tFlame+time.Since(t1)
	}
	b.ReportMetric(float64(tFlame)/float64(tAcc), "flame/accumulator")
	b.ReportMetric(float64(tFlame)/float64(b.N*len(works)), "flame-ns/unit")
}

// BenchmarkAccountUnit: what the runtime's accounting costs per task-
// shaped unit (Builder.EachTree with Reuse, into an Accumulator), with
// the caches warm and cold: cold=true writes 2 MiB between units, as a
// run's ipc copies of ~46 KB configurations push the accounting's data
// out of the core's caches. acct-ns/unit times the accounting alone.
//
//	go test -run '^$' -bench AccountUnit -count 5 ./telemetry/attribution/
func BenchmarkAccountUnit(b *testing.B) {
	rng := rand.New(rand.NewPCG(9, 10))
	var units [][]spans.Span
	for n := range 256 {
		spans := []sp{{"w", "", 0, 0, 0, 100, false}, {"d", "w", D, 0, 0, 30, false}, {"q", "d", telemetry.Queue, 0, 0, 25, false},
			{"h", "w", 0, 0, 30, 96, false},
			{"s", "h", S, req, 30, 32, false}, {"se", "h", Se, req, 32, 40, false},
			{"r", "h", R, req, 41, 43, true}, {"de", "h", De, req, 43, 45, true}, {"e", "h", E, 0, 45, 80, true}, {"s2", "h", S, rep, 80, 82, true},
			{"r2", "h", R, rep, 84, 90, false}, {"de2", "h", De, rep, 90, 95, false}}
		for i := range spans {
			spans[i].end += float64(rng.IntN(3))
		}
		units = append(units, build(fmt.Sprint("a", n), spans))
	}
	for _, cold := range []bool{false, true} {
		b.Run(fmt.Sprintf("cold=%v", cold), func(b *testing.B) {
			bd := Builder{Reuse: true}
			var a Accumulator
			evict := make([]byte, 2<<20)
			var acct time.Duration
			i := 0
			for b.Loop() {
				if cold {
					for j := 0; j < len(evict); j += 64 {
						evict[j]++
					}
				}
				t0 := time.Now()
				bd.EachTree(units[i%len(units)], a.Add)
				acct += time.Since(t0)
				i++
			}
			b.ReportMetric(float64(acct)/float64(b.N), "acct-ns/unit")
		})
	}
}

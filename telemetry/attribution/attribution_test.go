package attribution

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
)

var t0 = time.Unix(1_700_000_000, 0)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// build makes spans from (id, parent, phase, dir, start ms, end ms); id "w" is the root.
type sp struct {
	id, parent string
	phase      telemetry.Phase
	dir        telemetry.Direction
	start, end int
}

func build(trace string, in []sp) []Span {
	var out []Span
	for _, s := range in {
		name := "x." + s.phase.String()
		if s.id == "w" {
			name = telemetry.SpanWork
		}
		out = append(out, Span{TraceID: trace, SpanID: trace + s.id, ParentID: map[bool]string{true: "", false: trace + s.parent}[s.parent == ""],
			Name: name, Start: ms(s.start), End: ms(s.end), Phase: s.phase, Direction: s.dir, Outcome: "ok"})
	}
	return out
}

func TestCriticalPath(t *testing.T) {
	D, S, Se, R, De, E := telemetry.Dispatch, telemetry.Serialize, telemetry.Send, telemetry.Receive, telemetry.Deserialize, telemetry.Execute
	req := telemetry.Request
	other := Key{}
	for _, tc := range []struct {
		name      string
		spans     []sp
		critical  map[Key]int // ms
		naiveSend int
	}{
		{"sequential", []sp{{"w", "", 0, 0, 0, 100}, {"a", "w", D, 0, 0, 10}, {"b", "w", S, req, 10, 30}, {"c", "w", Se, req, 30, 60}, {"d", "w", E, 0, 60, 100}},
			map[Key]int{{D, 0}: 10, {S, req}: 20, {Se, req}: 30, {E, 0}: 40}, 30},
		{"parallel sends: the last to finish is critical", []sp{{"w", "", 0, 0, 0, 100}, {"a", "w", Se, req, 0, 90}, {"b", "w", Se, req, 0, 50}},
			map[Key]int{{Se, req}: 90, other: 10}, 140},
		{"child overflowing its parent is clipped", []sp{{"w", "", 0, 0, 0, 100}, {"a", "w", Se, req, 50, 120}},
			map[Key]int{{Se, req}: 50, other: 50}, 70},
		{"nested", []sp{{"w", "", 0, 0, 0, 100}, {"a", "w", Se, req, 10, 90}, {"b", "a", R, req, 20, 80}},
			map[Key]int{other: 20, {Se, req}: 20, {R, req}: 60}, 80},
		{"overlap chain", []sp{{"w", "", 0, 0, 0, 100}, {"a", "w", S, req, 0, 40}, {"b", "w", Se, req, 30, 70}, {"c", "w", De, req, 60, 100}},
			// c critical 60-100; before 60, b ends at 70 > 60: skipped; a ends 40: critical 0-40; gap 40-60 is the root's.
			map[Key]int{{De, req}: 40, other: 20, {S, req}: 40}, 40},
		// A span with no phase (phase 0: a gRPC span, a per-chunk span)
		// counts toward its nearest phase ancestor, and toward "other"
		// only when it has none; a phase below it is itself again.
		{"non-phase spans inherit the enclosing phase", []sp{{"w", "", 0, 0, 0, 100}, {"a", "w", Se, req, 10, 90}, {"g", "a", 0, 0, 20, 80}, {"b", "g", De, req, 40, 60}},
			map[Key]int{other: 20, {Se, req}: 60, {De, req}: 20}, 80},
		{"non-phase span at the root is other", []sp{{"w", "", 0, 0, 0, 100}, {"g", "w", 0, 0, 0, 50}, {"b", "g", E, 0, 10, 20}, {"c", "w", Se, req, 50, 100}},
			map[Key]int{other: 40, {E, 0}: 10, {Se, req}: 50}, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			works := Trees(build("t1", tc.spans))
			if len(works) != 1 {
				t.Fatalf("got %d works, want 1", len(works))
			}
			w := works[0]
			var sum time.Duration
			for k, v := range w.Critical {
				sum += v
				if v != 0 && tc.critical[k] == 0 {
					t.Errorf("%v: got %v on the critical path, want none", k, v)
				}
			}
			for k, want := range tc.critical {
				if got := w.Critical[k]; got != time.Duration(want)*time.Millisecond {
					t.Errorf("%v: got %v, want %dms", k, got, want)
				}
			}
			if sum != w.Root.Duration() {
				t.Errorf("critical sum %v, want root duration %v", sum, w.Root.Duration())
			}
			if got := w.Naive[Key{Se, req}]; got != time.Duration(tc.naiveSend)*time.Millisecond {
				t.Errorf("naive send %v, want %dms", got, tc.naiveSend)
			}
		})
	}
}

// Property: for random trees, critical times add up to the root's duration
// and no key gets more critical time than its naive sum (other excepted).
func TestCriticalSumsToRoot(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 500; n++ {
		trace := fmt.Sprintf("t%d", n)
		total := 1 + rng.IntN(1000)
		spans := []sp{{"w", "", 0, 0, 0, total}}
		for i := 0; i < rng.IntN(20); i++ {
			parent := spans[rng.IntN(len(spans))]
			a, b := rng.IntN(total+50), rng.IntN(total+50)
			if a > b {
				a, b = b, a
			}
			spans = append(spans, sp{fmt.Sprint(i), parent.id, telemetry.Phase(1 + rng.IntN(telemetry.NumPhases)), telemetry.Direction(rng.IntN(3)), a, b})
		}
		works := Trees(build(trace, spans))
		if len(works) != 1 {
			t.Fatalf("got %d works", len(works))
		}
		var sum time.Duration
		for k, v := range works[0].Critical {
			sum += v
			if v < 0 {
				t.Fatalf("tree %d: %v negative %v", n, k, v)
			}
		}
		if sum != works[0].Root.Duration() {
			t.Fatalf("tree %d: critical sum %v, root %v (%v)", n, sum, works[0].Root.Duration(), spans)
		}
	}
}

func TestSummarizeAndCompare(t *testing.T) {
	S, Se := telemetry.Serialize, telemetry.Send
	req := telemetry.Request
	mk := func(trace string, send int) []Span {
		return build(trace, []sp{{"w", "", 0, 0, 0, 40 + send}, {"a", "w", S, req, 0, 40}, {"b", "w", Se, req, 40, 40 + send}})
	}
	var base, cand []Span
	for i := 0; i < 10; i++ {
		base = append(base, mk(fmt.Sprint("b", i), 60)...)
		cand = append(cand, mk(fmt.Sprint("c", i), 30)...)
	}
	rb, rc := Summarize(Trees(base)), Summarize(Trees(cand))
	rb.WithP99(base)
	if rb.Works != 10 || rb.E2EMean != 100*time.Millisecond {
		t.Fatalf("baseline works %d e2e %v, want 10, 100ms", rb.Works, rb.E2EMean)
	}
	var sumQ float64
	for _, r := range rb.Rows {
		sumQ += r.Q
	}
	if math.Abs(sumQ-1) > 1e-9 {
		t.Errorf("Σq = %v, want 1", sumQ)
	}
	cmp := Compare(rb, rc)
	// send: q = 0.6, r = 0.5 → q·r = 0.3; measured 1 - 70/100 = 0.3.
	if math.Abs(cmp.Predicted-0.3) > 1e-9 || math.Abs(cmp.Measured-0.3) > 1e-9 {
		t.Errorf("predicted %v measured %v, want 0.3 and 0.3", cmp.Predicted, cmp.Measured)
	}
	var buf bytes.Buffer
	if err := rb.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"work items 10", "send/request", "60.0%", "serialize/request", "40.0%"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
	buf.Reset()
	if err := cmp.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "30.0%") {
		t.Errorf("comparison lacks 30.0%%:\n%s", buf.String())
	}
}

// The same spans read from the recorder and from the trace file give the
// same attribution.
func TestRecorderAndTraceFileAgree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	ctx := context.Background()
	tel, err := telemetry.Setup(ctx, telemetry.WithLookupEnv(func(string) (string, bool) { return "", false }),
		telemetry.WithRecorder(), telemetry.WithTraceFile(path))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := tel.Component("ipc", telemetry.AttrScenario.String("unit"))
	for i := 0; i < 5; i++ {
		wctx, w := c.StartWork(ctx)
		for _, p := range []telemetry.Phase{telemetry.Dispatch, telemetry.Serialize, telemetry.Send, telemetry.Execute} {
			_, ph := c.StartPhase(wctx, p, telemetry.Request)
			ph.End()
		}
		w.End(telemetry.OK, nil)
	}
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	fromRec := Summarize(Trees(FromSDK(tel.Recorder().Spans())))
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reqs, err := telemetry.ReadTraceFile(f)
	if err != nil {
		t.Fatal(err)
	}
	fromFile := Summarize(Trees(FromOTLP(reqs)))
	if fromRec.Works != 5 || fromFile.Works != 5 {
		t.Fatalf("works: recorder %d, file %d, want 5", fromRec.Works, fromFile.Works)
	}
	if len(fromRec.Rows) != len(fromFile.Rows) {
		t.Fatalf("rows: recorder %d, file %d", len(fromRec.Rows), len(fromFile.Rows))
	}
	for i := range fromRec.Rows {
		a, b := fromRec.Rows[i], fromFile.Rows[i]
		if a.Name != b.Name || a.Spans != b.Spans || math.Abs(a.Q-b.Q) > 1e-6 {
			t.Errorf("row %d: recorder %+v, file %+v", i, a, b)
		}
	}
}

package attribution

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// TestSomebodyElsesTraces: traces of services instrumented only with the
// OTel SDK and otelhttp/otelgrpc, as the Collector's file exporter writes
// them, have a unit per trace root and rows by the semantic conventions,
// every row's q exact.
func TestSomebodyElsesTraces(t *testing.T) {
	rep, err := readReport(t, demoFile(50, nil))
	if err != nil {
		t.Fatalf("got error %v, want 50 units", err)
	}
	if rep.Works != 50 || rep.E2EMean != 10*time.Millisecond {
		t.Fatalf("got %d units of mean e2e %v, want 50 of 10ms", rep.Works, rep.E2EMean)
	}
	want := map[string]float64{
		"frontend.execute GET /checkout":     0.12, // its own time: 0–0.5, 4.5–5, 9.8–10
		"cart.send GET":                      0.10,
		"cart.execute GET /cart":             0.10,
		"postgres.send SELECT items":         0.20,
		"pricing.send shop.Pricing/Quote":    0.10,
		"pricing.execute shop.Pricing/Quote": 0.30,
		"frontend/render":                    0.08,
	}
	got := rowQ(rep)
	if len(got) != len(want) {
		t.Errorf("rows %v, want %d rows", rowNames(rep), len(want))
	}
	for row, q := range want {
		if g, ok := got[row]; !ok || math.Abs(g-q) > 1e-6 {
			t.Errorf("row %q: q %v (present %v), want %v", row, g, ok, q)
		}
	}
}

// TestStandardKindsSkew: the far sides of CLIENT→SERVER pairs across
// services are placed causally: clocks 5 ms ahead or behind, or off by a
// random ±20 ms per unit, move no row's q by 1 pp or more.
func TestStandardKindsSkew(t *testing.T) {
	base, err := readReport(t, demoFile(40, nil))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 6))
	for name, skew := range map[string]func(int) (float64, float64){
		"+5ms":       func(int) (float64, float64) { return 5, 5 },
		"-5ms":       func(int) (float64, float64) { return -5, -5 },
		"±20ms/unit": func(int) (float64, float64) { return rng.Float64()*40 - 20, rng.Float64()*40 - 20 },
	} {
		rep, err := readReport(t, demoFile(40, skew))
		if err != nil {
			t.Fatal(err)
		}
		got := rowQ(rep)
		for row, q := range rowQ(base) {
			if math.Abs(got[row]-q) >= 0.01 {
				t.Errorf("%s: row %q q %.4f, want %.4f ± 1 pp", name, row, got[row], q)
			}
		}
	}
}

// clientSendUnit is the worked example of doc.go with standard kinds: a
// send (CLIENT, no amdahl.direction) 3–8 ms, a far side (SERVER, another
// service, its clock 2 ms behind) recorded 6.3–13.5, the reply's receive
// 15.8–16.5. withDirection gives the send amdahl.direction=request.
func clientSendUnit(withDirection bool) []byte {
	send := []string{"amdahl.component", "ipc", "amdahl.phase", "send"}
	if withDirection {
		send = append(send, "amdahl.direction", "request")
	}
	near := tres{service: "near", spans: []tspan{
		{"u", "w", "", "amdahl.work", kInternal, 0, 16.7, nil, nil, nil},
		{"u", "send", "w", "ipc.send", kClient, 3, 8, send, nil, nil},
		{"u", "recv", "w", "ipc.receive", kInternal, 15.8, 16.5, []string{"amdahl.component", "ipc", "amdahl.phase", "receive", "amdahl.direction", "reply"}, nil, nil},
	}}
	far := tres{service: "host", spans: []tspan{
		{"u", "exec", "send", "taskhost.execute", kServer, 6.3, 13.5, []string{"amdahl.component", "taskhost", "amdahl.phase", "execute"}, nil, nil},
	}}
	return otlpFile(near, far)
}

// TestFarSideOfAClientSend: a far side under a send is placed after it
// whether the send says amdahl.direction=request or only its kind: the
// send keeps its 5 ms (30 % of the unit).
func TestFarSideOfAClientSend(t *testing.T) {
	for _, dir := range []bool{true, false} {
		rep, err := readReport(t, clientSendUnit(dir))
		if err != nil {
			t.Fatal(err)
		}
		var send Row
		for _, r := range rep.Rows {
			if strings.HasPrefix(r.Name, "ipc.send") {
				send = r
			}
		}
		if send.CriticalPerWork != 5*time.Millisecond {
			t.Errorf("direction given %v: the send's critical time %v (rows %v), want 5ms", dir, send.CriticalPerWork, rowNames(rep))
		}
	}
}

// amdahlUnits is n units of amdahl's own shape (amdahl.work 0–10 ms,
// ipc.send/request 2–6 ms), with bad(i) to spoil unit i's root.
func amdahlUnits(n int, bad func(i int, root *tspan)) []byte {
	r := tres{service: "amdahl"}
	for i := range n {
		tr := fmt.Sprint("u", i)
		at := float64(i) * 20
		root := tspan{tr, "w", "", "amdahl.work", kInternal, at, at + 10, nil, nil, nil}
		if bad != nil {
			bad(i, &root)
		}
		r.spans = append(r.spans, root, tspan{tr, "send", "w", "ipc.send", kInternal, at + 2, at + 6,
			[]string{"amdahl.component", "ipc", "amdahl.phase", "send", "amdahl.direction", "request"}, nil, nil})
	}
	return otlpFile(r)
}

func ptr(s string) *string { return &s }

// TestHostileTimestamps: roots without a start, ending before they start,
// lasting about 2^63 ns or beyond 2262 are left out and counted; the
// units left read as if they were alone.
func TestHostileTimestamps(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  func(i int, root *tspan)
		n    int // units spoilt of 50
	}{
		{"no start", func(i int, r *tspan) {
			if i%5 == 0 {
				r.rawStart = ptr("")
			}
		}, 10},
		{"zero end", func(i int, r *tspan) {
			if i%5 == 0 {
				r.rawEnd = ptr(`"0"`)
			}
		}, 10},
		{"end before start", func(i int, r *tspan) {
			if i < 3 {
				r.start, r.end = r.end, r.start
			}
		}, 3},
		{"about 2^63 ns", func(i int, r *tspan) {
			if i < 3 {
				r.rawStart, r.rawEnd = ptr(`"1"`), ptr(strconv.FormatInt(math.MaxInt64-2, 10))
			}
		}, 3},
		{"past int64", func(i int, r *tspan) {
			if i < 3 {
				r.rawEnd = ptr(`"92233720368547758070"`)
			}
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := readReport(t, amdahlUnits(50, tc.bad))
			if err != nil {
				t.Fatal(err)
			}
			if rep.Works != 50-tc.n || rep.E2EMean != 10*time.Millisecond {
				t.Errorf("%d units, mean e2e %v; want %d of 10ms", rep.Works, rep.E2EMean, 50-tc.n)
			}
			if q := rowQ(rep)["ipc.send/request"]; math.Abs(q-0.4) > 1e-9 {
				t.Errorf("q(ipc.send/request) %v, want 0.4", q)
			}
			line := rep.Diagnostics.line()
			if !strings.Contains(line, fmt.Sprintf("(%d units)", tc.n)) {
				t.Errorf("diagnostics %q do not count the %d units left out", line, tc.n)
			}
		})
	}
	_, err := readReport(t, amdahlUnits(5, func(_ int, r *tspan) { r.rawStart = ptr("") }))
	if err == nil || !strings.Contains(err.Error(), "hostile timestamps") {
		t.Errorf("every unit bad: error %v, want one saying why", err)
	}
}

// TestSumsAtTheBound: units as long as the bound (24 h) until their sum
// passes what int64 nanoseconds hold: the units past it are counted, not
// folded in, and q stays a share.
func TestSumsAtTheBound(t *testing.T) {
	var acc Accumulator
	day := 24 * time.Hour
	n := int(math.MaxInt64/int64(day)) + 10
	k := Key{Component: "ipc", Phase: 4}
	for range n {
		acc.Add(Work{Root: spans.Span{Start: t0, End: t0 + int64(day)},
			Stats: []KeyStat{{Key: k, Critical: day / 2, Naive: day / 2, Count: 1}, {Critical: day / 2}}})
	}
	rep := acc.Report(false)
	if rep.E2ETotal <= 0 || rep.E2EMean != day {
		t.Errorf("e2e total %v, mean %v; want positive, 24h", rep.E2ETotal, rep.E2EMean)
	}
	var sum float64
	for _, r := range rep.Rows {
		if r.Q < 0 || r.Q > 1 {
			t.Errorf("row %s: q %v", r.Name, r.Q)
		}
		sum += r.Q
	}
	if math.Abs(sum-1) > 1e-9 || rep.Works+rep.Diagnostics.Overflow != n || rep.Diagnostics.Overflow == 0 {
		t.Errorf("Σq %v, %d units + %d refused for overflow; want 1, %d in all, some refused", sum, rep.Works, rep.Diagnostics.Overflow, n)
	}
}

// TestAmdahlTraceGolden: amdahl's own trace files give the rows, spans,
// means and q they gave before rules, gaps and the rest (testdata:
// report --json of the files, taken before those changes).
func TestAmdahlTraceGolden(t *testing.T) {
	for _, name := range []string{"mixed", "orchestrated"} {
		t.Run(name, func(t *testing.T) {
			f, err := os.Open("testdata/amdahl-" + name + ".jsonl.gz")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			z, err := gzip.NewReader(f)
			if err != nil {
				t.Fatal(err)
			}
			var acc Accumulator
			d, err := Read(z, name, spans.Limits{}, nil, acc.Add)
			if err != nil {
				t.Fatal(err)
			}
			acc.AddDiagnostics(d)
			rep := acc.Report(false)
			golden, err := os.ReadFile("testdata/amdahl-" + name + ".golden")
			if err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(strings.NewReader(string(golden)))
			sc.Scan()
			if got := fmt.Sprintf("works %d failed %d e2e_mean_ns %d e2e_total_ns %d", rep.Works, rep.Failed, int64(rep.E2EMean), int64(rep.E2ETotal)); got != sc.Text() {
				t.Errorf("got %q, want %q", got, sc.Text())
			}
			rows := map[string]string{}
			for _, r := range rep.Rows {
				rows[r.Name] = fmt.Sprintf("%s\t%d\t%d\t%d\t%d\t%s\t%s", r.Name, r.Spans, int64(r.Mean), int64(r.P99), int64(r.CriticalPerWork),
					strconv.FormatFloat(r.Q, 'g', -1, 64), strconv.FormatFloat(r.Naive, 'g', -1, 64))
			}
			for sc.Scan() {
				want := sc.Text()
				name, _, _ := strings.Cut(want, "\t")
				if got := rows[name]; !sameGoldenRow(got, want) {
					t.Errorf("row %s:\n got  %q\n want %q", name, got, want)
				}
			}
		})
	}
}

// sameGoldenRow compares two golden lines, their q and naive share within
// 1e-12 (Python and Go print the same float64 alike, but not always).
func sameGoldenRow(got, want string) bool {
	g, w := strings.Split(got, "\t"), strings.Split(want, "\t")
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		if i >= 5 {
			a, err1 := strconv.ParseFloat(g[i], 64)
			b, err2 := strconv.ParseFloat(w[i], 64)
			if err1 != nil || err2 != nil || math.Abs(a-b) > 1e-12 {
				return false
			}
		} else if g[i] != w[i] {
			return false
		}
	}
	return true
}

// forkJoin is n units of a fork and a join (ms, scaled by 1 ± 5 % per
// unit): X 0–10 and Y 0–6 in parallel, then Z from 10 to 12; with
// halved, X lasts 5 and Z waits for Y, from 6 to 8.
func forkJoin(n int, halved bool) []Work {
	var works []Work
	for i := range n {
		s := 1 + 0.05*math.Sin(float64(i))
		x, z0 := 10*s, 10*s
		if halved {
			x, z0 = 5*s, 6*s
		}
		ws, _ := Trees(build(fmt.Sprint("fj", halved, i), []sp{
			{"w", "", 0, 0, 0, z0 + 2*s, false},
			{"x", "w", S, req, 0, x, false},
			{"y", "w", De, rep, 0, 6 * s, false},
			{"z", "w", E, 0, z0, z0 + 2*s, false},
		}))
		works = append(works, ws...)
	}
	return works
}

// TestReplayHonoursJoins: X made twice as fast in a fork-join moves e2e
// from 12 to 8 ms (Y becomes critical): the replay of report --baseline
// and of --whatif predict that 33.3 %, inside the measured interval, not
// the 41.7 % of Z waiting only for X.
func TestReplayHonoursJoins(t *testing.T) {
	base, cand := Side{Runs: [][]Work{forkJoin(40, false)}}, Side{Runs: [][]Work{forkJoin(40, true)}}
	c, err := Compare(base, cand, CompareOptions{Target: []string{"x.serialize"}})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Measured.Contains(c.Replay.Value) || math.Abs(c.Replay.Value-1.0/3) > 0.002 {
		t.Errorf("replay predicts %s, measured %s; want 33.3%% inside the measured interval", FormatInterval(c.Replay), FormatInterval(c.Measured))
	}
	w, err := Replay(base, map[string]float64{"x.serialize": 0.5}, CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Measured.Contains(w.Gain.Value) || math.Abs(w.Gain.Value-1.0/3) > 0.002 {
		t.Errorf("--whatif x.serialize=2x predicts %s, measured %s; want 33.3%%", FormatInterval(w.Gain), FormatInterval(c.Measured))
	}
}

// gapUnits is n units of amdahl's shape with gaps (ms): dispatch 1–3,
// ipc.send/request 3–8, taskhost.receive/request 9+late–10+late,
// ipc.receive/reply 15–19, in a root 0–20; late(i) delays the host's
// receive and everything after it.
func gapUnits(n int, late func(i int) float64) []byte {
	r := tres{service: "amdahl"}
	row := func(comp, phase, dir string) []string {
		a := []string{"amdahl.component", comp, "amdahl.phase", phase}
		if dir != "" {
			a = append(a, "amdahl.direction", dir)
		}
		return a
	}
	for i := range n {
		tr, at := fmt.Sprint("g", i), float64(i)*30
		l := 0.0
		if late != nil {
			l = late(i)
		}
		r.spans = append(r.spans,
			tspan{tr, "w", "", "amdahl.work", kInternal, at, at + 20 + l, nil, nil, nil},
			tspan{tr, "d", "w", "runtime.dispatch", kInternal, at + 1, at + 3, row("runtime", "dispatch", ""), nil, nil},
			tspan{tr, "s", "w", "ipc.send", kInternal, at + 3, at + 8, row("ipc", "send", "request"), nil, nil},
			tspan{tr, "h", "w", "taskhost.receive", kInternal, at + 9 + l, at + 10 + l, row("taskhost", "receive", "request"), nil, nil},
			tspan{tr, "r", "w", "ipc.receive", kInternal, at + 15 + l, at + 19 + l, row("ipc", "receive", "reply"), nil, nil})
	}
	return otlpFile(r)
}

// TestGapsNamed: the critical time no span covers is booked to the gap it
// lies in, named by its two ends; "other" is their sum, and a unit's gaps
// and rows add up to its e2e.
func TestGapsNamed(t *testing.T) {
	rep, err := readReport(t, gapUnits(10, nil))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]time.Duration{}
	var sum time.Duration
	for _, r := range append(rep.Rows, rep.Gaps...) {
		got[r.Name] = r.CriticalPerWork
		if !strings.HasPrefix(r.Name, "gap ") {
			sum += r.CriticalPerWork
		}
	}
	for name, want := range map[string]time.Duration{
		"gap start → runtime.dispatch":                     time.Millisecond,
		"gap ipc.send/request → taskhost.receive/request":  time.Millisecond,
		"gap taskhost.receive/request → ipc.receive/reply": 5 * time.Millisecond,
		"gap ipc.receive/reply → end":                      time.Millisecond,
		"other":                                            8 * time.Millisecond,
	} {
		if got[name] != want {
			t.Errorf("%s: %v per unit, want %v (rows %v)", name, got[name], want, rowNames(rep))
		}
	}
	if sum != rep.E2EMean {
		t.Errorf("rows and other add up to %v, want e2e %v", sum, rep.E2EMean)
	}
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil || !strings.Contains(b.String(), "  gap ipc.send/request → taskhost.receive/request") ||
		!strings.Contains(b.String(), "100.0%") {
		t.Errorf("table (err %v) lacks the gap row or a total of 100 %%:\n%s", err, b.String())
	}
}

// TestVerdictNamesMovedGaps: when the time moves into a gap, the verdict
// names the gap, not "other".
func TestVerdictNamesMovedGaps(t *testing.T) {
	side := func(late float64) Side {
		var works []Work
		_, err := Read(strings.NewReader(string(gapUnits(30, func(i int) float64 { return late + 0.01*float64(i%5) }))), "t", spans.Limits{}, nil,
			func(w Work) { works = append(works, w) })
		if err != nil {
			t.Fatal(err)
		}
		return Side{Runs: [][]Work{works}}
	}
	c, err := Compare(side(0), side(2), CompareOptions{Target: []string{"ipc.send"}})
	if err != nil {
		t.Fatal(err)
	}
	v := strings.Join(c.Verdict, "\n")
	if !strings.Contains(v, "gap ipc.send/request → taskhost.receive/request +2ms/unit") {
		t.Errorf("verdict does not name the gap that moved:\n%s", v)
	}
}

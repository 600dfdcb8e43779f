package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func read(t *testing.T, path string) (attribution.Report, attribution.Side) {
	t.Helper()
	var acc attribution.Accumulator
	var works []attribution.Work
	d, err := attribution.Input{}.ReadFile(path, nil, func(w attribution.Work) {
		acc.Add(w)
		works = append(works, w)
	})
	if err != nil {
		t.Fatal(err)
	}
	acc.AddDiagnostics(d)
	return acc.Report(false), attribution.Side{Runs: [][]attribution.Work{works}}
}

// TestExample runs the shop twice, the second time with db twice as
// fast: amdahl's reading of the first run (units by trace roots, rows by
// the semantic conventions) has the README's rows, and its what-if on the
// db row is inside the gain measured between the two runs.
func TestExample(t *testing.T) {
	dir := t.TempDir()
	base, cand := filepath.Join(dir, "base.jsonl"), filepath.Join(dir, "fast-db.jsonl")
	// db's 8 ms against cart's 2 ms per item: the effect stands out of a
	// loaded machine's noise (the race detector's too).
	for _, run := range [][]string{{"--out", base, "--requests", "60", "--db-delay", "8ms"}, {"--out", cand, "--requests", "60", "--db-delay", "4ms"}} {
		var out, errb bytes.Buffer
		if code := realMain(context.Background(), run, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", run, code, errb.String())
		}
		if !strings.Contains(out.String(), "60 checkouts traced to ") {
			t.Errorf("output %q", out.String())
		}
	}
	rep, side := read(t, base)
	if rep.Works != 60 || rep.Failed != 0 {
		t.Fatalf("%d units (%d failed), want 60 checkouts", rep.Works, rep.Failed)
	}
	rows := map[string]attribution.Row{}
	top := attribution.Row{}
	for _, r := range rep.Rows {
		rows[r.Name] = r
		if r.Q > top.Q {
			top = r
		}
	}
	for _, want := range []string{"frontend.execute GET /checkout", "cart.send GET", "cart.execute GET /item/{id}", "db.execute grpc.health.v1.Health/Check"} {
		if _, ok := rows[want]; !ok {
			t.Errorf("no row %q among %v", want, rep.Rows)
		}
	}
	if top.Name != "cart.execute GET /item/{id}" && top.Name != "db.execute grpc.health.v1.Health/Check" {
		t.Errorf("critical row %s (q %.3f), want cart's or db's execute", top.Name, top.Q)
	}
	w, err := attribution.Replay(side, map[string]float64{"db.execute": 0.5}, attribution.CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, cside := read(t, cand)
	c, err := attribution.Compare(side, cside, attribution.CompareOptions{Target: []string{"db.execute"}})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Measured.Contains(w.Gain.Value) {
		t.Errorf("what-if db.execute=2x: %s; measured with db twice as fast %s: not inside", w.Text(), attribution.FormatInterval(c.Measured))
	}
	t.Logf("%s\nmeasured %s", w.Text(), attribution.FormatInterval(c.Measured))
}

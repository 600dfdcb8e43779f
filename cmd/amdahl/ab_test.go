package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/amdahl-rt/amdahl/runtime/ab"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

func TestABEndToEnd(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ab")
	code, out, errs := runCLI(t, "ab", "--scenario", "taskhost", "--set", "scenario.count=30", "--runs", "2", "--block", "10",
		"--baseline", "ipc.delta=off", "--candidate", "ipc.delta=on", "--json", "--out", dir, "--progress", "never")
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q", code, errs)
	}
	var res struct {
		Differ     []string               `json:"settings_that_differ"`
		Runs       []ab.Run               `json:"runs"`
		Comparison attribution.Comparison `json:"comparison"`
		Wall       map[string]*float64    `json:"wall_time_gain"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if !slices.Equal(res.Differ, []string{"ipc.delta"}) {
		t.Errorf("settings that differ %v, want [ipc.delta]", res.Differ)
	}
	// Pairs in order, the side going first alternating: A B, then B A.
	var order []string
	for _, r := range res.Runs {
		order = append(order, r.Side)
		if r.Units != 30 || r.Attributed != 27 {
			t.Errorf("run %s-%d: %d units, %d attributed; want 30 and 27 (10 %% warm-up left out)", r.Side, r.Index, r.Units, r.Attributed)
		}
	}
	if got := strings.Join(order, " "); got != "baseline candidate candidate baseline" {
		t.Errorf("run order %q, want baseline candidate candidate baseline", got)
	}
	c := res.Comparison
	if c.Resampled != "pairs of runs" || c.BaseRuns != 2 || c.CandRuns != 2 {
		t.Errorf("resampled %q over %d/%d runs, want pairs of runs over 2/2", c.Resampled, c.BaseRuns, c.CandRuns)
	}
	for _, want := range []string{"ipc.serialize/request", "ipc.send/request", "taskhost.deserialize/request"} {
		if !slices.Contains(c.Target, want) {
			t.Errorf("target %v lacks %s (derived from ipc.delta)", c.Target, want)
		}
	}
	if slices.Contains(c.Target, "taskhost.execute") || slices.Contains(c.Target, "runtime.dispatch") {
		t.Errorf("target %v holds rows ipc.delta is not about", c.Target)
	}
	for name, i := range map[string]attribution.Interval{"measured": c.Measured, "replay": c.Replay, "first order": c.FirstOrder} {
		if !(i.Lo <= i.Value && i.Value <= i.Hi) {
			t.Errorf("%s interval %+v not ordered", name, i)
		}
	}
	if res.Wall["value"] == nil || res.Wall["lo"] == nil || *res.Wall["lo"] > *res.Wall["hi"] {
		t.Errorf("wall time gain %v", res.Wall)
	}
	for _, name := range []string{"ab.json", "baseline-1/trace.jsonl", "candidate-2/summary.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("--out lacks %s: %v", name, err)
		}
	}
	checkTurns(t, dir)
	checkABPage(t, dir, res.Runs)
	checkReportMatchesAB(t, dir, c)
}

// checkTurns: the two runs of pair 1 ran side by side in turns.
func checkTurns(t *testing.T, dir string) {
	t.Helper()
	// The two runs of a pair ran side by side, taking turns of --block (10)
	// units, the side going first alternating from turn to turn (A B, B A,
	// A B): by start, 10 baseline units, 20 candidate, 20 baseline, 10
	// candidate — not one run after the other.
	type start struct {
		at   int64
		side string
	}
	var starts []start
	for _, side := range []string{"baseline", "candidate"} {
		if _, err := attribution.ReadFile(filepath.Join(dir, side+"-1/trace.jsonl"), spans.Limits{}, nil, func(w attribution.Work) {
			starts = append(starts, start{w.Root.Start, side})
		}); err != nil {
			t.Fatal(err)
		}
	}
	slices.SortFunc(starts, func(a, b start) int { return cmp.Compare(a.at, b.at) })
	var turns []int // units per turn
	for i, s := range starts {
		if i == 0 || s.side != starts[i-1].side {
			turns = append(turns, 0)
		}
		turns[len(turns)-1]++
	}
	if !slices.Equal(turns, []int{10, 20, 20, 10}) || starts[0].side != "baseline" {
		t.Errorf("pair 1: units per side's turn %v, first %s; want [10 20 20 10], the baseline first", turns, starts[0].side)
	}
}

// checkReportMatchesAB: amdahl report with the runs' files per side gives
// the same table as ab.
func checkReportMatchesAB(t *testing.T, dir string, c attribution.Comparison) {
	t.Helper()
	code, rep, errs := runCLI(t, "report", "--json", "--paired", "--warmup", "0.1", "--target", strings.Join(c.Target, ","),
		"--baseline", filepath.Join(dir, "baseline-1/trace.jsonl")+","+filepath.Join(dir, "baseline-2/trace.jsonl"),
		filepath.Join(dir, "candidate-1/trace.jsonl"), filepath.Join(dir, "candidate-2/trace.jsonl"))
	if code != exitOK {
		t.Fatalf("report: exit %d, stderr %q", code, errs)
	}
	var fromFiles struct {
		Comparison attribution.Comparison `json:"comparison"`
	}
	if err := json.Unmarshal([]byte(rep), &fromFiles); err != nil {
		t.Fatal(err)
	}
	if len(fromFiles.Comparison.Rows) != len(c.Rows) || fromFiles.Comparison.Resampled != c.Resampled {
		t.Fatalf("report has %d rows resampled over %q, ab %d over %q", len(fromFiles.Comparison.Rows), fromFiles.Comparison.Resampled, len(c.Rows), c.Resampled)
	}
	// The same units (the warm-up left out alike), the same statistics —
	// but not to the last bit: the live accounting closes a unit when its
	// root ends, and a sidecar span that ends a moment later (the server
	// side of the completion) is in the trace file only.
	for i, r := range c.Rows {
		f := fromFiles.Comparison.Rows[i]
		if f.Name != r.Name || math.Abs(f.Q.Value-r.Q.Value) > 0.01 || math.Abs(f.R.Value-r.R.Value) > 0.05 {
			t.Errorf("row %d: report %s q %.4f r %.4f, ab %s q %.4f r %.4f", i, f.Name, f.Q.Value, f.R.Value, r.Name, r.Q.Value, r.R.Value)
		}
	}
	if m, fm := c.Measured, fromFiles.Comparison.Measured; math.Abs(m.Value-fm.Value) > 1e-6 {
		t.Errorf("measured: report %+v, ab %+v", fm, m)
	}
}

// checkABPage: ab --out's report.html holds ab.json's comparison, and
// each side's critical paths over its attributed units; in Chromium
// (when there is one, always in CI) it loads with no console error and
// shows the comparison's numbers.
func checkABPage(t *testing.T, dir string, runs []ab.Run) {
	t.Helper()
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatalf("--out lacks report.html: %v", err)
	}
	m := regexp.MustCompile(`(?s)<script type="application/json" id="amdahl-data">(.*?)</script>`).FindSubmatch(page)
	if m == nil {
		t.Fatal("report.html has no data block")
	}
	var data struct {
		Comparison json.RawMessage `json:"comparison"`
		Sets       []struct {
			Name  string `json:"name"`
			Flame struct {
				Units int `json:"units"`
			} `json:"flame"`
		} `json:"sets"`
	}
	if err := json.Unmarshal(m[1], &data); err != nil {
		t.Fatalf("report.html's data block: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "ab.json"))
	if err != nil {
		t.Fatal(err)
	}
	var abj struct {
		Comparison json.RawMessage `json:"comparison"`
	}
	if err := json.Unmarshal(b, &abj); err != nil {
		t.Fatal(err)
	}
	var x, y bytes.Buffer
	if json.Compact(&x, data.Comparison) != nil || json.Compact(&y, abj.Comparison) != nil || x.String() != y.String() {
		t.Errorf("report.html's comparison differs from ab.json's:\n%s\n%s", x.String(), y.String())
	}
	attributed := map[string]int{}
	for _, r := range runs {
		attributed[r.Side] += r.Attributed
	}
	if len(data.Sets) != 2 || data.Sets[0].Name != "baseline" || data.Sets[0].Flame.Units != attributed["baseline"] ||
		data.Sets[1].Name != "candidate" || data.Sets[1].Flame.Units != attributed["candidate"] {
		t.Errorf("report.html's sets %+v, want baseline and candidate over %v attributed units", data.Sets, attributed)
	}
	if _, err := exec.LookPath("chromium"); err != nil && os.Getenv("CI") != "true" {
		t.Log("chromium not on PATH: report.html not loaded in a browser")
		return
	}
	var c attribution.Comparison
	if err := json.Unmarshal(abj.Comparison, &c); err != nil {
		t.Fatal(err)
	}
	dom := browse(t, newBrowser(t), filepath.Join(dir, "report.html"))
	for _, r := range c.Rows {
		rawEq(t, r.Name+" q", dom.ABRows[r.Name]["q"].V, r.Q.Value)
		if want := fmt.Sprintf("±%.1f", 100*r.Q.HalfWidth()); !strings.HasSuffix(dom.ABRows[r.Name]["q"].Text, want) {
			t.Errorf("%s q shown %q, want the half-width %s", r.Name, dom.ABRows[r.Name]["q"].Text, want)
		}
	}
}

func TestABUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ab", "--runs", "1"}, "--runs 1"},
		{[]string{"ab", "--baseline", "nope=1"}, "nope"},
		{[]string{"ab", "--json", "--markdown"}, "choose one"},
		{[]string{"ab", "--warmup", "0.9"}, "--warmup"},
		{[]string{"ab", "--block", "-1"}, "--block -1"},
		{[]string{"ab", "--scenario", "nope"}, "nope"},
	} {
		code, _, errs := runCLI(t, tc.args...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

func TestTargetsOf(t *testing.T) {
	for _, tc := range []struct {
		differ []string
		want   string
	}{
		{[]string{"ipc.buffer"}, "ipc taskhost.deserialize taskhost.receive taskhost.serialize"},
		{[]string{"chunking.algorithm", "chunking.accounting"}, "chunking"},
		{[]string{"runtime.nodes", "ipc.send"}, "ipc runtime taskhost.deserialize taskhost.receive taskhost.serialize"},
		{[]string{"scenario.count"}, ""},
		{[]string{"perturb.taskhost.execute"}, "taskhost.execute"},
	} {
		if got := strings.Join(ab.Targets(tc.differ), " "); got != tc.want {
			t.Errorf("ab.Targets(%v) = %q, want %q", tc.differ, got, tc.want)
		}
	}
}

// TestABCtrlC: Ctrl-C during amdahl ab stops the runs, prints the
// comparison of the pairs that finished and exits 1 saying so.
func TestABCtrlC(t *testing.T) {
	code, out, rest := interruptAfter(t, 4, "ab", "--scenario", "taskhost", "--set", "scenario.count=40", "--runs", "200",
		"--candidate", "perturb.taskhost.execute=200us", "--progress", "always", "--json")
	if code != exitFail {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitFail, rest)
	}
	if !strings.Contains(rest, "ab: interrupted after") {
		t.Errorf("stderr %q lacks the reason", rest)
	}
	var res abResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("stdout is not ab's JSON: %v\n%s", err, out)
	}
	if !res.Interrupted || len(res.Runs) < 4 || len(res.Runs) >= 400 || len(res.Runs)%2 != 0 {
		t.Errorf("interrupted %v after %d runs; want true, an even number from 4 (pairs whole) and well short of 400", res.Interrupted, len(res.Runs))
	}
	if m := res.Comparison.Measured; !(m.Lo <= m.Value && m.Value <= m.Hi) {
		t.Errorf("measured gain %v: want an interval over the finished pairs", m)
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/dashboards"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// runSummary is the part of `amdahl run --json` the tests read.
type runSummary struct {
	Submitted   int `json:"submitted"`
	Attribution struct {
		Works int `json:"works"`
		Rows  []struct {
			Row string  `json:"row"`
			Q   float64 `json:"q"`
		} `json:"rows"`
	} `json:"attribution"`
}

// amdahlRun runs `amdahl run` exporting spans to the OTLP endpoint and
// returns its summary.
func amdahlRun(t *testing.T, bin, endpoint string, units int) runSummary {
	t.Helper()
	cmd := exec.Command(bin, "run", "--scenario", "mixed", "--set", fmt.Sprintf("scenario.count=%d", units),
		"--set", "runtime.nodes=2", "--otlp-endpoint", endpoint, "--json", "--progress", "never")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("amdahl run: %v\n%s", err, stderr)
	}
	var s runSummary
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("amdahl run --json: %v", err)
	}
	if s.Attribution.Works != units {
		t.Fatalf("the run attributed %d units, want %d", s.Attribution.Works, units)
	}
	return s
}

// dashboardQuery is a dashboard's query with Grafana's variables set: the
// collector's series of the scenario, window win.
func dashboardQuery(expr string, win time.Duration) string {
	return strings.NewReplacer("$__range", fmt.Sprintf("%dms", win.Milliseconds()), "$scenario", "mixed", "$variant", ".*",
		"$service_name", "amdahl", "$source", dashboards.SourceCollector).Replace(expr)
}

// sampleAfter returns the time of the first scrape of series taken after
// after, at which expr (an aggregate of series) must be want (bounded:
// 30 s). timestamp() of an aggregate is the evaluation's time, so the
// scrape's is read from the series themselves.
func sampleAfter(t *testing.T, base, series, expr string, want float64, after time.Time) time.Time {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := promQuery(context.Background(), base, "max(timestamp("+series+"))", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res) == 1 && res[0].Value > float64(after.UnixMilli())/1000 {
			at := time.UnixMilli(int64(math.Round(res[0].Value * 1000)))
			v, err := promQuery(context.Background(), base, expr, at)
			if err != nil {
				t.Fatal(err)
			}
			if len(v) != 1 || v[0].Value != want {
				t.Fatalf("%s at %v: %v, want %v", expr, at, v, want)
			}
			return at
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sample of %s after %v within 30 s", expr, after)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func rowName(m map[string]string) string {
	if m["amdahl_phase"] == telemetry.PhaseGap {
		if m["amdahl_gap_from"] == "" && m["amdahl_gap_to"] == "" {
			return "other" // a sum over gaps: "other" is the sum of its gaps
		}
		return "gap " + m["amdahl_gap_from"] + " → " + m["amdahl_gap_to"] // as attribution.Key.String
	}
	r := m["amdahl_component"] + "." + m["amdahl_phase"]
	if d := m["amdahl_direction"]; d != "" {
		r += "/" + d
	}
	return r
}

// TestEndToEnd: amdahl run --otlp-endpoint → amdahl-collector (the
// connector) → a real Prometheus: the attribution dashboard's q query
// (dashboards.QCritical) gives the run's own table's q within 1 pp on
// every row.
//
// rate() sees only what a counter gained inside its window, so a first
// run of the same seeded scenario (the same units, so the same series:
// rows, transports, outcomes) makes every series exist before the window
// opens; the window holds the second run's 400 units only.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds amdahl and runs processes")
	}
	amdahl := buildAmdahl(t)
	otlp := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	promExp := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	col := startCollector(t, "amdahl-collector", fmt.Sprintf(`
receivers:
  otlp:
    protocols:
      grpc: {endpoint: %s}
connectors:
  amdahl:
    wait: 1s
    metrics_flush_interval: 500ms
exporters:
  prometheus:
    endpoint: %s
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces: {receivers: [otlp], exporters: [amdahl]}
    metrics: {receivers: [amdahl], exporters: [prometheus]}
`, otlp, promExp))
	waitListening(t, col, otlp)
	waitListening(t, col, promExp)
	prom := startPrometheus(t, promExp)

	series := `amdahl_work_duration_seconds_count{amdahl_source="collector", amdahl_scenario="mixed"}`
	units := "sum(" + series + ")"
	amdahlRun(t, amdahl, "http://"+otlp, 400)
	opened := sampleAfter(t, prom, series, units, 400, waitFor(t, prom, units, 400, 60*time.Second))
	run := amdahlRun(t, amdahl, "http://"+otlp, 400)
	closed := sampleAfter(t, prom, series, units, 800, waitFor(t, prom, units, 800, 60*time.Second).Add(-time.Hour))

	// The window runs from the scrape that opened it to the one that
	// closed it (10 ms more, so that the first is in it): rate() then
	// extrapolates no series past its samples, and every series is scraped
	// at the same instants, so the ratio is the ratio of the increases.
	res, err := promQuery(context.Background(), prom, dashboardQuery(dashboards.QCritical, closed.Sub(opened)+10*time.Millisecond), closed)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, s := range res {
		got[rowName(s.Metric)] = s.Value
	}
	// The same from the samples themselves (what rate() should see).
	inc := map[string]float64{}
	var workInc float64
	for i, at := range []time.Time{opened, closed} {
		sign := float64(2*i - 1)
		r, err := promQuery(context.Background(), prom, `sum by (amdahl_component, amdahl_phase, amdahl_direction) (amdahl_phase_critical_seconds_sum{amdahl_source="collector"})`, at)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range r {
			inc[rowName(s.Metric)] += sign * s.Value
		}
		w, err := promQuery(context.Background(), prom, `sum(amdahl_work_duration_seconds_sum{amdahl_source="collector"})`, at)
		if err != nil || len(w) != 1 {
			t.Fatal(err, w)
		}
		workInc += sign * w[0].Value
	}
	var worst float64
	var lines []string
	for _, r := range run.Attribution.Rows {
		d := math.Abs(got[r.Row] - r.Q)
		worst = max(worst, d)
		lines = append(lines, fmt.Sprintf("%-30s run %6.2f%%  dashboard %6.2f%%  samples %6.2f%%", r.Row, 100*r.Q, 100*got[r.Row], 100*inc[r.Row]/workInc))
		if d > 0.01 {
			t.Errorf("row %s: dashboard q %.2f%%, the run's table %.2f%% (more than 1 pp apart)", r.Row, 100*got[r.Row], 100*r.Q)
		}
		delete(got, r.Row)
	}
	for row, q := range got { // rows the run's table books elsewhere
		if q > 0.01 {
			t.Errorf("row %s: dashboard q %.2f%%, not in the run's table", row, 100*q)
		}
		lines = append(lines, fmt.Sprintf("%-30s run      -   dashboard %6.2f%%", row, 100*q))
	}
	sort.Strings(lines)
	t.Logf("largest difference %.2f pp over %d units:\n%s", 100*worst, run.Submitted, strings.Join(lines, "\n"))
}

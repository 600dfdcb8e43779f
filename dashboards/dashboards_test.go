package dashboards

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/grafanapyroscope"
	"go.uber.org/goleak"
)

var update = flag.Bool("update", false, "rewrite the generated dashboards in json/")

// envTestHost makes the test binary a task host (runtime.ServeHost).
const envTestHost = "AMDAHL_DASHBOARDS_TEST_HOST"

func TestMain(m *testing.M) {
	if os.Getenv(envTestHost) == "1" {
		if err := runtime.ServeHost(context.Background(), runtime.BuiltinTasks()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// The committed JSON is what the Go code generates (`amdahl dashboards` and
// `go test ./dashboards -update` write it).
func TestGeneratedJSONIsCurrent(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	plugins.RegisterDefaultPlugins()
	for name, d := range all {
		got, err := Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("json", name)
		if *update {
			if err := os.MkdirAll("json", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./dashboards -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go test ./dashboards -update", path)
		}
		var back dashboard.Dashboard
		err = back.UnmarshalJSONStrict(want)
		var be cog.BuildErrors
		if errors.As(err, &be) && len(be) > 0 || err != nil && !errors.As(err, &be) {
			t.Errorf("%s does not decode strictly: %v", path, err)
		}
		for _, p := range panels(d) {
			for _, tg := range p.Targets {
				if py, ok := tg.(*grafanapyroscope.Dataquery); ok && (py.ProfileTypeId == "" || !strings.HasPrefix(py.LabelSelector, "{")) {
					t.Errorf("panel %q: bad pyroscope query %+v", title(p), py)
				}
			}
		}
	}
}

func panels(d dashboard.Dashboard) []dashboard.Panel {
	var out []dashboard.Panel
	for _, p := range d.Panels {
		if p.Panel != nil {
			out = append(out, *p.Panel)
		}
		if p.RowPanel != nil {
			out = append(out, p.RowPanel.Panels...)
		}
	}
	return out
}

func title(p dashboard.Panel) string {
	if p.Title == nil {
		return "(untitled)"
	}
	return *p.Title
}

// promExprs returns every Prometheus query of a generated dashboard file
// with Grafana's macros and variables replaced by concrete values. It reads
// the JSON, not the Go values, so it tests what Grafana would load.
func promExprs(t *testing.T, d dashboard.Dashboard) map[string]string {
	t.Helper()
	raw, err := Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Panels []struct {
			Title      string `json:"title"`
			Datasource struct {
				Type string `json:"type"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	// Grafana's $__rate_interval is 4 scrape intervals at least.
	r := strings.NewReplacer("$__rate_interval", fmt.Sprintf("%ds", 4*scrapeSeconds), "$__range", fmt.Sprintf("%ds", 30*scrapeSeconds),
		"$__interval", fmt.Sprintf("%ds", scrapeSeconds), "$scenario", testScenario, "$variant", ".*", "$source", SourceRuntime,
		"$service_name", "amdahl", "$baseline", "baseline", "$candidate", "candidate")
	out := map[string]string{}
	for _, p := range doc.Panels {
		if p.Datasource.Type != TypePrometheus {
			continue
		}
		for i, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q target %d: empty expr", p.Title, i)
			}
			expr := r.Replace(tg.Expr)
			if strings.Contains(expr, "$") {
				t.Errorf("panel %q target %d: unreplaced variable in %s", p.Title, i, expr)
			}
			out[fmt.Sprintf("%s [%d]", p.Title, i)] = expr
		}
	}
	return out
}

// testScenario is the run's scenario: task host dispatches over ipc and
// chunked completions, including one with an oversized first action (a
// rejection), small enough for a test.
const testScenario = "dashboards"

const testScenarioYAML = `
name: dashboards
seed: 7
count: 10000000
workloads:
  - kind: taskhost
    weight: 0.7
    task:
      config_mean: 8KB
      config_sigma: 0.5
      config_cap: 64KB
      config_min: 256B
      environment: 2KB
      parameters: 4
      execute_passes: 1
  - kind: fanout
    weight: 0.3
    fanout:
      shapes:
        - name: 12x128KiB
          weight: 3
          actions: 12
          action_bytes: 128KiB
        - name: 20x1KiB
          weight: 2
          actions: 20
          action_bytes: 1KiB
        - name: oversized-first
          weight: 1
          actions: 2
          action_bytes: 1KiB
          first_action_bytes: 1.5MB
`

// runBoth runs the test scenario in two runtimes at once, variants
// baseline and candidate (candidate sends asynchronously), on tel, until
// ctx ends; the returned function waits for both runtimes to close.
func runBoth(ctx context.Context, t *testing.T, tel *otelsetup.Telemetry) (wait func()) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := scenario.Parse("dashboards.yaml", []byte(testScenarioYAML))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, v := range []struct{ name, send string }{{"baseline", "sync"}, {"candidate", "async"}} {
		set, err := runtime.ResolveSettings([]string{"variant=" + v.name, "ipc.send=" + v.send, "runtime.nodes=1",
			"runtime.concurrency=2", "chunking.max_chunk_bytes=1MiB", "chunking.large_payloads=off"},
			func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		// A closed loop, one unit in flight per variant: the run must not
		// starve /metrics of CPU (under -race a unit costs many times
		// more), or Prometheus's 1 s scrape times out.
		slot := make(chan struct{}, 1)
		cfg := runtime.Config{Settings: set, Scenario: testScenario,
			Hosts: runtime.HostsConfig{Argv: []string{exe}, Env: []string{envTestHost + "=1"}}, Logger: slog.New(slog.DiscardHandler),
			OnResult: func(runtime.Result) {
				select {
				case <-slot:
				default:
				}
			}}
		cfg.UseTelemetry(tel)
		r, err := runtime.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		gen := sc.NewGenerator()
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for ctx.Err() == nil {
				select {
				case slot <- struct{}{}:
				case <-ctx.Done():
					continue
				}
				if err := r.Submit(ctx, gen.Next()); err != nil && ctx.Err() == nil {
					t.Errorf("%s: submit: %v", v.name, err)
					break
				}
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := r.Close(cctx); err != nil {
				t.Errorf("%s: close: %v", v.name, err)
			}
		}()
	}
	return wg.Wait
}

// Every Prometheus query of every dashboard returns data from a real
// Prometheus scraping a real amdahl run (task hosts, ipc, chunking, an
// in-process sidecar) with both variants; and the exemplar of a latency
// bucket names a trace that is in the run's trace file.
func TestQueriesAgainstPrometheus(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("prometheus not on PATH (CI installs the Debian package prometheus)")
		}
		t.Skip("prometheus not on PATH: apt-get install prometheus to run this test")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	dir := t.TempDir()
	traceFile := filepath.Join(dir, "trace.jsonl")
	tel, err := otelsetup.Setup(ctx, otelsetup.WithLookupEnv(func(string) (string, bool) { return "", false }),
		otelsetup.WithMetricsAddr("127.0.0.1:0"), otelsetup.WithTraceFile(traceFile))
	if err != nil {
		t.Fatal(err)
	}
	shutdown := sync.OnceValue(func() error { return tel.Shutdown(context.Background()) })
	defer shutdown()

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	wait := runBoth(runCtx, t, tel)
	defer wait()

	base, logs := startPrometheus(ctx, t, bin, dir, tel.MetricsAddr())
	failures := pollQueries(t, base)
	if req, err := http.NewRequest(http.MethodGet, "http://"+tel.MetricsAddr()+"/metrics", nil); err == nil {
		req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0")
		start := time.Now()
		if resp, err := http.DefaultClient.Do(req); err == nil {
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			t.Logf("/metrics: %d bytes in %v", n, time.Since(start).Round(time.Millisecond))
		}
	}
	for _, f := range failures {
		t.Error(f)
	}
	if len(failures) > 0 {
		up, _ := query(base, `up`)
		dur, _ := query(base, `scrape_duration_seconds`)
		n, _ := query(base, `sum(amdahl_work_duration_seconds_count)`)
		t.Logf("up %s, scrape duration %s, units %s; prometheus log:\n%s", up, dur, n, logs.String())
	}

	// Exemplars: stop the run and flush the trace file, then every
	// exemplar of the latency histograms names a trace in it.
	stopRun()
	wait()
	if err := shutdown(); err != nil {
		t.Fatal(err)
	}
	checkExemplars(t, base, traceFile)
}

// startPrometheus runs a real Prometheus on a free loopback port that
// scrapes metricsAddr, until ctx ends (the test's cleanup waits for it),
// and returns its base URL and its log.
func startPrometheus(ctx context.Context, t *testing.T, bin, dir, metricsAddr string) (string, *bytes.Buffer) {
	t.Helper()
	port := freePort(t)
	cfg := fmt.Sprintf("global: {scrape_interval: %[1]ds, scrape_timeout: %[1]ds, evaluation_interval: %[1]ds}\nscrape_configs:\n  - job_name: amdahl\n    static_configs: [{targets: ['%[2]s']}]\n",
		scrapeSeconds, metricsAddr)
	if err := os.WriteFile(filepath.Join(dir, "prom.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.CommandContext(ctx, bin, "--config.file="+filepath.Join(dir, "prom.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr,
		"--enable-feature=exemplar-storage")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Wait() }) // after ctx's cancel, which ends it
	return "http://" + addr, &logs
}

// pollQueries runs every Prometheus query of every dashboard against base
// until each has returned data once, for up to 60 s, and returns those
// that never did.
func pollQueries(t *testing.T, base string) []string {
	t.Helper()
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	type q struct{ name, panel, expr string }
	var queries []q
	for name, d := range all {
		exprs := promExprs(t, d)
		if name != "amdahl-profiles.json" && len(exprs) < 7 {
			t.Errorf("%s: only %d prometheus queries found", name, len(exprs))
		}
		for panel, expr := range exprs {
			queries = append(queries, q{name, panel, expr})
		}
	}
	// Until every query has had data (both variants must have run long
	// enough for two samples in a $__rate_interval window); bounded: 60 s. A query passes once it
	// returns data: on a loaded machine a late scrape can leave a window
	// with one sample for a moment.
	began := time.Now()
	deadline := began.Add(60 * time.Second)
	poll := time.NewTicker(500 * time.Millisecond)
	defer poll.Stop()
	passed := map[int]bool{}
	var failures []string
	for {
		failures = failures[:0]
		for i, x := range queries {
			if passed[i] {
				continue
			}
			res, err := query(base, x.expr)
			if err != nil {
				failures = append(failures, fmt.Sprintf("%s / %s: %v\n%s", x.name, x.panel, err, x.expr))
			} else if len(res) == 0 {
				failures = append(failures, fmt.Sprintf("%s / %s: no data\n%s", x.name, x.panel, x.expr))
			} else {
				passed[i] = true
			}
		}
		if len(failures) == 0 || time.Now().After(deadline) {
			break
		}
		<-poll.C
	}
	if len(failures) == 0 {
		t.Logf("%d queries: every one had data after %v", len(queries), time.Since(began).Round(100*time.Millisecond))
	}
	return failures
}

// checkExemplars: every exemplar of the latency histograms names a trace
// in the (flushed) trace file.
func checkExemplars(t *testing.T, base, traceFile string) {
	t.Helper()
	traces, err := os.ReadFile(traceFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, metric := range []string{"amdahl_work_duration_seconds_bucket", "amdahl_phase_duration_seconds_bucket"} {
		ids, err := exemplarTraceIDs(base, metric)
		if err != nil {
			t.Fatalf("%s exemplars: %v", metric, err)
		}
		if len(ids) == 0 {
			t.Errorf("%s: no exemplars (OpenMetrics on /metrics, --enable-feature=exemplar-storage)", metric)
		}
		for _, id := range ids {
			if len(id) != 32 || !bytes.Contains(traces, []byte(id)) {
				t.Errorf("%s: exemplar trace_id %q is not in the run's trace file", metric, id)
			}
		}
		if len(ids) > 0 {
			t.Logf("%s: %d exemplars, every trace_id in the trace file", metric, len(ids))
		}
	}
}

// exemplarTraceIDs returns the trace_id of every exemplar Prometheus holds
// for metric over the last 10 minutes.
func exemplarTraceIDs(base, metric string) ([]string, error) {
	now := time.Now()
	resp, err := http.PostForm(base+"/api/v1/query_exemplars", url.Values{"query": {metric},
		"start": {fmt.Sprint(now.Add(-10 * time.Minute).Unix())}, "end": {fmt.Sprint(now.Unix() + 1)}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   []struct {
			Exemplars []struct {
				Labels map[string]string `json:"labels"`
			} `json:"exemplars"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("status %s: %s", body.Status, body.Error)
	}
	var ids []string
	for _, s := range body.Data {
		for _, e := range s.Exemplars {
			id, ok := e.Labels["trace_id"]
			if !ok {
				return nil, fmt.Errorf("exemplar without trace_id: %v", e.Labels)
			}
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func query(base, expr string) ([]json.RawMessage, error) {
	resp, err := http.PostForm(base+"/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("status %s: %s", body.Status, body.Error)
	}
	return body.Data.Result, nil
}

// TestProfilesCPUShare: the profiles dashboard shows the parent's and the
// task hosts' CPU by the pprof label phase, as Pyroscope metrics grouped
// by that label (the share a flame graph per phase cannot show).
func TestProfilesCPUShare(t *testing.T) {
	d, err := Profiles()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, p := range panels(d) {
		for _, tg := range p.Targets {
			var py *grafanapyroscope.Dataquery
			switch q := tg.(type) {
			case *grafanapyroscope.Dataquery:
				py = q
			case grafanapyroscope.Dataquery:
				py = &q
			}
			if py == nil || py.QueryType == nil || *py.QueryType != "metrics" {
				continue
			}
			if p.Type != "piechart" || py.ProfileTypeId != ProfileCPU || !slices.Equal(py.GroupBy, []string{"phase"}) {
				t.Errorf("panel %q: %s query %+v, want a piechart of CPU grouped by phase", title(p), p.Type, py)
			}
			found[py.LabelSelector] = true
		}
	}
	for _, sel := range []string{`{service_name="$service_name"}`, `{service_name="$host_service_name"}`} {
		if !found[sel] {
			t.Errorf("no CPU share by phase for %s (found %v)", sel, found)
		}
	}
}

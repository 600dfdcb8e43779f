package dashboards

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/grafanapyroscope"
	"go.uber.org/goleak"
)

var update = flag.Bool("update", false, "rewrite the generated dashboards in json/")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
	r := strings.NewReplacer("$__rate_interval", "4s", "$__interval", "1s", "$scenario", ".*", "$variant", ".*", "$r", "0.25")
	out := map[string]string{}
	for _, p := range doc.Panels {
		if p.Datasource.Type != "prometheus" {
			continue
		}
		for i, tg := range p.Targets {
			out[fmt.Sprintf("%s [%d]", p.Title, i)] = r.Replace(tg.Expr)
		}
	}
	return out
}

// Every Prometheus query of every dashboard returns data from a real
// Prometheus scraping a real amdahl /metrics endpoint.
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

	tel, err := otelsetup.Setup(ctx, otelsetup.WithLookupEnv(func(string) (string, bool) { return "", false }),
		otelsetup.WithMetricsAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())

	// A synthetic workload in two variants until the test ends.
	var wg sync.WaitGroup
	for _, variant := range []string{"baseline", "candidate"} {
		c, err := tel.Component("ipc", telemetry.AttrScenario.String("taskhost"), telemetry.AttrVariant.String(variant),
			telemetry.AttrTransport.String("ipc"))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				wctx, w := c.StartWork(ctx)
				for _, p := range []telemetry.Phase{telemetry.Dispatch, telemetry.Serialize, telemetry.Send, telemetry.Execute} {
					_, ph := c.StartPhase(wctx, p, telemetry.Request)
					c.RecordCritical(wctx, p, telemetry.Request, ph.End())
				}
				w.End(telemetry.OK, nil)
			}
		}()
	}
	defer wg.Wait()
	defer cancel()

	dir := t.TempDir()
	port := freePort(t)
	cfg := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n  - job_name: amdahl\n    static_configs: [{targets: ['%s']}]\n", tel.MetricsAddr())
	if err := os.WriteFile(filepath.Join(dir, "prom.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.CommandContext(ctx, bin, "--config.file="+filepath.Join(dir, "prom.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()

	base := "http://" + addr
	// Wait until Prometheus has at least 5 scrapes of the work counter, so
	// 4 s rate windows hold two samples. Bounded: 60 s.
	deadline := time.Now().Add(60 * time.Second)
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	for {
		res, err := query(base, `count_over_time(amdahl_work_duration_seconds_count[1m]) >= 5`)
		if err == nil && len(res) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus never had 5 scrapes (last error %v); its log:\n%s", err, logs.String())
		}
		<-poll.C
	}

	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range all {
		exprs := promExprs(t, d)
		if len(exprs) < 8 {
			t.Errorf("%s: only %d prometheus queries found", name, len(exprs))
		}
		for panel, expr := range exprs {
			res, err := query(base, expr)
			if err != nil {
				t.Errorf("%s / %s: %v\n%s", name, panel, err, expr)
				continue
			}
			if len(res) == 0 {
				t.Errorf("%s / %s: no data\n%s", name, panel, expr)
			}
		}
	}
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

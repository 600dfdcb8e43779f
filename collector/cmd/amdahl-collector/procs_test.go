package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The tests run the distribution as a real process: the test binary
// re-executes itself with collectorEnv set, and TestMain then runs main
// with the arguments given (the helper-process pattern), so the process
// is the amdahl-collector binary's code without a second build.
const collectorEnv = "AMDAHL_COLLECTOR_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(collectorEnv) == "1" {
		if dir := os.Getenv(heapProfileEnv); dir != "" {
			go writeHeapProfiles(dir)
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// heapProfileEnv, set to a directory in a collector the tests start,
// has it write a heap profile there every heapProfileEvery
// (heap-<seconds since start>.pb.gz): TestLoad's soak reads where memory
// went.
const (
	heapProfileEnv   = "AMDAHL_COLLECTOR_HEAP_PROFILES"
	heapProfileEvery = 30 * time.Second
)

func writeHeapProfiles(dir string) {
	start := time.Now()
	t := time.NewTicker(heapProfileEvery)
	defer t.Stop()
	for range t.C { // until the process exits
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap-%03d.pb.gz", int(time.Since(start).Round(time.Second).Seconds()))))
		if err != nil {
			return
		}
		_ = pprof.Lookup("heap").WriteTo(f, 0)
		f.Close()
	}
}

// need returns the path of an outside binary, skipping the test when it
// is missing, except under CI=true, where that fails it.
func need(t *testing.T, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not on PATH (CI installs it: %s)", name, install)
		}
		t.Skipf("%s not on PATH: %s to run this test", name, install)
	}
	return p
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// proc is a child process whose output is kept for the test's log.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// start starts cmd; the test's cleanup interrupts it, waits (killing it
// after 10 s) and logs its output if the test failed.
func start(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p, p
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.output())
		}
	})
	return p
}

// stop interrupts the process and waits for it (10 s, then kills it).
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// startCollector runs the distribution with config (YAML text).
func startCollector(t *testing.T, name, config string) *proc {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "--config="+path)
	cmd.Env = append(os.Environ(), collectorEnv+"=1")
	return start(t, name, cmd)
}

// waitListening waits until addr accepts connections (bounded: 60 s), or
// p exits.
func waitListening(t *testing.T, p *proc, addr string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before listening on %s: %v", p.name, addr, p.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: nothing listens on %s after 60 s", p.name, addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startPrometheus runs the real prometheus binary scraping targets (with
// honor_labels, as dashboards/ provisions the collector's job) every
// second; it returns its base URL.
func startPrometheus(t *testing.T, targets ...string) string {
	t.Helper()
	bin := need(t, "prometheus", "apt-get install prometheus")
	dir := t.TempDir()
	var list bytes.Buffer
	for _, tg := range targets {
		fmt.Fprintf(&list, "'%s', ", tg)
	}
	cfg := fmt.Sprintf("global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"+
		"scrape_configs:\n  - job_name: amdahl-collector\n    honor_labels: true\n    static_configs: [{targets: [%s]}]\n", list.String())
	if err := os.WriteFile(filepath.Join(dir, "prom.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := start(t, "prometheus", exec.Command(bin, "--config.file="+filepath.Join(dir, "prom.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr))
	waitListening(t, p, addr)
	return "http://" + addr
}

// sample is one element of a Prometheus instant vector.
type sample struct {
	Metric map[string]string
	Time   float64
	Value  float64
}

// promQuery evaluates expr at time at (now if zero).
func promQuery(ctx context.Context, base, expr string, at time.Time) ([]sample, error) {
	v := url.Values{"query": {expr}}
	if !at.IsZero() {
		v.Set("time", strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/query?"+v.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string
		Error  string
		Data   struct {
			Result []struct {
				Metric map[string]string
				Value  [2]json.RawMessage
			}
		}
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 64<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, body.Error)
	}
	out := make([]sample, 0, len(body.Data.Result))
	for _, r := range body.Data.Result {
		var ts float64
		var vs string
		if err := json.Unmarshal(r.Value[0], &ts); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(r.Value[1], &vs); err != nil {
			return nil, err
		}
		f, err := strconv.ParseFloat(vs, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, sample{Metric: r.Metric, Time: ts, Value: f})
	}
	return out, nil
}

// scalar is the value of a query that returns one sample (NaN if none).
func scalar(t *testing.T, base, expr string) (float64, bool) {
	t.Helper()
	res, err := promQuery(context.Background(), base, expr, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		return 0, false
	}
	return res[0].Value, true
}

// waitFor polls expr until it equals want (bounded: timeout).
func waitFor(t *testing.T, base, expr string, want float64, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last float64
	for {
		now := time.Now()
		if v, ok := scalar(t, base, expr); ok {
			last = v
			if v == want {
				return now
			}
		}
		if now.After(deadline) {
			t.Fatalf("%s is %v after %v, want %v", expr, last, timeout, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// promText returns the body of a Prometheus /metrics endpoint (at most
// 64 MiB).
func promText(u string) (string, error) {
	resp, err := http.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return string(b), err
}

// buildAmdahl builds the amdahl CLI of the root module into dir.
func buildAmdahl(t *testing.T) string {
	t.Helper()
	goBin := need(t, "go", "the Go toolchain")
	out := filepath.Join(t.TempDir(), "amdahl")
	cmd := exec.Command(goBin, "build", "-o", out, "./cmd/amdahl")
	cmd.Dir = filepath.Join("..", "..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/amdahl: %v\n%s", err, b)
	}
	return out
}

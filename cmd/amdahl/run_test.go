package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/amdahl-rt/amdahl/internal/features"
	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// runCLI runs the CLI in process; task hosts it spawns are this test
// binary acting as amdahl (envTestMain).
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCLIEnv(t, nil, args...)
}

// runCLIEnv is runCLI with the telemetry variables in env set (the others
// unset).
func runCLIEnv(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv(envTestMain, "1")
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_ENDPOINT", "PYROSCOPE_SERVER_ADDRESS", "AMDAHL_METRICS_ADDR", "AMDAHL_TRACE_FILE", "AMDAHL_PROFILE_DIR"} {
		t.Setenv(k, "")
		if v, ok := env[k]; ok {
			os.Setenv(k, v)
		} else {
			os.Unsetenv(k)
		}
	}
	// amdahl run sets the process's memory limit and GC percent
	// (setRunMemoryBudget); the test process goes back to its own after.
	limit, percent := gcSettings()
	defer func() {
		debug.SetMemoryLimit(limit)
		debug.SetGCPercent(percent)
	}()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRunCommand(t *testing.T) {
	code, out, errs := runCLI(t, "run", "--scenario", "taskhost", "--set", "scenario.count=30", "--set", "runtime.nodes=2")
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q", code, errs)
	}
	for _, want := range []string{"scenario taskhost", "units 30: ok 30, failed 0, cancelled 0", "throughput", "p50", "p99",
		"dispatch", "send/request", "execute", "deserialize/reply", "naive share",
		// taskhost goes straight to the hosts: no orchestration, so nothing
		// is completed to the sidecar.
		"sidecar: 0 completions applied"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestRunJSONAndOut(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	code, out, errs := runCLI(t, "run", "--scenario", "mixed", "--set", "scenario.count=40", "--set", "runtime.nodes=2", "--json", "--out", dir)
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q", code, errs)
	}
	var sum runtime.Summary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("stdout is not a JSON summary: %v\n%s", err, out)
	}
	if sum.SchemaVersion != runtime.SchemaVersion {
		t.Errorf("schema_version %d, want %d", sum.SchemaVersion, runtime.SchemaVersion)
	}
	if sum.Submitted != 40 || sum.OK+sum.Failed+sum.Cancelled != 40 || sum.Attribution.Works != 40 {
		t.Errorf("summary: submitted %d ok %d failed %d cancelled %d attributed %d, want 40 reconciled", sum.Submitted, sum.OK, sum.Failed, sum.Cancelled, sum.Attribution.Works)
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fileSum runtime.Summary
	if err := json.Unmarshal(b, &fileSum); err != nil || fileSum.Submitted != 40 {
		t.Errorf("summary.json: %v, submitted %d", err, fileSum.Submitted)
	}
	for _, name := range []string{"cpu.pprof", "heap.pprof", filepath.Join("hosts", "host-1", "cpu.pprof")} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("--out lacks %s: %v", name, err)
			continue
		}
		if _, err := profile.Parse(f); err != nil {
			t.Errorf("%s does not parse as pprof: %v", name, err)
		}
		f.Close()
	}
	if b, err := os.ReadFile(filepath.Join(dir, "report.html")); err != nil || !bytes.Contains(b, []byte(`id="attribution-table"`)) {
		t.Errorf("--out lacks report.html with the attribution table: %v", err)
	}
	// The trace file is OTLP JSON that amdahl report attributes the same way.
	code, rep, errs := runCLI(t, "report", filepath.Join(dir, "trace.jsonl"))
	if code != exitOK || !strings.Contains(rep, "work items 40") {
		t.Errorf("report of the run's trace: exit %d, stderr %q, output:\n%s", code, errs, rep)
	}
	// ... and gives the live run's q, row by row.
	code, rep, errs = runCLI(t, "report", "--json", filepath.Join(dir, "trace.jsonl"))
	var fromFile struct {
		Report attribution.Report `json:"report"`
	}
	if err := json.Unmarshal([]byte(rep), &fromFile); code != exitOK || err != nil {
		t.Fatalf("report --json: exit %d, %v, stderr %q", code, err, errs)
	}
	live := map[string]float64{}
	for _, r := range sum.Attribution.Rows {
		live[r.Name] = r.Q
	}
	if len(fromFile.Report.Rows) != len(live) {
		t.Errorf("report has %d rows, the live run %d", len(fromFile.Report.Rows), len(live))
	}
	// Not to the last bit: the live accounting closes a unit when its root
	// ends, and a sidecar span that ends a moment later (the server side
	// of the completion) is in the trace file only.
	for _, r := range fromFile.Report.Rows {
		if q, ok := live[r.Name]; !ok || math.Abs(q-r.Q) > 0.01 {
			t.Errorf("row %s: q %.6f from the trace file, %.6f live (present %v)", r.Name, r.Q, q, ok)
		}
	}
}

func TestRunAgainstStandaloneSidecar(t *testing.T) {
	t.Setenv(envTestMain, "1")
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	var sideOut bytes.Buffer
	go func() {
		code := run(ctx, []string{"sidecar", "--listen", "127.0.0.1:0"}, &sideOut, pw)
		pw.Close()
		done <- code
	}()
	br := bufio.NewReader(pr)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "listening on ") {
		cancel()
		t.Fatalf("sidecar: %q, %v", line, err)
	}
	addr := strings.TrimSpace(line[strings.Index(line, "listening on ")+len("listening on "):])
	code, out, errs := runCLI(t, "run", "--sidecar", addr, "--scenario-file", orchestratedTasks(t), "--set", "scenario.count=12")
	cancel()
	rest, _ := io.ReadAll(br)
	if sc := <-done; sc != exitOK {
		t.Errorf("sidecar exit %d: %s", sc, rest)
	}
	if code != exitOK || !strings.Contains(out, "units 12: ok 12") || !strings.Contains(out, "sidecar: external") {
		t.Fatalf("run --sidecar: exit %d, stderr %q, output:\n%s", code, errs, out)
	}
	if !strings.Contains(string(rest), "12 completions applied") {
		t.Errorf("sidecar's last words %q, want 12 completions applied", rest)
	}
}

// orchestratedTasks writes a scenario of small task units, each in a
// Durable Task orchestration (a lease before, a completion to the sidecar
// after), and returns its path.
func orchestratedTasks(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "orchestrated.yaml")
	data := "name: orchestrated\ncount: 10\nworkloads:\n  - kind: taskhost\n    orchestration: true\n    task: {config_mean: 4KB, config_cap: 64KB}\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunUsageErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: x\ncount: 10\nworkloads:\n  - kind: taskhost\n    task:\n      config_mean: 46QB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown setting", []string{"run", "--set", "ipc.bufer=1MiB"}, []string{`unknown setting "ipc.bufer"`, "ipc.buffer"}},
		{"bad value", []string{"run", "--set", "ipc.send=fast"}, []string{"ipc.send", "sync or async"}},
		{"unknown scenario", []string{"run", "--scenario", "nope"}, []string{"nope", "taskhost", "fanout", "mixed", "orchestrated"}},
		{"bad scenario file", []string{"run", "--scenario-file", bad}, []string{"bad.yaml:6", "config_mean", "46QB"}},
		{"bad progress", []string{"run", "--progress", "sometimes"}, []string{"--progress"}},
		{"extra argument", []string{"run", "now"}, []string{"takes no arguments"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runCLI(t, tc.args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr %q", code, exitUsage, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr %q lacks %q", errs, w)
				}
			}
			if strings.Count(strings.TrimSpace(errs), "\n") != 0 {
				t.Errorf("want a one-line reason, got %q", errs)
			}
		})
	}
}

// TestRunInvalidFeatureWave: an AMDAHL_DISABLE_FEATURES_FROM_VERSION that
// is not a version is bad usage (exit 2) with a one-line reason naming the
// variable and the valid waves, for run and ab alike; it never runs with
// every wave silently enabled.
func TestRunInvalidFeatureWave(t *testing.T) {
	t.Setenv(features.EnvDisableFrom, "latest")
	features.Reset()
	t.Cleanup(features.Reset)
	for _, args := range [][]string{
		{"run", "--scenario", "taskhost", "--set", "scenario.count=1"},
		{"ab", "--scenario", "taskhost", "--candidate", "ipc.send=async"},
	} {
		t.Run(args[0], func(t *testing.T) {
			code, out, errs := runCLI(t, args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr %q", code, exitUsage, errs)
			}
			for _, want := range []string{features.EnvDisableFrom, `"latest"`, features.Wave0_1.String()} {
				if !strings.Contains(errs, want) {
					t.Errorf("stderr %q lacks %q", errs, want)
				}
			}
			if strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.HasPrefix(errs, "amdahl: ") {
				t.Errorf("want one line \"amdahl: reason\", got %q", errs)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing: nothing ran", out)
			}
		})
	}
}

// TestHelpSettings: amdahl help settings documents every setting with its
// environment variable; run --help points there.
func TestHelpSettings(t *testing.T) {
	code, out, _ := runCLI(t, "help", "settings")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, name := range runtime.SettingNames() {
		if !strings.Contains(out, name) || !strings.Contains(out, runtime.EnvName(name)) {
			t.Errorf("help settings does not document %s (%s)", name, runtime.EnvName(name))
		}
	}
	if _, out, _ := runCLI(t, "run", "--help"); !strings.Contains(out, "amdahl help settings") {
		t.Error("run --help does not point to amdahl help settings")
	}
}

// TestHelpHasExamplesAndFits: every command's --help has Example lines and
// fits a screen (the settings table has its own topic).
func TestHelpHasExamplesAndFits(t *testing.T) {
	const screen = 60
	for _, c := range newRoot(io.Discard, io.Discard).Commands() {
		if c.Hidden || !c.IsAvailableCommand() {
			continue
		}
		t.Run(c.Name(), func(t *testing.T) {
			code, out, _ := runCLI(t, c.Name(), "--help")
			if code != exitOK {
				t.Fatalf("exit %d", code)
			}
			if !strings.Contains(out, "Examples:") {
				t.Errorf("%s --help has no Examples section", c.Name())
			}
			if n := strings.Count(out, "\n"); n > screen {
				t.Errorf("%s --help is %d lines, want at most %d", c.Name(), n, screen)
			}
		})
	}
}

func TestScenariosCommand(t *testing.T) {
	code, out, _ := runCLI(t, "scenarios")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"taskhost", "fanout", "mixed", "orchestrated", "32x2MiB", "oversized-first"} {
		if !strings.Contains(out, want) {
			t.Errorf("scenarios output lacks %q:\n%s", want, out)
		}
	}
}

func TestTaskhostByHand(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "taskhost")
	cmd.Env = append(os.Environ(), envTestMain+"=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "not meant to be started by hand") {
		t.Fatalf("amdahl taskhost by hand: %v, %q; want exit 2 and a readable message", err, out)
	}
}

// TestCtrlC sends SIGINT to the whole process group, as a terminal's
// Ctrl-C does: the run stops submitting, drains, prints a reconciled
// summary and exits 1; task hosts (in process groups of their own) are
// shut down by it, not killed by the signal, and none is left behind.
func TestCtrlC(t *testing.T) {
	code, out, rest := interruptAfter(t, 1, "run", "--scenario", "taskhost", "--set", "scenario.count=10000000", "--progress", "always")
	if code != exitFail {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitFail, rest)
	}
	if !strings.Contains(rest, "run interrupted after") {
		t.Errorf("stderr %q lacks the reason", rest)
	}
	if !strings.Contains(out, ", failed 0,") || !strings.Contains(out, "0 replaced") {
		t.Errorf("want no failed unit and no replaced host after Ctrl-C:\n%s", out)
	}
	// The summary reconciles: units N: ok a, failed 0, cancelled c with N = a + c.
	var n, ok, failed, cancelled int
	i := strings.Index(out, "units ")
	if i < 0 {
		t.Fatalf("no summary on stdout:\n%s", out)
	}
	if _, err := fmt.Sscanf(out[i:], "units %d: ok %d, failed %d, cancelled %d", &n, &ok, &failed, &cancelled); err != nil || n != ok+failed+cancelled || n == 0 {
		t.Errorf("summary line does not reconcile (%v): %d = %d + %d + %d", err, n, ok, failed, cancelled)
	}
}

// interruptAfter runs amdahl with args (which ask for a progress bar) as
// its own process group, sends SIGINT once the bar shows at least done
// finished (units for run, runs for ab), and returns the exit status,
// stdout and the rest of stderr.
func interruptAfter(t *testing.T, done int, args ...string) (int, string, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), envTestMain+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }()
	br := bufio.NewReader(stderr)
	// The progress bar is redrawn after "\r" ("[###...] 3/40 runs");
	// interrupt once it shows enough done (on a loaded machine the first
	// drawing may come before anything has finished).
	for n := 0; n < done; {
		line, err := br.ReadString('\r')
		if err != nil {
			t.Fatalf("no progress with %d done on stderr: %v", done, err)
		}
		if i := strings.LastIndex(line, "] "); i >= 0 {
			fmt.Sscanf(line[i+2:], "%d/", &n)
		}
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(br)
	err = cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), string(rest)
}

// TestRunPushesToPyroscope: --pyroscope reaches the telemetry setup; the
// run's profiles arrive at the server's /ingest (flushed at shutdown).
func TestRunPushesToPyroscope(t *testing.T) {
	var mu sync.Mutex
	apps := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ingest" {
			mu.Lock()
			apps[r.URL.Query().Get("name")]++
			mu.Unlock()
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	code, _, errs := runCLI(t, "run", "--scenario", "taskhost", "--set", "scenario.count=10", "--pyroscope", srv.URL)
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q", code, errs)
	}
	mu.Lock()
	defer mu.Unlock()
	n, hosts := 0, 0
	for name, c := range apps {
		if strings.HasPrefix(name, "amdahl") {
			n += c
		}
		if strings.HasPrefix(name, runtime.HostServiceName) {
			hosts += c
		}
	}
	if n == 0 {
		t.Errorf("no profile upload named amdahl reached the server; got %v", apps)
	}
	if hosts == 0 {
		t.Errorf("no profile upload named %s reached the server (the task hosts profile too); got %v", runtime.HostServiceName, apps)
	}
}

// TestRunExportsOTLP: --otlp-endpoint sends the run's spans to an OTLP
// collector; the task hosts send their own, once each (the parent's
// synthesised copies stay home).
func TestRunExportsOTLP(t *testing.T) {
	col := newSpanStore(t)
	code, _, errs := runCLI(t, "run", "--scenario-file", orchestratedTasks(t), "--set", "scenario.count=15", "--otlp-endpoint", col.addr)
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q", code, errs)
	}
	names, service := map[string]int{}, map[string]int{} // by span name; by "<service.name> <span name>"
	col.mu.Lock()
	for _, sp := range col.spans {
		names[sp.GetName()]++
		service[sp.service+" "+sp.GetName()]++
	}
	col.mu.Unlock()
	for name, want := range map[string]int{"amdahl.work": 15, "runtime.dispatch": 15, "runtime.host": 15, "taskhost.execute": 15, "ipc.send": 15, "chunking.send": 15} {
		if got := names[name]; got != want {
			t.Errorf("collector got %d %s spans, want %d (all: %v)", got, name, want, names)
		}
	}
	for _, name := range []string{"taskhost.receive", "taskhost.deserialize", "taskhost.execute", "taskhost.serialize"} {
		if got := service[runtime.HostServiceName+" "+name]; got != 15 {
			t.Errorf("collector got %d %s spans from %s, want 15 (all: %v)", got, name, runtime.HostServiceName, service)
		}
	}
}

// TestSummarySaysWhatWasSampled: under a sampler the run's table says
// how many of its units the attribution covers, with the variables that
// chose them; without one it says nothing of sampling.
func TestSummarySaysWhatWasSampled(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
	s := runtime.Summary{Submitted: 2000, OK: 2000, Sampler: "ParentBased{root:TraceIDRatioBased{0.25}}",
		Attribution: attribution.Report{Works: 500}}
	var b strings.Builder
	if err := writeSummary(&b, s, "", ""); err != nil {
		t.Fatal(err)
	}
	want := "traces sampled (OTEL_TRACES_SAMPLER=parentbased_traceidratio OTEL_TRACES_SAMPLER_ARG=0.25): attribution covers 500 of 2000 units\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("the table lacks %q:\n%s", want, b.String())
	}
	s.Sampler = ""
	b.Reset()
	if err := writeSummary(&b, s, "", ""); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "sampled") {
		t.Errorf("without a sampler the table speaks of sampling:\n%s", b.String())
	}
}

// TestSummarySaysTraceContextOff: when the sidecar calls carried no trace
// context (OTEL_PROPAGATORS=none) the run's table says why the sidecar's
// rows are missing; with it carried, or with nothing attributed, it says
// nothing of it.
func TestSummarySaysTraceContextOff(t *testing.T) {
	t.Setenv("OTEL_PROPAGATORS", "none")
	s := runtime.Summary{Submitted: 20, OK: 20, SidecarUntraced: true, Attribution: attribution.Report{Works: 20}}
	var b strings.Builder
	if err := writeSummary(&b, s, "", ""); err != nil {
		t.Fatal(err)
	}
	want := "sidecar calls carried no trace context (OTEL_PROPAGATORS=none): the sidecar's phases (chunking.deserialize, chunking.execute) are in no unit's trace, nor in the table\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("the table lacks %q:\n%s", want, b.String())
	}
	for _, tc := range []struct {
		name     string
		untraced bool
		works    int
	}{{"carried", false, 20}, {"nothing attributed", true, 0}} {
		s.SidecarUntraced, s.Attribution.Works = tc.untraced, tc.works
		b.Reset()
		if err := writeSummary(&b, s, "", ""); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(b.String(), "trace context") {
			t.Errorf("%s: the table speaks of the trace context:\n%s", tc.name, b.String())
		}
	}
}

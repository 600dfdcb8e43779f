package runtime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"reflect"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// The test binary doubles as a task host and as a standalone sidecar (the
// helper-process pattern): these variables select the mode.
const (
	envTestHost    = "AMDAHL_RUNTIME_TEST_HOST"
	envTestSidecar = "AMDAHL_RUNTIME_TEST_SIDECAR"
	// envTestSidecarAddr is where the sidecar listens (default 127.0.0.1:0).
	envTestSidecarAddr = "AMDAHL_RUNTIME_TEST_SIDECAR_ADDR"
)

// Test tasks served by the test host besides the built-ins.
const (
	taskBlock = "test.block" // announces itself on stderr, then blocks until the host dies
	taskFail  = "test.fail"  // fails with an error
	taskProcs = "test.procs" // outputs the host's GOMAXPROCS as "procs" and its GOGC as "gogc"
)

func TestMain(m *testing.M) {
	if os.Getenv(envTestHost) == "1" {
		tasks := BuiltinTasks()
		tasks[taskBlock] = func(ctx context.Context, task *ipcpb.TaskConfiguration) (map[string]string, error) {
			fmt.Fprintf(os.Stderr, "blocking in task %d\n", task.GetId())
			select {} // until killed
		}
		tasks[taskFail] = func(context.Context, *ipcpb.TaskConfiguration) (map[string]string, error) {
			return nil, errors.New("this task always fails")
		}
		tasks[taskProcs] = func(context.Context, *ipcpb.TaskConfiguration) (map[string]string, error) {
			gogc := debug.SetGCPercent(100)
			debug.SetGCPercent(gogc)
			return map[string]string{"procs": strconv.Itoa(goruntime.GOMAXPROCS(0)), "gogc": strconv.Itoa(gogc)}, nil
		}
		if err := ServeHost(context.Background(), tasks); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	if os.Getenv(envTestSidecar) == "1" {
		sc, err := chunking.NewSidecar(chunking.SidecarConfig{})
		if err == nil {
			var lis net.Listener
			listen := os.Getenv(envTestSidecarAddr)
			if listen == "" {
				listen = "127.0.0.1:0"
			}
			if lis, err = net.Listen("tcp", listen); err == nil {
				fmt.Println(lis.Addr())
				err = sc.Serve(lis)
			}
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}

func noEnv(string) (string, bool) { return "", false }

// captureLog is a slog handler that keeps every message, and signals when
// one containing want arrives.
type captureLog struct {
	mu    sync.Mutex
	lines []string
	want  string
	seen  chan struct{}
	once  sync.Once
}

func newCaptureLog(want string) *captureLog {
	return &captureLog{want: want, seen: make(chan struct{})}
}

func (c *captureLog) Enabled(context.Context, slog.Level) bool { return true }
func (c *captureLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	c.mu.Lock()
	c.lines = append(c.lines, b.String())
	c.mu.Unlock()
	if c.want != "" && strings.Contains(r.Message, c.want) {
		c.once.Do(func() { close(c.seen) })
	}
	return nil
}
func (c *captureLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &attrHandler{c: c, attrs: attrs}
}
func (c *captureLog) WithGroup(string) slog.Handler { return c }

type attrHandler struct {
	c     *captureLog
	attrs []slog.Attr
}

func (h *attrHandler) Enabled(ctx context.Context, l slog.Level) bool { return true }
func (h *attrHandler) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(h.attrs...)
	return h.c.Handle(ctx, r)
}
func (h *attrHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &attrHandler{c: h.c, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}
func (h *attrHandler) WithGroup(string) slog.Handler { return h }

// testConfig is a Config whose task hosts are this test binary, with
// telemetry from no environment and spans kept in rec.
func testConfig(t testing.TB, set Settings, rec *otelsetup.Recorder) Config {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var tpOpts []sdktrace.TracerProviderOption
	if rec != nil {
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(rec))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return Config{
		Settings: set, Logger: slog.New(slog.DiscardHandler),
		Hosts:     HostsConfig{Argv: []string{exe}, Env: []string{envTestHost + "=1"}},
		Telemetry: TelemetryConfig{TracerProvider: tp, Spans: otelsetup.SDKSource(tp), PhaseLabels: true},
		Sidecar: SidecarConfig{
			Retry:        chunking.RetryPolicy{MaxAttempts: 3, BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond},
			LeaseTimeout: 15 * time.Second,
		},
	}
}

// testSettings resolves sets over runtime.nodes=2, runtime.concurrency=4,
// ignoring the environment.
func testSettings(t testing.TB, sets ...string) Settings {
	t.Helper()
	s, err := ResolveSettings(append([]string{"runtime.nodes=2", "runtime.concurrency=4"}, sets...), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// checkTrace asserts the shape of the recorded trace: one amdahl.work root
// per unit, each in its own trace; the task host's spans (synthesised from
// its reply) in the same trace under the runtime.host span; and critical
// shares of each unit that add up to its end-to-end time.
func checkTrace(t *testing.T, spans []sdktrace.ReadOnlySpan, units int, wantHostSpans bool) {
	t.Helper()
	byID := map[string]sdktrace.ReadOnlySpan{}
	roots := map[string]int{} // trace id → roots
	for _, s := range spans {
		byID[s.SpanContext().SpanID().String()] = s
		if s.Name() == telemetry.SpanWork {
			if s.Parent().IsValid() {
				t.Errorf("amdahl.work span %s has a parent %s, want a root", s.SpanContext().SpanID(), s.Parent().SpanID())
			}
			roots[s.SpanContext().TraceID().String()]++
		}
	}
	if len(roots) != units {
		t.Errorf("got %d traces with an amdahl.work root, want %d (one per unit)", len(roots), units)
	}
	for tid, n := range roots {
		if n != 1 {
			t.Errorf("trace %s has %d roots, want 1", tid, n)
		}
	}
	remote := 0
	for _, s := range spans {
		v, ok := attrOf(s, telemetry.AttrRemote)
		if !ok || !v.AsBool() {
			continue
		}
		remote++
		if !strings.HasPrefix(s.Name(), "taskhost.") {
			t.Errorf("remote span %q, want taskhost.<phase>", s.Name())
		}
		parent, ok := byID[s.Parent().SpanID().String()]
		if !ok || parent.Name() != SpanHost {
			t.Errorf("remote span %s: parent %v, want the %s span", s.Name(), s.Parent().SpanID(), SpanHost)
			continue
		}
		if parent.SpanContext().TraceID() != s.SpanContext().TraceID() || roots[s.SpanContext().TraceID().String()] != 1 {
			t.Errorf("remote span %s is not in its unit's trace", s.Name())
		}
		if s.StartTime().Before(parent.StartTime()) || s.EndTime().After(parent.EndTime()) {
			t.Errorf("remote span %s [%v, %v] outside its host span [%v, %v]", s.Name(), s.StartTime(), s.EndTime(), parent.StartTime(), parent.EndTime())
		}
	}
	if wantHostSpans && remote < 4*units {
		t.Errorf("got %d task host spans, want at least 4 per unit (receive, deserialize, execute, serialize)", remote)
	}
}

func TestRunTaskhostEndToEnd(t *testing.T) {
	sc, err := scenario.Builtin("taskhost")
	if err != nil {
		t.Fatal(err)
	}
	orch := *sc
	orch.Workloads = slices.Clone(sc.Workloads)
	orch.Workloads[0].Orchestration = true
	for _, tc := range []struct {
		name, transport, send string
		sc                    *scenario.Scenario
	}{
		{"socketpair sync", "socketpair", "sync", sc},
		{"pipe async", "pipe", "async", sc},
		{"socketpair sync orchestrated", "socketpair", "sync", &orch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := otelsetup.NewRecorder()
			cfg := testConfig(t, testSettings(t, "scenario.count=40", "ipc.transport="+tc.transport, "ipc.send="+tc.send), rec)
			sum, err := Run(context.Background(), cfg, tc.sc)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Submitted != 40 || sum.OK != 40 || sum.Failed+sum.Cancelled != 0 {
				t.Fatalf("got submitted %d ok %d failed %d cancelled %d (%v), want 40 ok", sum.Submitted, sum.OK, sum.Failed, sum.Cancelled, sum.Examples)
			}
			if sum.HostsSpawned < 1 || sum.HostsSpawned > 2 || sum.HostsReplaced != 0 {
				t.Errorf("hosts spawned %d replaced %d, want 1..2 spawned (runtime.nodes=2) and none replaced", sum.HostsSpawned, sum.HostsReplaced)
			}
			// The taskhost scenario goes straight to hosts: no sidecar
			// call; orchestrated, every task's orchestration is completed.
			wantApplied := 0
			if tc.sc.Workloads[0].Orchestration {
				wantApplied = 40
			}
			if sum.SidecarApplied != int64(wantApplied) {
				t.Errorf("sidecar applied %d completions, want %d", sum.SidecarApplied, wantApplied)
			}
			if sum.Attribution.Works != 40 {
				t.Errorf("attribution covers %d units, want 40", sum.Attribution.Works)
			}
			var q float64
			seen := map[string]bool{}
			for _, row := range sum.Attribution.Rows {
				q += row.Q
				seen[row.Name] = true
			}
			if q < 0.999 || q > 1.001 {
				t.Errorf("critical-path shares add up to %.4f, want 1", q)
			}
			for _, name := range []string{"runtime.dispatch", "ipc.serialize/request", "ipc.send/request", "taskhost.receive/request", "taskhost.deserialize/request",
				"taskhost.execute", "taskhost.serialize/reply", "ipc.receive/reply", "ipc.deserialize/reply", "chunking.send/request"} {
				if want := wantApplied > 0 || !strings.HasPrefix(name, "chunking."); seen[name] != want {
					t.Errorf("row %s in the attribution: %v, want %v; rows: %v", name, seen[name], want, seen)
				}
			}
			checkTrace(t, rec.Spans(), 40, true)
			// Fair assignment: once every host is up, the hosts share the
			// tasks (least recently used first). Before the second host
			// has started, the first may run many short tasks alone.
			perHost := map[int64]int{}
			firstTask := map[int64]time.Time{}
			var hostSpans []sdktrace.ReadOnlySpan
			for _, sp := range rec.Spans() {
				if v, ok := attrOf(sp, AttrHostID); ok && sp.Name() == SpanHost {
					id := v.AsInt64()
					perHost[id]++
					if f, ok := firstTask[id]; !ok || sp.StartTime().Before(f) {
						firstTask[id] = sp.StartTime()
					}
					hostSpans = append(hostSpans, sp)
				}
			}
			if int64(len(perHost)) != sum.HostsSpawned {
				t.Errorf("tasks ran on %d hosts, %d were spawned", len(perHost), sum.HostsSpawned)
			}
			var allUp time.Time
			for _, f := range firstTask {
				if f.After(allUp) {
					allUp = f
				}
			}
			after, total := map[int64]int{}, 0
			for _, sp := range hostSpans {
				if !sp.StartTime().Before(allUp) {
					v, _ := attrOf(sp, AttrHostID)
					after[v.AsInt64()]++
					total++
				}
			}
			for id := range perHost {
				// Only when units are slow enough (a sidecar round trip
				// each) for the split not to hang on scheduling noise.
				if wantApplied > 0 && len(perHost) == 2 && total >= 10 && after[id] < total/5 {
					t.Errorf("host %d ran %d of the %d tasks after both hosts were up, want a fair share (≥ %d): %v of %v", id, after[id], total, total/5, after, perHost)
				}
			}
			t.Logf("tasks per host: %v; after both were up: %v", perHost, after)
		})
	}
}

// TestCriticalSharesPerUnit: each unit's critical-path times add up to its
// end-to-end time exactly (q of every unit sums to 1).
func TestCriticalSharesPerUnit(t *testing.T) {
	sc := orchestratedMixed(t)
	cfg := testConfig(t, testSettings(t, "scenario.count=60"), nil)
	var mu sync.Mutex
	var works []attribution.Work
	cfg.OnWork = func(w attribution.Work) {
		mu.Lock()
		works = append(works, w)
		mu.Unlock()
	}
	r := startRuntime(t, cfg)
	gen := sc.NewGenerator()
	for range 60 {
		if err := r.Submit(context.Background(), gen.Next()); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(works) != 60 {
		t.Fatalf("got %d attributed units, want 60", len(works))
	}
	for _, w := range works {
		var sum time.Duration
		for _, s := range w.Stats {
			sum += s.Critical
		}
		if sum != w.E2E() {
			t.Errorf("unit %s: critical times add up to %v, e2e is %v", w.Root.TraceID, sum, w.E2E())
		}
	}
}

// TestLiveExecuteOnThePath: on live taskhost runs, nothing overlaps the
// host's execute phase, so its critical-path share q stays within 10 %
// (relative) of its naive share: the far side's spans are placed causally
// and a near-side send recorded late does not hide them.
func TestLiveExecuteOnThePath(t *testing.T) {
	cfg := testConfig(t, testSettings(t, "scenario.count=200"), nil)
	r := startRuntime(t, cfg)
	sc, err := scenario.Builtin("taskhost")
	if err != nil {
		t.Fatal(err)
	}
	gen := sc.NewGenerator()
	for range 200 {
		if err := r.Submit(context.Background(), gen.Next()); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep := r.Summary().Attribution
	found := false
	for _, row := range rep.Rows {
		if row.Name != "taskhost.execute" {
			continue
		}
		found = true
		if row.Naive <= 0 || math.Abs(row.Q-row.Naive)/row.Naive > 0.10 {
			t.Errorf("taskhost.execute: q %.4f, naive share %.4f; want q within 10 %% of naive", row.Q, row.Naive)
		}
	}
	if !found {
		t.Fatalf("no taskhost.execute row in %+v", rep.Rows)
	}
}

// TestSidecarExecuteOnThePath: the in-process sidecar's execute phase
// (the applied completion handed to OnApplied) counts on the critical
// path. It follows its last chunk's deserialize, under the call; started
// under deserialize, it began after its parent had ended, and attribution
// cut it to nothing on every unit (critical 0).
func TestSidecarExecuteOnThePath(t *testing.T) {
	sc, err := scenario.Builtin("fanout")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Run(context.Background(), testConfig(t, testSettings(t, "scenario.count=16"), nil), sc)
	if err != nil {
		t.Fatal(err)
	}
	// Not Diagnostics.Outside == 0: a clock step or a race (a gRPC
	// server span ending after its client's) may cut a span or two.
	if n := sum.Attribution.Diagnostics.Outside; n >= sum.Submitted {
		t.Errorf("%d spans ran outside their parent in %d units: one a unit is a span started in the wrong place", n, sum.Submitted)
	}
	for _, row := range sum.Attribution.Rows {
		if row.Name != "chunking.execute" {
			continue
		}
		// One a unit: the oversized units' failure completions are
		// applied too.
		if row.Spans != sum.Submitted || row.CriticalPerWork <= 0 || row.CriticalPerWork < row.Mean/2 {
			t.Errorf("chunking.execute: %d spans (%d units), mean %v, critical per unit %v; want one a unit, at least half of it on the path",
				row.Spans, sum.Submitted, row.Mean, row.CriticalPerWork)
		}
		return
	}
	t.Fatalf("no chunking.execute row in %+v", sum.Attribution.Rows)
}

func TestRunFanout(t *testing.T) {
	sc, err := scenario.Builtin("fanout")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		sets          []string
		wantOversized bool
	}{
		{"oversized actions fail the orchestration", nil, true},
		{"large payloads accept them", []string{"chunking.large_payloads=on", "chunking.algorithm=legacy"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := otelsetup.NewRecorder()
			var mu sync.Mutex
			shapes := map[string]int{}
			cfg := testConfig(t, testSettings(t, append([]string{"scenario.count=16"}, tc.sets...)...), rec)
			cfg.OnResult = func(r Result) {
				mu.Lock()
				shapes[r.Shape]++
				if r.Outcome != telemetry.OK && r.Class != "oversized action" {
					t.Errorf("unit %d (%s) failed: %s", r.Seq, r.Shape, r.Reason)
				}
				mu.Unlock()
			}
			sum, err := Run(context.Background(), cfg, sc)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Submitted != 16 || sum.OK+sum.Failed != 16 {
				t.Fatalf("got submitted %d ok %d failed %d, want 16 = ok + failed", sum.Submitted, sum.OK, sum.Failed)
			}
			if sum.SidecarApplied != 16 {
				t.Errorf("sidecar applied %d completions, want 16 (a failed orchestration is a completion too)", sum.SidecarApplied)
			}
			if sum.HostsSpawned != 0 {
				t.Errorf("fanout spawned %d task hosts, want 0", sum.HostsSpawned)
			}
			over := shapes["oversized-first"]
			if over == 0 {
				t.Fatalf("no oversized-first unit among %v; pick another seed", shapes)
			}
			if tc.wantOversized && sum.Failures["oversized action"] != over {
				t.Errorf("got %d oversized failures, want %d (every oversized-first unit)", sum.Failures["oversized action"], over)
			}
			if !tc.wantOversized && sum.Failed != 0 {
				t.Errorf("got %d failures with large payloads, want 0: %v", sum.Failed, sum.Examples)
			}
			checkTrace(t, rec.Spans(), 16, false)
		})
	}
}

// waitGone waits until the process pid no longer exists (reaped).
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// blockingUnit is a task unit that blocks in its host.
func blockingUnit(seq int) scenario.Item {
	return scenario.Item{Seq: seq, Kind: scenario.KindTask, Task: &scenario.TaskItem{TaskName: taskBlock, Parameters: map[string]string{"p0": "x"}}}
}

// orchestratedMixed is the mixed scenario with its task units inside
// orchestrations (the orchestrated scenario's task units beside mixed's fanouts): orchestrated task
// units (a lease, the host, a completion) and chunked fanouts in one run,
// every path a unit takes through the sidecar.
func orchestratedMixed(t testing.TB) *scenario.Scenario {
	t.Helper()
	sc, err := scenario.Builtin("mixed")
	if err != nil {
		t.Fatal(err)
	}
	if sc.Workloads[0].Kind != scenario.KindTask {
		t.Fatalf("mixed's first workload is %v, want its task units", sc.Workloads[0].Kind)
	}
	sc.Workloads[0].Orchestration = true
	return sc
}

func smallUnit(seq int) scenario.Item {
	return scenario.Item{Seq: seq, Kind: scenario.KindTask, Task: &scenario.TaskItem{Parameters: map[string]string{"p0": strings.Repeat("x", 1000)}, ExecutePasses: 1}}
}

// orchestratedUnit is smallUnit inside a Durable Task orchestration: a
// lease on the sidecar before the task, a completion after.
func orchestratedUnit(seq int) scenario.Item {
	it := smallUnit(seq)
	it.Task.Orchestration = true
	return it
}

// results collects Results by sequence number.
type results struct {
	mu  sync.Mutex
	got map[int]Result
}

func (rs *results) add(r Result) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.got == nil {
		rs.got = map[int]Result{}
	}
	if _, dup := rs.got[r.Seq]; dup {
		panic(fmt.Sprintf("unit %d ended twice", r.Seq))
	}
	rs.got[r.Seq] = r
}

func (rs *results) get(seq int) (Result, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r, ok := rs.got[seq]
	return r, ok
}

// startRuntime starts a Runtime that the test's cleanup closes.
func startRuntime(t *testing.T, cfg Config) *Runtime {
	t.Helper()
	r, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

// submitSmall submits small task units from..to (sequence numbers) and
// waits for every unit submitted so far to end.
func submitSmall(t *testing.T, r *Runtime, from, to int) {
	t.Helper()
	submitUnits(t, r, from, to, smallUnit)
}

// submitUnits submits unit(from)..unit(to) and waits for every unit
// submitted so far to end.
func submitUnits(t *testing.T, r *Runtime, from, to int, unit func(int) scenario.Item) {
	t.Helper()
	for i := from; i <= to; i++ {
		if err := r.Submit(context.Background(), unit(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// wantOK checks that units from..to ended ok.
func (rs *results) wantOK(t *testing.T, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		if res, _ := rs.get(i); res.Outcome != telemetry.OK {
			t.Errorf("unit %d: got %v (%s), want ok", i, res.Outcome, res.Reason)
		}
	}
}

func TestHostKilledMidTask(t *testing.T) {
	logs := newCaptureLog("blocking in task")
	var rs results
	cfg := testConfig(t, testSettings(t), nil)
	cfg.Logger = slog.New(logs)
	cfg.OnResult = rs.add
	r := startRuntime(t, cfg)
	// In an orchestration, so that its failure is completed to the sidecar.
	blocking := blockingUnit(0)
	blocking.Task.Orchestration = true
	if err := r.Submit(context.Background(), blocking); err != nil {
		t.Fatal(err)
	}
	select {
	case <-logs.seen:
	case <-time.After(30 * time.Second):
		t.Fatal("the blocking task never started")
	}
	pids := r.HostPIDs()
	if len(pids) != 1 {
		t.Fatalf("got hosts %v, want exactly one", pids)
	}
	var victim int
	for _, pid := range pids {
		victim = pid
	}
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	submitSmall(t, r, 1, 20)
	res, ok := rs.get(0)
	if !ok || res.Outcome != telemetry.Failed || res.Class != "task host died" || !strings.Contains(res.Reason, "signal: killed") {
		t.Errorf("killed unit: got %+v, want failed, class \"task host died\", reason naming signal: killed", res)
	}
	rs.wantOK(t, 1, 20)
	sum := r.Summary()
	if sum.HostsReplaced < 1 || sum.HostsSpawned < 2 {
		t.Errorf("hosts spawned %d replaced %d, want the killed one replaced by a new one", sum.HostsSpawned, sum.HostsReplaced)
	}
	if sum.Submitted != 21 || sum.OK != 20 || sum.Failed != 1 {
		t.Errorf("summary %d = %d ok + %d failed + %d cancelled, want 21 = 20 + 1", sum.Submitted, sum.OK, sum.Failed, sum.Cancelled)
	}
	if sum.SidecarApplied != 1 {
		t.Errorf("sidecar applied %d completions, want 1: the killed unit's orchestration completed as failed (the others have none)", sum.SidecarApplied)
	}
	if !processGone(victim) {
		t.Errorf("killed host %d was not reaped", victim)
	}
}

// TestHostProcsReachHosts: a task host runs with the GOMAXPROCS of
// runtime.host_procs and the GOGC of runtime.host_gogc, whatever the
// parent's environment says (unless inherit).
func TestHostProcsReachHosts(t *testing.T) {
	t.Setenv("GOMAXPROCS", "7") // the parent's environment, which hosts inherit
	t.Setenv("GOGC", "77")
	for _, tc := range []struct {
		set      string
		want     int
		wantGOGC string
	}{
		{"runtime.host_procs=3", 3, "400"},
		{"runtime.host_procs=auto", max(1, goruntime.GOMAXPROCS(0)/2), "400"},
		{"runtime.host_gogc=150", max(1, goruntime.GOMAXPROCS(0)/2), "150"},
		{"runtime.host_gogc=inherit", max(1, goruntime.GOMAXPROCS(0)/2), "77"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			var rs results
			cfg := testConfig(t, testSettings(t, tc.set), nil)
			cfg.OnResult = rs.add
			r := startRuntime(t, cfg)
			for i := range 4 {
				it := scenario.Item{Seq: i, Kind: scenario.KindTask, Task: &scenario.TaskItem{TaskName: taskProcs, Parameters: map[string]string{}}}
				if err := r.Submit(context.Background(), it); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			for i := range 4 {
				res, _ := rs.get(i)
				if res.Outcome != telemetry.OK || res.Outputs["procs"] != strconv.Itoa(tc.want) || res.Outputs["gogc"] != tc.wantGOGC {
					t.Errorf("unit %d: %v, procs %q gogc %q, want ok, %d and %s", i, res.Outcome, res.Outputs["procs"], res.Outputs["gogc"], tc.want, tc.wantGOGC)
				}
			}
		})
	}
}

func TestTaskTimeout(t *testing.T) {
	var rs results
	cfg := testConfig(t, testSettings(t, "runtime.task_timeout=300ms"), nil)
	cfg.OnResult = rs.add
	r := startRuntime(t, cfg)
	if err := r.Submit(context.Background(), blockingUnit(0)); err != nil {
		t.Fatal(err)
	}
	fail := scenario.Item{Seq: 1, Kind: scenario.KindTask, Task: &scenario.TaskItem{TaskName: taskFail, Parameters: map[string]string{}}}
	if err := r.Submit(context.Background(), fail); err != nil {
		t.Fatal(err)
	}
	submitSmall(t, r, 2, 10)
	if res, _ := rs.get(0); res.Outcome != telemetry.Failed || res.Class != "task timed out" || !strings.Contains(res.Reason, "timed out after 300ms") {
		t.Errorf("hung unit: got %+v, want failed with class \"task timed out\"", res)
	}
	if res, _ := rs.get(1); res.Outcome != telemetry.Failed || res.Class != "task failed" || !strings.Contains(res.Reason, "this task always fails") {
		t.Errorf("failing unit: got %+v, want failed with class \"task failed\" and the task's error", res)
	}
	rs.wantOK(t, 2, 10)
	if sum := r.Summary(); sum.HostsReplaced < 1 {
		t.Errorf("hosts replaced %d, want the hung host replaced", sum.HostsReplaced)
	}
}

// startSidecarProcess runs the test binary as a standalone sidecar and
// returns its address and process.
func startSidecarProcess(t *testing.T) (string, *exec.Cmd) {
	t.Helper()
	return startSidecarProcessOn(t, "127.0.0.1:0")
}

// startSidecarProcessOn is startSidecarProcess listening on listen.
func startSidecarProcessOn(t *testing.T, listen string) (string, *exec.Cmd) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envTestSidecar+"=1", envTestSidecarAddr+"="+listen)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("sidecar process: %v", err)
	}
	return strings.TrimSpace(addr), cmd
}

func TestSidecarKilledMidRun(t *testing.T) {
	addr, side := startSidecarProcess(t)
	var rs results
	var mu sync.Mutex
	okSeen := 0
	killed := make(chan struct{})
	cfg := testConfig(t, testSettings(t, "runtime.concurrency=2"), nil)
	cfg.Sidecar.Addr = addr
	cfg.OnResult = func(r Result) {
		rs.add(r)
		mu.Lock()
		defer mu.Unlock()
		if r.Outcome == telemetry.OK {
			okSeen++
			if okSeen == 5 {
				_ = side.Process.Kill()
				close(killed)
			}
		}
	}
	r := startRuntime(t, cfg)
	const n = 30
	for i := range n {
		if err := r.Submit(context.Background(), orchestratedUnit(i)); err != nil {
			t.Fatal(err)
		}
		if i == 10 {
			<-killed
		}
	}
	if err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	sum := r.Summary()
	if sum.Submitted != n || sum.OK+sum.Failed+sum.Cancelled != n {
		t.Fatalf("summary %d = %d ok + %d failed + %d cancelled, want %d", sum.Submitted, sum.OK, sum.Failed, sum.Cancelled, n)
	}
	if sum.OK < 5 || sum.Failed < n-11 {
		t.Errorf("got %d ok, %d failed; want at least 5 ok before the kill and the units after it failed", sum.OK, sum.Failed)
	}
	if sum.SidecarApplied != -1 {
		t.Errorf("sidecar applied %d, want -1 for an external sidecar", sum.SidecarApplied)
	}
	for i := 11; i < n; i++ {
		res, _ := rs.get(i)
		if res.Outcome != telemetry.Failed || (res.Class != "sidecar" && res.Class != "completion") ||
			!strings.Contains(res.Reason, "sidecar") {
			t.Errorf("unit %d after the kill: got %v class %q reason %q, want failed with a sidecar reason", i, res.Outcome, res.Class, res.Reason)
		}
	}
}

func TestCancelledRunReconciles(t *testing.T) {
	sc, err := scenario.Builtin("taskhost")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	n := 0
	cfg := testConfig(t, testSettings(t, "scenario.count=100000"), nil)
	cfg.OnResult = func(Result) {
		mu.Lock()
		defer mu.Unlock()
		if n++; n == 30 {
			cancel()
		}
	}
	sum, err := Run(ctx, cfg, sc)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got error %v, want context.Canceled", err)
	}
	if sum.Submitted == 0 || sum.Submitted >= 100000 || sum.Submitted != sum.OK+sum.Failed+sum.Cancelled {
		t.Fatalf("summary %d = %d ok + %d failed + %d cancelled, want a partial run that reconciles", sum.Submitted, sum.OK, sum.Failed, sum.Cancelled)
	}
	if sum.OK < 30 {
		t.Errorf("got %d ok, want at least the 30 that ended before the cancel", sum.OK)
	}
	if sum.Attribution.Works != sum.Submitted {
		t.Errorf("attribution covers %d units, %d were submitted: a unit that was never submitted must not count", sum.Attribution.Works, sum.Submitted)
	}
	if sum.Failed != 0 {
		t.Errorf("got %d failed (%v), want running units drained or cancelled, not failed", sum.Failed, sum.Examples)
	}
}

func TestCloseLeavesNoProcess(t *testing.T) {
	cfg := testConfig(t, testSettings(t, "runtime.nodes=3", "runtime.concurrency=6"), nil)
	r, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		if err := r.Submit(context.Background(), smallUnit(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	pids := r.HostPIDs()
	if len(pids) == 0 {
		t.Fatal("no task host ran")
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for id, pid := range pids {
		if !processGone(pid) {
			t.Errorf("host %d (pid %d) still exists after Close", id, pid)
		}
	}
	if err := r.Submit(context.Background(), smallUnit(99)); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit after Close: got %v, want ErrClosed", err)
	}
}

// TestHostStartedByHand: the task host refuses to run without a parent,
// with a message that says so.
func TestHostStartedByHand(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envTestHost+"=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "not meant to be started by hand") {
		t.Fatalf("got %v, output %q; want exit status 2 and a message about being started by hand", err, out)
	}
}

// TestUnitMetrics: every unit records amdahl.work.duration, and its
// critical path amdahl.phase.critical per phase, labelled with the
// runtime component, its transport, scenario and variant.
func TestUnitMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	cfg := testConfig(t, testSettings(t, "variant=candidate"), nil)
	cfg.Scenario = "metrics"
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	cfg.Telemetry.MeterProvider = mp
	r := startRuntime(t, cfg)
	for i := range 10 {
		if err := r.Submit(context.Background(), smallUnit(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{} // metric/phase → data points' counts
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				continue
			}
			for _, dp := range h.DataPoints {
				comp, _ := dp.Attributes.Value(telemetry.AttrComponent)
				tr, _ := dp.Attributes.Value(telemetry.AttrTransport)
				sc, _ := dp.Attributes.Value(telemetry.AttrScenario)
				va, _ := dp.Attributes.Value(telemetry.AttrVariant)
				if !strings.HasPrefix(m.Name, "amdahl.phase.") && !strings.HasPrefix(m.Name, "amdahl.work.") {
					continue
				}
				if sc.AsString() != "metrics" || va.AsString() != "candidate" {
					t.Errorf("%s point %v: scenario %q variant %q, want metrics/candidate", m.Name, dp.Attributes, sc.AsString(), va.AsString())
				}
				ph, _ := dp.Attributes.Value(telemetry.AttrPhase)
				if m.Name == telemetry.MetricPhaseCritical && ph.AsString() == telemetry.PhaseGap {
					from, _ := dp.Attributes.Value(telemetry.AttrGapFrom)
					to, _ := dp.Attributes.Value(telemetry.AttrGapTo)
					if from.AsString() == "" || to.AsString() == "" || comp.AsString() != "" {
						t.Errorf("gap point %v: want both ends named and no component", dp.Attributes)
					}
					counts[m.Name+"/gap"] += dp.Count
				}
				if m.Name == telemetry.MetricWorkDuration || (m.Name == telemetry.MetricPhaseCritical && comp.AsString() != "") {
					if tr.AsString() != TransportIPC {
						t.Errorf("%s point %v: transport %q, want ipc", m.Name, dp.Attributes, tr.AsString())
					}
					counts[m.Name+"/"+ph.AsString()] += dp.Count
				}
			}
		}
	}
	// Dispatch, serialize, send and execute are on every unit's critical
	// path (the host's execute too: far-side spans are placed causally, so
	// a late end of the parent's send span does not hide them).
	for key, want := range map[string]uint64{telemetry.MetricWorkDuration + "/": 10, telemetry.MetricPhaseCritical + "/dispatch": 10,
		telemetry.MetricPhaseCritical + "/serialize": 10, telemetry.MetricPhaseCritical + "/send": 10, telemetry.MetricPhaseCritical + "/execute": 10,
		telemetry.MetricPhaseCritical + "/gap": 10} {
		if counts[key] < want {
			t.Errorf("%s: %d records, want at least %d; all: %v", key, counts[key], want, counts)
		}
	}
}

// TestCloseWithGrandchild: a task host that started a process of its own
// which holds the host's stdout open (here a shell's background sleep)
// neither hangs Close nor survives it: the host's process group goes with
// the host.
func TestCloseWithGrandchild(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH: cannot start a host with a grandchild")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, testSettings(t, "runtime.nodes=1"), nil)
	cfg.Hosts.Argv = []string{sh, "-c", `sleep 600 & exec "$0"`, exe}
	cfg.Hosts.Grace = 200 * time.Millisecond
	r, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Submit(context.Background(), smallUnit(0)); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := r.Summary(); s.OK != 1 {
		t.Fatalf("unit did not succeed: %v", s.Examples)
	}
	pids := r.HostPIDs()
	if len(pids) != 1 {
		t.Fatalf("hosts %v, want one", pids)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		// The host leads its own process group; the sleep is in it. The
		// group's SIGKILL is delivered asynchronously: allow the kernel a
		// moment (bounded) to act on it.
		live := liveGroupMembers(t, pid)
		for deadline := time.Now().Add(5 * time.Second); len(live) > 0 && time.Now().Before(deadline); live = liveGroupMembers(t, pid) {
			time.Sleep(10 * time.Millisecond)
		}
		if len(live) > 0 {
			t.Errorf("process group %d still has live members 5s after Close: %v", pid, live)
		}
	}
}

// liveGroupMembers lists the processes of process group pgid that are not
// zombies (a killed orphan stays a zombie until init reaps it).
func liveGroupMembers(t *testing.T, pgid int) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var live []string
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may contain spaces.
		st := string(b)
		i := strings.LastIndexByte(st, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(st[i+1:])
		if len(f) < 3 || f[2] != fmt.Sprint(pgid) || f[0] == "Z" || f[0] == "X" {
			continue
		}
		live = append(live, e.Name()+" "+st[:i+1])
	}
	return live
}

// TestSharedSidecar: two runtimes complete to one external sidecar at
// once; work items delivered to the other's stream are handed back, not
// lost or failed, and every unit of both succeeds.
func TestSharedSidecar(t *testing.T) {
	addr, _ := startSidecarProcess(t)
	var wg sync.WaitGroup
	sums := make([]Summary, 2)
	for i := range sums {
		cfg := testConfig(t, testSettings(t, "runtime.nodes=1", "runtime.concurrency=2"), nil)
		cfg.Sidecar.Addr = addr
		r, err := New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 25 {
				if err := r.Submit(context.Background(), smallUnit(j)); err != nil {
					t.Error(err)
					return
				}
			}
			if err := r.Wait(context.Background()); err != nil {
				t.Error(err)
			}
			if err := r.Close(context.Background()); err != nil {
				t.Error(err)
			}
			sums[i] = r.Summary()
		}()
	}
	wg.Wait()
	for i, s := range sums {
		if s.Submitted != 25 || s.OK != 25 {
			t.Errorf("runtime %d: %d ok of %d, want 25 of 25: %v", i, s.OK, s.Submitted, s.Examples)
		}
	}
}

// TestPerturbLengthensOnlyItsPhase: perturb.ipc.send and
// perturb.taskhost.execute (carried to the host through its environment)
// lengthen every span of those phases by the delay; the phases beside
// them do not get it. The delays are far above any phase's own time, so
// the test reads the sleep, not the machine's speed.
func TestPerturbLengthensOnlyItsPhase(t *testing.T) {
	const send, exec = 25 * time.Millisecond, 30 * time.Millisecond
	cfg := testConfig(t, testSettings(t, "scenario.count=8", "perturb.ipc.send="+send.String(), "perturb.taskhost.execute="+exec.String()), nil)
	var mu sync.Mutex
	minDur := map[string]time.Duration{}
	cfg.OnWork = func(w attribution.Work) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range w.Nodes {
			if name := n.Key.String(); n.Key.Phase.Valid() {
				if d, ok := minDur[name]; !ok || n.Dur < d {
					minDur[name] = n.Dur
				}
			}
		}
	}
	sc, err := scenario.Builtin("taskhost")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), cfg, sc); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if minDur["ipc.send/request"] < send || minDur["taskhost.execute"] < exec {
		t.Errorf("shortest ipc.send %v, taskhost.execute %v; want at least %v and %v", minDur["ipc.send/request"], minDur["taskhost.execute"], send, exec)
	}
	for _, row := range []string{"ipc.serialize/request", "taskhost.deserialize/request", "ipc.receive/reply"} {
		if d, ok := minDur[row]; !ok || d >= send {
			t.Errorf("%s: shortest span %v (seen %v), want it without the delay (< %v)", row, d, ok, send)
		}
	}
}

// A runtime records through the providers it is given and never sets up
// telemetry of its own; a provider it cannot read ended spans from is an
// error that says what to pass.
func TestProvidersWithoutSpans(t *testing.T) {
	cfg := testConfig(t, testSettings(t), nil)
	cfg.Telemetry.TracerProvider, cfg.Telemetry.Spans = tracenoop.NewTracerProvider(), nil
	r, err := New(context.Background(), cfg)
	if err == nil {
		_ = r.Close(context.Background())
		t.Fatal("New with a tracer provider that is not an SDK and no Config.Telemetry.Spans: want an error")
	}
	if !strings.Contains(err.Error(), "Config.Telemetry.Spans") {
		t.Errorf("error %q does not say to set Config.Telemetry.Spans", err)
	}
}

// TestCallerServesSidecar: a sidecar the caller started is used, counted
// and left serving: the caller closes it, after the runtime.
func TestCallerServesSidecar(t *testing.T) {
	side, err := chunking.NewSidecar(chunking.SidecarConfig{})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- side.Serve(lis) }()

	cfg := testConfig(t, testSettings(t), nil)
	cfg.Sidecar.Server, cfg.Sidecar.Addr = side, lis.Addr().String()
	r, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	for i := range n {
		if err := r.Submit(context.Background(), orchestratedUnit(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sum := r.Summary(); sum.OK != n || sum.SidecarApplied != n {
		t.Errorf("ok %d, sidecar applied %d; want %d and %d", sum.OK, sum.SidecarApplied, n, n)
	}
	select {
	case err := <-served:
		t.Fatalf("the runtime's Close stopped the caller's sidecar (Serve returned %v)", err)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := side.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}

	cfg.Sidecar.Addr = ""
	if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "Sidecar.Addr") {
		t.Errorf("Config.Sidecar.Server without an address: got %v, want an error naming Sidecar.Addr", err)
	}
}

// TestSummaryWithoutTelemetry: with the SDK disabled there are no spans,
// so no attribution, but the runtime still measures every unit's e2e and
// the throughput itself.
func TestSummaryWithoutTelemetry(t *testing.T) {
	ctx := context.Background()
	tel, err := otelsetup.Setup(ctx, otelsetup.WithLookupEnv(noEnv), otelsetup.WithSDKDisabled(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(ctx) })
	sc, err := scenario.Builtin("mixed")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, testSettings(t, "scenario.count=30"), nil)
	cfg.UseTelemetry(tel)
	var mu sync.Mutex
	byKind := map[string][]time.Duration{}
	cfg.OnResult = func(res Result) {
		mu.Lock()
		byKind[res.Kind.String()] = append(byKind[res.Kind.String()], res.E2E)
		mu.Unlock()
	}
	sum, err := Run(ctx, cfg, sc)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Submitted != 30 || sum.OK == 0 {
		t.Fatalf("got %d units, %d ok (%v), want 30, most ok", sum.Submitted, sum.OK, sum.Examples)
	}
	// Each kind's e2e apart, as the runtime measured its units.
	if len(byKind) != 2 {
		t.Fatalf("the run's units are of %d kinds, want both of mixed's (taskhost, fanout): change the count or the seed", len(byKind))
	}
	if len(sum.E2EByKind) != len(byKind) {
		t.Fatalf("E2EByKind has %d kinds, want %d: %+v", len(sum.E2EByKind), len(byKind), sum.E2EByKind)
	}
	for k, d := range byKind {
		got, ok := sum.E2EByKind[k]
		slices.Sort(d)
		lo, hi := d[(len(d)-1)/2], d[len(d)/2] // the median's two ranks
		if !ok || got.Units != len(d) || got.E2EMean <= 0 || got.E2EP99 < got.E2EP50 ||
			float64(got.E2EP50) < 0.999*float64(lo) || float64(got.E2EP50) > 1.001*float64(hi) {
			t.Errorf("E2EByKind[%s] = %+v, want %d units and a p50 of %v to %v", k, got, len(d), lo, hi)
		}
	}
	if sum.Attribution.Works != 0 {
		t.Errorf("attribution covers %d units with the SDK disabled, want 0", sum.Attribution.Works)
	}
	if sum.Throughput <= 0 || sum.E2EP50 <= 0 || sum.E2EP99 < sum.E2EP50 || sum.E2EMean <= 0 {
		t.Errorf("got throughput %v, e2e mean %v p50 %v p99 %v: want all > 0 and p99 ≥ p50", sum.Throughput, sum.E2EMean, sum.E2EP50, sum.E2EP99)
	}
}

// teeSpans is a spans.Source that records every span the runtime's
// accounting is given, in the order it is given them (the lock is held
// across the call), so a test can replay exactly what it saw.
type teeSpans struct {
	tp   *sdktrace.TracerProvider
	mu   sync.Mutex
	seen []spans.Span
}

func (t *teeSpans) Subscribe(fn func(spans.Span)) func() {
	return otelsetup.SDKSource(t.tp).Subscribe(func(s spans.Span) {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.seen = append(t.seen, s)
		fn(s)
	})
}

// unitSpans returns the spans of units of work that ended before (or as)
// their unit's root: what the runtime's processor keeps of a unit.
func unitSpans(seen []spans.Span) []spans.Span {
	rooted := map[spans.TraceID]bool{}
	for _, s := range seen {
		if s.Name == telemetry.SpanWork && s.ParentID.IsZero() {
			rooted[s.TraceID] = true
		}
	}
	ended := map[spans.TraceID]bool{}
	var out []spans.Span
	for _, s := range seen {
		if !rooted[s.TraceID] || ended[s.TraceID] {
			continue
		}
		out = append(out, s)
		if s.Name == telemetry.SpanWork && s.ParentID.IsZero() {
			ended[s.TraceID] = true
		}
	}
	return out
}

// TestSummaryMatchesTrees: the run's attribution, accounted off the
// span-ending goroutines in batches, is what attribution.Trees gives for
// the same spans (each unit's, up to its root's end), unit by unit and in
// the summary.
func TestSummaryMatchesTrees(t *testing.T) {
	sc := orchestratedMixed(t)
	cfg := testConfig(t, testSettings(t, "scenario.count=80"), nil)
	tee := &teeSpans{tp: cfg.Telemetry.TracerProvider.(*sdktrace.TracerProvider)}
	cfg.Telemetry.Spans = tee
	var mu sync.Mutex
	live := map[spans.TraceID]attribution.Work{}
	cfg.OnWork = func(w attribution.Work) {
		mu.Lock()
		live[w.Root.TraceID] = w
		mu.Unlock()
	}
	sum, err := Run(context.Background(), cfg, sc)
	if err != nil {
		t.Fatal(err)
	}
	tee.mu.Lock()
	works, diag := attribution.Trees(unitSpans(tee.seen))
	tee.mu.Unlock()
	if len(works) != 80 || len(live) != 80 {
		t.Fatalf("got %d units from the recorded spans and %d accounted live, want 80 each", len(works), len(live))
	}
	var acc attribution.Accumulator
	for _, w := range works {
		acc.Add(w)
		got, ok := live[w.Root.TraceID]
		if !ok {
			t.Errorf("unit %s: not accounted live", w.Root.TraceID)
			continue
		}
		if !slices.Equal(got.Stats, w.Stats) || !slices.Equal(got.Nodes, w.Nodes) || got.Root != w.Root {
			t.Errorf("unit %s: live attribution differs from Trees:\n got %+v\nwant %+v", w.Root.TraceID, got.Stats, w.Stats)
		}
	}
	acc.AddDiagnostics(diag)
	want := acc.Report(false)
	if !reflect.DeepEqual(sum.Attribution, want) {
		t.Errorf("summary attribution differs from Trees over the recorded spans:\n got %+v\nwant %+v", sum.Attribution, want)
	}
}

// TestSampledUnits: with a sampler from OTEL_TRACES_SAMPLER, the runtime's
// own tracer attributes the units whose roots it samples, each whole
// (every row has one span per attributed unit), and no other: a ratio
// of one half attributes some units and not all, always_off none; every
// unit still runs, and the summary names the sampler.
func TestSampledUnits(t *testing.T) {
	ctx := context.Background()
	const units = 60
	for _, tc := range []struct {
		sampler, arg, desc string
		some               bool // some units attributed, not all; else none
	}{
		{"parentbased_traceidratio", "0.5", "TraceIDRatioBased{0.5}", true},
		{"always_off", "", "AlwaysOffSampler", false},
	} {
		t.Run(tc.sampler, func(t *testing.T) {
			env := map[string]string{otelsetup.EnvTracesSampler: tc.sampler, otelsetup.EnvTracesSamplerArg: tc.arg}
			tel, err := otelsetup.Setup(ctx, otelsetup.WithLookupEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tel.Shutdown(ctx) })
			sc, err := scenario.Builtin("taskhost")
			if err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(t, testSettings(t, fmt.Sprintf("scenario.count=%d", units)), nil)
			cfg.UseTelemetry(tel)
			if cfg.Telemetry.TracerProvider != nil || cfg.Telemetry.Sampler == nil {
				t.Fatalf("UseTelemetry: TracerProvider %T, Sampler %v: want the runtime's own tracer, with the sampler", cfg.Telemetry.TracerProvider, cfg.Telemetry.Sampler)
			}
			sum, err := Run(ctx, cfg, sc)
			if err != nil {
				t.Fatal(err)
			}
			if sum.OK != units {
				t.Fatalf("%d of %d units ok (%v)", sum.OK, units, sum.Examples)
			}
			works := sum.Attribution.Works
			if tc.some != (works > 0 && works < units) || (!tc.some && works != 0) {
				t.Fatalf("attribution covers %d of %d units, want some and not all: %v", works, units, tc.some)
			}
			for _, row := range sum.Attribution.Rows {
				if row.Name != "other" && row.Spans != works {
					t.Errorf("row %s has %d spans for %d units attributed: a sampled unit was not whole, or an unsampled one counted", row.Name, row.Spans, works)
				}
			}
			if !strings.Contains(sum.Sampler, tc.desc) {
				t.Errorf("Summary.Sampler %q does not name the sampler", sum.Sampler)
			}
		})
	}
}

package ab

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
)

// The test binary is its own task host: the runtime starts it with an
// inherited connection (ipc.EnvFD).
func TestMain(m *testing.M) {
	if os.Getenv(ipc.EnvFD) != "" {
		if err := runtime.ServeHost(context.Background(), runtime.BuiltinTasks()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func config(t *testing.T, units int) Config {
	t.Helper()
	sc, err := scenario.Builtin("taskhost")
	if err != nil {
		t.Fatal(err)
	}
	var sides [2]Side
	for i, name := range []string{"baseline", "candidate"} {
		set, err := runtime.ResolveSettings([]string{"runtime.nodes=1", fmt.Sprintf("scenario.count=%d", units), "variant=" + name}, func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		sides[i] = Side{Name: name, Settings: set}
	}
	return Config{Scenario: sc, Sides: sides, Runs: 2, Warmup: 0.25, HostArgv: []string{os.Args[0], "-test.run=^$"},
		Logger: slog.New(slog.DiscardHandler)}
}

// TestRunPairs: two real pairs, the side that goes first alternating, each
// run's units accounted with the warm-up left out, earliest first.
func TestRunPairs(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED", "PYROSCOPE_SERVER_ADDRESS", "AMDAHL_TRACE_FILE", "AMDAHL_METRICS_ADDR", "AMDAHL_PROFILE_DIR"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	cfg := config(t, 20)
	ran := 0
	cfg.OnRun = func() { ran++ }
	runs, interrupted, err := RunPairs(context.Background(), cfg)
	if err != nil || interrupted {
		t.Fatalf("RunPairs = %v, interrupted %v", err, interrupted)
	}
	var order []string
	for _, r := range runs {
		order = append(order, fmt.Sprintf("%s-%d", r.Side, r.Index))
		if r.Units != 20 || r.OK != 20 || r.Attributed != 15 || len(r.Works) != 15 || r.Wall <= 0 || r.Throughput <= 0 || r.E2EMean <= 0 {
			t.Errorf("run %s-%d: units %d ok %d attributed %d works %d wall %v throughput %v e2e %v; want 20, 20, 15 (a quarter left out), 15, and positive times",
				r.Side, r.Index, r.Units, r.OK, r.Attributed, len(r.Works), r.Wall, r.Throughput, r.E2EMean)
		}
		for i := 1; i < len(r.Works); i++ {
			if r.Works[i].Root.Start < r.Works[i-1].Root.Start {
				t.Errorf("run %s-%d: works not in start order at %d", r.Side, r.Index, i)
				break
			}
		}
	}
	if got, want := strings.Join(order, " "), "baseline-1 candidate-1 candidate-2 baseline-2"; got != want {
		t.Errorf("runs in order %q, want %q (the side that goes first alternates)", got, want)
	}
	if ran != 4 {
		t.Errorf("OnRun called %d times, want 4", ran)
	}
}

func TestRunPairsInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	runs, interrupted, err := RunPairs(ctx, config(t, 20))
	if err != nil || !interrupted || len(runs) != 0 {
		t.Errorf("RunPairs after cancel = %d runs, interrupted %v, %v; want none, true, nil", len(runs), interrupted, err)
	}
}

func TestConfigRefused(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Scenario = nil }, "no scenario"},
		{func(c *Config) { c.Runs = 1 }, "runs"},
		{func(c *Config) { c.Block = -1 }, "per turn"},
		{func(c *Config) { c.InFlight = -1 }, "in flight"},
		{func(c *Config) { c.Warmup = 0.6 }, "warm-up"},
	} {
		cfg := config(t, 20)
		c.mod(&cfg)
		if _, _, err := RunPairs(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RunPairs = %v, want an error about %q", err, c.want)
		}
	}
}

func TestTargets(t *testing.T) {
	differ := SettingsThatDiffer(map[string]string{"ipc.buffer": "1", "variant": "a", "x": "1"}, map[string]string{"ipc.buffer": "2", "variant": "b", "x": "1"})
	if strings.Join(differ, ",") != "ipc.buffer" {
		t.Errorf("SettingsThatDiffer = %v, want [ipc.buffer] (variant aside)", differ)
	}
	if got := strings.Join(Targets([]string{"perturb.ipc.send", "chunking.algorithm", "runtime.nodes"}), ","); got != "chunking,ipc.send,runtime" {
		t.Errorf("Targets = %q", got)
	}
}

package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amdahl-rt/amdahl/internal/report/profiles"
	"github.com/amdahl-rt/amdahl/runtime"
)

// profileScenario has both kinds of unit, with enough hashing in the hosts'
// execute phase for the CPU profile to sample it, and configurations over
// the ipc reader's 128 KiB buffer (whose growth is what the receive phase
// allocates).
const profileScenario = `name: profiled
seed: 7
count: 12
workloads:
  - kind: taskhost
    weight: 0.7
    task:
      config_mean: 192KB
      config_min: 160KB
      config_cap: 256KB
      environment: 2KB
      parameters: 8
      execute_passes: 150
  - kind: fanout
    weight: 0.3
    fanout:
      shapes:
        - name: 8x64KiB
          actions: 8
          action_bytes: 64KiB
`

// memProfileRate samples an allocation every 256 bytes on average in the
// run and its hosts (GODEBUG=memprofilerate, inherited by the hosts), not
// every 512 KiB: every phase entry function's few allocations per unit are
// then in the heap profiles. The thinnest is ipc's write: since --out keeps
// a task unit's spans in its record, it allocates about 3 KiB in phase send
// over this whole run (measured at rate 1). At 1024 that is about three
// samples expected, and none came in 4 of 30 runs (one of them on CI); at
// 256, about twelve, none in 30 runs. 1 (every allocation) makes the
// race-enabled hosts too slow to shut down in their grace.
const memProfileRate = "256"

// runOut runs `amdahl run --out` as its own process (this test binary as
// amdahl, its task hosts too) with memProfileRate, and returns the
// directory.
func runOut(t *testing.T) string {
	t.Helper()
	tmp := t.TempDir()
	scen := filepath.Join(tmp, "profiled.yaml")
	if err := os.WriteFile(scen, []byte(profileScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "out")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "run", "--scenario-file", scen, "--out", dir, "--progress", "never")
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "OTEL_") || strings.HasPrefix(k, "PYROSCOPE_") || strings.HasPrefix(k, "AMDAHL_") || k == "GODEBUG" {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, envTestMain+"=1", "GODEBUG=memprofilerate="+memProfileRate)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run --out: %v\n%s", err, out)
	}
	t.Logf("run --out:\n%s", out)
	return dir
}

func profileOf(t *testing.T, args ...string) profileJSON {
	t.Helper()
	code, out, errs := runCLI(t, append([]string{"profile", "--json"}, args...)...)
	if code != exitOK {
		t.Fatalf("profile %v: exit %d, stderr %q", args, code, errs)
	}
	var p profileJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("profile %v: %v\n%s", args, err, out)
	}
	if p.SchemaVersion != runtime.SchemaVersion {
		t.Errorf("schema_version %d, want %d", p.SchemaVersion, runtime.SchemaVersion)
	}
	return p
}

func phaseOf(p profileJSON, phase string) (profiles.PhaseTop, bool) {
	for _, pt := range p.Phases {
		if pt.Phase == phase {
			return pt, true
		}
	}
	return profiles.PhaseTop{}, false
}

func funcIn(pt profiles.PhaseTop, name string) (profiles.Func, bool) {
	for _, f := range pt.Funcs {
		if f.Name == name {
			return f, true
		}
	}
	return profiles.Func{}, false
}

// TestProfileCommand runs a real `run --out` and reads its profiles back:
// CPU time of the hosts' execute phase goes to the task's hashing; every
// phase entry function of internal/report/profiles is on the stacks of the run's
// allocations, in its phase (so a rename or a moved span fails here).
func TestProfileCommand(t *testing.T) {
	dir := runOut(t)

	// report.html of the same run lists them too.
	t.Run("report.html", func(t *testing.T) {
		page, err := os.ReadFile(filepath.Join(dir, "report.html"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`<section id="profiles">`, `data-phase="execute"`, "sha256"} {
			if !strings.Contains(string(page), want) {
				t.Errorf("report.html lacks %q: the top functions per phase of the run's CPU profiles", want)
			}
		}
	})

	t.Run("cpu", func(t *testing.T) {
		p := profileOf(t, dir, "--top", "0")
		hosts := 0
		for _, f := range p.Files {
			if strings.Contains(f, string(filepath.Separator)+profiles.HostsDir+string(filepath.Separator)) {
				hosts++
			}
		}
		if p.InPhase == nil || p.Samples <= 0 || p.InPhase.Low > p.InPhase.Share || p.InPhase.High < p.InPhase.Share {
			t.Errorf("samples %d, in_phase %+v: want the share in a phase with its interval", p.Samples, p.InPhase)
		}
		if p.Kind != "cpu" || len(p.Files) < 2 || hosts == 0 {
			t.Fatalf("kind %q from %v, want cpu from the parent and the hosts", p.Kind, p.Files)
		}
		ex, ok := phaseOf(p, "execute")
		if !ok {
			t.Fatalf("no execute phase in %+v", p.Phases)
		}
		// A third, not half: the phase also holds the host's span and
		// label work (and under -race the detector's), and its few dozen
		// samples move the share by about 15 points from run to run
		// (seen at 48.6 % under load). A profile that books the hashing
		// elsewhere gives 0.
		if f, ok := funcIn(ex, "github.com/amdahl-rt/amdahl/runtime.hashTask"); !ok || f.Cum < ex.Total/3 {
			t.Errorf("execute: runtime.hashTask %+v, want at least a third of the phase's %d ns", f, ex.Total)
		}
		top := ex.Funcs[:min(5, len(ex.Funcs))]
		sha := false
		for _, f := range top {
			sha = sha || strings.Contains(f.Name, "sha256")
		}
		if !sha {
			t.Errorf("execute: no sha256 function in the top %d by flat: %+v", len(top), top)
		}
	})

	t.Run("alloc", func(t *testing.T) {
		p := profileOf(t, dir, "--alloc", "--top", "0")
		if p.Kind != "alloc" {
			t.Errorf("kind %q, want alloc", p.Kind)
		}
		for _, e := range profiles.Entries {
			pt, _ := phaseOf(p, e.Phase.String())
			if f, ok := funcIn(pt, e.Func); !ok || f.Cum == 0 {
				t.Errorf("entry %s: not on any allocation's stack in phase %s of a real run (renamed? moved?)", e.Func, e.Phase)
			}
		}
		ex, _ := phaseOf(p, "execute")
		if f, _ := funcIn(ex, "github.com/amdahl-rt/amdahl/runtime.hashTask"); f.Flat == 0 {
			t.Errorf("execute: runtime.hashTask allocates nothing? %+v", ex.Funcs)
		}
	})

	t.Run("table", func(t *testing.T) {
		code, out, errs := runCLI(t, "profile", dir, "--alloc", "--phase", "execute", "--top", "3")
		if code != exitOK {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
		for _, want := range []string{"bytes allocated by phase in ", "from task hosts", "phase execute: ", "runtime.hashTask", "innermost phase entry function"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "phase serialize") {
			t.Errorf("--phase execute shows another phase:\n%s", out)
		}
	})
}

func TestProfileUsage(t *testing.T) {
	empty := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no dir", []string{"profile"}, exitUsage, "takes one directory"},
		{"two dirs", []string{"profile", empty, empty}, exitUsage, "takes one directory"},
		{"bad phase", []string{"profile", empty, "--phase", "lunch"}, exitUsage, `--phase "lunch": want queue, dispatch`},
		{"bad top", []string{"profile", empty, "--top", "-1"}, exitUsage, "--top -1"},
		{"no profiles", []string{"profile", empty}, exitFail, "no cpu.pprof in"},
		{"no heap profiles", []string{"profile", "--alloc", empty}, exitFail, "no heap.pprof in"},
		{"missing dir", []string{"profile", filepath.Join(empty, "nope")}, exitFail, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runCLI(t, tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d with %q", code, errs, tc.code, tc.want)
			}
		})
	}
}

// TestWilson: the share's interval (amdahl profile's second line) against
// worked values of the 95 % Wilson score interval.
func TestWilson(t *testing.T) {
	for _, tc := range []struct {
		k, n      int64
		low, high float64
	}{
		{90, 100, 0.8256, 0.9448},
		{100, 100, 0.9630, 1},
		{0, 10, 0, 0.2775},
		{1030, 1150, 0.8766, 0.9120},
	} {
		got := wilson(tc.k, tc.n)
		if math.Abs(got.Low-tc.low) > 5e-4 || math.Abs(got.High-tc.high) > 5e-4 || got.Share != float64(tc.k)/float64(tc.n) {
			t.Errorf("wilson(%d, %d) = %+v, want [%.4f, %.4f]", tc.k, tc.n, *got, tc.low, tc.high)
		}
	}
	if wilson(0, 0) != nil {
		t.Error("wilson(0, 0) is not nil")
	}
}

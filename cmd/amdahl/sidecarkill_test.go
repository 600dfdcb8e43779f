package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/runtime"
)

// sidecarProcess runs `amdahl sidecar --listen listen` (this test binary
// as amdahl) in a process group of its own and returns its address once
// it listens; the test's cleanup kills it.
func sidecarProcess(t *testing.T, listen string) (string, *exec.Cmd) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "sidecar", "--listen", listen)
	cmd.Env = append(os.Environ(), envTestMain+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	br := bufio.NewReader(stderr)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "listening on ") {
		t.Fatalf("sidecar: %q, %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, br) }() // a full pipe must not block it
	return strings.TrimSpace(line[strings.Index(line, "listening on ")+len("listening on "):]), cmd
}

// runUntil starts `amdahl run args… --progress always` as a process and
// calls at once its progress bar shows at least done units finished.
// It returns a function that waits for the run's end, for at most limit
// (then it kills the run and fails the test), and returns its exit status
// and stdout.
func runUntil(t *testing.T, done int, at func(), args ...string) func(limit time.Duration) (int, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, append(args, "--progress", "always")...)
	cmd.Env = append(os.Environ(), envTestMain+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout strings.Builder
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	br := bufio.NewReader(stderr)
	for n := 0; n < done; {
		line, err := br.ReadString('\r')
		if err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			t.Fatalf("no progress with %d done on stderr: %v (last %q)", done, err, line)
		}
		if i := strings.LastIndex(line, "] "); i >= 0 {
			fmt.Sscanf(line[i+2:], "%d/", &n)
		}
	}
	at()
	rest := make(chan string, 1)
	go func() { b, _ := io.ReadAll(br); rest <- string(b) }()
	return func(limit time.Duration) (int, string) {
		timer := time.AfterFunc(limit, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		err := cmd.Wait()
		if !timer.Stop() {
			t.Fatalf("the run had not ended %v later: killed; stdout so far:\n%s", limit, stdout.String())
		}
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if r := <-rest; code != exitOK && code != exitFail {
			t.Logf("run's stderr: %s", r)
		}
		return code, stdout.String()
	}
}

// readSummary reads summary.json from an --out directory.
func readSummary(t *testing.T, dir string) runtime.Summary {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s runtime.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRunSurvivesSidecarKill: `amdahl run --sidecar` of 20,000
// orchestrated units with the default retry budget and breaker, the
// sidecar SIGKILLed after 300 units. Once the sidecar has been unreachable
// for sidecar.breaker.open_after, the units that need it fail at once,
// class "sidecar unavailable", instead of each spending the retry budget
// (about a minute): the run ends within 30 s of the kill (the
// acceptance bound of issue 49; without the breaker it would take days)
// and reconciles. Real processes: the sidecar, the run and its task hosts.
func TestRunSurvivesSidecarKill(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 20,000-unit run against a sidecar process")
	}
	addr, side := sidecarProcess(t, "127.0.0.1:0")
	out := t.TempDir()
	const n = 20000
	var killed time.Time
	wait := runUntil(t, 300, func() {
		if err := side.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		killed = time.Now()
	}, "run", "--sidecar", addr, "--scenario", "orchestrated", "--set", fmt.Sprintf("scenario.count=%d", n), "--out", out)
	// Without the breaker each unit spends the retry budget, about a
	// minute, four at a time: the wait's bound ends that run.
	code, stdout := wait(60 * time.Second)
	took := time.Since(killed)
	t.Logf("the run ended %v after the sidecar was killed", took.Round(time.Millisecond))
	if code != exitOK {
		t.Fatalf("exit %d, want %d (the run completed, its failed units reported); stdout:\n%s", code, exitOK, stdout)
	}
	if took > 30*time.Second {
		t.Errorf("the run ended %v after the kill, want within 30s", took.Round(time.Millisecond))
	}
	s := readSummary(t, out)
	if s.Submitted != n || s.OK+s.Failed+s.Cancelled != n {
		t.Fatalf("summary: %d submitted = %d ok + %d failed + %d cancelled, want %d, all accounted", s.Submitted, s.OK, s.Failed, s.Cancelled, n)
	}
	if s.OK < 300 {
		t.Errorf("%d ok, want at least the 300 before the kill", s.OK)
	}
	classes := 0
	for c, k := range s.Failures {
		switch c {
		case runtime.ClassSidecarUnavailable, "sidecar", "completion":
			classes += k
		default:
			t.Errorf("%d units failed with class %q (e.g. %s), want only sidecar classes", k, c, s.Examples[c])
		}
	}
	if classes != s.Failed+s.Cancelled {
		t.Errorf("failures by class add up to %d, want %d failed + %d cancelled", classes, s.Failed, s.Cancelled)
	}
	if u := s.Failures[runtime.ClassSidecarUnavailable]; u < n/2 {
		t.Errorf("%d units failed as %q, want most of the %d after the kill (failures %v)", u, runtime.ClassSidecarUnavailable, n-s.OK, s.Failures)
	}
	if !strings.Contains(s.Examples[runtime.ClassSidecarUnavailable], "circuit breaker open") {
		t.Errorf("example of %q: %q, want it to name the circuit breaker", runtime.ClassSidecarUnavailable, s.Examples[runtime.ClassSidecarUnavailable])
	}
}

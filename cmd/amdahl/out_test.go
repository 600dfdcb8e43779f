package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunOutNotWritable: an --out that cannot be a directory fails the run
// before anything runs, with an error naming --out.
func TestRunOutNotWritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, out string }{
		{"a file", file},
		{"under a file", filepath.Join(file, "out")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI(t, "run", "--scenario", "taskhost", "--set", "scenario.count=20", "--set", "runtime.nodes=2", "--out", tc.out)
			if code != exitFail {
				t.Errorf("exit %d, want %d", code, exitFail)
			}
			if !strings.Contains(errs, "--out") || !strings.Contains(errs, "not a directory") {
				t.Errorf("stderr %q, want an error naming --out and why", errs)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing: the run must not start", out)
			}
		})
	}
}

// TestRunTraceFileFull: the trace file fills up during the run (/dev/full
// fails every write with ENOSPC). The run still prints its summary,
// reports the write error and exits 1.
func TestRunTraceFileFull(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	code, out, errs := runCLIEnv(t, map[string]string{"AMDAHL_TRACE_FILE": "/dev/full"},
		"run", "--scenario", "taskhost", "--set", "scenario.count=50", "--set", "runtime.nodes=2")
	if code != exitFail {
		t.Errorf("exit %d, want %d", code, exitFail)
	}
	if !strings.Contains(out, "units 50: ok 50, failed 0, cancelled 0") {
		t.Errorf("stdout lacks the summary of the run:\n%s", out)
	}
	if !strings.Contains(errs, "write trace file") || !strings.Contains(errs, "no space left on device") {
		t.Errorf("stderr %q, want the trace file's write error", errs)
	}
}

// TestRunSummaryUnwritable: summary.json cannot be written at the end of
// the run (here a directory stands at its name; a full disk fails the same
// write). The summary still prints, the error names summary.json, exit 1.
func TestRunSummaryUnwritable(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "summary.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "run", "--scenario", "taskhost", "--set", "scenario.count=30", "--set", "runtime.nodes=2", "--out", dir)
	if code != exitFail {
		t.Errorf("exit %d, want %d", code, exitFail)
	}
	if !strings.Contains(out, "units 30: ok 30, failed 0, cancelled 0") {
		t.Errorf("stdout lacks the summary of the run:\n%s", out)
	}
	if !strings.Contains(errs, "write summary.json") {
		t.Errorf("stderr %q, want the summary.json write error", errs)
	}
}

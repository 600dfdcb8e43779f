package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/amdahl-rt/amdahl/runtime"
)

// gcSettings reads the process's memory limit and GC percent without
// changing them.
func gcSettings() (limit int64, percent int) {
	limit = debug.SetMemoryLimit(-1)
	percent = debug.SetGCPercent(100)
	debug.SetGCPercent(percent)
	return limit, percent
}

// TestRunMemoryBudget: amdahl run's process works under a memory limit of
// three times runtime.completion_bytes plus its base, with the GC percent
// off, and sets neither when the user set GOGC or GOMEMLIMIT.
func TestRunMemoryBudget(t *testing.T) {
	limit0, percent0 := gcSettings()
	t.Cleanup(func() {
		debug.SetMemoryLimit(limit0)
		debug.SetGCPercent(percent0)
	})
	set := runtime.Settings{CompletionBytes: runtime.DefaultCompletionBytes}
	if got, want := runMemoryLimit(set), int64(240<<20); got != want {
		t.Errorf("runMemoryLimit at the default completion_bytes = %d, want %d (240 MiB)", got, want)
	}
	for _, tc := range []struct {
		name, env, value string
		set              bool
	}{
		{"neither set", "", "", true},
		{"GOGC set", "GOGC", "150", false},
		{"GOMEMLIMIT set", "GOMEMLIMIT", "1GiB", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
				if v, ok := os.LookupEnv(k); ok {
					t.Setenv(k, v) // restored after the subtest
					os.Unsetenv(k)
				}
			}
			if tc.env != "" {
				t.Setenv(tc.env, tc.value)
			}
			debug.SetMemoryLimit(math.MaxInt64)
			debug.SetGCPercent(100)
			if got := setRunMemoryBudget(set); got != tc.set {
				t.Errorf("setRunMemoryBudget reported %v, want %v", got, tc.set)
			}
			limit, percent := gcSettings()
			wantLimit, wantPercent := int64(math.MaxInt64), 100
			if tc.set {
				wantLimit, wantPercent = runMemoryLimit(set), runGCPercent
			}
			if limit != wantLimit || percent != wantPercent {
				t.Errorf("memory limit %d, GC percent %d; want %d and %d", limit, percent, wantLimit, wantPercent)
			}
		})
	}
}

// TestRunSetsMemoryBudget: `amdahl run` itself sets the limit from its
// settings (runtime.completion_bytes=16MiB: 96 MiB) and turns GC off.
func TestRunSetsMemoryBudget(t *testing.T) {
	limit0, percent0 := gcSettings()
	t.Cleanup(func() {
		debug.SetMemoryLimit(limit0)
		debug.SetGCPercent(percent0)
	})
	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		if v, ok := os.LookupEnv(k); ok {
			t.Setenv(k, v)
			os.Unsetenv(k)
		}
	}
	t.Setenv(envTestMain, "1")
	debug.SetMemoryLimit(math.MaxInt64)
	debug.SetGCPercent(100)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"run", "--scenario", "taskhost", "--set", "scenario.count=3",
		"--set", "runtime.completion_bytes=16MiB"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d; stderr %q", code, errb.String())
	}
	if limit, percent := gcSettings(); limit != 96<<20 || percent != -1 {
		t.Errorf("after amdahl run: memory limit %d, GC percent %d; want %d (3 × 16 MiB + 48 MiB) and -1 (off)", limit, percent, 96<<20)
	}
}

// TestSidecarMemoryLimitKeepsGOGC: amdahl sidecar sets its memory limit
// beside a GOGC the operator set, and leaves its GC percent alone.
func TestSidecarMemoryLimitKeepsGOGC(t *testing.T) {
	limit0, percent0 := gcSettings()
	t.Cleanup(func() {
		debug.SetMemoryLimit(limit0)
		debug.SetGCPercent(percent0)
	})
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		t.Setenv("GOMEMLIMIT", v)
		os.Unsetenv("GOMEMLIMIT")
	}
	t.Setenv("GOGC", "150")
	debug.SetMemoryLimit(math.MaxInt64)
	debug.SetGCPercent(150)
	if !setMemoryBudget(300<<20, 0) {
		t.Fatal("setMemoryBudget with GOGC set and no GC percent to change set nothing")
	}
	if limit, percent := gcSettings(); limit != 300<<20 || percent != 150 {
		t.Errorf("memory limit %d, GC percent %d; want %d and 150", limit, percent, 300<<20)
	}
}

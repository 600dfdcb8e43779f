package main

import (
	"fmt"
	"os"
	goruntime "runtime"
	"strings"
	"testing"
)

// TestMixedMemory: `amdahl run --scenario mixed` stays within 300 MB of
// peak RSS (800 MB under the race detector: its shadow memory is outside
// the Go memory limit run works under, 240 MiB, and about doubles a heap
// of payloads), whatever its length: the fanout
// completions in flight are bounded by their payload bytes
// (runtime.completion_bytes, 64 MiB) and the sender holds at most 8 MiB of
// a completion's encoded chunks ahead of the one it sends. Without those
// bounds the run held 700 MB from 3,000 units on (1.7 GB under the race
// detector): the sender encoded each completion whole (64 MiB for the
// 32 × 2 MiB shape) and several were sent and reassembled at once.
func TestMixedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a run of thousands of mixed units")
	}
	if goruntime.GOOS != "linux" {
		t.Skip("peak RSS is read from the child's rusage on Linux")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	units, bound := 3000, int64(300e6)
	if raceBuild {
		units, bound = 1500, 800e6
	}
	rss, cpu, out, err := peakRSS(t, exe, "run", "--scenario", "mixed", "--set", fmt.Sprintf("scenario.count=%d", units))
	if err != nil {
		t.Fatalf("amdahl run: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("units %d: ok ", units); !strings.Contains(out, want) {
		t.Fatalf("no %q in the run's output:\n%s", want, out)
	}
	t.Logf("mixed, %d units: peak RSS %.1f MB, CPU %v", units, float64(rss)/1e6, cpu)
	if rss > bound {
		t.Errorf("peak RSS %.1f MB, want at most %.0f MB", float64(rss)/1e6, float64(bound)/1e6)
	}
}

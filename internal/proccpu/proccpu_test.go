package proccpu

import (
	"testing"
	"time"
)

// TestUsedGrows: CPU spent between two reads shows in the second. The
// test spins until Used has grown by 20 ms, so a loaded machine (which
// gives the spin less CPU per wall second) only makes it take longer; it
// fails when 10 s of spinning never show 20 ms.
func TestUsedGrows(t *testing.T) {
	before := Used()
	if before <= 0 {
		t.Fatalf("Used() = %v before any work, want > 0 (a test binary has run for some CPU time)", before)
	}
	x, deadline := uint64(1), time.Now().Add(10*time.Second)
	for Used()-before < 20*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("Used() grew by %v over 10 s of spinning (x=%d), want at least 20 ms", Used()-before, x)
		}
		for range 100_000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
}

package proccpu

import (
	"testing"
	"time"
)

// TestUsedGrows: CPU spent between two reads shows in the second.
func TestUsedGrows(t *testing.T) {
	before := Used()
	if before <= 0 {
		t.Fatalf("Used() = %v before any work, want > 0 (a test binary has run for some CPU time)", before)
	}
	x, deadline := uint64(1), time.Now().Add(50*time.Millisecond)
	for time.Now().Before(deadline) {
		for range 1000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	if after := Used(); after-before < 20*time.Millisecond {
		t.Fatalf("Used() grew by %v over 50 ms of spinning (x=%d), want at least 20 ms", after-before, x)
	}
}

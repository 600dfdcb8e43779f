package otelsetup

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestProfileWriteErrors: the disk fills up while the profiles are written
// (every write to /dev/full fails with ENOSPC). runtime/pprof ignores the
// CPU profile's write errors; stopping the profiles must report them, and
// the heap profile's, instead of leaving truncated files without a word.
func TestProfileWriteErrors(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	prev := createProfile
	t.Cleanup(func() { createProfile = prev })
	createProfile = func(string) (*os.File, error) { return os.OpenFile("/dev/full", os.O_WRONLY, 0) }

	p, err := startProfiles(t.TempDir(), PyroscopeConfig{}, "test")
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
	}
	err = p.stop()
	if err == nil {
		t.Fatal("stop: nil error, want the write errors of cpu.pprof and heap.pprof")
	}
	for _, want := range []string{"write cpu profile", "write heap profile", "no space left on device"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("stop: %v; want it to say %q", err, want)
		}
	}
}

package otelsetup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/internal/proccpu"
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

// TestProfileWindow: stopping the profiles writes the window of the
// process's CPU time that the CPU profile covers (proccpu.WindowFile),
// and the CPU spent while it ran is inside it.
func TestProfileWindow(t *testing.T) {
	dir := t.TempDir()
	before := proccpu.Used()
	p, err := startProfiles(dir, PyroscopeConfig{}, "test")
	if err != nil {
		t.Fatal(err)
	}
	for start := proccpu.Used(); proccpu.Used()-start < 30*time.Millisecond; {
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	after := proccpu.Used()
	w, err := proccpu.ReadWindow(filepath.Join(dir, proccpu.WindowFile))
	if err != nil {
		t.Fatal(err)
	}
	if w.Start < before || w.Stop > after || w.Stop-w.Start < 30*time.Millisecond {
		t.Errorf("window %v … %v; want inside %v … %v and at least the 30ms spun", w.Start, w.Stop, before, after)
	}
	// On Linux the window names the part sysmon used (ReadWindow refuses
	// one outside the window).
	if _, err := proccpu.SysmonUsed(); err == nil && w.Sysmon == nil {
		t.Errorf("window %+v has no sysmon CPU, though proccpu.SysmonUsed reads it", w)
	}
	for _, f := range []string{"cpu.pprof", "heap.pprof"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestProfileWindowEndsWithSampling: the window ends where sampling ends.
// Writing the CPU profile out (here StopCPUProfile followed by 30 ms of
// CPU, as symbolizing and compressing a large profile takes) happens with
// no sample taken, so it must fall after Stop, in Written − Stop, not in
// the window, where it would read as CPU the samples missed.
func TestProfileWindowEndsWithSampling(t *testing.T) {
	dir := t.TempDir()
	prev := stopCPUProfile
	t.Cleanup(func() { stopCPUProfile = prev })
	var atStop time.Duration
	stopCPUProfile = func() {
		atStop = proccpu.Used()
		prev()
		for start := proccpu.Used(); proccpu.Used()-start < 30*time.Millisecond; {
		}
	}
	p, err := startProfiles(dir, PyroscopeConfig{}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	w, err := proccpu.ReadWindow(filepath.Join(dir, proccpu.WindowFile))
	if err != nil {
		t.Fatal(err)
	}
	if w.Stop > atStop {
		t.Errorf("window stops at %v of CPU, after sampling stopped at %v: the profile's writing is in the window", w.Stop, atStop)
	}
	if w.Written-w.Stop < 30*time.Millisecond {
		t.Errorf("written at %v, stopped at %v: want the 30ms spent writing the profile between them", w.Written, w.Stop)
	}
}

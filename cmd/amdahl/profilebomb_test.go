package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bombRSS bounds the peak RSS of `amdahl profile` refusing a bomb.
const bombRSS = 100 << 20

// TestProfileBombs runs `amdahl profile` (its own process) on profiles
// built to exhaust it (testdata/bombs): double-gzip.pprof, 590 bytes, is
// a gzip stream whose content is a gzip stream of 256 MiB of zeros
// (nested compression: the bound on the file's size held for the outer
// layer only); samples.pprof, 32 KB, a gzipped profile of 16.5 million
// empty samples (33 MB decompressed, within the size bound). Both were
// made with Python's gzip.compress at level 9. Each is refused with an
// error naming its bound, and the process's peak RSS stays under 100 MB.
func TestProfileBombs(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if goruntime.GOOS != "linux" {
		t.Skip("peak RSS is read from the child's rusage on Linux")
	}
	for _, tc := range []struct {
		name string
		file string
		want string
	}{
		{"double gzip", "double-gzip.pprof", "nested compression is refused"},
		{"sample bomb", "samples.pprof", "the MaxSamples bound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "bombs", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "cpu.pprof"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			rss, cpu, out, err := peakRSS(t, exe, "profile", dir)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("profile of a %d-byte %s: %v, output %q; want a failure naming %q", len(data), tc.name, err, out, tc.want)
			}
			t.Logf("%s (%d bytes): refused with peak RSS %.1f MB, CPU %v", tc.name, len(data), float64(rss)/1e6, cpu)
			if rss > bombRSS {
				t.Errorf("peak RSS %.1f MB refusing a %s, want at most %d MB", float64(rss)/1e6, tc.name, bombRSS>>20)
			}
		})
	}
}

// envPeakRSS makes the test binary run its arguments as amdahl in a child
// process and print the child's peak RSS (see peakRSS).
const envPeakRSS = "AMDAHL_TEST_PEAK_RSS"

// peakRSS runs `amdahl args…` (this test binary as amdahl) and returns its
// peak RSS in bytes, its CPU time, its output and its exit error. The
// child is started from an intermediate process, this test binary in
// peakRSSMain, not from the test: on Linux a process started by a vfork
// (as os/exec does) inherits the peak RSS of the process it was forked
// from, and the test's own can be far above the bound.
func peakRSS(t *testing.T, exe string, args ...string) (rss int64, cpu time.Duration, out string, err error) {
	t.Helper()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(childEnv(), envPeakRSS+"=1")
	cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool { return kv == envTestMain+"=1" })
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var kib, ns int64
	if _, serr := fmt.Sscanf(stdout.String(), "maxrss=%d cpu=%d", &kib, &ns); serr != nil {
		t.Fatalf("peak RSS of %v: %q: %v (stderr %q)", args, stdout.String(), serr, stderr.String())
	}
	return kib << 10, time.Duration(ns), stderr.String(), err
}

// peakRSSMain runs args as amdahl (this binary), its output to stderr,
// then prints "maxrss=<KiB> cpu=<ns>" of it on stdout and exits with its
// exit code.
func peakRSSMain(args []string) int {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, envPeakRSS+"=") }), envTestMain+"=1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	err := cmd.Run()
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		fmt.Fprintln(os.Stderr, "no rusage on this platform")
		return 3
	}
	fmt.Printf("maxrss=%d cpu=%d\n", ru.Maxrss, (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Nanoseconds())
	return cmd.ProcessState.ExitCode()
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amdahl-rt/amdahl/internal/report/profiles"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// addCPU reads the CPU profiles of a run --out directory (the parent's and
// every task host's) and gives rep each row's CPU time per unit of work
// (Row.CPUPerWork) and the account of the rest (Report.CPU). A sample
// counts to the row its labels or its stack name (internal/report/profiles):
// component.phase/direction, or phase/direction when the rows are by
// phase; a phase with no span in rep is a row of CPU only. processes is
// the processes' CPU time as the system counted it (0: unknown): what the
// profiles do not hold of it is accounted by the profiles' windows.
func addCPU(rep *attribution.Report, dir string, byPhase bool, processes time.Duration) error {
	if rep.Works == 0 {
		return nil
	}
	an, err := profiles.Analyze(dir, false, 1)
	if err != nil {
		return err
	}
	if an.Unit != "nanoseconds" {
		return fmt.Errorf("profiles: CPU samples in %s, want nanoseconds", an.Unit)
	}
	cpu := &attribution.CPU{Total: time.Duration(an.Total), Processes: processes,
		Resolution: time.Duration(an.Period) / time.Duration(rep.Works)}
	index := map[string]int{}
	for i, row := range rep.Rows {
		if row.Key.IsRow() {
			index[row.Name] = i
		}
	}
	var inRows int64
	perRow := map[string]int64{}
	for name, v := range an.Rows {
		inRows += v
		if byPhase {
			// component.phase/direction → phase/direction
			_, name, _ = strings.Cut(name, ".")
		}
		perRow[name] += v
	}
	for name, v := range perRow {
		if i, ok := index[name]; ok {
			rep.Rows[i].CPUPerWork = time.Duration(v / int64(rep.Works))
			cpu.InRows += time.Duration(v)
		} else {
			// A phase with no span (the sidecar's gRPC reader): a row of
			// CPU only.
			cpu.Elsewhere = append(cpu.Elsewhere, attribution.CPUPart{Name: name, Kind: attribution.CPURow, CPU: time.Duration(v)})
		}
	}
	for _, pt := range an.Phases {
		if pt.Bucket || pt.Phase == profiles.NoPhase {
			kind := attribution.CPUBucket
			if pt.Phase == profiles.BucketProcess || pt.Phase == profiles.NoPhase {
				kind = attribution.CPUOther // what nothing more specific names
			}
			cpu.Elsewhere = append(cpu.Elsewhere, attribution.CPUPart{Name: pt.Phase, Kind: kind, CPU: time.Duration(pt.Total)})
		}
	}
	// Samples booked to a phase with no row named: labels without the
	// component (profiles of an older amdahl).
	if rest := an.ByLabel + an.ByStack - inRows; rest > 0 {
		cpu.Elsewhere = append(cpu.Elsewhere, attribution.CPUPart{Name: "(a phase, no row named)", Kind: attribution.CPUOther, CPU: time.Duration(rest)})
	}
	attribution.SortCPUParts(cpu.Elsewhere)
	cpu.Unprofiled = unprofiled(an, processes)
	cpu.SetAccounted()
	rep.CPU = cpu
	return nil
}

// Names of the parts of the processes' CPU that no profile holds.
const (
	cpuBefore     = "(before the profiles)"
	cpuAfter      = "(after the profiles)"
	cpuNotSampled = "(not sampled)"
	cpuNotInAny   = "(in no profile)"
	// cpuSysmon is a bucket measured from the system's per-thread
	// accounting, not from samples: the Go runtime's system monitor
	// thread, on which the profiler arms no timer.
	cpuSysmon = "(go runtime: sysmon)"
	// cpuWriting is a bucket measured by each process around its CPU
	// profile's stop: the CPU of writing cpu.pprof out once sampling has
	// stopped (runtime/pprof's last read, symbolization, compression).
	cpuWriting = "(writing cpu.pprof)"
)

// unprofiled accounts for the processes' CPU that the profiles of an do
// not hold, from the profiles' windows: what the processes used before
// their profiles started, after they stopped (a task host's exit, the
// parent's work since; a process that left no profile), and while they
// ran but no sample caught. Of the last, the part that the Go runtime's
// sysmon thread used (on which the profiler arms no timer) is read from
// the system's per-thread accounting by each process (proccpu.SysmonUsed)
// and is a bucket of its own, (go runtime: sysmon), when every window has
// it; (not sampled) is then what is left: the sampling error of each
// thread (the kernel checks a thread's CPU timer only on a clock tick
// that finds the thread running, so a thread that runs in short bursts
// can pass more than one period between two checks, and the runtime
// counts one sample for them), and the threads whose timer the runtime
// has not yet armed (it arms it when the thread next runs a goroutine).
// Of what came after, the CPU each process used writing its stopped CPU
// profile out is measured by the process (proccpu.Window.Written) and is
// the bucket (writing cpu.pprof) when every window has it. Without a
// window for every profile it is one part; without processes only what
// the windows tell. (not sampled) can come out a little below zero: a
// sampled thread's count can exceed its CPU by up to one period, most
// visibly in a small, mostly idle task host; it is shown as it is, so
// that the parts still add up to the processes' CPU.
func unprofiled(an *profiles.Analysis, processes time.Duration) []attribution.CPUPart {
	var parts []attribution.CPUPart
	add := func(name string, d time.Duration) {
		if d != 0 {
			parts = append(parts, attribution.CPUPart{Name: name, Kind: attribution.CPUUnprofiled, CPU: d})
		}
	}
	if an.Windows == len(an.Files) && an.Windows > 0 {
		add(cpuBefore, an.Window.Start)
		notSampled := an.Window.Stop - an.Window.Start - time.Duration(an.Total)
		if an.Sysmons == an.Windows {
			parts = append(parts, attribution.CPUPart{Name: cpuSysmon, Kind: attribution.CPUBucket, CPU: an.Sysmon})
			notSampled -= an.Sysmon
		}
		add(cpuNotSampled, notSampled)
		after := processes - an.Window.Stop
		if an.Writings == an.Windows {
			parts = append(parts, attribution.CPUPart{Name: cpuWriting, Kind: attribution.CPUBucket, CPU: an.Writing})
			after -= an.Writing
		}
		if processes > 0 {
			add(cpuAfter, after)
		}
		return parts
	}
	if processes > 0 {
		add(cpuNotInAny, processes-time.Duration(an.Total))
	}
	return parts
}

// maxSummaryFile bounds the summary.json runProcessesCPU reads: a run's
// summary is a few tens of KiB.
const maxSummaryFile = 16 << 20

// runProcessesCPU is the processes' CPU time that the run which wrote the
// --out directory dir recorded in its summary.json: 0 with no error when
// it has none (a run of an older amdahl, or not a run directory), an error
// when the file is over maxSummaryFile bytes or not a summary.
func runProcessesCPU(dir string) (time.Duration, error) {
	path := filepath.Join(dir, "summary.json")
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var s struct {
		Attribution struct {
			CPU *struct {
				Processes time.Duration `json:"processes_ns"`
			} `json:"cpu"`
		} `json:"attribution"`
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSummaryFile+1))
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxSummaryFile {
		return 0, fmt.Errorf("%s: over %d MiB (a run's summary is a few tens of KiB)", path, maxSummaryFile>>20)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if s.Attribution.CPU == nil {
		return 0, nil
	}
	if s.Attribution.CPU.Processes < 0 {
		return 0, fmt.Errorf("%s: attribution.cpu.processes_ns is negative (%d)", path, s.Attribution.CPU.Processes)
	}
	return s.Attribution.CPU.Processes, nil
}

// processesCPU is the CPU time this process and its children waited for
// (the run's task hosts, once they have exited) have used.
func processesCPU() time.Duration {
	var self, children unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &self) != nil || unix.Getrusage(unix.RUSAGE_CHILDREN, &children) != nil {
		return 0
	}
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano())
}

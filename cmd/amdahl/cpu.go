package main

import (
	"fmt"
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
// phase. processes is the processes' CPU time as the system counted it
// (0: unknown).
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
	elsewhere := map[string]time.Duration{}
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
			elsewhere[name] += time.Duration(v)
		}
	}
	for _, pt := range an.Phases {
		if pt.Bucket || pt.Phase == profiles.NoPhase {
			elsewhere[pt.Phase] += time.Duration(pt.Total)
		}
	}
	// Samples booked to a phase with no row named: labels without the
	// component (profiles of an older amdahl).
	if rest := an.ByLabel + an.ByStack - inRows; rest > 0 {
		elsewhere["(a phase, no row named)"] += time.Duration(rest)
	}
	for name, v := range elsewhere {
		cpu.Elsewhere = append(cpu.Elsewhere, attribution.CPUPart{Name: name, CPU: v})
	}
	attribution.SortCPUParts(cpu.Elsewhere)
	rep.CPU = cpu
	return nil
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

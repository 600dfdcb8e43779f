package proccpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// WindowFile is the file beside a process's cpu.pprof that says which part
// of the process's CPU time the profile covers (a Window, as JSON).
const WindowFile = "cpu-window.json"

// maxWindowFile bounds what ReadWindow reads: a Window is under 100 bytes.
const maxWindowFile = 4 << 10

// Window is the part of a process's CPU time (user and system, as Used
// counts it) that its CPU profile covers: the process had used Start
// right before the profile started sampling and Stop right before it
// stopped. What the process used before Start and after Stop is in no
// profile; of Stop − Start, the profile holds what its samples caught.
type Window struct {
	Start time.Duration `json:"cpu_at_start_ns"`
	Stop  time.Duration `json:"cpu_at_stop_ns"`
	// Written, when not 0, is the process's CPU time once the stopped
	// profile was written out (runtime/pprof reads the last samples,
	// symbolizes, compresses and writes the file after sampling has
	// stopped): Written − Stop is that work's CPU, which no sample holds.
	Written time.Duration `json:"cpu_at_written_ns,omitempty"`
	// Sysmon is the part of Stop − Start that the Go runtime's sysmon
	// thread used (SysmonUsed at stop minus at start), nil when the
	// system could not tell: no sample of the profile holds it.
	Sysmon *time.Duration `json:"sysmon_cpu_ns,omitempty"`
}

// sysmonSlack is what Sysmon may exceed Stop − Start by: the process's
// CPU is read in microseconds, the thread's in nanoseconds.
const sysmonSlack = 10 * time.Microsecond

// ReadWindow reads the Window at path, at most 4 KiB of it. A missing
// file is an error that wraps os.ErrNotExist; a window that runs backwards
// (Stop before Start, or either negative, or a Written before Stop) is
// refused, and so is a Sysmon below zero or above Stop − Start.
func ReadWindow(path string) (Window, error) {
	f, err := os.Open(path)
	if err != nil {
		return Window{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxWindowFile+1))
	if err != nil {
		return Window{}, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxWindowFile {
		return Window{}, fmt.Errorf("read %s: over %d bytes (a CPU profile window is under 100)", path, maxWindowFile)
	}
	var w Window
	if err := json.Unmarshal(b, &w); err != nil {
		return Window{}, fmt.Errorf("read %s: %w", path, err)
	}
	if w.Start < 0 || w.Stop < w.Start {
		return Window{}, fmt.Errorf("read %s: %w: cpu_at_start_ns %d, cpu_at_stop_ns %d", path, errBackwards, w.Start, w.Stop)
	}
	if w.Written != 0 && w.Written < w.Stop {
		return Window{}, fmt.Errorf("read %s: %w: cpu_at_written_ns %d before cpu_at_stop_ns %d", path, errBackwards, w.Written, w.Stop)
	}
	if w.Sysmon != nil && (*w.Sysmon < 0 || *w.Sysmon > w.Stop-w.Start+sysmonSlack) {
		return Window{}, fmt.Errorf("read %s: sysmon_cpu_ns %d is not within the window's %d ns of CPU", path, *w.Sysmon, w.Stop-w.Start)
	}
	return w, nil
}

var errBackwards = errors.New("the window runs backwards")

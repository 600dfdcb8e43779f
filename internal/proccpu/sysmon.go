package proccpu

import (
	"errors"
	"time"
)

// ErrNoSysmon is returned by SysmonUsed when the system cannot tell which
// thread is the Go runtime's system monitor, or how much CPU it used.
var ErrNoSysmon = errors.New("the Go runtime's sysmon thread cannot be told")

// SysmonUsed returns the CPU time (user and system) that the Go runtime's
// system monitor thread of this process has used so far.
//
// sysmon is a thread of its own that runs no goroutine. The CPU profiler
// arms its timer on a thread when the thread runs a goroutine, so no CPU
// profile holds a sample of sysmon's work (retaking Ps from long system
// calls, preempting long-running goroutines, polling the network when no
// P does). Its CPU is part of the process's CPU all the same; SysmonUsed
// measures it from the system's per-thread accounting, so that a CPU
// account can name it instead of leaving it in what was not sampled.
//
// On Linux it reads /proc/self/task: runtime.main starts sysmon before
// any package initialisation runs, as the first thread after the main
// thread, so sysmon is the lowest thread ID above the process ID. Thread
// IDs are handed out in increasing order until they wrap around at the
// system's maximum; when a thread ID below the process ID shows that they
// did, the thread cannot be told and SysmonUsed returns ErrNoSysmon, as it
// does on other systems.
func SysmonUsed() (time.Duration, error) { return sysmonUsed() }

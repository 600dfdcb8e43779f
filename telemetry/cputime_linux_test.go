package telemetry

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU returns the CPU time the calling thread has used: unlike the
// wall clock, it does not count the time the thread waited for a CPU, so
// a benchmark on a loaded machine still measures what its code costs.
// The caller locks its goroutine to the thread (runtime.LockOSThread).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}

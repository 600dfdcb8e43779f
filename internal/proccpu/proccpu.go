// Package proccpu reads the CPU time this process has used, for the
// runtime's summary and for benchmarks that report CPU per operation
// beside its latency.
package proccpu

import (
	"time"

	"golang.org/x/sys/unix"
)

// Used returns the user and system CPU time this process has used (its
// own, not its children's: the runtime's task hosts are not counted), or 0
// if the system cannot say.
func Used() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

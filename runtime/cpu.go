package runtime

import (
	"time"

	"golang.org/x/sys/unix"
)

// processCPU returns the user and system CPU time this process has used
// (its own, not its children's: the task hosts are not counted), or 0 if
// the system cannot say.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

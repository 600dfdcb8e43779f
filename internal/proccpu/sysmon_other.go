//go:build !linux

package proccpu

import "time"

func sysmonUsed() (time.Duration, error) { return 0, ErrNoSysmon }

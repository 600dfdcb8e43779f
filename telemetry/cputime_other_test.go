//go:build !linux

package telemetry

import "time"

var cpuEpoch = time.Now()

// threadCPU falls back to the wall clock where the thread's CPU clock is
// not at hand.
func threadCPU() time.Duration { return time.Since(cpuEpoch) }

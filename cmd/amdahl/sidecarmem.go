package main

import (
	"os"
	"runtime/debug"

	"github.com/amdahl-rt/amdahl/chunking"
)

// sidecarBaseMemory is what amdahl sidecar needs beside the bytes its
// bounds count: the runtime, gRPC's connections and buffers, telemetry.
const sidecarBaseMemory = 48 << 20

// sidecarMemoryLimit is the Go memory limit amdahl sidecar runs under:
// MaxTotalBufferedBytes (the messages being received and the partial
// completions buffered, together), a quarter of it again for the copies
// gRPC makes while it decodes a message and for collection slack, and
// sidecarBaseMemory. Near the limit the collector runs more often and
// returns freed memory to the system, instead of letting the heap grow to
// twice the live bytes (GOGC=100) and keeping it for minutes.
func sidecarMemoryLimit(cfg chunking.SidecarConfig) int64 {
	t := int64(cfg.MaxTotalBufferedBytes)
	return t + t/4 + sidecarBaseMemory
}

// setSidecarMemoryLimit sets the process's memory limit from cfg's bounds,
// unless GOMEMLIMIT is set (the operator's choice stands).
func setSidecarMemoryLimit(cfg chunking.SidecarConfig) {
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		return
	}
	debug.SetMemoryLimit(sidecarMemoryLimit(cfg))
}

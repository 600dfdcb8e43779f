package main

import (
	"os"
	"runtime/debug"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/runtime"
)

// sidecarBaseMemory is what amdahl sidecar needs beside the bytes its
// bounds count: the runtime, gRPC's connections and buffers, telemetry.
// amdahl run needs as much beside its own bounds.
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

// runGCPercent is the GC percent amdahl run's process works at: off, so
// the collector runs when the heap nears runMemoryLimit rather than each
// time it doubles. The fan-out payloads live briefly and in bulk: at
// Go's 100 the parent of a default run collects many times a second,
// under the limit alone a few times (docs/measurements/earlier.md,
// "Figures the code's comments quoted").
const runGCPercent = -1

// runMemoryLimit is the Go memory limit amdahl run's process (the runtime
// and its in-process sidecar) works under: runtime.completion_bytes three
// times (the payloads of the fan-out completions in flight, held by the
// runtime, reassembled by the sidecar and decoded there; the sender's
// encoded chunks ahead, 8 MiB, fit in the slack) and sidecarBaseMemory.
// At the default 64 MiB that is 240 MiB.
func runMemoryLimit(s runtime.Settings) int64 {
	return 3*s.CompletionBytes + sidecarBaseMemory
}

// setMemoryBudget sets the process's soft memory limit and, unless
// gcPercent is 0, its GC percent (-1: off, the limit alone starts a
// collection), unless the user chose: with GOMEMLIMIT set
// it sets neither (a higher GC percent without the limit would let the
// heap grow with no bound), and with GOGC set it sets neither when it
// would change the GC percent. It reports whether it set anything.
func setMemoryBudget(limit int64, gcPercent int) bool {
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		return false
	}
	if _, ok := os.LookupEnv("GOGC"); ok && gcPercent != 0 {
		return false
	}
	debug.SetMemoryLimit(limit)
	if gcPercent != 0 {
		debug.SetGCPercent(gcPercent)
	}
	return true
}

// setRunMemoryBudget sets amdahl run's memory limit from its settings'
// bounds and turns its GC percent off (runGCPercent), unless GOGC or
// GOMEMLIMIT is set (the user's choice stands).
func setRunMemoryBudget(s runtime.Settings) bool {
	return setMemoryBudget(runMemoryLimit(s), runGCPercent)
}

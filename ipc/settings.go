package ipc

import (
	"fmt"
	"strings"

	"github.com/amdahl-rt/amdahl/internal/bytesize"
	"github.com/amdahl-rt/amdahl/internal/features"
)

// Environment variables read by the ipc package (see doc.go).
const (
	EnvBuffer = "AMDAHL_IPC_BUFFER" // setting ipc.buffer
	EnvMode   = "AMDAHL_IPC_SEND"   // setting ipc.send
	EnvDelta  = "AMDAHL_IPC_DELTA"  // setting ipc.delta
	EnvFD     = "AMDAHL_IPC_FD"     // child end: inherited connection fd
	EnvToken  = "AMDAHL_IPC_TOKEN"  // child end: per-connection handshake token
)

// Buffer sizes: the current wave default and the legacy one restored by
// AMDAHL_DISABLE_FEATURES_FROM_VERSION=0.1.
const (
	DefaultBufferSize = 1 << 20
	LegacyBufferSize  = 128 << 10
	// MaxBufferSize is the largest ipc.buffer accepted; the kernel clamps
	// far below it anyway (net.core.wmem_max).
	MaxBufferSize = 1 << 30
)

// DefaultBuffer returns the wave default of ipc.buffer: DefaultBufferSize,
// or LegacyBufferSize when wave 0.1 is disabled.
func DefaultBuffer() int {
	if features.Enabled(features.Wave0_1) {
		return DefaultBufferSize
	}
	return LegacyBufferSize
}

// ParseBufferSize parses an ipc.buffer value: a size in amdahl's one size
// grammar (package internal/bytesize): a whole number of bytes, or a number
// with unit B, KB, MB, GB, KiB, MiB or GiB (262144, 256KiB, 1.5MiB),
// surrounded by optional spaces. Anything else, zero or above MaxBufferSize
// is an error naming the setting, its environment variable and the valid
// values.
func ParseBufferSize(s string) (int, error) {
	n, err := bytesize.Parse(strings.TrimSpace(s))
	if err != nil || n <= 0 || n > MaxBufferSize {
		return 0, fmt.Errorf("invalid ipc.buffer (%s) %q: want a positive size up to %d bytes (%s): %s (e.g. 262144, 256KiB, 1.5MiB)",
			EnvBuffer, s, MaxBufferSize, bytesize.Format(MaxBufferSize), bytesize.Want)
	}
	return n, nil
}

// Mode is how Conn.Send waits.
type Mode uint8

// The send modes.
const (
	// Sync: Send returns once the packet's bytes are written to the socket,
	// so the caller feels the backpressure (the seed's behaviour).
	Sync Mode = iota
	// Async: Send returns once the packet is queued; it blocks only while
	// the queue is full (bounded in bytes and packets).
	Async
)

// String returns "sync" or "async".
func (m Mode) String() string {
	if m == Async {
		return "async"
	}
	return "sync"
}

// ParseMode parses an ipc.send value.
func ParseMode(s string) (Mode, error) {
	switch strings.TrimSpace(s) {
	case "sync":
		return Sync, nil
	case "async":
		return Async, nil
	}
	return 0, fmt.Errorf("invalid ipc.send (%s) %q: want sync or async", EnvMode, s)
}

// ParseDelta parses an ipc.delta value.
func ParseDelta(s string) (bool, error) {
	switch strings.TrimSpace(s) {
	case "on":
		return true, nil
	case "off":
		return false, nil
	}
	return false, fmt.Errorf("invalid ipc.delta (%s) %q: want on or off", EnvDelta, s)
}

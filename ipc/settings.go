package ipc

import (
	"fmt"
	"strings"

	"github.com/amdahl-rt/amdahl/internal/bytesize"
)

// Buffer sizes (setting ipc.buffer, WithBufferSize).
const (
	// DefaultBufferSize is the send buffer requested without
	// WithBufferSize.
	DefaultBufferSize = 1 << 20
	// MaxBufferSize is the largest ipc.buffer accepted; the kernel clamps
	// far below it anyway (net.core.wmem_max).
	MaxBufferSize = 1 << 30
)

// ParseBufferSize parses an ipc.buffer value: a size in amdahl's one size
// grammar (package internal/bytesize): a whole number of bytes, or a number
// with unit B, KB, MB, GB, KiB, MiB or GiB (262144, 256KiB, 1.5MiB),
// surrounded by optional spaces. Anything else, zero or above MaxBufferSize
// is an error naming the setting and the valid values.
func ParseBufferSize(s string) (int, error) {
	n, err := bytesize.Parse(strings.TrimSpace(s))
	if err != nil || n <= 0 || n > MaxBufferSize {
		return 0, fmt.Errorf("invalid ipc.buffer %q: want a positive size up to %d bytes (%s): %s (e.g. 262144, 256KiB, 1.5MiB)",
			s, MaxBufferSize, bytesize.Format(MaxBufferSize), bytesize.Want)
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
	return 0, fmt.Errorf("invalid ipc.send %q: want sync or async", s)
}

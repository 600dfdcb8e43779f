package ipc

import (
	"fmt"
	"strconv"
	"strings"
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

// ParseBufferSize parses an ipc.buffer value: a positive integer number of
// bytes, optionally followed by KiB or MiB, surrounded by optional spaces.
// Anything else, zero, negative or above MaxBufferSize is an error naming the
// setting and the valid values.
func ParseBufferSize(s string) (int, error) {
	v := strings.TrimSpace(s)
	mult := int64(1)
	switch {
	case strings.HasSuffix(v, "KiB"):
		mult, v = 1<<10, strings.TrimSpace(strings.TrimSuffix(v, "KiB"))
	case strings.HasSuffix(v, "MiB"):
		mult, v = 1<<20, strings.TrimSpace(strings.TrimSuffix(v, "MiB"))
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > MaxBufferSize/mult {
		return 0, fmt.Errorf("invalid ipc.buffer %q: want a positive number of bytes up to %d, optionally with suffix KiB or MiB (e.g. 262144, 256KiB, 1MiB)", s, MaxBufferSize)
	}
	return int(n * mult), nil
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

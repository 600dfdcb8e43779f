package ipc

import (
	"net"
	"testing"
)

// Exported for package ipc_test (the benchmarks, which install the
// task-host protocol of package taskproto, an importer of ipc).
var (
	InProcessPair   = inProcessPair
	SeedSizes       = seedSizes
	ApplySendBuffer = applySendBuffer
)

// SmallBuffer is smallBuffer, the seed's 128 KiB.
const SmallBuffer = smallBuffer

// Socketpair returns both ends of a socketpair, without a handshake.
func Socketpair(tb testing.TB) (*net.UnixConn, *net.UnixConn) {
	tb.Helper()
	p, err := NewPair()
	if err != nil {
		tb.Fatal(err)
	}
	fc, err := net.FileConn(p.ChildFile())
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.CloseChild(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.parent.Close(); _ = fc.Close() })
	return p.parent, fc.(*net.UnixConn)
}

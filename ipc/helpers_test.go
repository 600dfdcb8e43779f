package ipc

import (
	"context"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/internal/telemetrytest"
)

// tel is in-memory telemetry for one end of a connection.
type tel struct{ *telemetrytest.Memory }

// newTelemetry builds it; the child process uses it directly, tests
// through newTel.
func newTelemetry() (*tel, error) {
	m, err := telemetrytest.New("ipc")
	return &tel{m}, err
}

func newTel(t testing.TB) *tel { return &tel{telemetrytest.NewT(t, "ipc")} }

func (x *tel) opts() []Option { return []Option{WithTelemetry(x.Comp), WithMeterProvider(x.MP)} }

func (x *tel) sum(t *testing.T, name string, attrs map[string]string) int64 {
	return x.Sum(t, name, attrs)
}

// inProcessPair returns both ends of a socketpair after the handshake,
// parent first.
func inProcessPair(t testing.TB, parentOpts, childOpts []Option) (*Conn, *Conn) {
	t.Helper()
	p, err := NewPair()
	if err != nil {
		t.Fatal(err)
	}
	fc, err := net.FileConn(p.ChildFile())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CloseChild(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	return handshakeBoth(t,
		func() (*Conn, error) { return p.Connect(ctx, parentOpts...) },
		func() (*Conn, error) { return Accept(ctx, fc.(*net.UnixConn), p.token, childOpts...) })
}

// handshakeBoth runs the child's end (accept) beside the parent's
// (connect), fails t unless both succeed, and closes both when t ends.
func handshakeBoth(t testing.TB, connect, accept func() (*Conn, error)) (*Conn, *Conn) {
	t.Helper()
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := accept()
		ch <- res{c, err}
	}()
	parent, perr := connect()
	r := <-ch
	if perr != nil || r.err != nil {
		t.Fatalf("handshake: parent %v, child %v", perr, r.err)
	}
	t.Cleanup(func() {
		_ = parent.Close()
		_ = r.c.Close()
	})
	return parent, r.c
}

const handshakeTimeoutForTest = 30 * time.Second

// smallBuffer is the 128 KiB send buffer of the seed (the legacy default
// of ipc.buffer), beside DefaultBufferSize.
const smallBuffer = 128 << 10

func traceSpanContext(ctx context.Context) trace.SpanContext {
	return trace.SpanContextFromContext(ctx)
}

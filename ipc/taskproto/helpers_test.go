package taskproto

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/amdahl-rt/amdahl/internal/telemetrytest"
	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
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

func (x *tel) opts() []ipc.Option {
	return []ipc.Option{ipc.WithTelemetry(x.Comp), ipc.WithMeterProvider(x.MP)}
}

func (x *tel) sum(t *testing.T, name string, attrs map[string]string) int64 {
	return x.Sum(t, name, attrs)
}

// pair returns both ends of a socketpair after the handshake, parent
// first, through ipc's public API.
func pair(t testing.TB, parentOpts, childOpts []ipc.Option) (*ipc.Conn, *ipc.Conn) {
	t.Helper()
	p, err := ipc.NewPair()
	if err != nil {
		t.Fatal(err)
	}
	env := p.ChildEnv(3)
	inh, err := ipc.LookupInherited(func(k string) (string, bool) {
		for _, kv := range env {
			if name, v, _ := strings.Cut(kv, "="); name == k {
				return v, true
			}
		}
		return "", false
	})
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
	type res struct {
		c   *ipc.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ipc.Accept(ctx, fc.(*net.UnixConn), inh.Token, childOpts...)
		ch <- res{c, err}
	}()
	parent, perr := p.Connect(ctx, parentOpts...)
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

func taskConfig(id uint64, env map[string]string) *ipcpb.TaskConfiguration {
	return &ipcpb.TaskConfiguration{
		Id: id, TaskName: "Csc", Environment: env,
		GlobalProperties: map[string]string{"Configuration": "Release"},
	}
}

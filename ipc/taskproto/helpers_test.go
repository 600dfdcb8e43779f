package taskproto

import (
	"context"
	"net"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// tel is in-memory telemetry for one end of a connection.
type tel struct {
	comp   *telemetry.Component
	spans  *tracetest.SpanRecorder
	reader *metric.ManualReader
	mp     *metric.MeterProvider
	tp     *sdktrace.TracerProvider
}

func newTelemetry() (*tel, error) {
	x := &tel{spans: tracetest.NewSpanRecorder(), reader: metric.NewManualReader()}
	x.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(x.spans))
	x.mp = metric.NewMeterProvider(metric.WithReader(x.reader))
	comp, err := telemetry.NewComponent("ipc", telemetry.ComponentConfig{TracerProvider: x.tp, MeterProvider: x.mp})
	if err != nil {
		return nil, err
	}
	x.comp = comp
	return x, nil
}

func (x *tel) shutdown() {
	_ = x.tp.Shutdown(context.Background())
	_ = x.mp.Shutdown(context.Background())
}

func newTel(t testing.TB) *tel {
	t.Helper()
	x, err := newTelemetry()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.shutdown)
	return x
}

func (x *tel) opts() []ipc.Option {
	return []ipc.Option{ipc.WithTelemetry(x.comp), ipc.WithMeterProvider(x.mp)}
}

// sum returns the sum of the Int64 sum metric name over the data points
// whose attributes include every attr (key=value).
func (x *tel) sum(t *testing.T, name string, attrs map[string]string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := x.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
		next:
			for _, p := range d.DataPoints {
				for k, v := range attrs {
					if got, ok := p.Attributes.Value(attribute.Key(k)); !ok || got.Emit() != v {
						continue next
					}
				}
				total += p.Value
			}
		}
	}
	return total
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

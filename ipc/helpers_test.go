package ipc

import (
	"context"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/amdahl-rt/amdahl/telemetry"
)

type tel struct {
	comp   *telemetry.Component
	spans  *tracetest.SpanRecorder
	reader *metric.ManualReader
	mp     *metric.MeterProvider
	tp     *sdktrace.TracerProvider
}

// newTelemetry builds a component over in-memory providers; the child
// process uses it directly, tests through newTel.
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

func (x *tel) opts() []Option { return []Option{WithTelemetry(x.comp), WithMeterProvider(x.mp)} }

// sum returns the sum of the Int64 sum metric name over data points whose
// attributes include every attr (key=value).
func (x *tel) sum(t *testing.T, name string, attrs map[string]string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := x.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			var pts []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				pts = d.DataPoints
			case metricdata.Gauge[int64]:
				pts = d.DataPoints
			default:
				t.Fatalf("metric %s has data %T", name, m.Data)
			}
		next:
			for _, p := range pts {
				for k, v := range attrs {
					got, ok := p.Attributes.Value(attribute.Key(k))
					if !ok || got.Emit() != v {
						continue next
					}
				}
				total += p.Value
			}
		}
	}
	return total
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
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := Accept(ctx, fc.(*net.UnixConn), p.token, childOpts...)
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

const handshakeTimeoutForTest = 30 * time.Second

// smallBuffer is the 128 KiB send buffer of the seed (the legacy default
// of ipc.buffer), beside DefaultBufferSize.
const smallBuffer = 128 << 10

func traceSpanContext(ctx context.Context) trace.SpanContext {
	return trace.SpanContextFromContext(ctx)
}

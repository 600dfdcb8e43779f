// Package telemetrytest is in-memory telemetry for tests: a
// telemetry.Component on a span recorder and a manual metric reader, and
// the sum of a metric's data points.
package telemetrytest

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// Memory is a component's telemetry kept in memory.
type Memory struct {
	Comp   *telemetry.Component
	Spans  *tracetest.SpanRecorder
	Reader *metric.ManualReader
	MP     *metric.MeterProvider
	TP     *sdktrace.TracerProvider
}

// New builds a component named component over in-memory providers (for a
// child process that has no testing.TB; tests use NewT).
func New(component string) (*Memory, error) {
	x := &Memory{Spans: tracetest.NewSpanRecorder(), Reader: metric.NewManualReader()}
	x.TP = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(x.Spans))
	x.MP = metric.NewMeterProvider(metric.WithReader(x.Reader))
	comp, err := telemetry.NewComponent(component, telemetry.ComponentConfig{TracerProvider: x.TP, MeterProvider: x.MP})
	if err != nil {
		return nil, err
	}
	x.Comp = comp
	return x, nil
}

// Shutdown shuts both providers down.
func (x *Memory) Shutdown() {
	_ = x.TP.Shutdown(context.Background())
	_ = x.MP.Shutdown(context.Background())
}

// NewT is New for a test, shut down when it ends.
func NewT(t testing.TB, component string) *Memory {
	t.Helper()
	x, err := New(component)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Shutdown)
	return x
}

// Sum returns the sum of the int64 sum or gauge metric name over the data
// points whose attributes include every attr (key=value); 0 when there is
// none. A metric of that name with other data fails the test.
func (x *Memory) Sum(t testing.TB, name string, attrs map[string]string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := x.Reader.Collect(context.Background(), &rm); err != nil {
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

// Leaves is a telemetry.PhaseTracer that keeps, by span name, the last
// leaf recorded (RecordPhaseSpan): the context it was recorded under and
// its attributes. Exported is what it answers PhaseAttributes (whether
// anything reads a phase's attributes). Its started phases make no span:
// they return the caller's context and its span.
type Leaves struct {
	tracenoop.TracerProvider
	Exported bool

	mu     sync.Mutex
	leaves map[string]Leaf
}

// Leaf is one leaf a Leaves recorded.
type Leaf struct {
	Ctx   context.Context
	Attrs []attribute.KeyValue
}

var _ telemetry.PhaseTracer = (*Leaves)(nil)

// StartPhaseSpan implements telemetry.PhaseTracer.
func (l *Leaves) StartPhaseSpan(ctx context.Context, _, _ string, _ telemetry.Phase, _ telemetry.Direction, _ time.Time) (context.Context, trace.Span) {
	return ctx, trace.SpanFromContext(ctx)
}

// EndPhaseSpan implements telemetry.PhaseTracer.
func (l *Leaves) EndPhaseSpan(trace.Span, time.Time) {}

// RecordPhaseSpan implements telemetry.PhaseTracer: it keeps the leaf.
func (l *Leaves) RecordPhaseSpan(ctx context.Context, name, _ string, _ telemetry.Phase, _ telemetry.Direction, _, _ time.Time, attrs []attribute.KeyValue) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leaves == nil {
		l.leaves = map[string]Leaf{}
	}
	l.leaves[name] = Leaf{Ctx: ctx, Attrs: append([]attribute.KeyValue(nil), attrs...)}
}

// PhaseAttributes implements telemetry.PhaseTracer.
func (l *Leaves) PhaseAttributes() bool { return l.Exported }

// Get returns the last leaf named name, and whether there was one.
func (l *Leaves) Get(name string) (Leaf, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lf, ok := l.leaves[name]
	return lf, ok
}

// Len returns how many names the leaves recorded have.
func (l *Leaves) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.leaves)
}

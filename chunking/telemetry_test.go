package chunking

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/amdahl-rt/amdahl/telemetry"
)

func TestTelemetry(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	comp, err := telemetry.NewComponent("chunking", telemetry.ComponentConfig{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	f := &faults{calls: map[int32]int{}, before: map[int32]codes.Code{1: codes.Unavailable}}
	rg := startRig(t, SidecarConfig{Component: comp, TracerProvider: tp, MeterProvider: mp,
		ServerOptions: []grpc.ServerOption{grpc.UnaryInterceptor(f.intercept)}},
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithMeterProvider(mp),
			otelgrpc.WithPropagators(propagation.TraceContext{}))))
	r := response(actionOfSize(t, 0, 700<<10), actionOfSize(t, 1, 700<<10), actionOfSize(t, 2, 700<<10))
	r.CompletionToken = rg.lease(t, r.InstanceId)
	pl := newPlanner(t, PlannerConfig{MaxChunkBytes: 1 << 20, Component: comp, MeterProvider: mp})
	s, err := NewSender(rg.conn, SenderConfig{Planner: pl, Component: comp, MeterProvider: mp, Retry: RetryPolicy{BaseDelay: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, root := tp.Tracer("test").Start(context.Background(), "root")
	if _, err := s.Complete(ctx, r); err != nil {
		t.Fatal(err)
	}
	root.End()

	count := map[string]int{}
	var serialize sdktrace.ReadOnlySpan
	retries := 0
	chunkIdx := map[int64]bool{}
	for _, sp := range rec.Ended() {
		count[sp.Name()]++
		if sp.Name() == "chunking.serialize" {
			serialize = sp
		}
		if sp.Name() == "chunking.send.chunk" {
			// Exported spans keep the chunk's attributes
			// (Component.SpanAttributes).
			attrs := attribute.NewSet(sp.Attributes()...)
			idx, _ := attrs.Value(AttrChunkIndex)
			n, _ := attrs.Value(AttrChunks)
			b, _ := attrs.Value(telemetry.AttrBytes)
			if n.AsInt64() != 3 || b.AsInt64() <= 0 {
				t.Errorf("chunk span attributes %v, want %s=3 and %s > 0", sp.Attributes(), AttrChunks, telemetry.AttrBytes)
			}
			chunkIdx[idx.AsInt64()] = idx.Type() == attribute.INT64
		}
		for _, e := range sp.Events() {
			if e.Name == "retry" {
				retries++
			}
		}
		if sp.SpanContext().TraceID() != root.SpanContext().TraceID() && sp.Name() != "root" {
			t.Errorf("span %s in trace %v, want the sender's trace %v (context not propagated)", sp.Name(), sp.SpanContext().TraceID(), root.SpanContext().TraceID())
		}
	}
	for name, want := range map[string]int{"chunking.serialize": 1, "chunking.send": 1, "chunking.send.chunk": 3,
		"chunking.deserialize": 3, "chunking.execute": 1} {
		if count[name] != want {
			t.Errorf("%d %s spans, want %d (all: %v)", count[name], name, want, count)
		}
	}
	if retries != 1 {
		t.Errorf("%d retry events, want 1", retries)
	}
	if !chunkIdx[0] || !chunkIdx[1] || !chunkIdx[2] {
		t.Errorf("chunk spans' %s: %v, want 0, 1 and 2", AttrChunkIndex, chunkIdx)
	}
	if serialize != nil {
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range serialize.Attributes() {
			attrs[kv.Key] = kv.Value
		}
		if attrs[AttrChunks].AsInt64() != 3 || attrs[AttrActions].AsInt64() != 3 || attrs[AttrActionSizings].AsInt64() != 3 || attrs[telemetry.AttrBytes].AsInt64() == 0 {
			t.Errorf("serialize attributes %v", attrs)
		}
	}
	// The sidecar's spans keep their attributes where they are exported:
	// three chunks, the first two partial, applied as one completion of
	// three actions.
	partial := 0
	for _, sp := range rec.Ended() {
		attrs := attribute.NewSet(sp.Attributes()...)
		switch sp.Name() {
		case "chunking.deserialize":
			p, ok := attrs.Value("amdahl.chunking.partial")
			a, _ := attrs.Value(AttrActions)
			if !ok || a.AsInt64() != 1 {
				t.Errorf("deserialize span attributes %v, want amdahl.chunking.partial and %s=1", sp.Attributes(), AttrActions)
			}
			if p.AsBool() {
				partial++
			}
		case "chunking.execute":
			a, _ := attrs.Value(AttrActions)
			c, _ := attrs.Value(AttrChunks)
			if a.AsInt64() != 3 || c.AsInt64() != 3 {
				t.Errorf("execute span attributes %v, want %s=3 and %s=3", sp.Attributes(), AttrActions, AttrChunks)
			}
		}
	}
	if partial != 2 {
		t.Errorf("%d partial deserialize spans, want 2", partial)
	}
	// Execute follows the last chunk's deserialize as its sibling, under
	// the call's span: a child of deserialize would start after its
	// parent ended, and attribution would cut it to nothing.
	var execute sdktrace.ReadOnlySpan
	deserialize := map[trace.SpanID]sdktrace.ReadOnlySpan{} // by parent
	for _, sp := range rec.Ended() {
		switch sp.Name() {
		case "chunking.execute":
			execute = sp
		case "chunking.deserialize":
			deserialize[sp.Parent().SpanID()] = sp
		}
	}
	if execute != nil {
		if d, ok := deserialize[execute.Parent().SpanID()]; !ok {
			t.Errorf("execute's parent %v is no deserialize span's parent: want it a sibling of the last chunk's deserialize", execute.Parent().SpanID())
		} else if execute.StartTime().Before(d.EndTime()) {
			t.Errorf("execute starts at %v, before its chunk's deserialize ends (%v)", execute.StartTime(), d.EndTime())
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range d.DataPoints {
					key := m.Name
					if v, ok := p.Attributes.Value(AttrSizingKind); ok {
						key += "/" + v.AsString()
					}
					if v, ok := p.Attributes.Value(AttrCode); ok {
						key += "/" + v.AsString()
					}
					sums[key] += p.Value
				}
			}
		}
	}
	for name, want := range map[string]int64{MetricSizingComputations + "/action": 3, MetricRetries + "/Unavailable": 1,
		MetricPartialBuffers: 0} {
		if got, ok := sums[name]; !ok || got != want {
			t.Errorf("metric %s = %d (recorded %v), want %d", name, got, ok, want)
		}
	}
	if sums[MetricBytes] == 0 {
		t.Errorf("%s not recorded", MetricBytes)
	}
}

// quietTracer is a PhaseTracer that exports nothing (PhaseAttributes
// false), as the runtime's own tracer when only the attribution reads its
// spans, which counts the phase spans started, the leaves (recorded whole
// when they end) and the attributes given to either.
type quietTracer struct {
	tracenoop.TracerProvider
	attrs, started, leaves *int
}

func (q quietTracer) StartPhaseSpan(ctx context.Context, _, _ string, _ telemetry.Phase, _ telemetry.Direction, _ time.Time) (context.Context, trace.Span) {
	*q.started++
	return ctx, countingSpan{attrs: q.attrs}
}
func (quietTracer) EndPhaseSpan(trace.Span, time.Time) {}
func (q quietTracer) RecordPhaseSpan(_ context.Context, _, _ string, _ telemetry.Phase, _ telemetry.Direction, _, _ time.Time, attrs []attribute.KeyValue) {
	*q.leaves++
	*q.attrs += len(attrs)
}
func (quietTracer) PhaseAttributes() bool { return false }

type countingSpan struct {
	tracenoop.Span
	attrs *int
}

func (countingSpan) IsRecording() bool                        { return true }
func (s countingSpan) SetAttributes(kv ...attribute.KeyValue) { *s.attrs += len(kv) }

// TestAttributesOnlyWhenRead: the planner's serialize span (actions,
// chunks, sizings, algorithm, bytes) and the sidecar's deserialize and
// execute spans (partial, actions, chunks) get their attributes only
// where something reads them (Component.SpanAttributes); a tracer that
// exports nothing is given none, so they are not built.
func TestAttributesOnlyWhenRead(t *testing.T) {
	var attrs, started, leaves int
	comp, err := telemetry.NewComponent("chunking", telemetry.ComponentConfig{TracerProvider: quietTracer{attrs: &attrs, started: &started, leaves: &leaves}, MeterProvider: metricnoop.NewMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	if comp.SpanAttributes() {
		t.Fatal("SpanAttributes true on a PhaseTracer that exports nothing")
	}
	p := newPlanner(t, PlannerConfig{Component: comp})
	if _, err := p.Plan(context.Background(), response(task(0, 10), task(1, 10))); err != nil {
		t.Fatal(err)
	}
	if started != 0 || leaves != 1 || attrs != 0 {
		t.Errorf("the plan started %d spans and made %d leaves with %d attributes that nothing reads, want its serialize as a leaf with 0", started, leaves, attrs)
	}
	started, leaves, attrs = 0, 0, 0
	rg := startRig(t, SidecarConfig{Component: comp})
	tok := rg.leaseN(t, 1)[0]
	snd, err := NewSender(rg.conn, SenderConfig{Planner: newPlanner(t, PlannerConfig{Component: comp}), Component: comp})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := snd.Complete(context.Background(), withToken(response(task(0, 10)), tok)); err != nil {
		t.Fatal(err)
	}
	if rg.sc.Applied() != 1 {
		t.Fatalf("sidecar applied %d completions, want 1", rg.sc.Applied())
	}
	// Leaves: the sender's serialize, the sidecar's deserialize and
	// execute (no span starts under them); started: send, which the
	// chunks' spans start under (send.chunk starts through the OTel API:
	// not counted).
	if started != 1 || leaves != 3 || attrs != 0 {
		t.Errorf("the completion started %d phase spans and made %d leaves with %d attributes that nothing reads, want 1 and 3 with 0", started, leaves, attrs)
	}
}

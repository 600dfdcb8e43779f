package telemetry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func newTestComponent(t *testing.T, name string, attrs ...attribute.KeyValue) (*Component, *tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	c, err := NewComponent(name, ComponentConfig{TracerProvider: tp, MeterProvider: mp, PhaseLabels: true, Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	return c, sr, reader
}

func attrMap(kvs []attribute.KeyValue) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.Emit()
	}
	return m
}

func TestPhaseSpansAndMetrics(t *testing.T) {
	c, sr, reader := newTestComponent(t, "ipc", AttrTransport.String("ipc"), AttrScenario.String("taskhost"))
	ctx, work := c.StartWork(context.Background(), AttrWorkID.Int(7))
	for _, tc := range []struct {
		phase Phase
		dir   Direction
		fail  error
	}{
		{Dispatch, None, nil},
		{Serialize, Request, nil},
		{Send, Request, errors.New("broken pipe")},
		{Deserialize, Reply, nil},
	} {
		_, ph := c.Start(ctx, tc.phase, tc.dir)
		if tc.fail != nil {
			ph.End(WithError(tc.fail))
		} else if d := ph.End(); d <= 0 {
			t.Errorf("%v: End returned %v, want > 0", tc.phase, d)
		}
	}
	work.End(OK, nil)

	spans := sr.Ended()
	if got, want := len(spans), 5; got != want {
		t.Fatalf("got %d spans, want %d", got, want)
	}
	root := spans[4]
	if root.Name() != SpanWork {
		t.Fatalf("last span %q, want %q", root.Name(), SpanWork)
	}
	ra := attrMap(root.Attributes())
	if ra[AttrWorkID] != "7" || ra[AttrOutcome] != "ok" || ra[AttrScenario] != "taskhost" {
		t.Errorf("root attributes %v", ra)
	}
	wantNames := []string{"ipc.dispatch", "ipc.serialize", "ipc.send", "ipc.deserialize"}
	wantDir := []string{"", "request", "request", "reply"}
	for i, s := range spans[:4] {
		if s.Name() != wantNames[i] {
			t.Errorf("span %d: got name %q, want %q", i, s.Name(), wantNames[i])
		}
		if s.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("%s: parent %v, want root %v", s.Name(), s.Parent().SpanID(), root.SpanContext().SpanID())
		}
		a := attrMap(s.Attributes())
		if a[AttrComponent] != "ipc" || a[AttrPhase] != wantNames[i][4:] || a[AttrDirection] != wantDir[i] {
			t.Errorf("%s: attributes %v", s.Name(), a)
		}
		// The component's attributes are the root's and the metrics', not
		// repeated on every phase span.
		if _, ok := a[AttrTransport]; ok || len(a) > 3 {
			t.Errorf("%s: attributes %v, want amdahl.component, .phase and .direction only", s.Name(), a)
		}
		if s.SpanKind() != trace.SpanKindInternal {
			t.Errorf("%s: kind %v, want internal", s.Name(), s.SpanKind())
		}
	}
	if spans[2].Status().Description != "broken pipe" {
		t.Errorf("failed send: status %+v, want error 'broken pipe'", spans[2].Status())
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, ScopeName)
		}
		for _, m := range sm.Metrics {
			if m.Unit != "s" {
				t.Errorf("%s: unit %q, want s", m.Name, m.Unit)
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				t.Fatalf("%s: data %T, want explicit-bucket histogram", m.Name, m.Data)
			}
			for _, dp := range h.DataPoints {
				if len(dp.Bounds) != len(DurationBuckets) {
					t.Errorf("%s: %d bounds, want %d", m.Name, len(dp.Bounds), len(DurationBuckets))
				}
				ph, _ := dp.Attributes.Value(AttrPhase)
				dir, _ := dp.Attributes.Value(AttrDirection)
				out, _ := dp.Attributes.Value(AttrOutcome)
				if _, ok := dp.Attributes.Value(AttrWorkID); ok {
					t.Errorf("%s: work id leaked onto a metric", m.Name)
				}
				counts[m.Name+"/"+ph.AsString()+"/"+dir.AsString()+"/"+out.AsString()] += dp.Count
			}
		}
	}
	want := map[string]uint64{
		MetricPhaseDuration + "/dispatch//":         1,
		MetricPhaseDuration + "/serialize/request/": 1,
		MetricPhaseDuration + "/send/request/":      1,
		MetricPhaseDuration + "/deserialize/reply/": 1,
		MetricWorkDuration + "///ok":                1,
	}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("count %s = %d, want %d (all: %v)", k, counts[k], v, counts)
		}
	}
}

func TestDisabledComponent(t *testing.T) {
	var c *Component
	ctx := context.Background()
	got, ph := c.Start(ctx, Execute, None)
	if got != ctx {
		t.Error("disabled StartPhase changed the context")
	}
	if ph.Span().IsRecording() {
		t.Error("disabled phase span is recording")
	}
	if d := ph.End(); d < 0 {
		t.Errorf("disabled End = %v, want >= 0", d)
	}
	_, w := c.StartWork(ctx)
	w.End(Failed, errors.New("x"))
	c.RecordCritical(ctx, c.Name(), Send, Request, 1)
}

// RunAttributes hands a library the component's scenario and variant,
// not its transport or other attributes; nil for a disabled component.
func TestRunAttributes(t *testing.T) {
	c, err := NewComponent("ipc", ComponentConfig{MeterProvider: sdkmetric.NewMeterProvider(), Attributes: []attribute.KeyValue{
		AttrTransport.String("ipc"), AttrVariant.String("candidate"), attribute.String("other", "x"), AttrScenario.String("s1")}})
	if err != nil {
		t.Fatal(err)
	}
	got := attribute.NewSet(c.RunAttributes()...)
	want := attribute.NewSet(AttrScenario.String("s1"), AttrVariant.String("candidate"))
	if !got.Equals(&want) {
		t.Errorf("RunAttributes = %v, want %v", got.Encoded(attribute.DefaultEncoder()), want.Encoded(attribute.DefaultEncoder()))
	}
	var disabled *Component
	if a := disabled.RunAttributes(); a != nil {
		t.Errorf("disabled RunAttributes = %v, want nil", a)
	}
}

// A component made without providers uses the otel globals, as an OTel
// instrumentation library does: a program that set them gets the spans.
func TestNilProvidersMeanGlobals(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)

	c, err := NewComponent("chunking", ComponentConfig{})
	if err != nil || c == nil {
		t.Fatalf("NewComponent without providers = %v, %v; want a component on the globals", c, err)
	}
	_, ph := c.Start(context.Background(), Serialize, Reply)
	ph.End()
	if got := sr.Ended(); len(got) != 1 || got[0].Name() != "chunking.serialize" {
		t.Fatalf("global provider got %d spans, want chunking.serialize", len(got))
	}
}

func TestParseNames(t *testing.T) {
	for _, p := range Phases() {
		got, err := ParsePhase(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePhase(%q) = %v, %v", p.String(), got, err)
		}
	}
	if _, err := ParsePhase("compile"); err == nil {
		t.Error("ParsePhase(compile): want error")
	}
	for _, d := range []Direction{None, Request, Reply} {
		got, err := ParseDirection(d.String())
		if err != nil || got != d {
			t.Errorf("ParseDirection(%q) = %v, %v", d.String(), got, err)
		}
	}
	if _, err := ParseDirection("sideways"); err == nil {
		t.Error("ParseDirection(sideways): want error")
	}
}

func TestInvalidPhasePanics(t *testing.T) {
	c, _, _ := newTestComponent(t, "ipc")
	for name, start := range map[string]func(){
		"StartPhase(0)":              func() { c.Start(context.Background(), 0, None) },
		"StartLeaf(0)":               func() { c.Start(context.Background(), 0, None, Leaf()) },
		"StartDetachedLeaf(send, 9)": func() { c.Start(context.Background(), Send, 9, Leaf(), Detached()) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			start()
		}()
	}
}

func TestRecordSpanMeasuredElsewhere(t *testing.T) {
	c, sr, reader := newTestComponent(t, "taskhost", AttrTransport.String("ipc"))
	ctx, work := c.StartWork(context.Background())
	start := time.Unix(1_700_000_000, 0)
	end := start.Add(3 * time.Millisecond)
	c.RecordSpan(ctx, Execute, None, start, end, AttrRemote.Bool(true))
	c.RecordSpan(ctx, Receive, Request, start, start.Add(time.Millisecond), AttrBytes.Int(42))
	c.RecordSpan(ctx, Phase(0), Request, start, end) // invalid: nothing
	c.RecordSpan(ctx, Execute, Direction(9), start, end)
	work.End(OK, nil)

	spans := sr.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 2 phases + the work span", len(spans))
	}
	ex, rc := spans[0], spans[1]
	if ex.Name() != "taskhost.execute" || !ex.StartTime().Equal(start) || !ex.EndTime().Equal(end) {
		t.Errorf("span %q [%v, %v], want taskhost.execute [%v, %v]", ex.Name(), ex.StartTime(), ex.EndTime(), start, end)
	}
	if ex.Parent().SpanID() != work.Span().SpanContext().SpanID() {
		t.Error("the recorded span is not a child of the span in ctx")
	}
	m := attrMap(ex.Attributes())
	for k, want := range map[attribute.Key]string{AttrComponent: "taskhost", AttrPhase: "execute", AttrRemote: "true"} {
		if m[k] != want {
			t.Errorf("%s = %q, want %q (all: %v)", k, m[k], want, m)
		}
	}
	if _, ok := m[AttrDirection]; ok {
		t.Error("execute has no direction")
	}
	if m := attrMap(rc.Attributes()); m[AttrDirection] != "request" || m[AttrBytes] != "42" {
		t.Errorf("receive attributes %v, want direction request and bytes 42", m)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var count uint64
	var sum float64
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name != MetricPhaseDuration {
				continue
			}
			for _, dp := range mt.Data.(metricdata.Histogram[float64]).DataPoints {
				count += dp.Count
				sum += dp.Sum
			}
		}
	}
	if count != 2 || sum < 0.00399 || sum > 0.00401 {
		t.Errorf("%s: %d points summing %gs, want 2 summing 0.004s", MetricPhaseDuration, count, sum)
	}
}

// A detached phase ends on another goroutine: its span and duration are
// recorded as a phase's.
func TestStartDetached(t *testing.T) {
	c, sr, reader := newTestComponent(t, "runtime")
	ctx, ph := c.Start(context.Background(), Dispatch, None, Detached())
	if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		t.Fatal("StartDetached returned no span in ctx")
	}
	done := make(chan time.Duration)
	go func() { done <- ph.End() }()
	if d := <-done; d <= 0 {
		t.Errorf("End on another goroutine = %v, want > 0", d)
	}
	if got := sr.Ended(); len(got) != 1 || got[0].Name() != "runtime.dispatch" {
		t.Fatalf("ended %d spans, want runtime.dispatch", len(got))
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	n := uint64(0)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == MetricPhaseDuration {
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					n += dp.Count
				}
			}
		}
	}
	if n != 1 {
		t.Errorf("%s has %d points, want 1", MetricPhaseDuration, n)
	}
	var nilComp *Component
	if _, ph := nilComp.Start(context.Background(), Queue, None, Detached()); ph.End() != 0 || ph.Span().IsRecording() {
		t.Error("a disabled component's detached phase records")
	}
}

// labellingProvider is a TracerProvider that, like otel-profiling-go, sets
// a span_id pprof label in the context Start returns.
type labellingProvider struct{ trace.TracerProvider }

type labellingTracer struct{ trace.Tracer }

func (p labellingProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return labellingTracer{p.TracerProvider.Tracer(name, opts...)}
}

func (t labellingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	ctx, span := t.Tracer.Start(ctx, name, opts...)
	ctx = pprof.WithLabels(ctx, pprof.Labels("span_id", span.SpanContext().SpanID().String()))
	pprof.SetGoroutineLabels(ctx)
	return ctx, span
}

// TestPhaseKeepsSpanLabels: a phase that is the first span of its trace in
// the process (its parent context has no labels) keeps the span_id label
// its tracer set, beside phase; End restores the parent's labels (none).
func TestPhaseKeepsSpanLabels(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	c, err := NewComponent("taskhost", ComponentConfig{TracerProvider: labellingProvider{tp}, PhaseLabels: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, ph := c.Start(context.Background(), Execute, None)
	want := ph.Span().SpanContext().SpanID().String()
	if v, _ := pprof.Label(ctx, "span_id"); v != want {
		t.Errorf("span_id label %q, want %q", v, want)
	}
	if v, _ := pprof.Label(ctx, LabelPhase); v != "execute" {
		t.Errorf("phase label %q, want execute", v)
	}
	ph.End()
}

// TestLeafSpanLikePhase: a leaf (Leaf; End with WithAttributes or WithError) makes the
// span Start without Leaf would have made: name, parent, attributes plus those
// given at the end, error status, times; it records the phase metric
// once, and holds the phase's pprof label while it runs.
func TestLeafSpanLikePhase(t *testing.T) {
	c, sr, reader := newTestComponent(t, "ipc", AttrTransport.String("ipc"))
	ctx, work := c.StartWork(context.Background())
	_, ph := c.Start(ctx, Send, Request)
	ph.Span().SetAttributes(AttrBytes.Int(10))
	ph.End()
	before := time.Now()
	_, leaf := c.Start(ctx, Send, Request, Leaf())
	const fn = "telemetry.TestLeafSpanLikePhase"
	if got := goroutineLabels(t, fn); !strings.Contains(got, `"phase":"send"`) {
		t.Errorf("goroutine labels during a leaf %s, want phase send", got)
	}
	d := leaf.End(WithAttributes(AttrBytes.Int(10)))
	if got := goroutineLabels(t, fn); strings.Contains(got, "phase") {
		t.Errorf("goroutine labels after the leaf ended %s, want no phase", got)
	}
	_, failed := c.Start(ctx, Send, Request, Leaf())
	failed.End(WithError(errors.New("broken pipe")), WithAttributes(AttrBytes.Int(7)))
	work.End(OK, nil)

	spans := sr.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	want, got, bad := spans[0], spans[1], spans[2]
	if got.Name() != want.Name() || got.Parent().SpanID() != want.Parent().SpanID() || got.SpanKind() != want.SpanKind() {
		t.Errorf("leaf span %s under %s, want %s under %s", got.Name(), got.Parent().SpanID(), want.Name(), want.Parent().SpanID())
	}
	if g, w := attrMap(got.Attributes()), attrMap(want.Attributes()); len(g) != len(w) || g[AttrBytes] != "10" || g[AttrPhase] != "send" || g[AttrDirection] != "request" {
		t.Errorf("leaf attributes %v, want %v", g, w)
	}
	if got.StartTime().Before(before) || got.EndTime().Sub(got.StartTime()) != d {
		t.Errorf("leaf span %v–%v, End returned %v: want its own start and the duration End measured", got.StartTime(), got.EndTime(), d)
	}
	if bad.Status().Code.String() != "Error" || bad.Status().Description != "broken pipe" {
		t.Errorf("failed leaf status %+v, want Error broken pipe", bad.Status())
	}
	if g := attrMap(bad.Attributes()); g[AttrBytes] != "7" || g[AttrPhase] != "send" {
		t.Errorf("failed leaf attributes %v, want the phase's and %s=7", g, AttrBytes)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == MetricPhaseDuration {
				for _, dp := range h.DataPoints {
					n += dp.Count
				}
			}
		}
	}
	if n != 3 {
		t.Errorf("%s recorded %d times, want 3 (a phase and two leaves)", MetricPhaseDuration, n)
	}
}

// TestWorkDurationMarksUnsampledUnits: amdahl.work.duration of a unit
// whose root was not sampled carries amdahl.sampled=false (the dashboards
// leave it out of q's denominator, as amdahl.phase.critical has none of
// it); a sampled unit's carries no such attribute.
func TestWorkDurationMarksUnsampledUnits(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(ctx) }()
	for _, sampled := range []bool{true, false, false} {
		s := sdktrace.NeverSample()
		if sampled {
			s = sdktrace.AlwaysSample()
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(s))
		c, err := NewComponent("runtime", ComponentConfig{TracerProvider: tp, MeterProvider: mp})
		if err != nil {
			t.Fatal(err)
		}
		_, w := c.StartWork(ctx)
		w.End(OK, nil)
		_ = tp.Shutdown(ctx)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != MetricWorkDuration {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				v, ok := dp.Attributes.Value(AttrSampled)
				got[fmt.Sprintf("%v %s", ok, v.Emit())] += dp.Count
			}
		}
	}
	if want := map[string]uint64{"false ": 1, "true false": 2}; !maps.Equal(got, want) {
		t.Errorf("work durations by amdahl.sampled (present, value): %v, want %v", got, want)
	}
}

// TestPhaseAtGivenTimes: StartedAt (of a phase and a leaf) and EndedAt
// take the instants the caller read instead of reading the clock, through
// the OTel API and through a PhaseTracer; a perturbed phase's EndAt still
// includes its delay; a zero instant is now; a disabled component reads
// nothing and returns 0.
func TestPhaseAtGivenTimes(t *testing.T) {
	start := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	end := start.Add(3 * time.Millisecond)

	c, sr, _ := newTestComponent(t, "runtime")
	ctx, ph := c.Start(context.Background(), Dispatch, None, Detached(), StartedAt(start))
	_, leaf := c.Start(ctx, Queue, None, Leaf(), Detached(), StartedAt(start))
	if ph.Start() != start || leaf.Start() != start {
		t.Fatalf("Start = %v and %v, want %v", ph.Start(), leaf.Start(), start)
	}
	if d := leaf.End(EndedAt(end.Add(-time.Millisecond))); d != 2*time.Millisecond {
		t.Errorf("leaf EndAt = %v, want 2ms", d)
	}
	if d := ph.End(EndedAt(end), WithAttributes(attribute.Int("n", 1))); d != 3*time.Millisecond {
		t.Errorf("EndAt = %v, want 3ms", d)
	}
	got := map[string][2]time.Time{}
	for _, s := range sr.Ended() {
		got[s.Name()] = [2]time.Time{s.StartTime(), s.EndTime()}
		if s.Name() == "runtime.dispatch" && attrMap(s.Attributes())["n"] != "1" {
			t.Errorf("dispatch attributes %v, want n=1 among them", s.Attributes())
		}
	}
	want := map[string][2]time.Time{"runtime.dispatch": {start, end}, "runtime.queue": {start, end.Add(-time.Millisecond)}}
	if !maps.Equal(got, want) {
		t.Errorf("spans %v, want %v", got, want)
	}

	// Through a PhaseTracer: the times it is handed are the given ones.
	f := &fakePhaseTracer{}
	fc, err := NewComponent("runtime", ComponentConfig{TracerProvider: f, MeterProvider: metricnoop.NewMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	_, fph := fc.Start(context.Background(), Dispatch, None, Detached(), StartedAt(start))
	fph.End(EndedAt(end))
	_, fleaf := fc.Start(context.Background(), Queue, None, Leaf(), Detached(), StartedAt(start))
	fleaf.End(EndedAt(end))
	if len(f.ended) != 1 || !f.ended[0].Equal(end) {
		t.Errorf("PhaseTracer ended at %v, want [%v]", f.ended, end)
	}
	if len(f.recorded) != 1 || !strings.HasSuffix(f.recorded[0], " 3ms") {
		t.Errorf("PhaseTracer recorded %q, want the queue leaf of 3ms", f.recorded)
	}

	// An end before the start is the start: an empty phase, not a
	// negative one.
	_, bph := c.Start(context.Background(), Dispatch, None, Detached(), StartedAt(end))
	if d := bph.End(EndedAt(start)); d != 0 {
		t.Errorf("EndAt before the start = %v, want 0", d)
	}
	if got := sr.Ended(); got[len(got)-1].EndTime() != end {
		t.Errorf("span ended before the start at %v, want its start %v", got[len(got)-1].EndTime(), end)
	}

	// A zero instant is now.
	before := time.Now()
	_, zph := c.Start(context.Background(), Dispatch, None, Detached(), StartedAt(time.Time{}))
	if zph.Start().Before(before) {
		t.Errorf("StartDetachedAt(zero) started at %v, before the call at %v", zph.Start(), before)
	}
	if d := zph.End(EndedAt(time.Time{})); d < 0 {
		t.Errorf("EndAt(zero) = %v", d)
	}

	// A perturbed phase's delay is its own: EndAt reads the clock after it.
	pc, err := NewComponent("ipc", ComponentConfig{TracerProvider: f, MeterProvider: metricnoop.NewMeterProvider(),
		Delay: map[Phase]time.Duration{Send: 2 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := pc.Start(context.Background(), Send, Request, Leaf())
	if d := sp.End(EndedAt(sp.Start())); d < 2*time.Millisecond {
		t.Errorf("perturbed EndAt = %v, want at least the 2ms delay", d)
	}

	var off *Component
	if _, oph := off.Start(context.Background(), Dispatch, None, Detached(), StartedAt(start)); oph.End(EndedAt(end)) != 0 || !oph.Start().IsZero() {
		t.Error("a disabled component's phase at given times records")
	}
	if _, oleaf := off.Start(context.Background(), Queue, None, Leaf(), Detached(), StartedAt(start)); oleaf.End(EndedAt(end)) != 0 {
		t.Error("a disabled component's leaf at given times records")
	}
}

// TestOptions: End's options combine (attributes of several WithAttributes
// all reach the span; the last EndedAt and the last non-nil error win; a
// nil WithError is no failure), and neither Start's nor End's options
// allocate: a phase started Detached at a given instant and ended at
// another, with an error, allocates nothing through a PhaseTracer.
func TestOptions(t *testing.T) {
	c, sr, _ := newTestComponent(t, "ipc")
	start := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	_, leaf := c.Start(context.Background(), Send, Request, Leaf(), StartedAt(start))
	boom := errors.New("boom")
	d := leaf.End(WithAttributes(AttrBytes.Int(1)), EndedAt(start.Add(time.Second)), WithError(boom),
		WithAttributes(AttrRemote.Bool(true)), EndedAt(start.Add(2*time.Second)), WithError(nil))
	_, ok := c.Start(context.Background(), Send, Request, Leaf())
	ok.End(WithError(nil))
	spans := sr.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	got := spans[0]
	if g := attrMap(got.Attributes()); g[AttrBytes] != "1" || g[AttrRemote] != "true" {
		t.Errorf("attributes %v, want both WithAttributes' (%s=1, %s=true)", g, AttrBytes, AttrRemote)
	}
	if d != 2*time.Second || !got.StartTime().Equal(start) || !got.EndTime().Equal(start.Add(2*time.Second)) {
		t.Errorf("span %v–%v, End = %v: want %v–%v (the last EndedAt)", got.StartTime(), got.EndTime(), d, start, start.Add(2*time.Second))
	}
	if got.Status().Code.String() != "Error" || got.Status().Description != "boom" {
		t.Errorf("status %+v, want Error boom (a later WithError(nil) is no change)", got.Status())
	}
	if s := spans[1].Status().Code.String(); s != "Unset" {
		t.Errorf("WithError(nil): status %s, want Unset", s)
	}

	nc, err := NewComponent("ipc", ComponentConfig{TracerProvider: nullPhaseTracer{}, MeterProvider: metricnoop.NewMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		_, ph := nc.Start(ctx, Dispatch, None, Detached(), StartedAt(start))
		_, lf := nc.Start(ctx, Queue, None, Leaf(), Detached(), StartedAt(start))
		lf.End(EndedAt(start.Add(time.Millisecond)))
		ph.End(EndedAt(start.Add(time.Second)), WithError(boom))
	}); n != 0 {
		t.Errorf("phases with options allocate %v times, want 0", n)
	}
}

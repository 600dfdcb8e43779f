package telemetry

import (
	"context"
	"errors"
	"maps"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// fakePhaseTracer records what a Component hands a PhaseTracer.
type fakePhaseTracer struct {
	tracenoop.TracerProvider
	started  []string
	ended    []time.Time
	recorded []string
	attrs    [][]attribute.KeyValue
}

func (f *fakePhaseTracer) StartPhaseSpan(ctx context.Context, name, component string, p Phase, d Direction, start time.Time) (context.Context, trace.Span) {
	f.started = append(f.started, name+" "+component+" "+p.String()+" "+d.String())
	return ctx, noopSpan
}

func (f *fakePhaseTracer) EndPhaseSpan(_ trace.Span, end time.Time) { f.ended = append(f.ended, end) }

func (f *fakePhaseTracer) PhaseAttributes() bool { return false }

func (f *fakePhaseTracer) RecordPhaseSpan(_ context.Context, name, component string, p Phase, d Direction, start, end time.Time, attrs []attribute.KeyValue) {
	f.recorded = append(f.recorded, name+" "+component+" "+p.String()+" "+d.String()+" "+end.Sub(start).String())
	f.attrs = append(f.attrs, attrs)
}

// TestPhaseTracerPath: a Component whose TracerProvider is a PhaseTracer
// hands it its phases whole (names, component, phase, direction, the times
// it read), and with a no-op MeterProvider records no metric.
func TestPhaseTracerPath(t *testing.T) {
	f := &fakePhaseTracer{}
	c, err := NewComponent("ipc", ComponentConfig{TracerProvider: f, MeterProvider: metricnoop.NewMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	if c.RecordsMetrics() {
		t.Error("RecordsMetrics with a no-op meter provider")
	}
	ctx, w := c.StartWork(context.Background(), AttrWorkID.String("u"))
	_, ph := c.Start(ctx, Serialize, Request)
	d := ph.End()
	_, q := c.Start(ctx, Queue, None, Detached())
	q.End()
	t0 := time.Unix(100, 0)
	c.RecordSpan(ctx, Receive, Reply, t0, t0.Add(time.Millisecond), AttrRemote.Bool(true))
	_, lf := c.Start(ctx, Send, Request, Leaf())
	lf.End(WithAttributes(AttrBytes.Int(5)))
	e2e := w.End(OK, nil)

	wantStarted := []string{"amdahl.work  phase(0) ", "ipc.serialize ipc serialize request", "ipc.queue ipc queue "}
	if !slices.Equal(f.started, wantStarted) {
		t.Errorf("started %q, want %q", f.started, wantStarted)
	}
	if len(f.ended) != 3 {
		t.Fatalf("ended %d spans, want 3", len(f.ended))
	}
	if got := f.ended[2].Sub(w.Start()); got != e2e {
		t.Errorf("root ended %v after its start, End returned %v: want the time End read", got, e2e)
	}
	if got := f.ended[0].Sub(ph.Start()); got != d {
		t.Errorf("phase ended %v after its start, End returned %v: want the time End read", got, d)
	}
	if len(f.recorded) != 2 || f.recorded[0] != "ipc.receive ipc receive reply 1ms" || len(f.attrs[0]) != 1 || f.attrs[0][0] != AttrRemote.Bool(true) {
		t.Errorf("recorded %q with %v, want ipc.receive with amdahl.remote first", f.recorded, f.attrs)
	}
	// A leaf is recorded whole at its end: no span started for it.
	if len(f.recorded) == 2 && (!strings.HasPrefix(f.recorded[1], "ipc.send ipc send request ") || len(f.attrs[1]) != 1 || f.attrs[1][0] != AttrBytes.Int(5)) {
		t.Errorf("leaf recorded as %q with %v, want ipc.send/request with amdahl.bytes", f.recorded[1], f.attrs[1])
	}
}

// TestSpanAttributes: a caller may skip a span's attributes only where
// nothing reads them: a disabled component, the no-op provider, a
// PhaseTracer that exports nothing. An SDK provider (exporters,
// samplers) and an exporting PhaseTracer read them.
func TestSpanAttributes(t *testing.T) {
	var disabled *Component
	if disabled.SpanAttributes() {
		t.Error("a disabled component's span attributes are read")
	}
	sdk := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	for _, c := range []struct {
		name string
		tp   trace.TracerProvider
		want bool
	}{
		{"SDK", sdk, true},
		{"no-op", tracenoop.NewTracerProvider(), false},
		{"PhaseTracer exporting nothing", nullPhaseTracer{}, false},
		{"exporting PhaseTracer", &exportingPhaseTracer{TracerProvider: sdk}, true},
	} {
		comp, err := NewComponent("chunking", ComponentConfig{TracerProvider: c.tp, MeterProvider: metricnoop.NewMeterProvider()})
		if err != nil {
			t.Fatal(err)
		}
		if got := comp.SpanAttributes(); got != c.want {
			t.Errorf("%s: SpanAttributes %v, want %v", c.name, got, c.want)
		}
	}
}

// nullPhaseTracer takes phases and keeps nothing, allocating nothing.
type nullPhaseTracer struct{ tracenoop.TracerProvider }

func (nullPhaseTracer) PhaseAttributes() bool { return false }

func (nullPhaseTracer) StartPhaseSpan(ctx context.Context, _, _ string, _ Phase, _ Direction, _ time.Time) (context.Context, trace.Span) {
	return ctx, noopSpan
}
func (nullPhaseTracer) EndPhaseSpan(trace.Span, time.Time) {}
func (nullPhaseTracer) RecordPhaseSpan(context.Context, string, string, Phase, Direction, time.Time, time.Time, []attribute.KeyValue) {
}

// TestNoMetricsNoAllocation: with a no-op MeterProvider a phase records
// no metric: the Component itself allocates nothing (a record's variadic
// option would escape).
func TestNoMetricsNoAllocation(t *testing.T) {
	c, err := NewComponent("ipc", ComponentConfig{TracerProvider: nullPhaseTracer{}, MeterProvider: metricnoop.NewMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Unix(100, 0)
	if n := testing.AllocsPerRun(100, func() {
		_, ph := c.Start(ctx, Send, Request)
		ph.End()
		c.RecordSpan(ctx, Receive, Reply, t0, t0)
		c.RecordCritical(ctx, c.Name(), Send, Request, time.Millisecond)
		c.RecordPhase(ctx, Send, Request, time.Millisecond)
	}); n != 0 {
		t.Errorf("a phase allocates %v times with no metrics, want 0", n)
	}
}

// exportingPhaseTracer is a PhaseTracer whose spans are exported
// (PhaseAttributes): an SDK provider with a recorder underneath.
type exportingPhaseTracer struct {
	*sdktrace.TracerProvider
	recorded []string
}

func (f *exportingPhaseTracer) PhaseAttributes() bool { return true }

func (f *exportingPhaseTracer) StartPhaseSpan(ctx context.Context, name, _ string, _ Phase, _ Direction, start time.Time) (context.Context, trace.Span) {
	return f.Tracer("fake").Start(ctx, name, trace.WithTimestamp(start))
}

func (f *exportingPhaseTracer) EndPhaseSpan(s trace.Span, end time.Time) {
	s.End(trace.WithTimestamp(end))
}

func (f *exportingPhaseTracer) RecordPhaseSpan(_ context.Context, name, _ string, _ Phase, _ Direction, _, _ time.Time, _ []attribute.KeyValue) {
	f.recorded = append(f.recorded, name)
}

// TestPhaseTracerExports: through a PhaseTracer whose spans are exported,
// the root span gets the component's attributes and StartWork's, and a
// leaf that failed is recorded with its error (the OTel path) instead of
// whole; one that did not is still recorded whole.
func TestPhaseTracerExports(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	f := &exportingPhaseTracer{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))}
	c, err := NewComponent("ipc", ComponentConfig{TracerProvider: f, MeterProvider: metricnoop.NewMeterProvider(),
		Attributes: []attribute.KeyValue{AttrScenario.String("s")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, w := c.StartWork(context.Background(), AttrWorkID.String("u"))
	_, leaf1 := c.Start(ctx, Send, Request, Leaf())
	leaf1.End(WithAttributes(AttrBytes.Int(5)))
	_, leaf2 := c.Start(ctx, Serialize, Request, Leaf())
	leaf2.End(WithError(errors.New("boom")))
	w.End(OK, nil)

	if !slices.Equal(f.recorded, []string{"ipc.send"}) {
		t.Errorf("recorded whole %q, want only the leaf that did not fail, ipc.send", f.recorded)
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = s
	}
	root, ok := byName[SpanWork]
	if !ok {
		t.Fatalf("no root span among %v", slices.Collect(maps.Keys(byName)))
	}
	want := []attribute.KeyValue{AttrScenario.String("s"), AttrWorkID.String("u"), AttrOutcome.String("ok")}
	if got := root.Attributes(); !slices.Equal(got, want) {
		t.Errorf("root attributes %v, want %v", got, want)
	}
	failed, ok := byName["ipc.serialize"]
	if !ok {
		t.Fatal("the failed leaf made no span")
	}
	if failed.Status().Code != codes.Error || len(failed.Events()) != 1 || failed.Events()[0].Name != "exception" {
		t.Errorf("failed leaf: status %v, events %v; want Error and an exception event", failed.Status(), failed.Events())
	}
}

// TestOffTracer: a Component on the no-op TracerProvider (what
// OTEL_SDK_DISABLED gives) makes no span and allocates nothing, and every
// call returns what the no-op tracer's Start would: the same span context
// in the returned context and span, recording neither, whatever the
// caller's context holds (nothing, a remote parent, a recording span of
// another provider, a sampled-out one).
func TestOffTracer(t *testing.T) {
	tp := tracenoop.NewTracerProvider()
	if _, ok := PhaseTracerOf(tp).(offTracer); !ok {
		t.Fatalf("PhaseTracerOf(no-op provider) = %T, want the off tracer", PhaseTracerOf(tp))
	}
	if samplesOut(PhaseTracerOf(tp)) {
		t.Error("the off tracer says it samples out: its Components look for sampled-out parents for nothing")
	}
	c, err := NewComponent("ipc", ComponentConfig{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	sdk := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	recording, recSpan := sdk.Tracer("t").Start(context.Background(), "parent")
	defer recSpan.End()
	sampledOut, soSpan := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())).Tracer("t").Start(context.Background(), "parent")
	defer soSpan.End()
	remote := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true}))
	noopT := tp.Tracer(ScopeName)
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{{"no parent", context.Background()}, {"root marker", trace.ContextWithSpanContext(context.Background(), trace.SpanContext{})},
		{"remote parent", remote}, {"recording parent", recording}, {"sampled-out parent", sampledOut}} {
		t.Run(tc.name, func(t *testing.T) {
			wantCtx, wantSpan := noopT.Start(tc.ctx, "x")
			check := func(what string, ctx context.Context, span trace.Span) {
				t.Helper()
				if got, want := trace.SpanContextFromContext(ctx), trace.SpanContextFromContext(wantCtx); !got.Equal(want) {
					t.Errorf("%s: context carries %v, the no-op tracer's %v", what, got, want)
				}
				if trace.SpanFromContext(ctx).IsRecording() {
					t.Errorf("%s: the context's span records", what)
				}
				if span != nil && (span.IsRecording() || !span.SpanContext().Equal(wantSpan.SpanContext())) {
					t.Errorf("%s: span %v recording %v, the no-op tracer's %v", what, span.SpanContext(), span.IsRecording(), wantSpan.SpanContext())
				}
			}
			ctx, ph := c.Start(tc.ctx, Send, Request)
			check("StartPhase", ctx, ph.Span())
			ph.End()
			ctx, ph = c.Start(tc.ctx, Dispatch, None, Detached())
			check("StartDetached", ctx, ph.Span())
			ph.End(WithError(errors.New("boom")))
			ctx, w := c.StartWork(tc.ctx, AttrWorkID.String("u1"))
			check("StartWork", ctx, w.Span())
			w.End(Failed, errors.New("boom"))
			if !recSpan.IsRecording() {
				t.Fatal("a phase ended the caller's span")
			}
		})
	}
	// Nothing is recorded, so nothing is measured: no clock read, and
	// the component says it records nothing (callers skip what they
	// would hand it); with metrics, labels or a delay it still does.
	if c.Enabled() {
		t.Error("a Component on the no-op providers says it records")
	}
	if _, ph := c.Start(remote, Send, Request); ph.End() != 0 || !ph.Start().IsZero() {
		t.Error("a phase on the no-op providers read the clock")
	}
	if _, ph := c.Start(remote, Serialize, Request, Leaf()); ph.End() != 0 || !ph.Start().IsZero() {
		t.Error("a leaf on the no-op providers read the clock")
	}
	for _, cfg := range []ComponentConfig{{PhaseLabels: true}, {Delay: map[Phase]time.Duration{Send: time.Nanosecond}}, {}} {
		cfg.TracerProvider = tp
		if cfg.PhaseLabels || cfg.Delay != nil {
			cfg.MeterProvider = metricnoop.NewMeterProvider()
		}
		oc, err := NewComponent("ipc", cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !oc.Enabled() {
			t.Errorf("labels %v, delay %v, metrics %v: Enabled false, want true", cfg.PhaseLabels, cfg.Delay, cfg.MeterProvider == nil)
		}
		_, ph := oc.Start(remote, Send, Request)
		if ph.End() <= 0 && ph.Start().IsZero() {
			t.Errorf("labels %v, delay %v: the phase read no clock", cfg.PhaseLabels, cfg.Delay)
		}
		pprof.SetGoroutineLabels(context.Background())
	}

	ctx := remote
	t0 := time.Unix(100, 0)
	if n := testing.AllocsPerRun(100, func() {
		wctx, w := c.StartWork(ctx)
		dctx, disp := c.Start(wctx, Dispatch, None, Detached())
		pctx, ph := c.Start(dctx, Send, Request)
		_, leaf := c.Start(pctx, Serialize, Request, Leaf())
		leaf.End()
		ph.End()
		c.RecordSpan(pctx, Receive, Reply, t0, t0)
		disp.End()
		w.End(OK, nil)
	}); n != 0 {
		t.Errorf("a unit's phases allocate %v times with the no-op provider, want 0", n)
	}
	// Span-only attributes: only the caller's variadic slice, one a call.
	if n := testing.AllocsPerRun(100, func() {
		_, leaf := c.Start(ctx, Serialize, Request, Leaf())
		leaf.End(WithAttributes(AttrBytes.Int(100)))
		c.RecordSpan(ctx, Receive, Reply, t0, t0, AttrRemote.Bool(true))
	}); n > 2 {
		t.Errorf("two phases with an attribute each allocate %v times with the no-op provider, want at most 2", n)
	}
}

// TestSampledOutPhases: through a PhaseTracer, a phase under a span
// sampled out (valid, unsampled, not recording) is not handed to the
// tracer at all and reads no clock (End returns 0); its Span is the
// parent's. A phase the component records anything else of (metrics,
// labels, a delay) or under a sampled parent goes to the tracer as ever.
func TestSampledOutPhases(t *testing.T) {
	out := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}}))
	in := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled}))
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		cfg    ComponentConfig
		handed bool
		all    bool // the tracer says it samples every span (SamplesOut false)
	}{
		{"sampled out", out, ComponentConfig{MeterProvider: metricnoop.NewMeterProvider()}, false, false},
		{"sampled", in, ComponentConfig{MeterProvider: metricnoop.NewMeterProvider()}, true, false},
		{"sampled out, labels", out, ComponentConfig{MeterProvider: metricnoop.NewMeterProvider(), PhaseLabels: true}, true, false},
		{"sampled out, a delay", out, ComponentConfig{MeterProvider: metricnoop.NewMeterProvider(), Delay: map[Phase]time.Duration{Send: time.Nanosecond, Serialize: time.Nanosecond}}, true, false},
		{"sampled out, metrics", out, ComponentConfig{MeterProvider: metricnoopless{}}, true, false},
		// Not looked for: the tracer makes no span under it all the same.
		{"sampled out, a tracer that samples every span", out, ComponentConfig{MeterProvider: metricnoop.NewMeterProvider()}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakePhaseTracer{}
			tc.cfg.TracerProvider = f
			if tc.all {
				tc.cfg.TracerProvider = samplesAll{f}
			}
			c, err := NewComponent("ipc", tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, ph := c.Start(tc.ctx, Serialize, Request)
			d := ph.End()
			_, lf := c.Start(tc.ctx, Send, Request, Leaf())
			lf.End()
			handed := len(f.started)+len(f.recorded) > 0
			if handed != tc.handed {
				t.Fatalf("handed to the tracer: %v (started %q, recorded %q), want %v", handed, f.started, f.recorded, tc.handed)
			}
			// A phase measured elsewhere goes the same way.
			f.started, f.recorded = nil, nil
			now := time.Now()
			c.RecordSpan(tc.ctx, Send, Reply, now, now.Add(time.Microsecond))
			if handed := len(f.recorded) > 0; handed != tc.handed {
				t.Errorf("RecordSpan handed to the tracer: %v (recorded %q), want %v", handed, f.recorded, tc.handed)
			}
			if got := c.Records(tc.ctx); got != tc.handed {
				t.Errorf("Records = %v, want %v", got, tc.handed)
			}
			if !tc.handed {
				if d != 0 || !ph.Start().IsZero() {
					t.Errorf("a sampled-out phase read the clock: start %v, duration %v", ph.Start(), d)
				}
				if got := ph.Span().SpanContext(); !got.Equal(trace.SpanContextFromContext(tc.ctx)) {
					t.Errorf("a sampled-out phase's span context %v, want its parent's", got)
				}
			}
		})
	}
}

// samplesAll is a PhaseTracer that says it samples out no span.
type samplesAll struct{ *fakePhaseTracer }

func (samplesAll) SamplesOut() bool { return false }

// metricnoopless is a meter provider that is not the no-op one: a
// Component records metrics on it.
type metricnoopless struct{ metricnoop.MeterProvider }

// batchPhaseTracer is a fakePhaseTracer that also takes a Component's
// phases several at once, and keeps each batch's names.
type batchPhaseTracer struct {
	fakePhaseTracer
	batches [][]string
}

func (f *batchPhaseTracer) RecordPhaseSpans(_ context.Context, c *Component, phases Timings, attrs []attribute.KeyValue) {
	var names []string
	for _, t := range phases.T[:phases.N] {
		names = append(names, c.SpanName(t.Phase, t.Direction)+" "+t.End.Sub(t.Start).String())
	}
	f.batches = append(f.batches, names)
	f.attrs = append(f.attrs, attrs)
}

// TestRecordSpans: RecordSpans hands a PhaseBatcher the phases in one
// call, with the attributes; with an invalid phase or direction among
// them (what another process sent), more than Timings holds, or through
// a PhaseTracer that does not batch, it records each valid one as
// RecordSpan does and drops the others.
func TestRecordSpans(t *testing.T) {
	t0 := time.Unix(100, 0)
	valid := []Timing{{Phase: Receive, Direction: Request, Start: t0, End: t0.Add(time.Millisecond)}, {Phase: Execute, Start: t0, End: t0.Add(2 * time.Millisecond)}}
	invalid := append(slices.Clone(valid), Timing{Phase: Execute, Direction: Direction(9)})
	wantEach := []string{"taskhost.receive taskhost receive request 1ms", "taskhost.execute taskhost execute  2ms"}
	many := slices.Repeat(valid[:1], len(Timings{}.T)+1)
	for _, tc := range []struct {
		name     string
		batches  bool
		phases   []Timing
		wantEach []string
	}{{"batch", true, valid, nil}, {"batch, an invalid phase", true, invalid, wantEach}, {"no batch", false, invalid, wantEach},
		{"batch, too many", true, many, slices.Repeat(wantEach[:1], len(many))}} {
		t.Run(tc.name, func(t *testing.T) {
			f := &batchPhaseTracer{}
			var tp PhaseTracer = f
			if !tc.batches {
				tp = &f.fakePhaseTracer
			}
			c, err := NewComponent("taskhost", ComponentConfig{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider()})
			if err != nil {
				t.Fatal(err)
			}
			c.RecordSpans(context.Background(), tc.phases, AttrRemote.Bool(true))
			if tc.wantEach == nil {
				want := [][]string{{"taskhost.receive 1ms", "taskhost.execute 2ms"}}
				if !slices.EqualFunc(f.batches, want, slices.Equal) || len(f.recorded) != 0 {
					t.Errorf("batches %q, recorded %q: want %q in one batch", f.batches, f.recorded, want)
				}
			} else if len(f.batches) != 0 || !slices.Equal(f.recorded, tc.wantEach) {
				t.Errorf("batches %q, recorded %q: want each of %q", f.batches, f.recorded, tc.wantEach)
			}
			for _, a := range f.attrs {
				if len(a) != 1 || a[0] != AttrRemote.Bool(true) {
					t.Errorf("attributes %v, want amdahl.remote", a)
				}
			}
		})
	}
}

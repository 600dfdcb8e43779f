package telemetry

import (
	"context"
	"fmt"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// Component is the instrumentation of one component (ipc, chunking, runtime,
// taskhost, sidecar) with a fixed set of low-cardinality attributes
// (transport, scenario, variant). Every span name, attribute set, metric
// option and pprof label set is built once in the constructor, so that
// Start and End add no allocation of their own beyond what the OTel SDK
// does.
//
// A nil *Component (otelsetup hands one out for a nil *Telemetry) is
// disabled: its methods do nothing and cost a branch. A Component is safe for concurrent
// use.
type Component struct {
	name   string
	tracer trace.Tracer
	fast   PhaseTracer // the TracerProvider, if it is one
	// fastAttrs: fast exports its spans (PhaseAttributes), so they get
	// every attribute and error the OTel path gives them.
	fastAttrs bool
	labels    bool
	// metrics is false when the MeterProvider is a no-op: no record is
	// made (a variadic option passed to an interface escapes: one
	// allocation per record, for nothing).
	metrics bool

	phaseHist    metric.Float64Histogram
	criticalHist metric.Float64Histogram
	workHist     metric.Float64Histogram

	spanNames [NumPhases + 1][NumDirections]string
	spanOpts  [NumPhases + 1][NumDirections][]trace.SpanStartOption
	metricOpt [NumPhases + 1][NumDirections]metric.RecordOption
	labelCtx  [NumPhases + 1][NumDirections]context.Context
	phaseLbl  [NumPhases + 1][NumDirections]pprof.LabelSet

	workOpts   []trace.SpanStartOption
	workMetric [len(outcomeNames)]metric.RecordOption
	// workUnsampled: workMetric's, with amdahl.sampled=false.
	workUnsampled [len(outcomeNames)]metric.RecordOption

	attrs    []attribute.KeyValue
	critOpts sync.Map // criticalKey -> metric.RecordOption
	gapOpts  sync.Map // gapKey -> metric.RecordOption
	gapSets  atomic.Int32
	delay    [NumPhases + 1]time.Duration
	// quiet[p]: a phase p of this component records nothing but its span
	// (a PhaseTracer's, no metrics, labels or delay) and the tracer may
	// sample spans out: under a parent sampled out it is skipped whole
	// (unrecorded).
	quiet [NumPhases + 1]bool
	// quietAll: every phase is quiet.
	quietAll bool
	// off: the component records nothing at all and changes nothing (the
	// off tracer's, OTEL_SDK_DISABLED=true; no metrics, labels or delay):
	// its phases are a disabled component's, reading no clock, and only
	// a phase started with a context asks the tracer for the span the
	// no-op tracer would give (propagation).
	off bool
}

type criticalKey struct {
	component string
	phase     Phase
	dir       Direction
}

// PhaseGap is amdahl.phase on amdahl.phase.critical for a gap
// (RecordCriticalGap).
const PhaseGap = "gap"

// maxGapSets bounds the distinct gaps amdahl.phase.critical records by
// their ends; later ones are recorded with both ends GapMore.
const maxGapSets = 256

// GapMore names the ends of gaps past maxGapSets distinct ones.
const GapMore = "(more)"

type gapKey struct{ from, to string }

// ComponentConfig is what a Component is built from: a program embedding
// amdahl's libraries passes its own providers (or none, for the globals);
// amdahl's own process builds components with (*otelsetup.Telemetry).Component.
type ComponentConfig struct {
	// TracerProvider and MeterProvider; nil means the otel globals
	// (otel.GetTracerProvider, otel.GetMeterProvider), which are no-ops
	// until the program sets them. A disabled component is a nil
	// *Component.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// PhaseLabels runs each phase body under the pprof label phase=<name>.
	PhaseLabels bool
	// Attributes are added to every span and metric of the component. Keep
	// them low-cardinality: transport, scenario, variant.
	Attributes []attribute.KeyValue
	// Delay lengthens phases on purpose (a causal experiment: how much does
	// e2e move when this phase takes d longer?): End sleeps Delay[p] before
	// ending a phase p of any direction. A sleep, not a spin: on a small
	// machine a spin steals CPU from the experiment's other processes and
	// lengthens every phase. Zero (the default) costs one comparison.
	Delay map[Phase]time.Duration
}

// NewComponent builds the instrumentation of the component name. It returns
// an error only if an instrument cannot be created.
func NewComponent(name string, cfg ComponentConfig) (*Component, error) {
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if name == "" {
		return nil, fmt.Errorf("telemetry: component name is empty")
	}
	c := &Component{
		attrs:  append([]attribute.KeyValue(nil), cfg.Attributes...),
		name:   name,
		tracer: cfg.TracerProvider.Tracer(ScopeName, trace.WithInstrumentationVersion(Version)),
		labels: cfg.PhaseLabels,
	}
	c.fast = PhaseTracerOf(cfg.TracerProvider)
	c.fastAttrs = c.fast != nil && c.fast.PhaseAttributes()
	_, noMetrics := cfg.MeterProvider.(metricnoop.MeterProvider)
	c.metrics = !noMetrics
	for p, d := range cfg.Delay {
		if !p.Valid() || d < 0 {
			return nil, fmt.Errorf("telemetry: component %s: delay %v for %v: want a phase and a duration ≥ 0", name, d, p)
		}
		c.delay[p] = d
	}
	c.quietAll = true
	for p := range c.quiet {
		c.quiet[p] = c.fast != nil && samplesOut(c.fast) && !c.metrics && !c.labels && c.delay[p] == 0
		c.quietAll = c.quietAll && c.quiet[p]
	}
	_, isOff := c.fast.(offTracer)
	c.off = isOff && !c.metrics && !c.labels && c.delay == [NumPhases + 1]time.Duration{}
	var err error
	if c.phaseHist, c.criticalHist, c.workHist, err = instruments(cfg.MeterProvider); err != nil {
		return nil, err
	}
	base := append([]attribute.KeyValue{AttrComponent.String(name)}, cfg.Attributes...)
	for p := Queue; p <= Execute; p++ {
		for d := None; d <= Reply; d++ {
			c.phaseLbl[p][d] = pprof.Labels(phaseLabelArgs(name, p, d)...)
			c.labelCtx[p][d] = pprof.WithLabels(context.Background(), c.phaseLbl[p][d])
			pd := []attribute.KeyValue{AttrPhase.String(p.String())} // and the direction, if any
			if d != None {
				pd = append(pd, AttrDirection.String(d.String()))
			}
			c.spanNames[p][d] = name + "." + p.String()
			// A phase span carries what tells it from its siblings; the
			// component's attributes, constant for the unit, are on its
			// root span amdahl.work and on the metrics. Each attribute
			// adds to every span's cost (BenchmarkPhaseVsSDK).
			skv := slices.Concat([]attribute.KeyValue{AttrComponent.String(name)}, pd)
			c.spanOpts[p][d] = []trace.SpanStartOption{trace.WithAttributes(skv...), trace.WithSpanKind(trace.SpanKindInternal)}
			c.metricOpt[p][d] = metric.WithAttributeSet(attribute.NewSet(slices.Concat(base, pd)...))
		}
	}
	c.workOpts = []trace.SpanStartOption{trace.WithAttributes(cfg.Attributes...), trace.WithSpanKind(trace.SpanKindInternal)}
	for o := range outcomeNames {
		kv := append(append([]attribute.KeyValue(nil), cfg.Attributes...), AttrOutcome.String(outcomeNames[o]))
		c.workMetric[o] = metric.WithAttributeSet(attribute.NewSet(kv...))
		c.workUnsampled[o] = metric.WithAttributeSet(attribute.NewSet(append(kv, AttrSampled.Bool(false))...))
	}
	return c, nil
}

// Name returns the component's name ("" for a disabled component).
func (c *Component) Name() string {
	if c == nil {
		return ""
	}
	return c.name
}

// RunAttributes returns the component's amdahl.scenario and amdahl.variant
// attributes (nil for a disabled component or when it has neither), for a
// library to put on its own metrics (amdahl.ipc.*, amdahl.chunking.*,
// amdahl.sidecar.*), so dashboards filter them by scenario and variant like
// the phase metrics. Call it once, at construction.
func (c *Component) RunAttributes() []attribute.KeyValue {
	if c == nil {
		return nil
	}
	var out []attribute.KeyValue
	for _, kv := range c.attrs {
		if kv.Key == AttrScenario || kv.Key == AttrVariant {
			out = append(out, kv)
		}
	}
	return out
}

// SpanName returns the name of the component's spans of phase p in
// direction d ("ipc.send"), or "" for a disabled component or an invalid
// phase or direction.
func (c *Component) SpanName(p Phase, d Direction) string {
	if c == nil || !p.Valid() || d > Reply {
		return ""
	}
	return c.spanNames[p][d]
}

// RecordsMetrics reports whether the component records metrics: false
// when disabled or when its MeterProvider is a no-op, where a caller may
// skip preparing what it would record.
func (c *Component) RecordsMetrics() bool { return c != nil && c.metrics }

// Enabled reports whether the component records anything: false when
// disabled, and on the OTel API's no-op providers (OTEL_SDK_DISABLED=true)
// unless it sets labels or delays phases.
func (c *Component) Enabled() bool { return c != nil && !c.off }

// Records reports whether a phase of the component under the span in ctx
// may record anything: false when Enabled is, and when that span is
// sampled out and every phase of the component would be skipped whole
// under it (the component records nothing of its phases but their spans,
// and its tracer makes no span under a sampled-out parent: see
// PhaseTracer's SamplesOut). A caller may then skip preparing phases it
// would only hand the component to drop (the runtime's host phases, built
// from a task's reply).
func (c *Component) Records(ctx context.Context) bool {
	if !c.Enabled() {
		return false
	}
	if !c.quietAll {
		return true
	}
	_, skip := c.unrecorded(ctx, Execute) // every phase is quiet: any one answers for all
	return !skip
}

// SpanAttributes reports whether anything may read the attributes of the
// spans a caller starts with Tracer, or gives a phase (WithAttributes,
// RecordSpan): false when the component is disabled
// or its TracerProvider is a PhaseTracer that exports nothing (the no-op
// provider's, or the runtime's when only the attribution reads its
// spans: PhaseAttributes false), where a caller may skip building
// attributes that only an exporter or a sampler would see. Attributes
// the attribution reads (amdahl.component, amdahl.phase, …) are a
// phase's own and need no caller's.
func (c *Component) SpanAttributes() bool { return c != nil && (c.fast == nil || c.fastAttrs) }

// Tracer returns the component's tracer, or a no-op tracer when disabled.
func (c *Component) Tracer() trace.Tracer {
	if c == nil {
		return noopTracer
	}
	return c.tracer
}

// PhaseSpan is one running phase, returned by Start. It is a small
// value: copy it freely, end it once. The zero value (from a disabled
// component) is valid and its End does nothing.
type PhaseSpan struct {
	c     *Component
	ctx   context.Context // span context, for exemplars; restored labels
	span  trace.Span
	start time.Time
	phase Phase
	dir   Direction
	label bool
	// inherit: the span's context carries pprof labels (the caller's, or
	// span_id from the tracer), which the phase's and its steps' labels are
	// added to; base is that context.
	inherit bool
	base    context.Context
	// leaf: started with Leaf, no span yet; End records it.
	leaf bool
}

// StartOption configures Start. Options are small values, not interfaces
// (the OTel API's are, and each one passed allocates): a call with options
// allocates nothing for them.
type StartOption struct {
	leaf, detached bool
	at             time.Time
}

// Leaf starts a leaf of the unit's tree: a phase under which no span
// starts (ipc's serialize and send, a unit's queue wait). Start returns
// the caller's context unchanged, and the phase's span is made when it
// ends, from its start and end times, as RecordSpan makes one: through the
// SDK the same span a phase without Leaf makes; through a PhaseTracer (the
// runtime's own tracer) no span object and no context at all. Until then
// PhaseSpan.Span is a no-op: give the span's attributes to End
// (WithAttributes).
func Leaf() StartOption { return StartOption{leaf: true} }

// Detached starts a phase that ends on another goroutine than the one that
// started it (a unit's queue wait and dispatch, which span the submitting
// goroutine and a worker): it sets no pprof label, and its End may be
// called from any goroutine, once.
func Detached() StartOption { return StartOption{detached: true} }

// StartedAt starts the phase at t, an instant the caller read from the
// clock for something else (a unit's dispatch begins when the unit does):
// the phase reads no clock to start. A zero t is now.
func StartedAt(t time.Time) StartOption { return StartOption{at: t} }

// Start starts the phase p (direction d) of the component: the span
// "<component>.<phase>" as a child of the span in ctx, with the
// amdahl.phase, amdahl.direction and amdahl.component attributes, and (if
// enabled, and not Detached) the pprof label phase=<name> on the calling
// goroutine until End. It returns the context carrying the new span, for
// propagation into the phase body (ctx itself for a Leaf).
//
// Phases on one goroutine are meant to be sequential; a nested phase replaces
// the label and its End restores the labels carried by its parent context,
// like pprof.Do. An invalid phase panics: it is a programming error.
// ExampleComponent_Start shows the options.
func (c *Component) Start(ctx context.Context, p Phase, d Direction, opts ...StartOption) (context.Context, PhaseSpan) {
	if c == nil {
		return ctx, PhaseSpan{}
	}
	return c.startPhase(ctx, p, d, opts)
}

// startPhase is Start's enabled path, kept out of line so the disabled
// check inlines into callers.
func (c *Component) startPhase(ctx context.Context, p Phase, d Direction, opts []StartOption) (context.Context, PhaseSpan) {
	if !p.Valid() || d > Reply {
		panic(fmt.Sprintf("telemetry: Start(%v, %v): invalid phase or direction", p, d))
	}
	if len(opts) > 0 {
		return c.startWith(ctx, p, d, opts)
	}
	ctx, ps := c.startSpan(ctx, p, d, time.Time{})
	if c.labels {
		return ps.setLabels(ctx)
	}
	return ctx, ps
}

// startWith is startPhase with options.
func (c *Component) startWith(ctx context.Context, p Phase, d Direction, opts []StartOption) (context.Context, PhaseSpan) {
	var o StartOption
	for _, x := range opts {
		o.leaf = o.leaf || x.leaf
		o.detached = o.detached || x.detached
		if !x.at.IsZero() {
			o.at = x.at
		}
	}
	labels := c.labels && !o.detached
	if o.leaf {
		return ctx, c.startLeaf(ctx, p, d, labels, o.at)
	}
	ctx, ps := c.startSpan(ctx, p, d, o.at)
	if labels {
		return ps.setLabels(ctx)
	}
	return ctx, ps
}

// setLabels puts the phase's pprof label on the goroutine, over the
// labels ctx carries, and returns the context carrying them.
func (ps PhaseSpan) setLabels(ctx context.Context) (context.Context, PhaseSpan) {
	ps.label = true
	if hasLabels(ctx) {
		// Keep the labels already set: the caller's own, and span_id from
		// otel-profiling-go, whose tracer puts them in the context it
		// returns for a span that is the first of its trace in this
		// process (a task host's execute, whose parent is remote). This
		// path allocates, the common one not.
		ps.inherit, ps.base = true, ctx
		lctx := pprof.WithLabels(ctx, ps.c.phaseLbl[ps.phase][ps.dir])
		pprof.SetGoroutineLabels(lctx)
		return lctx, ps
	}
	pprof.SetGoroutineLabels(ps.c.labelCtx[ps.phase][ps.dir])
	return ctx, ps
}

// startLeaf starts a leaf at start (zero: now).
func (c *Component) startLeaf(ctx context.Context, p Phase, d Direction, labels bool, start time.Time) PhaseSpan {
	if c.off {
		return PhaseSpan{}
	}
	if span, ok := c.unrecorded(ctx, p); ok {
		return PhaseSpan{span: span}
	}
	if start.IsZero() {
		start = time.Now()
	}
	ps := PhaseSpan{c: c, ctx: ctx, start: start, phase: p, dir: d, leaf: true}
	if labels {
		_, ps = ps.setLabels(ctx)
	}
	return ps
}

// startSpan starts the span of phase p (direction d) as a child of the
// span in ctx, at start (zero: now).
func (c *Component) startSpan(ctx context.Context, p Phase, d Direction, start time.Time) (context.Context, PhaseSpan) {
	parent := ctx
	if c.off {
		// The span the no-op tracer would give, for the context; no
		// clock read, and End does nothing.
		ctx, span := c.fast.StartPhaseSpan(ctx, c.spanNames[p][d], c.name, p, d, time.Time{})
		return ctx, PhaseSpan{span: span}
	}
	if span, ok := c.unrecorded(ctx, p); ok {
		return ctx, PhaseSpan{span: span}
	}
	if c.fast != nil {
		if start.IsZero() {
			start = time.Now()
		}
		ctx, span := c.fast.StartPhaseSpan(ctx, c.spanNames[p][d], c.name, p, d, start)
		return ctx, PhaseSpan{c: c, ctx: parent, span: span, start: start, phase: p, dir: d}
	}
	opts := c.spanOpts[p][d]
	if !start.IsZero() {
		opts = append(opts[:len(opts):len(opts)], trace.WithTimestamp(start))
	}
	ctx, span := c.tracer.Start(ctx, c.spanNames[p][d], opts...)
	if start.IsZero() {
		start = time.Now()
	}
	return ctx, PhaseSpan{c: c, ctx: parent, span: span, start: start, phase: p, dir: d}
}

// unrecorded returns the span in ctx when phase p under it would record
// nothing at all: the component records nothing of p but its span
// (quiet), and that span is sampled out (valid, not sampled, not
// recording), under which a PhaseTracer (the runtime's own tracer) makes
// no span. Such a phase is a disabled PhaseSpan over that span: it reads
// no clock, its End returns 0, and its Span is the parent's, whose
// context it propagates.
func (c *Component) unrecorded(ctx context.Context, p Phase) (trace.Span, bool) {
	if !c.quiet[p] {
		return nil, false
	}
	span := trace.SpanFromContext(ctx)
	sc := span.SpanContext()
	return span, sc.IsValid() && !sc.IsSampled() && !span.IsRecording()
}

func hasLabels(ctx context.Context) bool {
	has := false
	pprof.ForLabels(ctx, func(string, string) bool { has = true; return false })
	return has
}

// Span returns the phase's span for attributes and events (sizes, counts);
// a no-op span when disabled.
func (ps PhaseSpan) Span() trace.Span {
	if ps.span == nil {
		return noopSpan
	}
	return ps.span
}

// Start returns when the phase started.
func (ps PhaseSpan) Start() time.Time { return ps.start }

// Phase returns the phase being measured.
func (ps PhaseSpan) Phase() Phase { return ps.phase }

// Direction returns the direction of the phase being measured.
func (ps PhaseSpan) Direction() Direction { return ps.dir }

// EndOption configures End. Like StartOption, a small value: passing
// one allocates nothing of its own.
type EndOption struct {
	err   error
	attrs []attribute.KeyValue
	at    time.Time
}

// WithError ends a phase that failed (err not nil): the span's status is
// set to Error with err's message and err is recorded as an event. A nil
// err is a phase that did not fail.
func WithError(err error) EndOption { return EndOption{err: err} }

// WithAttributes adds attributes to the phase's span (sizes, counts):
// the way to give them to a Leaf. Only the span gets them, not the
// metrics. Skip building them when nothing reads them
// (Component.SpanAttributes).
func WithAttributes(kv ...attribute.KeyValue) EndOption { return EndOption{attrs: kv} }

// EndedAt ends the phase at t, an instant the caller read from the clock
// for its own timing (a write's blocked time): the phase reads no clock
// to end. A zero t is now, and so is the end of a phase perturbed by a
// delay (perturb.*), which the phase must include; an end before the
// phase's start is its start (the phase is empty).
func EndedAt(t time.Time) EndOption { return EndOption{at: t} }

// End ends the span, records amdahl.phase.duration, restores the goroutine's
// pprof labels and returns the phase's duration. A disabled phase reads no
// clock and returns 0: callers that must report timings with telemetry off
// measure them themselves.
// End must be called once, on the goroutine that started the phase (any
// goroutine for a Detached phase).
func (ps PhaseSpan) End(opts ...EndOption) time.Duration {
	if ps.c == nil {
		return 0
	}
	return ps.end(opts)
}

// end is End's enabled path, kept out of line so that End inlines.
func (ps PhaseSpan) end(opts []EndOption) time.Duration {
	var now time.Time
	var err error
	var attrs []attribute.KeyValue
	for _, o := range opts {
		if o.err != nil {
			err = o.err
		}
		if !o.at.IsZero() {
			now = o.at
		}
		if len(attrs) == 0 {
			attrs = o.attrs
		} else if len(o.attrs) > 0 {
			attrs = append(attrs[:len(attrs):len(attrs)], o.attrs...)
		}
	}
	if dl := ps.c.delay[ps.phase]; dl > 0 {
		time.Sleep(dl)
		now = time.Time{} // the delay is the phase's
	}
	given := !now.IsZero()
	if !given {
		now = time.Now()
	} else if now.Before(ps.start) {
		now = ps.start // an end given before the start: an empty phase
	}
	d := now.Sub(ps.start)
	if ps.leaf {
		ps.c.recordSpan(ps.ctx, ps.phase, ps.dir, ps.start, now, err, attrs)
	} else {
		if len(attrs) > 0 {
			ps.span.SetAttributes(attrs...)
		}
		ps.c.endSpan(ps.span, now, given, err)
		if ps.c.metrics {
			ps.c.phaseHist.Record(ps.ctx, d.Seconds(), ps.c.metricOpt[ps.phase][ps.dir])
		}
	}
	if ps.label {
		pprof.SetGoroutineLabels(ps.ctx)
	}
	return d
}

// endSpan ends span at now (through the PhaseTracer, if there is one),
// with err as its error status if not nil. Through the OTel API the span
// reads its own clock, unless now was given (EndedAt).
func (c *Component) endSpan(span trace.Span, now time.Time, given bool, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	switch {
	case c.fast != nil:
		c.fast.EndPhaseSpan(span, now)
	case given:
		span.End(trace.WithTimestamp(now))
	default:
		span.End()
	}
}

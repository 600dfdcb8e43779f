package spans

import (
	"context"
	"encoding/binary"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// TracerProvider is amdahl's one tracer: a trace.TracerProvider whose
// spans are Spans, built as they run. An ended span goes to its unit in
// the Collector (a unit's root tracked with Collector.Track carries its
// unit to the spans started under it) and, when the provider has an
// Exporter, to it whole as a Record: its name, attributes, kind, events,
// links and status as the SDK would record them (under the SDK's default
// span limits), its tracer's instrumentation scope and the Resource.
// Without an Exporter a span keeps only what a Span keeps, and events,
// links and status are dropped. Its spans carry real W3C span contexts,
// so trace context propagates to task hosts and sidecars.
//
// It is also a telemetry.PhaseTracer: a Component hands it its phases
// whole, without span options, and with an Exporter with their
// attributes and errors (PhaseAttributes).
//
// It samples as the SDK's parent-based sampler over Sampler would: a root
// as the Sampler decides (nil: every root), a child as its parent is. A
// span under an unsampled parent is no new object: it is the parent's
// non-recording span, so an unsampled unit costs its root and its clock
// reads, and no collection.
type TracerProvider struct {
	embedded.TracerProvider
	cfg    TracerConfig
	export *export // nil without cfg.Export
	phase  *Tracer // the tracer of the Components' scope: phase spans
	leaves leafKinds

	mu      sync.Mutex
	tracers map[Scope]*Tracer
}

// TracerConfig configures a TracerProvider.
type TracerConfig struct {
	// Collector takes the spans of the units it tracks (nil: none).
	Collector *Collector
	// Export, if set, takes every span ended, whole, with Resource as its
	// resource (nil: a resource with no attributes). The provider does
	// not shut it down.
	Export   Exporter
	Resource *Resource
	// Sampler decides a root's sampling (nil: every root is sampled).
	Sampler Sampler
}

// NewTracerProvider returns the tracer of cfg.
func NewTracerProvider(cfg TracerConfig) *TracerProvider {
	p := &TracerProvider{cfg: cfg, tracers: map[Scope]*Tracer{}}
	if cfg.Export != nil {
		res := cfg.Resource
		if res == nil {
			res = NewResource("")
		}
		p.export = &export{exp: cfg.Export, res: res}
	}
	p.phase = p.Tracer(telemetry.ScopeName, trace.WithInstrumentationVersion(telemetry.Version)).(*Tracer)
	return p
}

var (
	_ trace.TracerProvider   = (*TracerProvider)(nil)
	_ telemetry.PhaseTracer  = (*TracerProvider)(nil)
	_ telemetry.PhaseBatcher = (*TracerProvider)(nil)
	_ trace.Tracer           = (*Tracer)(nil)
)

// defaultTracerName is the scope name of a tracer asked for without one,
// as the SDK names it.
const defaultTracerName = "go.opentelemetry.io/otel/sdk/tracer"

// Tracer implements trace.TracerProvider: one tracer per instrumentation
// scope, as the SDK keeps them.
func (p *TracerProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	if name == "" {
		name = defaultTracerName
	}
	cfg := trace.NewTracerConfig(opts...)
	scope := Scope{Name: name, Version: cfg.InstrumentationVersion(),
		SchemaURL: cfg.SchemaURL(), Attributes: cfg.InstrumentationAttributes()}
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.tracers[scope]
	if !ok {
		t = &Tracer{p: p, scope: scope}
		p.tracers[scope] = t
	}
	return t
}

// StartPhaseSpan implements telemetry.PhaseTracer: Start without the
// options, under the Components' scope.
func (p *TracerProvider) StartPhaseSpan(ctx context.Context, name, component string, ph telemetry.Phase, d telemetry.Direction, start time.Time) (context.Context, trace.Span) {
	return p.phase.startPhase(ctx, name, component, ph, d, start)
}

// RecordPhaseSpan implements telemetry.PhaseTracer: the span is filed as
// it is made, with no trace.Span around it.
func (p *TracerProvider) RecordPhaseSpan(ctx context.Context, name, component string, ph telemetry.Phase, d telemetry.Direction, start, end time.Time, attrs []attribute.KeyValue) {
	p.phase.recordPhase(ctx, name, component, ph, d, start, end, attrs)
}

// EndPhaseSpan implements telemetry.PhaseTracer.
func (p *TracerProvider) EndPhaseSpan(span trace.Span, end time.Time) {
	if s, ok := span.(*tracerSpan); ok {
		s.endAt(end)
		return
	}
	span.End(trace.WithTimestamp(end)) // not ours: cannot happen through a Component
}

// PhaseAttributes implements telemetry.PhaseTracer: the spans'
// attributes are read only when exported.
func (p *TracerProvider) PhaseAttributes() bool { return p.export != nil }

// SamplesOut tells a telemetry.Component whether to look for a
// sampled-out parent before each phase: only with a Sampler; without
// one every root is sampled, and so is every child of a sampled parent.
func (p *TracerProvider) SamplesOut() bool { return p.cfg.Sampler != nil }

// Tracer is a TracerProvider's tracer of one instrumentation scope.
type Tracer struct {
	embedded.Tracer
	p     *TracerProvider
	scope Scope
}

// A Holder is a span, not a TracerProvider's, that keeps the spans of its
// unit itself: the spans recorded or started under it, and under those,
// reach it rather than a Collector (the runtime's record of a task unit
// keeps its leaves as times in slots, and the rest whole).
type Holder interface {
	trace.Span
	// HoldLeaf keeps a leaf recorded right under the span, as it is, and
	// reports whether it did; if not, the tracer makes it a span and
	// hands it to Hold.
	HoldLeaf(name, component string, ph telemetry.Phase, d telemetry.Direction, start, end time.Time, attrs []attribute.KeyValue) bool
	// Hold keeps a span of its unit, ended.
	Hold(sp Span)
}

// under is what a new span takes from the span it starts under.
type under struct {
	sc     trace.SpanContext
	unit   *unit  // its unit, if the span is one of ours
	holder Holder // the Holder its unit's spans go to, if any
	direct bool   // the span is the holder
}

// parentOf returns the span context of the span in ctx (as
// trace.SpanContextFromContext does), and if it is one of ours or a
// Holder, where its unit's spans go.
func parentOf(ctx context.Context) under {
	switch s := trace.SpanFromContext(ctx).(type) {
	case *tracerSpan:
		return under{sc: s.sc, unit: s.unit, holder: s.holder}
	case Holder:
		return under{sc: s.SpanContext(), holder: s, direct: true}
	default:
		return under{sc: s.SpanContext()}
	}
}

// file hands sp, ended, to where its unit's spans go: the holder, else the
// collector.
func (t *Tracer) file(p *under, sp *Span) {
	if p.holder != nil {
		p.holder.Hold(*sp)
		return
	}
	t.p.cfg.Collector.ended(p.unit, sp)
}

// startPhase starts a phase span (ph zero: a span that is not a phase,
// such as amdahl.work, with no attributes).
func (t *Tracer) startPhase(ctx context.Context, name, component string, ph telemetry.Phase, d telemetry.Direction, start time.Time) (context.Context, trace.Span) {
	p := parentOf(ctx)
	if span, ok := unsampled(ctx, p.sc); ok {
		return ctx, span
	}
	parent := p.sc
	s := t.newSpan(ctx, &p, name)
	s.sp.Name, s.sp.Component, s.sp.Phase, s.sp.Direction, s.sp.Start = name, component, ph, d, start.UnixNano()
	if t.p.export != nil && !s.ended {
		s.rec = &exportRecord{parent: parent, kind: trace.SpanKindInternal, lead: t.p.export.phaseLead(component, ph, d)}
	}
	return s.contextWith(ctx), s
}

// recordPhase records a phase span whole, with attrs besides its phase's.
func (t *Tracer) recordPhase(ctx context.Context, name, component string, ph telemetry.Phase, d telemetry.Direction, start, end time.Time, attrs []attribute.KeyValue) {
	p := parentOf(ctx)
	if p.direct && p.holder.HoldLeaf(name, component, ph, d, start, end, attrs) {
		return
	}
	if u, remote := p.leafUnit(attrs); u != nil {
		// A leaf of a tracked unit: kept compactly in it (leaf.go).
		if k := t.p.leafKind(name, component, ph, d, remote); k != nil {
			t.fileLeaves(u, p.sc, attrs, leaf{kind: k, start: start.UnixNano(), end: end.UnixNano(), parent: SpanID(p.sc.SpanID())})
			return
		}
	}
	parent := p.sc
	sp, sampled := t.child(ctx, parent, name)
	if !sampled {
		return
	}
	sp.Name, sp.Component, sp.Phase, sp.Direction, sp.Start, sp.End = name, component, ph, d, start.UnixNano(), end.UnixNano()
	for _, kv := range attrs {
		sp.SetAttribute(kv)
	}
	t.file(&p, &sp)
	if t.p.export != nil {
		t.exportPhase(parent, trace.TraceID(sp.TraceID), sp.SpanID, t.p.export.phaseLead(component, ph, d), &sp, attrs)
	}
}

// Start implements trace.Tracer.
func (t *Tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	p := parentOf(ctx)
	if cfg.NewRoot() {
		// As the SDK: the sampler sees no parent either.
		ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
		p = under{}
	} else if span, ok := unsampled(ctx, p.sc); ok {
		return ctx, span
	}
	parent := p.sc
	s := t.newSpan(ctx, &p, name)
	start := cfg.Timestamp()
	if start.IsZero() {
		start = time.Now()
	}
	s.sp.Start, s.sp.Name = start.UnixNano(), name
	for _, kv := range cfg.Attributes() {
		s.sp.SetAttribute(kv)
	}
	if t.p.export != nil && !s.ended {
		kind := cfg.SpanKind()
		if kind == trace.SpanKindUnspecified {
			kind = trace.SpanKindInternal // as the SDK defaults it
		}
		s.rec = &exportRecord{parent: parent, kind: kind}
		s.rec.addAttrs(cfg.Attributes())
		for _, l := range cfg.Links() {
			s.rec.addLink(l)
		}
	}
	return s.contextWith(ctx), s
}

// unsampled returns the span of a child of parent, the span context of
// ctx's span, when parent is valid and not sampled: ctx's span itself,
// when it records nothing (ours, or the OTel API's non-recording span),
// so that the child costs no object and no ids. Its End, attributes and
// events are no-ops, and it propagates its parent's context, unsampled,
// which is all a non-recording span is read for.
func unsampled(ctx context.Context, parent trace.SpanContext) (trace.Span, bool) {
	if !parent.IsValid() || parent.IsSampled() {
		return nil, false
	}
	if span := trace.SpanFromContext(ctx); !span.IsRecording() {
		return span, true
	}
	return nil, false // a recording parent, unsampled (an SDK sampler's RecordOnly)
}

// newSpan returns a span named name, not started yet, as a child of p
// (a root if its context is not valid), ctx the context it starts in.
func (t *Tracer) newSpan(ctx context.Context, p *under, name string) *tracerSpan {
	parent, u := p.sc, p.unit
	if u == nil && !parent.IsValid() && t.p.cfg.Collector != nil {
		// A root: allocated with the unit it may become (Track), and the
		// first spans under it.
		u = new(unit)
	}
	s := u.newSpan()
	s.tracer, s.unit, s.holder = t, u, p.holder
	var sampled bool
	s.sp, sampled = t.child(ctx, parent, name)
	flags := trace.FlagsSampled
	if !sampled {
		flags, s.ended = 0, true // not recording
		if parent.IsValid() {
			// A child of a recording parent that is not sampled.
			s.sp.TraceID, s.sp.SpanID = TraceID(parent.TraceID()), NewSpanID()
		}
	}
	s.sc = trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID(s.sp.TraceID), SpanID: trace.SpanID(s.sp.SpanID), TraceFlags: flags,
		TraceState: parent.TraceState(), // as the SDK: a child keeps its parent's
	})
	return s
}

// child returns the ids of a new span named name under parent (a root, in
// a new trace, if parent is not valid), ctx the context it starts in,
// and whether it is sampled. A root is as the Sampler decides (always,
// without one), a child as its parent is, with no ids when it is not.
// For a child that is what every sampler OTEL_TRACES_SAMPLER names
// decides in a trace whose root is ours: the parent-based ones follow
// the parent, traceidratio decides by the trace id as it did for the
// root, always_on and always_off are constant.
func (t *Tracer) child(ctx context.Context, parent trace.SpanContext, name string) (Span, bool) {
	if !parent.IsValid() {
		sp := Span{TraceID: NewTraceID(), SpanID: NewSpanID()}
		if t.p.cfg.Sampler == nil {
			return sp, true
		}
		return sp, t.p.cfg.Sampler.Sample(ctx, trace.TraceID(sp.TraceID), name, trace.SpanKindInternal)
	}
	if !parent.IsSampled() {
		return Span{}, false
	}
	return Span{TraceID: TraceID(parent.TraceID()), SpanID: NewSpanID(), ParentID: SpanID(parent.SpanID())}, true
}

// NewTraceID returns a random trace id, as the SDK's are (128 bits of the
// runtime's per-thread generator: no lock or shared counter on the span's
// path), so two units of a run meet with a probability of about n²/2¹²⁹.
func NewTraceID() TraceID {
	var id TraceID
	for id == (TraceID{}) {
		binary.BigEndian.PutUint64(id[:8], mrand.Uint64())
		binary.BigEndian.PutUint64(id[8:], mrand.Uint64())
	}
	return id
}

// NewSpanID returns a random span id, never zero, as the SDK's (64 bits
// of the runtime's per-thread generator); ids matter only within a
// unit's trace, where two of its n spans meet with a probability of
// about n²/2⁶⁵.
func NewSpanID() SpanID {
	var id SpanID
	for id.IsZero() {
		binary.BigEndian.PutUint64(id[:], mrand.Uint64())
	}
	return id
}

// export is where a provider's spans go, as Records, and their resource.
type export struct {
	exp Exporter
	res *Resource
	// lead and leads hold the attributes phase spans begin with, made
	// and encoded once per phase (phaseLead): lead by phase and
	// direction, for the first component seen with them, and leads
	// (phaseKey → *SharedAttributes) for the others. Bounded by the
	// Components' names, phases and directions.
	lead  [telemetry.NumPhases + 1][telemetry.NumDirections]atomic.Pointer[phaseLeadSlot]
	leads sync.Map
}

// phaseLeadSlot is a component's lead attributes for one phase and
// direction.
type phaseLeadSlot struct {
	component string
	attrs     *SharedAttributes
}

// phaseKey names a phase of a Component.
type phaseKey struct {
	component string
	ph        telemetry.Phase
	d         telemetry.Direction
}

// phaseAttrs returns amdahl.component, amdahl.phase and amdahl.direction
// (none for direction None) as SharedAttributes.
func phaseAttrs(component string, ph telemetry.Phase, d telemetry.Direction) *SharedAttributes {
	kvs := []attribute.KeyValue{telemetry.AttrComponent.String(component), telemetry.AttrPhase.String(ph.String())}
	if d != telemetry.None {
		kvs = append(kvs, telemetry.AttrDirection.String(d.String()))
	}
	return NewSharedAttributes(kvs...)
}

// phaseLead returns the attributes a Component's phase span begins with,
// amdahl.component, amdahl.phase and amdahl.direction (none for
// direction None), as a Component's spans through the OTel API carry
// them: nil for a span that is not a phase (ph zero).
func (e *export) phaseLead(component string, ph telemetry.Phase, d telemetry.Direction) *SharedAttributes {
	if ph == 0 {
		return nil
	}
	if !ph.Valid() || int(d) >= telemetry.NumDirections {
		return phaseAttrs(component, ph, d) // not kept: a Component's phases are valid
	}
	// A string compare: a Component passes its name, the same string
	// every time.
	slot := &e.lead[ph][d]
	if l := slot.Load(); l != nil && l.component == component {
		return l.attrs
	}
	k := phaseKey{component, ph, d}
	if a, ok := e.leads.Load(k); ok {
		return a.(*SharedAttributes)
	}
	v, _ := e.leads.LoadOrStore(k, phaseAttrs(component, ph, d))
	a := v.(*SharedAttributes)
	slot.CompareAndSwap(nil, &phaseLeadSlot{component: component, attrs: a})
	return a
}

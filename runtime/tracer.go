package runtime

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// accountingTracer is the tracer of a run whose spans nothing but its
// attribution reads (no exporter, trace file or recorder: Config with no
// TracerProvider, which UseTelemetry leaves nil then). Its spans are the
// compact attribution.Span the collector keeps, built as the span runs
// and handed to the collector at End: no SDK span, no span processor, no
// conversion, and nothing of what only an exporter reads (events, links,
// status, attributes other than the five attribution reads). They carry
// real, sampled W3C span contexts, so trace context still propagates to
// the task hosts and the sidecar, and exemplars still name their trace.
//
// It samples as the SDK would with sampler (nil: the SDK's default,
// parent-based, always on) for the runtime: a root as sampler decides, a
// child as its parent is (child). A span under an unsampled parent is no
// new object: it is the parent's non-recording span (unsampled), so an
// unsampled unit costs its root and its clock reads, and no collection.
type accountingTracer struct {
	embedded.Tracer
	provider trace.TracerProvider // an *accountingProvider or *exportingProvider
	col      *collector
	// With export (an exportingProvider's tracers), every span is also
	// handed whole to export.exp (a spans.Exporter) as a spans.Record,
	// under the tracer's scope.
	export  *spanExport
	scope   spans.Scope
	sampler spans.Sampler // Config.Telemetry.Sampler; nil samples every root
}

// accountingProvider is the accountingTracer's trace.TracerProvider.
type accountingProvider struct {
	embedded.TracerProvider
	phaseTracer
	tracer accountingTracer
}

var (
	_ trace.TracerProvider = (*accountingProvider)(nil)
	_ trace.Tracer         = (*accountingTracer)(nil)
	_ trace.Span           = (*accountingSpan)(nil)
)

// exportingProvider is the runtime's own tracer when an exporter
// (Config.Telemetry.Export: amdahl run's trace file) reads the spans besides
// the attribution. Its spans go to the collector as the accountingTracer's
// do, and to that exporter whole, as spans.Records: the names,
// attributes, kind, events, links and status the SDK would record (under
// the SDK's default span limits), the tracer's instrumentation scope and
// Config.Telemetry.Resource. It is a telemetry.PhaseTracer that wants every
// attribute (PhaseAttributes): Components hand it their phases without
// span options, as to the accountingProvider, but with the attributes and
// errors the OTel API would have given the SDK. What it saves is the
// SDK's span machinery and the options, not what a span says.
type exportingProvider struct {
	embedded.TracerProvider
	phaseTracer // through the Component's scope's tracer
	col         *collector
	export      *spanExport
	sampler     spans.Sampler

	mu      sync.Mutex
	tracers map[spans.Scope]*accountingTracer
}

// spanExport is where an exportingProvider's spans go, as spans.Records,
// and their resource.
type spanExport struct {
	exp spans.Exporter
	res *spans.Resource
	// lead and leads hold the attributes phase spans begin with, made
	// and encoded once per phase (phaseLead): lead by phase and
	// direction, for the first component seen with them, and leads
	// (phaseKey → *SharedAttributes) for the others. Bounded by the
	// Components' names, phases and directions.
	lead  [telemetry.NumPhases + 1][telemetry.NumDirections]atomic.Pointer[phaseLeadSlot]
	leads sync.Map
}

// phaseAttrs returns amdahl.component, amdahl.phase and amdahl.direction
// (none for direction None) as SharedAttributes.
func phaseAttrs(component string, ph telemetry.Phase, d telemetry.Direction) *spans.SharedAttributes {
	kvs := []attribute.KeyValue{telemetry.AttrComponent.String(component), telemetry.AttrPhase.String(ph.String())}
	if d != telemetry.None {
		kvs = append(kvs, telemetry.AttrDirection.String(d.String()))
	}
	return spans.NewSharedAttributes(kvs...)
}

// phaseLeadSlot is a component's lead attributes for one phase and
// direction.
type phaseLeadSlot struct {
	component string
	attrs     *spans.SharedAttributes
}

// phaseKey names a phase of a Component.
type phaseKey struct {
	component string
	ph        telemetry.Phase
	d         telemetry.Direction
}

// phaseLead returns the attributes a Component's phase span begins with,
// amdahl.component, amdahl.phase and amdahl.direction (none for
// direction None), as a Component's spans through the OTel API carry
// them: nil for a span that is not a phase (ph zero).
func (e *spanExport) phaseLead(component string, ph telemetry.Phase, d telemetry.Direction) *spans.SharedAttributes {
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
		return a.(*spans.SharedAttributes)
	}
	v, _ := e.leads.LoadOrStore(k, phaseAttrs(component, ph, d))
	a := v.(*spans.SharedAttributes)
	slot.CompareAndSwap(nil, &phaseLeadSlot{component: component, attrs: a})
	return a
}

// end hands the ended span sp of tracer t, with context sc and the
// record r, to the export.
func (e *spanExport) end(t *accountingTracer, r *spanRecord, sc trace.SpanContext, sp *attribution.Span) {
	e.exp.Export(r.record(t, sc, sp))
}

var (
	_ trace.TracerProvider  = (*exportingProvider)(nil)
	_ telemetry.PhaseTracer = (*accountingProvider)(nil)
)

func newExportingProvider(col *collector, exp spans.Exporter, res *spans.Resource, sampler spans.Sampler) *exportingProvider {
	p := &exportingProvider{col: col, export: &spanExport{exp: exp, res: res}, sampler: sampler,
		tracers: map[spans.Scope]*accountingTracer{}}
	p.phaseTracer = phaseTracer{t: p.Tracer(telemetry.ScopeName, trace.WithInstrumentationVersion(telemetry.Version)).(*accountingTracer), attrs: true}
	return p
}

// defaultTracerName is the scope name of a tracer asked for without one,
// as the SDK names it.
const defaultTracerName = "go.opentelemetry.io/otel/sdk/tracer"

// Tracer implements trace.TracerProvider: one tracer per instrumentation
// scope, as the SDK keeps them.
func (p *exportingProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	if name == "" {
		name = defaultTracerName
	}
	cfg := trace.NewTracerConfig(opts...)
	scope := spans.Scope{Name: name, Version: cfg.InstrumentationVersion(),
		SchemaURL: cfg.SchemaURL(), Attributes: cfg.InstrumentationAttributes()}
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.tracers[scope]
	if !ok {
		t = &accountingTracer{provider: p, col: p.col, export: p.export, scope: scope, sampler: p.sampler}
		p.tracers[scope] = t
	}
	return t
}

// newAccountingProvider returns the tracer provider whose spans go to
// col, sampled with sampler (nil: every root).
func newAccountingProvider(col *collector, sampler spans.Sampler) *accountingProvider {
	p := &accountingProvider{}
	p.tracer = accountingTracer{provider: p, col: col, sampler: sampler}
	p.phaseTracer = phaseTracer{t: &p.tracer}
	return p
}

// Tracer implements trace.TracerProvider: every tracer is the same one.
func (p *accountingProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return &p.tracer }

// phaseTracer is the telemetry.PhaseTracer of both providers: phase
// spans through tracer t, without span options. attrs (the
// exportingProvider's) says the spans are exported, so a Component gives
// them all their attributes; the exporting tracer's phase spans also
// carry amdahl.component, amdahl.phase and amdahl.direction, as a
// Component's spans through the OTel API do, under the Component's scope.
type phaseTracer struct {
	t     *accountingTracer
	attrs bool
}

// StartPhaseSpan implements telemetry.PhaseTracer: Start without the
// options.
func (p phaseTracer) StartPhaseSpan(ctx context.Context, name, component string, ph telemetry.Phase, d telemetry.Direction, start time.Time) (context.Context, trace.Span) {
	return p.t.startPhase(ctx, name, component, ph, d, start)
}

// RecordPhaseSpan implements telemetry.PhaseTracer: the span goes to the
// collector as it is made, with no trace.Span around it (and, exported,
// to the export as a read-only span).
func (p phaseTracer) RecordPhaseSpan(ctx context.Context, name, component string, ph telemetry.Phase, d telemetry.Direction, start, end time.Time, attrs []attribute.KeyValue) {
	p.t.recordPhase(ctx, name, component, ph, d, start, end, attrs)
}

// PhaseAttributes implements telemetry.PhaseTracer.
func (p phaseTracer) PhaseAttributes() bool { return p.attrs }

// SamplesOut tells a telemetry.Component whether to look for a sampled-out
// parent before each phase: only with a sampler (Config.Telemetry.Sampler); without
// one every root is sampled, and so is every child of a sampled parent.
func (p phaseTracer) SamplesOut() bool { return p.t.sampler != nil }

// EndPhaseSpan implements telemetry.PhaseTracer.
func (p phaseTracer) EndPhaseSpan(span trace.Span, end time.Time) { endPhaseSpan(span, end) }

func endPhaseSpan(span trace.Span, end time.Time) {
	switch s := span.(type) {
	case *accountingSpan:
		s.endAt(end)
		return
	case *recSpan:
		s.endAt(end)
		return
	}
	span.End(trace.WithTimestamp(end)) // not ours: cannot happen through a Component
}

// startPhase starts a phase span (p zero: a span that is not a phase,
// such as amdahl.work, with no attributes).
func (t *accountingTracer) startPhase(ctx context.Context, name, component string, ph telemetry.Phase, d telemetry.Direction, start time.Time) (context.Context, trace.Span) {
	parent, unit, rec, _ := parentOf(ctx)
	if span, ok := unsampled(ctx, parent); ok {
		return ctx, span
	}
	s := t.newSpan(ctx, parent, name)
	s.unit, s.urec = unit, rec
	s.sp.Name, s.sp.Component, s.sp.Phase, s.sp.Direction, s.sp.Start = name, component, ph, d, start.UnixNano()
	if t.export != nil && !s.ended {
		s.rec = &spanRecord{parent: parent, kind: trace.SpanKindInternal, lead: t.export.phaseLead(component, ph, d)}
	}
	return trace.ContextWithSpan(ctx, s), s
}

// recordPhase records a phase span whole, with attrs besides its phase's.
func (t *accountingTracer) recordPhase(ctx context.Context, name, component string, ph telemetry.Phase, d telemetry.Direction, start, end time.Time, attrs []attribute.KeyValue) {
	parent, unit, rec, rs := parentOf(ctx)
	if rs != nil {
		rec.recordLeaf(rs, name, component, ph, d, start, end, attrs)
		return
	}
	sp, sampled := t.child(ctx, parent, name)
	if !sampled {
		return
	}
	sp.Name, sp.Component, sp.Phase, sp.Direction, sp.Start, sp.End = name, component, ph, d, start.UnixNano(), end.UnixNano()
	for _, kv := range attrs {
		sp.SetAttribute(kv)
	}
	if rec != nil {
		rec.addExtra(sp) // under a span the record has no slot for
	} else {
		t.col.ended(unit, sp)
	}
	if t.export != nil {
		r := spanRecord{parent: parent, kind: trace.SpanKindInternal, lead: t.export.phaseLead(component, ph, d)}
		if r.canBorrow(attrs) {
			// An Exporter keeps nothing of the record past Export:
			// attrs need no copy.
			r.attrs = attrs
		} else {
			r.addAttrs(attrs)
		}
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID(sp.TraceID), SpanID: trace.SpanID(sp.SpanID),
			TraceFlags: trace.FlagsSampled, TraceState: parent.TraceState()})
		t.export.end(t, &r, sc, &sp)
	}
}

// Start implements trace.Tracer.
func (t *accountingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent, unit, rec, _ := parentOf(ctx)
	if cfg.NewRoot() {
		// As the SDK: the sampler sees no parent either.
		ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
		parent, unit, rec = trace.SpanContext{}, nil, nil
	} else if span, ok := unsampled(ctx, parent); ok {
		return ctx, span
	}
	s := t.newSpan(ctx, parent, name)
	s.unit, s.urec = unit, rec
	start := cfg.Timestamp()
	if start.IsZero() {
		start = time.Now()
	}
	s.sp.Start, s.sp.Name = start.UnixNano(), name
	for _, kv := range cfg.Attributes() {
		s.sp.SetAttribute(kv)
	}
	if t.export != nil && !s.ended {
		kind := cfg.SpanKind()
		if kind == trace.SpanKindUnspecified {
			kind = trace.SpanKindInternal // as the SDK defaults it
		}
		s.rec = &spanRecord{parent: parent, kind: kind}
		s.rec.addAttrs(cfg.Attributes())
		for _, l := range cfg.Links() {
			s.rec.addLink(l)
		}
	}
	return trace.ContextWithSpan(ctx, s), s
}

// parentOf returns the span context of the span in ctx (as
// trace.SpanContextFromContext does), and if it is one of ours its
// unit's buffer or record (record.go), and the span itself if it is one
// of a record's.
func parentOf(ctx context.Context) (trace.SpanContext, *unitBuf, *unitRecord, *recSpan) {
	switch s := trace.SpanFromContext(ctx).(type) {
	case *accountingSpan:
		return s.sc, s.unit, s.urec, nil
	case *recSpan:
		return s.sc, nil, s.rec, s
	default:
		return s.SpanContext(), nil, nil, nil
	}
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

// newSpan returns a span named name, not started yet, as a child of
// parent (a root if parent is not valid), ctx the context it starts in.
func (t *accountingTracer) newSpan(ctx context.Context, parent trace.SpanContext, name string) *accountingSpan {
	s := &accountingSpan{tracer: t}
	var sampled bool
	s.sp, sampled = t.child(ctx, parent, name)
	flags := trace.FlagsSampled
	if !sampled {
		flags, s.ended = 0, true // not recording
		if parent.IsValid() {
			// A child of a recording parent that is not sampled.
			s.sp.TraceID, s.sp.SpanID = attribution.TraceID(parent.TraceID()), t.col.newSpanID()
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
// and whether it is sampled. A root is as t.sampler decides (always,
// without one), a child as its parent is, with no ids when it is not.
// For a child that is what every sampler OTEL_TRACES_SAMPLER names
// decides in a trace whose root is ours: the parent-based ones follow
// the parent, traceidratio decides by the trace id as it did for the
// root, always_on and always_off are constant.
func (t *accountingTracer) child(ctx context.Context, parent trace.SpanContext, name string) (attribution.Span, bool) {
	if !parent.IsValid() {
		sp := attribution.Span{TraceID: t.col.newTraceID(), SpanID: t.col.newSpanID()}
		if t.sampler == nil {
			return sp, true
		}
		return sp, t.sampler.Sample(ctx, trace.TraceID(sp.TraceID), name, trace.SpanKindInternal)
	}
	if !parent.IsSampled() {
		return attribution.Span{}, false
	}
	return attribution.Span{TraceID: attribution.TraceID(parent.TraceID()), SpanID: t.col.newSpanID(),
		ParentID: attribution.SpanID(parent.SpanID())}, true
}

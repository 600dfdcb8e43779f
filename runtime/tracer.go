package runtime

import (
	"context"
	"reflect"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
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
	// handed whole to export.proc, under the tracer's scope.
	export  *spanExport
	scope   instrumentation.Scope
	sampler sdktrace.Sampler // Config.Sampler; nil samples every root
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

// exportingProvider is the runtime's own tracer when a span processor
// (Config.SpanExport: amdahl run's trace file) reads the spans besides
// the attribution. Its spans go to the collector as the accountingTracer's
// do, and to that processor whole, as read-only spans: the names,
// attributes, kind, events, links and status the SDK would record (under
// the SDK's default span limits), the tracer's instrumentation scope and
// Config.SpanResource. It is a telemetry.PhaseTracer that wants every
// attribute (PhaseAttributes): Components hand it their phases without
// span options, as to the accountingProvider, but with the attributes and
// errors the OTel API would have given the SDK. What it saves is the
// SDK's span machinery and the options, not what a span says.
type exportingProvider struct {
	embedded.TracerProvider
	phaseTracer // through the Component's scope's tracer
	col         *collector
	export      *spanExport
	sampler     sdktrace.Sampler

	mu      sync.Mutex
	tracers map[instrumentation.Scope]*accountingTracer
}

// spanExport is where an exportingProvider's spans go, and their resource.
// When proc takes spans as otelsetup.FileSpans (the trace file's does),
// they go to file as such: no read-only span is made for each.
type spanExport struct {
	proc sdktrace.SpanProcessor
	file otelsetup.FileSpanWriter // proc, if it is one
	res  *resource.Resource
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
func phaseAttrs(component string, ph telemetry.Phase, d telemetry.Direction) *otelsetup.SharedAttributes {
	kvs := []attribute.KeyValue{telemetry.AttrComponent.String(component), telemetry.AttrPhase.String(ph.String())}
	if d != telemetry.None {
		kvs = append(kvs, telemetry.AttrDirection.String(d.String()))
	}
	return otelsetup.NewSharedAttributes(kvs...)
}

// phaseLeadSlot is a component's lead attributes for one phase and
// direction.
type phaseLeadSlot struct {
	component string
	attrs     *otelsetup.SharedAttributes
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
func (e *spanExport) phaseLead(component string, ph telemetry.Phase, d telemetry.Direction) *otelsetup.SharedAttributes {
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
		return a.(*otelsetup.SharedAttributes)
	}
	v, _ := e.leads.LoadOrStore(k, phaseAttrs(component, ph, d))
	a := v.(*otelsetup.SharedAttributes)
	slot.CompareAndSwap(nil, &phaseLeadSlot{component: component, attrs: a})
	return a
}

// end hands the ended span sp of tracer t, with context sc and the
// record r, to the export.
func (e *spanExport) end(t *accountingTracer, r *spanRecord, sc trace.SpanContext, sp *attribution.Span) {
	fs := r.fileSpan(t, sc, sp)
	if e.file == nil {
		e.proc.OnEnd(snapshot(fs))
		return
	}
	e.file.EndFileSpan(fs)
}

var (
	_ trace.TracerProvider  = (*exportingProvider)(nil)
	_ telemetry.PhaseTracer = (*accountingProvider)(nil)
)

func newExportingProvider(col *collector, proc sdktrace.SpanProcessor, res *resource.Resource, sampler sdktrace.Sampler) *exportingProvider {
	fw, _ := proc.(otelsetup.FileSpanWriter)
	p := &exportingProvider{col: col, export: &spanExport{proc: proc, file: fw, res: res}, sampler: sampler,
		tracers: map[instrumentation.Scope]*accountingTracer{}}
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
	scope := instrumentation.Scope{Name: name, Version: cfg.InstrumentationVersion(),
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
func newAccountingProvider(col *collector, sampler sdktrace.Sampler) *accountingProvider {
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
// parent before each phase: only with a sampler (Config.Sampler); without
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
		if t.export.file != nil && r.canBorrow(attrs) {
			// The file encodes the span before end returns: attrs
			// need no copy.
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
		res := t.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: trace.TraceID(sp.TraceID),
			Name: name, Kind: trace.SpanKindInternal})
		return sp, res.Decision == sdktrace.RecordAndSample
	}
	if !parent.IsSampled() {
		return attribution.Span{}, false
	}
	return attribution.Span{TraceID: attribution.TraceID(parent.TraceID()), SpanID: t.col.newSpanID(),
		ParentID: attribution.SpanID(parent.SpanID())}, true
}

// accountingSpan is a span of the accountingTracer. Like every span, it is
// safe for concurrent use.
type accountingSpan struct {
	embedded.Span
	tracer *accountingTracer
	sc     trace.SpanContext
	// unit is the buffer of the unit the span belongs to, where it is
	// filed when it ends (nil: looked up by trace). Set before the span
	// is shared: inherited from the parent, or, on a unit's root, by
	// setUnit.
	unit *unitBuf
	// urec, instead, is the record of the unit it belongs to (a span
	// started under a record's span that the record has no slot for):
	// it is kept with the record's spans.
	urec *unitRecord

	mu    sync.Mutex
	sp    attribution.Span
	rec   *spanRecord // what only the export reads; nil unless the tracer exports
	ended bool
}

// End hands the span to the collector, once.
func (s *accountingSpan) End(opts ...trace.SpanEndOption) { s.endAt(endTime(opts)) }

// endTime is the end a span's End options give (WithTimestamp), or now.
func endTime(opts []trace.SpanEndOption) time.Time {
	if len(opts) > 0 {
		cfg := trace.NewSpanEndConfig(opts...)
		if ts := cfg.Timestamp(); !ts.IsZero() {
			return ts
		}
	}
	return time.Now()
}

// endAt ends the span at end, once.
func (s *accountingSpan) endAt(end time.Time) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.sp.End = end.UnixNano()
	sp := s.sp
	s.mu.Unlock()
	if s.urec != nil {
		s.urec.addExtra(sp)
	} else {
		s.tracer.col.ended(s.unit, sp)
	}
	if s.rec != nil {
		s.tracer.export.end(s.tracer, s.rec, s.sc, &sp)
	}
}

// setUnit makes span, a unit's root just started and not shared yet,
// carry buf, the buffer the collector keeps the unit's spans in (track):
// the spans started under it inherit it. Nothing for a span of another
// tracer.
func setUnit(span trace.Span, buf *unitBuf) {
	if s, ok := span.(*accountingSpan); ok {
		s.unit = buf
	}
}

// IsRecording reports whether the span has not ended yet.
func (s *accountingSpan) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

// SetAttributes keeps the attributes attribution reads.
func (s *accountingSpan) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	if !s.ended {
		for _, a := range kv {
			s.sp.SetAttribute(a)
		}
		if s.rec != nil {
			s.rec.addAttrs(kv)
		}
	}
	s.mu.Unlock()
}

// SetName renames the span.
func (s *accountingSpan) SetName(name string) {
	s.mu.Lock()
	if !s.ended {
		s.sp.Name = name
	}
	s.mu.Unlock()
}

// SpanContext returns the span's W3C context.
func (s *accountingSpan) SpanContext() trace.SpanContext { return s.sc }

// TracerProvider returns the tracer that made the span.
func (s *accountingSpan) TracerProvider() trace.TracerProvider { return s.tracer.provider }

// Events, links, errors and status reach only exporters: without one
// (no rec) they are dropped; a unit's failure reaches attribution as
// amdahl.outcome.

// AddEvent adds an event, as the SDK would.
func (s *accountingSpan) AddEvent(name string, opts ...trace.EventOption) {
	s.mu.Lock()
	if s.rec != nil && !s.ended {
		s.rec.addEvent(name, trace.NewEventConfig(opts...))
	}
	s.mu.Unlock()
}

// AddLink adds a link, as the SDK would.
func (s *accountingSpan) AddLink(l trace.Link) {
	s.mu.Lock()
	if s.rec != nil && !s.ended {
		s.rec.addLink(l)
	}
	s.mu.Unlock()
}

// RecordError adds err as an exception event, as the SDK would.
func (s *accountingSpan) RecordError(err error, opts ...trace.EventOption) {
	if err == nil || s.rec == nil {
		return // rec is set before the span is shared
	}
	cfg := exceptionEvent(err, opts)
	s.mu.Lock()
	if !s.ended {
		s.rec.addEvent(eventException, cfg)
	}
	s.mu.Unlock()
}

// exceptionEvent is the exception event of RecordError(err, opts...), as
// the SDK records it.
func exceptionEvent(err error, opts []trace.EventOption) trace.EventConfig {
	opts = append(opts, trace.WithAttributes(attribute.String(attrExceptionType, errorType(err)),
		attribute.String(attrExceptionMessage, err.Error())))
	cfg := trace.NewEventConfig(opts...)
	if cfg.StackTrace() {
		buf := make([]byte, 2048)
		buf = buf[:goruntime.Stack(buf, false)]
		cfg = trace.NewEventConfig(append(opts, trace.WithAttributes(attribute.String(attrExceptionStacktrace, string(buf))))...)
	}
	return cfg
}

// SetStatus sets the status as the SDK does (spanRecord.setStatus).
func (s *accountingSpan) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	if s.rec != nil && !s.ended {
		s.rec.setStatus(code, description)
	}
	s.mu.Unlock()
}

// setStatus sets the status as the SDK does: Ok is final, Error beats
// Unset, and only an Error keeps its description.
func (r *spanRecord) setStatus(code codes.Code, description string) {
	if r.status.Code <= code {
		r.status = sdktrace.Status{Code: code}
		if code == codes.Error {
			r.status.Description = description
		}
	}
}

// The exception event of RecordError, as the SDK records it
// (OpenTelemetry semantic conventions).
const (
	eventException          = "exception"
	attrExceptionType       = "exception.type"
	attrExceptionMessage    = "exception.message"
	attrExceptionStacktrace = "exception.stacktrace"
)

// errorType is exception.type of err, as the SDK writes it.
func errorType(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

// The SDK's default span limits (sdktrace.SpanLimits), which an
// exporting span keeps to.
const (
	maxSpanAttrs  = 128 // attributes of a span
	maxSpanEvents = 128 // events of a span (the oldest are dropped)
	maxSpanLinks  = 128 // links of a span (the oldest are dropped)
	maxItemAttrs  = 128 // attributes of an event or a link
)

// spanRecord is what an exporting span keeps besides its
// attribution.Span: what the SDK would hand an exporter.
type spanRecord struct {
	parent trace.SpanContext
	kind   trace.SpanKind
	// lead are a phase span's first attributes (phaseLead), shared and
	// encoded once; attrs follow them and repeat none of their keys (a
	// key of lead set again moves lead into attrs: unshare).
	lead          *otelsetup.SharedAttributes
	attrs         []attribute.KeyValue // in order set; deduplicated at snapshot
	events        []sdktrace.Event
	links         []sdktrace.Link
	status        sdktrace.Status
	droppedAttrs  int
	droppedEvents int
	droppedLinks  int
}

// addAttrs keeps the valid attributes of kv; an invalid one (empty key)
// is counted as dropped, as the SDK does. The list is deduplicated once
// it holds twice the limit, so a span set in a loop stays bounded.
func (r *spanRecord) addAttrs(kv []attribute.KeyValue) {
	for _, a := range kv {
		if !a.Valid() {
			r.droppedAttrs++
			continue
		}
		if r.lead.Has(a.Key) {
			r.unshare()
		}
		r.attrs = append(r.attrs, a)
		if len(r.attrs) >= 2*maxSpanAttrs {
			r.attrs = r.dedupeAttrs()
		}
	}
}

// unshare moves lead's attributes to the front of attrs, where a key of
// theirs set again can replace its value.
func (r *spanRecord) unshare() {
	if r.lead == nil {
		return
	}
	r.attrs = append(r.lead.KeyValues(), r.attrs...) // KeyValues is clipped: a copy
	r.lead = nil
}

// canBorrow reports whether attrs can be the record's attributes as they
// are: a few, all valid, none repeating a key of lead's or another's.
func (r *spanRecord) canBorrow(attrs []attribute.KeyValue) bool {
	if len(attrs) > fewAttrs || hasDupKey(attrs) {
		return false
	}
	for _, a := range attrs {
		if !a.Valid() || r.lead.Has(a.Key) {
			return false
		}
	}
	return true
}

// dedupeAttrs returns the attributes with each key once, where it was
// first set, with the value it was last set to, and at most maxSpanAttrs
// of them with lead's (the later keys are counted as dropped): the SDK's
// rules. A list that holds no key twice and is within the limit is
// returned as it is, not written to.
func (r *spanRecord) dedupeAttrs() []attribute.KeyValue {
	if r.lead != nil && r.lead.Len()+len(r.attrs) > maxSpanAttrs {
		r.unshare() // the limit cuts attrs after lead's
	}
	if len(r.attrs) <= fewAttrs && !hasDupKey(r.attrs) {
		return r.attrs
	}
	out := r.attrs[:0]
next:
	for _, a := range r.attrs {
		for i := range out {
			if out[i].Key == a.Key {
				out[i] = a
				continue next
			}
		}
		out = append(out, a)
	}
	clear(r.attrs[len(out):])
	if len(out) > maxSpanAttrs {
		r.droppedAttrs += len(out) - maxSpanAttrs
		clear(out[maxSpanAttrs:])
		out = out[:maxSpanAttrs]
	}
	return out
}

// fewAttrs is how many attributes are checked pair by pair for a key
// given twice (hasDupKey) rather than deduplicated: a phase's one or two.
const fewAttrs = 8

// hasDupKey reports whether a key is in kvs twice.
func hasDupKey(kvs []attribute.KeyValue) bool {
	for i := range kvs {
		for j := range i {
			if kvs[i].Key == kvs[j].Key {
				return true
			}
		}
	}
	return false
}

// itemAttrs returns an event's or a link's attributes within
// maxItemAttrs, and how many were dropped.
func itemAttrs(attrs []attribute.KeyValue) ([]attribute.KeyValue, int) {
	if len(attrs) > maxItemAttrs {
		return attrs[:maxItemAttrs], len(attrs) - maxItemAttrs
	}
	return attrs, 0
}

func (r *spanRecord) addEvent(name string, cfg trace.EventConfig) {
	attrs, dropped := itemAttrs(cfg.Attributes())
	if len(r.events) == maxSpanEvents {
		r.events = append(r.events[:0], r.events[1:]...)
		r.droppedEvents++
	}
	r.events = append(r.events, sdktrace.Event{Name: name, Attributes: attrs, DroppedAttributeCount: dropped, Time: cfg.Timestamp()})
}

func (r *spanRecord) addLink(l trace.Link) {
	if !l.SpanContext.IsValid() && len(l.Attributes) == 0 && l.SpanContext.TraceState().Len() == 0 {
		return // as the SDK: a link to nothing
	}
	if len(r.links) == maxSpanLinks { // as the SDK: the oldest goes
		r.links = append(r.links[:0], r.links[1:]...)
		r.droppedLinks++
	}
	attrs, dropped := itemAttrs(l.Attributes)
	r.links = append(r.links, sdktrace.Link{SpanContext: l.SpanContext, Attributes: attrs, DroppedAttributeCount: dropped})
}

// fileSpan is the ended span sp of tracer t, with context sc, as the trace
// file's processor takes it (and, through snapshot, any other).
func (r *spanRecord) fileSpan(t *accountingTracer, sc trace.SpanContext, sp *attribution.Span) otelsetup.FileSpan {
	attrs := r.dedupeAttrs() // first: it may move lead into attrs
	return otelsetup.FileSpan{
		Name: sp.Name, SpanContext: sc, Parent: r.parent, Kind: r.kind, Start: sp.Start, End: sp.End,
		Leading: r.lead, Attributes: attrs, Events: r.events, Links: r.links, Status: r.status,
		DroppedAttributes: r.droppedAttrs, DroppedEvents: r.droppedEvents, DroppedLinks: r.droppedLinks,
		Resource: t.export.res, Scope: t.scope,
	}
}

// snapshot is a span as fileSpan gives it, as an SDK span processor
// receives it.
func snapshot(fs otelsetup.FileSpan) sdktrace.ReadOnlySpan {
	return tracetest.SpanStub{
		Name: fs.Name, SpanContext: fs.SpanContext, Parent: fs.Parent, SpanKind: fs.Kind,
		StartTime: time.Unix(0, fs.Start), EndTime: time.Unix(0, fs.End),
		Attributes: fs.AllAttributes(), Events: fs.Events, Links: fs.Links, Status: fs.Status,
		DroppedAttributes: fs.DroppedAttributes, DroppedEvents: fs.DroppedEvents, DroppedLinks: fs.DroppedLinks,
		Resource: fs.Resource, InstrumentationScope: fs.Scope,
	}.Snapshot()
}

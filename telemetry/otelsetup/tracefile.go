package otelsetup

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// The OTel SDK as one sink and source among others: its read-only spans
// become spans.Records for the trace file (TraceFileExporter, and the file's
// span processor), and spans.Records become read-only spans for an SDK
// span processor (ProcessorExporter).

// TraceFileExporter is an SDK span exporter that writes each batch of
// spans as one line of the trace file (spans.FileWriter: OTLP JSON, the
// Collector's file exporter's format). ExportSpans and Shutdown are safe
// for concurrent use.
type TraceFileExporter struct {
	w    *spans.FileWriter
	mu   sync.Mutex
	line spans.Line // ExportSpans's
}

// NewTraceFileExporter creates (or truncates) path and returns an exporter
// that writes to it. Its Shutdown closes the file.
func NewTraceFileExporter(path string) (*TraceFileExporter, error) {
	w, err := spans.CreateFile(path)
	if err != nil {
		return nil, err
	}
	return &TraceFileExporter{w: w}, nil
}

// ExportSpans writes spans as one line and flushes it to the file. It
// returns ctx's error if ctx is done on entry, the write error of the file
// (this batch's and every later one's: a line was cut), or an error after
// Shutdown. A nil span is skipped.
func (e *TraceFileExporter) ExportSpans(ctx context.Context, ss []sdktrace.ReadOnlySpan) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range ss {
		if s != nil {
			r := RecordOf(s)
			e.line.Add(&r)
		}
	}
	err := e.w.WriteLine(&e.line)
	e.line.Reset()
	return err
}

// Shutdown flushes and closes the file (spans.FileWriter.Shutdown).
func (e *TraceFileExporter) Shutdown(ctx context.Context) error { return e.w.Shutdown(ctx) }

// RecordOf returns s as a spans.Record; for nil, the zero Record (not
// sampled: an Exporter ignores it). Its attributes are s's; its events
// and links are new slices.
func RecordOf(s sdktrace.ReadOnlySpan) spans.Record {
	if s == nil {
		return spans.Record{}
	}
	sc := s.InstrumentationScope()
	r := spans.Record{
		Name: s.Name(), SpanContext: s.SpanContext(), Parent: s.Parent(), Kind: s.SpanKind(),
		Start: s.StartTime().UnixNano(), End: s.EndTime().UnixNano(), Attributes: s.Attributes(),
		Status:            spans.Status{Code: s.Status().Code, Description: s.Status().Description},
		DroppedAttributes: s.DroppedAttributes(), DroppedEvents: s.DroppedEvents(), DroppedLinks: s.DroppedLinks(),
		Resource: ResourceOf(s.Resource()), Scope: spans.Scope{Name: sc.Name, Version: sc.Version, SchemaURL: sc.SchemaURL, Attributes: sc.Attributes},
	}
	if evs := s.Events(); len(evs) > 0 {
		r.Events = make([]spans.Event, len(evs))
		for i, ev := range evs {
			r.Events[i] = spans.Event{Name: ev.Name, Time: ev.Time.UnixNano(), Attributes: ev.Attributes, DroppedAttributes: ev.DroppedAttributeCount}
		}
	}
	if links := s.Links(); len(links) > 0 {
		r.Links = make([]spans.Link, len(links))
		for i, l := range links {
			r.Links[i] = spans.Link{SpanContext: l.SpanContext, Attributes: l.Attributes, DroppedAttributes: l.DroppedAttributeCount}
		}
	}
	return r
}

// resources maps the SDK's resources to spans.Resources, so that the
// spans of one provider share one (the file's encoder caches a resource's
// encoding by pointer). A process has a few; past maxResources a resource
// is converted afresh each time, which costs time, not correctness.
var resources sync.Map // *resource.Resource → *spans.Resource

const maxResources = 64

var resourceCount struct {
	sync.Mutex
	n int
}

// ResourceOf returns r as a spans.Resource (nil for nil), the same one
// for the same r.
func ResourceOf(r *resource.Resource) *spans.Resource {
	if r == nil {
		return nil
	}
	if v, ok := resources.Load(r); ok {
		return v.(*spans.Resource)
	}
	sr := spans.NewResource(r.SchemaURL(), r.Attributes()...)
	resourceCount.Lock()
	defer resourceCount.Unlock()
	if resourceCount.n >= maxResources {
		return sr
	}
	v, loaded := resources.LoadOrStore(r, sr)
	if !loaded {
		resourceCount.n++
	}
	return v.(*spans.Resource)
}

// ExporterProcessor returns an SDK span processor that hands each sampled
// span that ends to e as a spans.Record (RecordOf): how an SDK provider
// feeds the trace file's spans.FileSink. Its ForceFlush and Shutdown are
// e's, when e has them (a FileSink does), else nothing.
func ExporterProcessor(e spans.Exporter) sdktrace.SpanProcessor { return exporterProcessor{e} }

type exporterProcessor struct{ e spans.Exporter }

func (exporterProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (p exporterProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if s == nil || !s.SpanContext().IsSampled() {
		return
	}
	p.e.Export(RecordOf(s))
}

func (p exporterProcessor) ForceFlush(ctx context.Context) error {
	if f, ok := p.e.(interface{ ForceFlush(context.Context) error }); ok {
		return f.ForceFlush(ctx)
	}
	return nil
}

func (p exporterProcessor) Shutdown(ctx context.Context) error {
	if f, ok := p.e.(interface{ Shutdown(context.Context) error }); ok {
		return f.Shutdown(ctx)
	}
	return nil
}

// ProcessorExporter returns a spans.Exporter that hands each record to
// proc as an ended read-only span (OnEnd; never OnStart), as an SDK
// provider would: how a tracer of spans.Records feeds an SDK span
// processor (a tracetest.SpanRecorder, a batch processor of an exporter).
// The read-only span holds copies of the record's attributes, which proc
// may keep. proc is not shut down by it.
func ProcessorExporter(proc sdktrace.SpanProcessor) spans.Exporter { return processorExporter{proc} }

type processorExporter struct{ proc sdktrace.SpanProcessor }

func (p processorExporter) Export(r spans.Record) { p.proc.OnEnd(snapshot(&r)) }

// snapshot is r as an SDK span processor receives an ended span.
func snapshot(r *spans.Record) sdktrace.ReadOnlySpan {
	stub := tracetest.SpanStub{
		Name: r.Name, SpanContext: r.SpanContext, Parent: r.Parent, SpanKind: r.Kind,
		StartTime: time.Unix(0, r.Start), EndTime: time.Unix(0, r.End),
		Attributes: slices.Clone(r.AllAttributes()), Status: sdktrace.Status{Code: r.Status.Code, Description: r.Status.Description},
		DroppedAttributes: r.DroppedAttributes, DroppedEvents: r.DroppedEvents, DroppedLinks: r.DroppedLinks,
		InstrumentationScope: instrumentation.Scope{Name: r.Scope.Name, Version: r.Scope.Version,
			SchemaURL: r.Scope.SchemaURL, Attributes: r.Scope.Attributes},
	}
	if r.Resource != nil {
		stub.Resource = resource.NewWithAttributes(r.Resource.SchemaURL(), r.Resource.Set().ToSlice()...)
	}
	for _, ev := range r.Events {
		stub.Events = append(stub.Events, sdktrace.Event{Name: ev.Name, Time: time.Unix(0, ev.Time),
			Attributes: ev.Attributes, DroppedAttributeCount: ev.DroppedAttributes})
	}
	for _, l := range r.Links {
		stub.Links = append(stub.Links, sdktrace.Link{SpanContext: l.SpanContext, Attributes: l.Attributes,
			DroppedAttributeCount: l.DroppedAttributes})
	}
	return stub.Snapshot()
}

// DefaultResource returns the SDK's default resource (resource.Default:
// the service name from OTEL_SERVICE_NAME, the SDK's attributes) as a
// spans.Resource: the resource of spans an SDK provider without one
// would record.
func DefaultResource() *spans.Resource { return ResourceOf(resource.Default()) }

package otelsetup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/internal/outfile"
)

// TraceFileExporter is a span exporter that writes each batch of spans as one
// line of OTLP JSON, an ExportTraceServiceRequest: the format of the
// OpenTelemetry Collector's file exporter, so files from either are
// interchangeable. Trace and span ids are hex, enums are numbers, 64-bit
// integers are strings (OTLP/JSON); members are in the order encoding/json
// gives a map's keys, so a line is byte for byte what spans.MarshalTraceLine writes
// for the same request. Spans are grouped by resource, then by
// instrumentation scope, each in order of first appearance in the batch.
// Strings that are not valid UTF-8 have each bad byte replaced by U+FFFD.
//
// Spans are encoded straight into the line's reused buffers (spanLine:
// the trace file's batcher encodes each where it ends), and each line is
// flushed to the file before ExportSpans returns,
// so the file only ever ends in a whole line. ExportSpans and Shutdown are
// safe for concurrent use.
type TraceFileExporter struct {
	mu     sync.Mutex
	w      *bufio.Writer
	c      io.Closer // closed by Shutdown; nil for none
	closed bool
	err    error // the first write error: the file's last line is cut

	buf     []byte
	line    spanLine // ExportSpans's
	lineRes []int    // writeLine's: each group's resource, an index in resSet
	resSet  lineResources
	res     *resource.Resource // the resource encoded in resJSON
	resJSON []byte
}

// traceFileBufSize is the file's write buffer. A line's spans are already
// encoded (spanLine, bounded by its caller) and written to it group by
// group.
const traceFileBufSize = 64 << 10

// FileSpan is an ended span as the trace file writes it: the fields of an
// sdktrace.ReadOnlySpan that OTLP carries, as values. A span processor
// that writes the file (TraceFileOnly's) takes spans in this form too
// (FileSpanWriter), from a tracer that records its own spans and would
// otherwise make a read-only span of each only for the file to read it
// back. Start and End are Unix nanoseconds.
//
// Leading, if not nil, are the span's first attributes, shared with other
// spans and encoded once (a phase's amdahl.component, amdahl.phase and
// amdahl.direction); Attributes follow them and must not repeat one of
// their keys. The span's attributes are then AllAttributes.
type FileSpan struct {
	Name                string
	SpanContext, Parent trace.SpanContext
	Kind                trace.SpanKind
	Start, End          int64
	Leading             *SharedAttributes
	Attributes          []attribute.KeyValue
	Events              []sdktrace.Event
	Links               []sdktrace.Link
	Status              sdktrace.Status
	DroppedAttributes   int
	DroppedEvents       int
	DroppedLinks        int
	Resource            *resource.Resource
	Scope               instrumentation.Scope
}

// AllAttributes returns the span's attributes: Leading's, then
// Attributes; in a new slice when there are Leading ones (they are
// shared with other spans: the caller may keep or change the result).
func (s *FileSpan) AllAttributes() []attribute.KeyValue {
	if s.Leading == nil || len(s.Leading.kvs) == 0 {
		return s.Attributes
	}
	all := make([]attribute.KeyValue, 0, len(s.Leading.kvs)+len(s.Attributes))
	return append(append(all, s.Leading.kvs...), s.Attributes...)
}

// SharedAttributes are attributes that many spans begin with, encoded for
// the trace file once (FileSpan.Leading): a span that leads with them
// needs no attribute list of its own for them, and they are copied into
// the file rather than encoded again for each span. Immutable; safe to
// share.
type SharedAttributes struct {
	kvs  []attribute.KeyValue
	json []byte // the key-values' OTLP JSON, comma-separated, no brackets
}

// NewSharedAttributes returns kvs as SharedAttributes, under the SDK's
// rules for a span's attributes: an invalid one (attribute.KeyValue.Valid:
// an empty key or no value) is left out, and a key given twice is kept
// once, where it first appears, with its last value.
func NewSharedAttributes(kvs ...attribute.KeyValue) *SharedAttributes {
	a := &SharedAttributes{kvs: make([]attribute.KeyValue, 0, len(kvs))}
next:
	for _, kv := range kvs {
		if !kv.Valid() {
			continue
		}
		for i := range a.kvs {
			if a.kvs[i].Key == kv.Key {
				a.kvs[i] = kv
				continue next
			}
		}
		a.kvs = append(a.kvs, kv)
	}
	a.json = appendKeyValueList(nil, false, a.kvs)
	return a
}

// KeyValues returns the attributes (none of nil). The slice is the
// SharedAttributes'; appending to it copies it.
func (a *SharedAttributes) KeyValues() []attribute.KeyValue {
	if a == nil {
		return nil
	}
	return slices.Clip(a.kvs)
}

// Len returns how many attributes there are (none for nil).
func (a *SharedAttributes) Len() int {
	if a == nil {
		return 0
	}
	return len(a.kvs)
}

// Has reports whether one of the attributes has key k (none of nil's).
func (a *SharedAttributes) Has(k attribute.Key) bool {
	if a == nil {
		return false
	}
	for i := range a.kvs {
		if a.kvs[i].Key == k {
			return true
		}
	}
	return false
}

// FileSpanOf returns s as a FileSpan; for nil, the zero FileSpan (not
// sampled: a FileSpanWriter ignores it).
func FileSpanOf(s sdktrace.ReadOnlySpan) FileSpan {
	if s == nil {
		return FileSpan{}
	}
	return FileSpan{
		Name: s.Name(), SpanContext: s.SpanContext(), Parent: s.Parent(), Kind: s.SpanKind(),
		Start: s.StartTime().UnixNano(), End: s.EndTime().UnixNano(),
		Attributes: s.Attributes(), Events: s.Events(), Links: s.Links(), Status: s.Status(),
		DroppedAttributes: s.DroppedAttributes(), DroppedEvents: s.DroppedEvents(), DroppedLinks: s.DroppedLinks(),
		Resource: s.Resource(), Scope: s.InstrumentationScope(),
	}
}

// FileSpanWriter is implemented by the trace file's span processor
// (Telemetry.TraceFileOnly): EndFileSpan writes s as OnEnd writes a
// read-only span with the same fields. It keeps nothing of s: the span is
// encoded before it returns, and an implementation must not keep s's
// slices (Attributes, Events, Links) past its return, which callers may
// reuse (the runtime hands it a phase's attributes as the Component got
// them). s is a value, not a pointer, so that the caller's span need not
// move to the heap for the call.
type FileSpanWriter interface {
	EndFileSpan(s FileSpan)
}

// errExporterClosed is returned by ExportSpans after Shutdown.
var errExporterClosed = errors.New("trace file: exporter is shut down")

// NewTraceFileExporter creates (or truncates) path and returns an exporter
// that writes to it. Its Shutdown closes the file.
func NewTraceFileExporter(path string) (*TraceFileExporter, error) {
	f, err := outfile.Create(path)
	if err != nil {
		return nil, fmt.Errorf("open trace file: %w", err)
	}
	return newTraceWriter(f, f), nil
}

// newTraceWriter returns an exporter writing to w; Shutdown closes c when it
// is not nil.
func newTraceWriter(w io.Writer, c io.Closer) *TraceFileExporter {
	return &TraceFileExporter{w: bufio.NewWriterSize(w, traceFileBufSize), c: c}
}

// ExportSpans writes spans as one line and flushes it to the file. It
// returns ctx's error if ctx is done on entry, the write error of the file
// (this batch's and every later one's: a line was cut), or an error after
// Shutdown. A nil span is skipped.
func (e *TraceFileExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range spans {
		if s != nil {
			fs := FileSpanOf(s)
			e.line.add(&fs)
		}
	}
	err := e.writeLocked(&e.line)
	e.line.reset()
	return err
}

// writeSpanLine writes l as one line, as ExportSpans does.
func (e *TraceFileExporter) writeSpanLine(l *spanLine) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.writeLocked(l)
}

// writeLocked writes l as one line, unless the exporter is shut down or a
// line was cut. mu is held.
func (e *TraceFileExporter) writeLocked(l *spanLine) error {
	if e.closed {
		return errExporterClosed
	}
	if e.err != nil {
		return e.err
	}
	if err := e.writeLine(l); err != nil {
		e.err = fmt.Errorf("write trace file: %w", err)
		return e.err
	}
	return nil
}

// Shutdown flushes and closes the file. It returns the first write error
// of ExportSpans again, if there was one (the file is cut short), or the
// flush's or close's. It is idempotent: later calls return nil. ctx is not used: a flush to a local file does not wait on
// anything ctx could cancel.
func (e *TraceFileExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	// The first write error is returned again: the file was cut short,
	// and whoever shuts down (amdahl run's exit status) must hear of it.
	err := e.err
	if err == nil {
		if err = e.w.Flush(); err != nil {
			err = fmt.Errorf("write trace file: %w", err)
		}
	}
	if e.c != nil {
		if cerr := e.c.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close trace file: %w", cerr))
		}
	}
	return err
}

// writeLine writes one request holding l's spans and flushes it.
func (e *TraceFileExporter) writeLine(l *spanLine) error {
	if l.n == 0 {
		return nil
	}
	rs := &e.resSet
	rs.reset()
	ri := e.lineRes[:0]
	for i := range l.groups {
		ri = append(ri, rs.index(l.groups[i].res))
	}
	e.lineRes = ri
	b := append(e.buf[:0], `{"resourceSpans":[`...)
	for r, res := range rs.res {
		if r > 0 {
			b = append(b, ',')
		}
		// Members of each object in sorted order, as spans.MarshalTraceLine
		// (encoding/json re-encoding a map) writes them.
		b = append(b, '{')
		if res != nil {
			b = appendKey(b, "resource")
			b = e.appendResource(b, res)
		}
		if u := res.SchemaURL(); u != "" {
			b = appendKey(b, "schemaUrl")
			b = appendString(b, u)
		}
		b = appendKey(b, "scopeSpans")
		b = append(b, '[')
		first := true
		for i := range l.groups {
			if ri[i] != r {
				continue
			}
			g := &l.groups[i]
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, '{')
			if g.scope.SchemaURL != "" {
				b = appendKey(b, "schemaUrl")
				b = appendString(b, g.scope.SchemaURL)
			}
			if g.scope != (instrumentation.Scope{}) {
				b = appendKey(b, "scope")
				b = appendScope(b, g.scope)
			}
			b = appendKey(b, "spans")
			b = append(b, '[')
			if _, err := e.w.Write(b); err != nil {
				return err
			}
			if _, err := e.w.Write(g.spans); err != nil {
				return err
			}
			b = append(b[:0], "]}"...)
		}
		b = append(b, "]}"...)
	}
	b = append(b, "]}\n"...)
	_, err := e.w.Write(b)
	e.buf = b[:0]
	if err != nil {
		return err
	}
	return e.w.Flush()
}

// spanLine is one line of the trace file being filled: its spans encoded
// as they are added, grouped by resource and instrumentation scope in
// order of first appearance (writeLine merges the groups of equal
// resources). Nothing of a span is kept but its encoding: not its
// attributes, events or links.
type spanLine struct {
	n      int // spans
	size   int // bytes of the encoded spans
	groups []spanGroup
}

type spanGroup struct {
	res   *resource.Resource
	scope instrumentation.Scope
	spans []byte // its spans, encoded, comma-separated
}

// maxKeptGroupBuf bounds the buffer a group keeps for the next line: one
// that grew past it (a line of huge spans) is let go.
const maxKeptGroupBuf = 1 << 20

// add encodes s into its group: that of its scope and its resource, or a
// resource with the same attributes (the first one seen stands for both).
func (l *spanLine) add(s *FileSpan) {
	var g *spanGroup
	for i := range l.groups {
		if x := &l.groups[i]; x.scope == s.Scope && (x.res == s.Resource || x.res.Equivalent() == s.Resource.Equivalent()) {
			g = x
			break
		}
	}
	if g == nil {
		if n := len(l.groups); n < cap(l.groups) {
			l.groups = l.groups[:n+1] // with the buffer a former line left
		} else {
			l.groups = append(l.groups, spanGroup{})
		}
		g = &l.groups[len(l.groups)-1]
		g.res, g.scope = s.Resource, s.Scope
	}
	before := len(g.spans)
	if before > 0 {
		g.spans = append(g.spans, ',')
	}
	g.spans = appendSpan(g.spans, s)
	l.n++
	l.size += len(g.spans) - before
}

// reset empties the line, keeping its groups' buffers for the next.
func (l *spanLine) reset() {
	all := l.groups[:cap(l.groups)]
	for i := range all {
		g := &all[i]
		g.res, g.scope = nil, instrumentation.Scope{}
		if cap(g.spans) > maxKeptGroupBuf {
			g.spans = nil
		}
		g.spans = g.spans[:0]
	}
	l.groups = l.groups[:0]
	l.n, l.size = 0, 0
}

// appendResource appends r's OTLP JSON, from a cache: every span of a
// tracer provider shares one immutable *resource.Resource.
func (e *TraceFileExporter) appendResource(b []byte, r *resource.Resource) []byte {
	if r != e.res {
		rb := append(e.resJSON[:0], '{')
		rb = appendAttrIter(rb, r.Iter())
		e.res, e.resJSON = r, append(rb, '}')
	}
	return append(b, e.resJSON...)
}

// lineResources is a line's resources, each once: resources with the same
// attributes are one, as in the OTLP exporter; the first one seen gives
// the group its schema URL. Its slices are reused from line to line.
type lineResources struct {
	res    []*resource.Resource
	resKey []attribute.Distinct
}

// reset empties the set, dropping its references to resources.
func (g *lineResources) reset() {
	clear(g.res)
	g.res, g.resKey = g.res[:0], g.resKey[:0]
}

// index returns r's index in g.res, adding it if it is new.
func (g *lineResources) index(r *resource.Resource) int {
	for i, x := range g.res {
		if x == r {
			return i
		}
	}
	key := r.Equivalent()
	for i, k := range g.resKey {
		if k == key {
			return i
		}
	}
	g.res, g.resKey = append(g.res, r), append(g.resKey, key)
	return len(g.res) - 1
}

// OTLP span flags: the low byte is the W3C trace flags.
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// writeErr returns the first write error, if any.
func (e *TraceFileExporter) writeErr() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

package otelsetup

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
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
// gives a map's keys, so a line is byte for byte what MarshalTraceLine writes
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
		// Members of each object in sorted order, as MarshalTraceLine
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

func spanFlags(tf trace.TraceFlags, remote bool) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if remote {
		f |= flagIsRemote
	}
	return f
}

func appendSpan(b []byte, s *FileSpan) []byte {
	sc, parent := &s.SpanContext, &s.Parent
	b = append(b, '{')
	var lead []byte
	if s.Leading != nil {
		lead = s.Leading.json
	}
	b = appendLeadAttrs(b, lead, s.Attributes)
	b = appendCount(b, "droppedAttributesCount", s.DroppedAttributes)
	b = appendCount(b, "droppedEventsCount", s.DroppedEvents)
	b = appendCount(b, "droppedLinksCount", s.DroppedLinks)
	b = appendTime(b, "endTimeUnixNano", s.End)
	if evs := s.Events; len(evs) > 0 {
		b = appendKey(b, "events")
		b = append(b, '[')
		for i, ev := range evs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			b = appendAttrs(b, ev.Attributes)
			b = appendCount(b, "droppedAttributesCount", ev.DroppedAttributeCount)
			if ev.Name != "" {
				b = appendKey(b, "name")
				b = appendString(b, ev.Name)
			}
			b = appendTime(b, "timeUnixNano", ev.Time.UnixNano())
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendKey(b, "flags")
	b = strconv.AppendUint(b, uint64(spanFlags(sc.TraceFlags(), parent.IsRemote())), 10)
	if k := spanKind(s.Kind); k != 0 {
		b = appendKey(b, "kind")
		b = strconv.AppendUint(b, uint64(k), 10)
	}
	if links := s.Links; len(links) > 0 {
		b = appendKey(b, "links")
		b = append(b, '[')
		for i, l := range links {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			b = appendAttrs(b, l.Attributes)
			b = appendCount(b, "droppedAttributesCount", l.DroppedAttributeCount)
			b = appendKey(b, "flags")
			b = strconv.AppendUint(b, uint64(spanFlags(l.SpanContext.TraceFlags(), l.SpanContext.IsRemote())), 10)
			b = appendSpanID(b, "spanId", l.SpanContext.SpanID())
			b = appendTraceID(b, l.SpanContext.TraceID())
			b = appendTraceState(b, l.SpanContext.TraceState())
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if s.Name != "" {
		b = appendKey(b, "name")
		b = appendString(b, s.Name)
	}
	if parent.SpanID().IsValid() {
		b = appendSpanID(b, "parentSpanId", parent.SpanID())
	}
	b = appendSpanID(b, "spanId", sc.SpanID())
	b = appendTime(b, "startTimeUnixNano", s.Start)
	b = appendKey(b, "status")
	b = append(b, '{')
	st := &s.Status
	if c := statusCode(st.Code); c != 0 {
		b = appendKey(b, "code")
		b = strconv.AppendUint(b, uint64(c), 10)
	}
	if st.Description != "" {
		b = appendKey(b, "message")
		b = appendString(b, st.Description)
	}
	b = append(b, '}')
	b = appendTraceID(b, sc.TraceID())
	b = appendTraceState(b, sc.TraceState())
	return append(b, '}')
}

// spanKind is OTLP's Span.SpanKind.
func spanKind(k trace.SpanKind) int {
	switch k {
	case trace.SpanKindInternal:
		return 1
	case trace.SpanKindServer:
		return 2
	case trace.SpanKindClient:
		return 3
	case trace.SpanKindProducer:
		return 4
	case trace.SpanKindConsumer:
		return 5
	}
	return 0
}

// statusCode is OTLP's Status.StatusCode.
func statusCode(c codes.Code) int {
	switch c {
	case codes.Ok:
		return 1
	case codes.Error:
		return 2
	}
	return 0
}

func appendScope(b []byte, s instrumentation.Scope) []byte {
	b = append(b, '{')
	b = appendAttrIter(b, s.Attributes.Iter())
	if s.Name != "" {
		b = appendKey(b, "name")
		b = appendString(b, s.Name)
	}
	if s.Version != "" {
		b = appendKey(b, "version")
		b = appendString(b, s.Version)
	}
	return append(b, '}')
}

// appendKey appends an object member's name and colon, after a comma unless
// it is the object's first member: a value never ends in '{'.
func appendKey(b []byte, key string) []byte {
	if b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

// appendCount appends an OTLP uint32 count, omitted when zero, clamped to
// [0, MaxUint32] as the OTLP exporter does.
func appendCount(b []byte, key string, n int) []byte {
	if n <= 0 {
		return b
	}
	b = appendKey(b, key)
	return strconv.AppendUint(b, min(uint64(n), math.MaxUint32), 10)
}

// appendTime appends a fixed64 time as a JSON string, omitted when zero;
// times before 1970 are 0, as in the OTLP exporter.
func appendTime(b []byte, key string, unixNano int64) []byte {
	if unixNano <= 0 {
		return b
	}
	b = appendKey(b, key)
	b = append(b, '"')
	b = strconv.AppendInt(b, unixNano, 10)
	return append(b, '"')
}

func appendTraceID(b []byte, id trace.TraceID) []byte {
	b = appendKey(b, "traceId")
	b = append(b, '"')
	b = hex.AppendEncode(b, id[:])
	return append(b, '"')
}

func appendSpanID(b []byte, key string, id trace.SpanID) []byte {
	b = appendKey(b, key)
	b = append(b, '"')
	b = hex.AppendEncode(b, id[:])
	return append(b, '"')
}

func appendTraceState(b []byte, ts trace.TraceState) []byte {
	if ts.Len() == 0 {
		return b
	}
	b = appendKey(b, "traceState")
	return appendString(b, ts.String())
}

// appendAttrs appends "attributes":[…], omitted when there are none.
func appendAttrs(b []byte, kvs []attribute.KeyValue) []byte { return appendLeadAttrs(b, nil, kvs) }

// appendLeadAttrs appends the attributes field: lead (key-values already
// encoded, comma-separated, as SharedAttributes keeps them), then kvs;
// nothing when both are empty.
func appendLeadAttrs(b, lead []byte, kvs []attribute.KeyValue) []byte {
	if len(lead) == 0 && len(kvs) == 0 {
		return b
	}
	b = appendKey(b, "attributes")
	b = append(append(b, '['), lead...)
	return append(appendKeyValueList(b, len(lead) > 0, kvs), ']')
}

func appendAttrIter(b []byte, it attribute.Iterator) []byte {
	if it.Len() == 0 {
		return b
	}
	b = appendKey(b, "attributes")
	b = append(b, '[')
	for it.Next() {
		i, kv := it.IndexedAttribute()
		if i > 0 {
			b = append(b, ',')
		}
		b = appendKeyValue(b, kv)
	}
	return append(b, ']')
}

func appendKeyValues(b []byte, kvs []attribute.KeyValue) []byte {
	return append(appendKeyValueList(append(b, '['), false, kvs), ']')
}

// appendKeyValueList appends kvs comma-separated, with a comma before the
// first if after is set (something precedes them in the list).
func appendKeyValueList(b []byte, after bool, kvs []attribute.KeyValue) []byte {
	for _, kv := range kvs {
		if after {
			b = append(b, ',')
		}
		b = appendKeyValue(b, kv)
		after = true
	}
	return b
}

func appendKeyValue(b []byte, kv attribute.KeyValue) []byte {
	b = append(b, '{')
	if kv.Key != "" {
		b = appendKey(b, "key")
		b = appendString(b, string(kv.Key))
	}
	b = appendKey(b, "value")
	b = appendValue(b, kv.Value)
	return append(b, '}')
}

// appendValue appends an OTLP AnyValue. Its one member is written even when
// it holds a zero value (protobuf oneof semantics); an array or map with no
// elements has no "values".
func appendValue(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.EMPTY:
		return append(b, "{}"...)
	case attribute.BOOL:
		return appendBool(b, v.AsBool())
	case attribute.INT64:
		return appendInt(b, v.AsInt64())
	case attribute.FLOAT64:
		return appendDouble(b, v.AsFloat64())
	case attribute.STRING:
		return appendStringValue(b, v.AsString())
	case attribute.BYTESLICE:
		b = append(b, `{"bytesValue":"`...)
		b = base64.StdEncoding.AppendEncode(b, v.AsByteSlice())
		return append(b, `"}`...)
	case attribute.BOOLSLICE:
		return appendArray(b, v.AsBoolSlice(), appendBool)
	case attribute.INT64SLICE:
		return appendArray(b, v.AsInt64Slice(), appendInt)
	case attribute.FLOAT64SLICE:
		return appendArray(b, v.AsFloat64Slice(), appendDouble)
	case attribute.STRINGSLICE:
		return appendArray(b, v.AsStringSlice(), appendStringValue)
	case attribute.SLICE:
		return appendArray(b, v.AsSlice(), appendValue)
	case attribute.MAP:
		kvs := v.AsMap()
		if len(kvs) == 0 {
			return append(b, `{"kvlistValue":{}}`...)
		}
		b = append(b, `{"kvlistValue":{"values":`...)
		b = appendKeyValues(b, kvs)
		return append(b, "}}"...)
	}
	// A type this encoder does not know, as the OTLP exporter writes it.
	return append(b, `{"stringValue":"INVALID"}`...)
}

func appendArray[T any](b []byte, vs []T, elem func([]byte, T) []byte) []byte {
	if len(vs) == 0 {
		return append(b, `{"arrayValue":{}}`...)
	}
	b = append(b, `{"arrayValue":{"values":[`...)
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = elem(b, v)
	}
	return append(b, "]}}"...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, `{"boolValue":true}`...)
	}
	return append(b, `{"boolValue":false}`...)
}

func appendInt(b []byte, v int64) []byte {
	b = append(b, `{"intValue":"`...)
	b = strconv.AppendInt(b, v, 10)
	return append(b, `"}`...)
}

func appendStringValue(b []byte, v string) []byte {
	b = append(b, `{"stringValue":`...)
	b = appendString(b, v)
	return append(b, '}')
}

// appendDouble appends {"doubleValue":v}: a JSON number formatted as
// encoding/json formats a float64 (ECMAScript's shortest form), or, for the
// values JSON has no number for, the strings of OTLP/JSON (protojson).
func appendDouble(b []byte, v float64) []byte {
	b = append(b, `{"doubleValue":`...)
	switch {
	case math.IsNaN(v):
		b = append(b, `"NaN"`...)
	case math.IsInf(v, 1):
		b = append(b, `"Infinity"`...)
	case math.IsInf(v, -1):
		b = append(b, `"-Infinity"`...)
	default:
		b = appendFloat(b, v)
	}
	return append(b, '}')
}

// appendFloat appends a finite v with the fewest digits that read back as v:
// plain decimal for 1e-6 ≤ |v| < 1e21, exponent form otherwise with at
// least one exponent digit ("1e-7", not Go's "1e-07").
func appendFloat(b []byte, v float64) []byte {
	if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) {
		n := len(b)
		b = strconv.AppendFloat(b, v, 'e', -1, 64)
		// Go writes at least two exponent digits: drop a leading zero.
		if e := len(b) - n; e >= 4 && b[len(b)-4] == 'e' && b[len(b)-2] == '0' {
			b[len(b)-2] = b[len(b)-1]
			b = b[:len(b)-1]
		}
		return b
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string with encoding/json's escapes
// (HTML characters left alone): \" \\ \n \r \t \b \f, \u00XX for the other
// control characters, \u2028 and \u2029 (line breaks to JavaScript), and
// \ufffd for each byte that is not part of valid UTF-8.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	done := 0 // s[:done] is in b
	for i := 0; i < len(s); {
		// Eight bytes at a time while none needs a second look.
		for i+8 <= len(s) && plain8(s[i:i+8]) {
			i += 8
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[done:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			done = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[done:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[done:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		done = i
	}
	b = append(b, s[done:]...)
	return append(b, '"')
}

// plain8 reports whether none of the eight bytes of s needs a second
// look from appendString: all ASCII, none a control character, '"' or
// '\\'. Each test is the bit trick that finds a byte below n in a word:
// (x - n·0x01…) &^ x & 0x80… is not zero exactly when one is (for n up to
// 0x80), applied to x for the control characters and to x XOR the byte
// for '"' and '\\' (below 1: equal).
func plain8(s string) bool {
	_ = s[7]
	x := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote, backslash := x^('"'*ones), x^('\\'*ones)
	return (x|(x-0x20*ones)&^x|(quote-ones)&^quote|(backslash-ones)&^backslash)&highs == 0
}

// writeErr returns the first write error, if any.
func (e *TraceFileExporter) writeErr() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

package spans

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"go.opentelemetry.io/otel/attribute"

	"github.com/amdahl-rt/amdahl/internal/outfile"
)

// FileWriter writes trace files: each Line as one line of OTLP JSON, an
// ExportTraceServiceRequest: the format of the OpenTelemetry Collector's
// file exporter, so files from either are interchangeable. Trace and span
// ids are hex, enums are numbers, 64-bit integers are strings (OTLP/JSON);
// members are in the order encoding/json gives a map's keys, so a line is
// byte for byte what MarshalTraceLine writes for the same request. Spans
// are grouped by resource, then by instrumentation scope, each in order of
// first appearance in the line. Strings that are not valid UTF-8 have each
// bad byte replaced by U+FFFD.
//
// Spans are encoded straight into a Line's reused buffers as they are
// added, and each line is flushed to the file before WriteLine returns, so
// the file only ever ends in a whole line. WriteLine and Shutdown are safe
// for concurrent use.
type FileWriter struct {
	mu     sync.Mutex
	w      *bufio.Writer
	c      io.Closer // closed by Shutdown; nil for none
	closed bool
	err    error // the first write error: the file's last line is cut

	buf     []byte
	lineRes []int // writeLine's: each group's resource, an index in resSet
	resSet  lineResources
	res     *Resource // the resource encoded in resJSON
	resJSON []byte
}

// traceFileBufSize is the file's write buffer. A line's spans are already
// encoded (Line, bounded by its caller) and written to it group by
// group.
const traceFileBufSize = 64 << 10

// errWriterClosed is returned by WriteLine after Shutdown.
var errWriterClosed = errors.New("trace file: writer is shut down")

// CreateFile creates (or truncates) path, without following a link at its
// name, and returns a writer to it. Its Shutdown closes the file.
func CreateFile(path string) (*FileWriter, error) {
	f, err := outfile.Create(path)
	if err != nil {
		return nil, fmt.Errorf("open trace file: %w", err)
	}
	return NewFileWriter(f, f), nil
}

// NewFileWriter returns a writer to w; Shutdown closes c when it is not
// nil.
func NewFileWriter(w io.Writer, c io.Closer) *FileWriter {
	return &FileWriter{w: bufio.NewWriterSize(w, traceFileBufSize), c: c}
}

// WriteLine writes l's spans as one line and flushes it to the file; an
// empty l writes nothing. It returns the write error of the file (this
// line's and every later one's: a line was cut), or an error after
// Shutdown. l is not changed: Reset it to reuse it.
func (e *FileWriter) WriteLine(l *Line) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.writeLocked(l)
}

// writeLocked writes l as one line, unless the exporter is shut down or a
// line was cut. mu is held.
func (e *FileWriter) writeLocked(l *Line) error {
	if e.closed {
		return errWriterClosed
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
// of WriteLine again, if there was one (the file is cut short), or the
// flush's or close's. It is idempotent: later calls return nil. ctx is not used: a flush to a local file does not wait on
// anything ctx could cancel.
func (e *FileWriter) Shutdown(context.Context) error {
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
func (e *FileWriter) writeLine(l *Line) error {
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
			if g.scope != (Scope{}) {
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

// Line is one line of a trace file being filled: its spans encoded as
// they are added, grouped by resource and instrumentation scope in order
// of first appearance (WriteLine merges the groups of equal resources).
// Nothing of a span is kept but its encoding: not its attributes, events
// or links. The zero Line is empty and ready; it is not safe for
// concurrent use.
type Line struct {
	n      int // spans
	size   int // bytes of the encoded spans
	groups []spanGroup
}

type spanGroup struct {
	res   *Resource
	scope Scope
	spans []byte // its spans, encoded, comma-separated
}

// maxKeptGroupBuf bounds the buffer a group keeps for the next line: one
// that grew past it (a line of huge spans) is let go.
const maxKeptGroupBuf = 1 << 20

// Len returns how many spans l holds.
func (l *Line) Len() int { return l.n }

// Size returns the bytes of l's encoded spans.
func (l *Line) Size() int { return l.size }

// Add encodes s into its group: that of its scope and its resource, or a
// resource with the same attributes (the first one seen stands for both).
// Nothing of s is kept.
func (l *Line) Add(s *Record) {
	var g *spanGroup
	for i := range l.groups {
		if x := &l.groups[i]; x.scope == s.Scope && (x.res == s.Resource || x.res.equivalent() == s.Resource.equivalent()) {
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

// Reset empties the line, keeping its groups' buffers for the next.
func (l *Line) Reset() {
	all := l.groups[:cap(l.groups)]
	for i := range all {
		g := &all[i]
		g.res, g.scope = nil, Scope{}
		if cap(g.spans) > maxKeptGroupBuf {
			g.spans = nil
		}
		g.spans = g.spans[:0]
	}
	l.groups = l.groups[:0]
	l.n, l.size = 0, 0
}

// appendResource appends r's OTLP JSON, from a cache: every span of a
// process shares one immutable *Resource.
func (e *FileWriter) appendResource(b []byte, r *Resource) []byte {
	if r != e.res {
		rb := append(e.resJSON[:0], '{')
		rb = appendAttrIter(rb, r.Set().Iter())
		e.res, e.resJSON = r, append(rb, '}')
	}
	return append(b, e.resJSON...)
}

// lineResources is a line's resources, each once: resources with the same
// attributes are one, as in the OTLP exporter; the first one seen gives
// the group its schema URL. Its slices are reused from line to line.
type lineResources struct {
	res    []*Resource
	resKey []attribute.Distinct
}

// reset empties the set, dropping its references to resources.
func (g *lineResources) reset() {
	clear(g.res)
	g.res, g.resKey = g.res[:0], g.resKey[:0]
}

// index returns r's index in g.res, adding it if it is new.
func (g *lineResources) index(r *Resource) int {
	for i, x := range g.res {
		if x == r {
			return i
		}
	}
	key := r.equivalent()
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
func (e *FileWriter) writeErr() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

package spans

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// Limits bounds what a reader accepts from outside; the zero value means the
// defaults. A negative field is an error.
type Limits struct {
	MaxSpans  int // spans in all (default 20_000_000); over it: error naming the bound
	MaxString int // bytes of one JSON string or number, as written (default 1 MiB)
	MaxDepth  int // JSON nesting depth (default 64)
}

// DefaultMaxSpans is Limits.MaxSpans's default.
const DefaultMaxSpans = 20_000_000

const (
	defaultMaxString = 1 << 20
	defaultMaxDepth  = 64

	readBufSize = 64 << 10
	// batchChunk is the number of spans in one chunk of the buffer that
	// holds a ResourceSpans' spans until its resource is known: chunks grow
	// the buffer without copying it.
	batchChunk = 4096
	// maxLocalStrings bounds the reader's lock-free cache in front of the
	// Interner.
	maxLocalStrings = 4096
	// maxInternLen is the longest string interned: names and attribute
	// values are short, and the tables must not hold long strings from
	// hostile input.
	maxInternLen = 256
	// maxEmptyReads is how many (0, nil) reads in a row are taken for a
	// stuck reader, as in bufio.
	maxEmptyReads = 100
)

func (l Limits) withDefaults() (Limits, error) {
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxSpans", l.MaxSpans}, {"MaxString", l.MaxString}, {"MaxDepth", l.MaxDepth}} {
		if f.v < 0 {
			return l, fmt.Errorf("invalid Limits.%s %d: want ≥ 0 (0 for the default)", f.name, f.v)
		}
	}
	l.MaxSpans = cmp.Or(l.MaxSpans, DefaultMaxSpans)
	l.MaxString = cmp.Or(l.MaxString, defaultMaxString)
	l.MaxDepth = cmp.Or(l.MaxDepth, defaultMaxDepth)
	return l, nil
}

// Rules give each span read its row from attributes a Span does not keep
// (the semantic conventions' rpc.*, http.*, db.*, a rules file's own) and
// mark the spans a unit selector picks (Span.Selected). The attribution's
// rule sets implement it (attribution.SpanRules); the reader keeps the
// values of Keys and hands them to Apply, so that what is read is stated
// here, not in the order the reader meets attributes.
type Rules interface {
	// Keys returns the attribute keys Apply reads, of a span or of its
	// resource. It is called once, before reading.
	Keys() []string
	// Apply sets s's row (Component, Phase, Direction, Op) and Selected.
	// s has its name, kind and amdahl's own attributes (those of its
	// resource included) when it is called; span and res hold the values
	// of Keys on the span and on its resource, "" where absent (bools as
	// "true"/"false", integers as their digits). hasAmdahl reports whether
	// the span or its resource carried one of amdahl's row attributes
	// (amdahl.component, amdahl.phase, amdahl.direction). Apply must not
	// retain span or res.
	Apply(s *Span, span, res []string, hasAmdahl bool)
}

// ReadOTLPJSON streams OTLP JSON trace data from r and calls fn for each span, in file order.
//
// The input is a sequence of OTLP/JSON ExportTraceServiceRequest objects,
// separated by any whitespace: the files of amdahl's trace exporter
// (FileWriter) and of the OpenTelemetry Collector's file
// exporter, one per line, or one object of any size on one line. Ids may be
// hex (OTLP/JSON) or base64 (protojson's default); times a string of digits
// or a JSON number; field names lowerCamelCase or snake_case; fields in any
// order; unknown fields are skipped.
//
// Span attributes fill the Span as SetAttribute does: amdahl.phase,
// amdahl.direction, amdahl.component, amdahl.outcome… (strings) and
// amdahl.remote (bool). Those string attributes on a resource apply to its
// spans that do not have them. Span.Process numbers the distinct
// resource identities (service.name, service.instance.id, host.name,
// process.pid) 1, 2, 3… in order of their first span; it is 0 for a resource
// with none of them. Strings are shared through in (a private Interner if
// nil). rules, if not nil, then give each span its row (Rules.Apply).
//
// r is read to its end and not closed; fn (nil to only check the input) is
// called on the calling goroutine. Each span is passed on as soon as it is
// read, except in a ResourceSpans whose "resource" comes after its
// "scopeSpans" (JSON objects are unordered; amdahl and the Collector write
// it first): those spans are held until the resource is read. Memory is the
// 64 KiB read buffer, the spans so held, a few strings within lim.MaxString
// and one entry per distinct resource identity, whatever the length of a
// line. The request object is at depth 1; OTLP's own nesting is 10 deep
// with attribute values that are not arrays or maps.
//
// Every error but fn's names the input, line and byte column, e.g.
// "trace.jsonl:3:17: want ':' after object key": malformed or truncated
// JSON (truncation wraps io.ErrUnexpectedEOF), a span without a valid
// traceId or spanId, a time that is not an integer, and a bound of lim
// exceeded. An error of r is wrapped. fn's error stops reading and is
// returned as it is.
func ReadOTLPJSON(r io.Reader, name string, lim Limits, in *Interner, rules Rules, fn func(Span) error) error {
	lim, err := lim.withDefaults()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if in == nil {
		in = new(Interner)
	}
	if fn == nil {
		fn = func(Span) error { return nil }
	}
	p := &otlpReader{
		r:     r,
		name:  name,
		lim:   lim,
		fn:    fn,
		strs:  stringCache{in: in, m: make(map[string]string)},
		buf:   make([]byte, readBufSize),
		line:  1,
		procs: make(map[string]uint32),
		rules: rules,
	}
	if rules != nil {
		keys := rules.Keys()
		p.keyAt = make(map[string]int, len(keys))
		for i, k := range keys {
			if _, dup := p.keyAt[k]; !dup {
				p.keyAt[k] = i
			}
		}
		p.vals = make([]string, len(keys))
		p.res.vals = make([]string, len(keys))
	}
	return p.run()
}

// otlpReader is a byte-level scanner over its own read buffer, with one
// method per OTLP message. Its methods recurse only along the fixed OTLP
// schema; skip, which takes any JSON, is iterative.
type otlpReader struct {
	r    io.Reader
	name string
	lim  Limits
	fn   func(Span) error
	strs stringCache

	buf      []byte
	pos, end int   // unread bytes are buf[pos:end]
	base     int64 // stream offset of buf[0]
	line     int64 // 1-based line of buf[pos]
	lineOff  int64 // stream offset of the first byte of line
	rerr     error // r's error (io.EOF at the end), once it returned one
	valOff   int64 // stream offset of the last value read by strOrNull or scalar

	depth int
	kinds []bool // skip's stack: true for an object, false for an array

	sbuf  []byte // a string that crossed the buffer's end or had escapes
	kbuf  []byte // an object key that crossed the buffer's end
	akey  []byte // KeyValue.key
	aval  []byte // KeyValue.value, string or integer text
	akind valueKind
	abool bool

	spans int // spans begun, for Limits.MaxSpans and errors
	res   resourceState
	batch spanBatch
	procs map[string]uint32

	// rules (nil: amdahl's attributes only) and the values of its Keys
	// (keyAt numbers them) for the span being read (res.vals for its
	// resource).
	rules Rules
	keyAt map[string]int
	vals  []string
}

type valueKind uint8

const (
	kindNone valueKind = iota
	kindString
	kindBool
	kindInt
)

// pendingSpan is a span with the amdahlKeys it has (bit i for
// amdahlKeys[i]), so that its resource's, perhaps read later, fill only
// the rest.
type pendingSpan struct {
	Span
	has  uint8
	vals []string // the kept attributes of a span held for its resource
}

// amdahlKeys are the string attributes a resource can give its spans;
// setAttr says what each sets.
var amdahlKeys = [...]string{
	string(telemetry.AttrPhase), string(telemetry.AttrDirection), string(telemetry.AttrComponent),
	string(telemetry.AttrScenario), string(telemetry.AttrVariant), string(telemetry.AttrOutcome),
}

// identityKeys are the resource attributes that identify a process.
var identityKeys = [...]string{"service.name", "service.instance.id", "host.name", "process.pid"}

// resourceState is what one ResourceSpans' resource says about its spans.
type resourceState struct {
	seen     bool
	defaults [len(amdahlKeys)]string // interned values of amdahlKeys
	hasDef   uint8                   // bit i: defaults[i] is given
	has      [len(identityKeys)]bool
	id       [len(identityKeys)][]byte
	idKey    []byte
	proc     uint32
	procDone bool
	vals     []string // the values of rules' Keys (otlpReader.keyAt)
}

func (rs *resourceState) reset() {
	rs.seen = false
	rs.hasDef = 0
	rs.has = [len(identityKeys)]bool{}
	rs.proc, rs.procDone = 0, false
	clear(rs.vals)
}

// spanBatch holds spans in chunks of batchChunk.
type spanBatch struct {
	chunks [][]pendingSpan
	cur    int // chunks[:cur] are full
	n      int
}

func (b *spanBatch) add(s *pendingSpan) {
	if b.cur < len(b.chunks) && len(b.chunks[b.cur]) == batchChunk {
		b.cur++
	}
	if b.cur == len(b.chunks) {
		size := batchChunk
		if b.cur == 0 {
			size = 64 // most batches are small
		}
		b.chunks = append(b.chunks, make([]pendingSpan, 0, size))
	}
	b.chunks[b.cur] = append(b.chunks[b.cur], *s)
	b.n++
}

func (b *spanBatch) reset() {
	for i := range b.chunks[:min(b.cur+1, len(b.chunks))] {
		b.chunks[i] = b.chunks[i][:0]
	}
	b.cur, b.n = 0, 0
}

// stringCache is a lock-free cache in front of the Interner, bounded like
// it: a small direct-mapped table for the few strings that repeat on every
// span, then a map.
type stringCache struct {
	in  *Interner
	hot [64]string
	m   map[string]string
}

func (c *stringCache) get(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > maxInternLen {
		return string(b)
	}
	h := &c.hot[(len(b)*31+int(b[0])*7+int(b[len(b)-1]))%len(c.hot)]
	if *h == string(b) {
		return *h
	}
	if s, ok := c.m[string(b)]; ok {
		*h = s
		return s
	}
	s := c.in.Intern(b)
	if len(c.m) < maxLocalStrings {
		c.m[s] = s
	}
	return s
}

// run reads requests to the end of input.
func (p *otlpReader) run() error {
	for {
		c, ok := p.ws()
		if !ok {
			if p.rerr == io.EOF {
				return nil
			}
			return p.endErr()
		}
		if c != '{' {
			return p.unexpected(c, "want '{' to begin an ExportTraceServiceRequest")
		}
		if err := p.request(); err != nil {
			return err
		}
	}
}

// request reads an ExportTraceServiceRequest, its '{' next.
func (p *otlpReader) request() error {
	if err := p.open(); err != nil {
		return err
	}
	return p.members(func(key []byte) error {
		switch string(key) {
		case "resourceSpans", "resource_spans":
			return p.elems("resourceSpans", p.resourceSpans)
		}
		return p.skip()
	})
}

// resourceSpans reads one ResourceSpans. Its spans are passed to fn as
// they are read once the resource is known, and held until then.
func (p *otlpReader) resourceSpans() error {
	p.res.reset()
	p.batch.reset()
	ok, err := p.object("a ResourceSpans")
	if err != nil || !ok {
		return err
	}
	err = p.members(func(key []byte) error {
		switch string(key) {
		case "resource":
			if p.res.seen {
				return p.errorAt(p.here(), "resource given twice in one ResourceSpans")
			}
			if err := p.resource(); err != nil {
				return err
			}
			return p.flush()
		case "scopeSpans", "scope_spans":
			return p.elems("scopeSpans", p.scopeSpans)
		}
		return p.skip()
	})
	if err != nil {
		return err
	}
	p.res.seen = true // absent: no defaults, no identity
	return p.flush()
}

// flush passes the held spans to fn.
func (p *otlpReader) flush() error {
	for _, c := range p.batch.chunks {
		for i := range c {
			if err := p.emit(&c[i]); err != nil {
				return err
			}
		}
	}
	p.batch.reset()
	return nil
}

// emit fills in s's resource defaults and process and passes it to fn.
func (p *otlpReader) emit(ps *pendingSpan) error {
	s := ps.Span
	if use := p.res.hasDef &^ ps.has; use != 0 {
		for i, k := range amdahlKeys {
			if use&(1<<i) != 0 {
				s.setAttr(k, p.res.defaults[i], nil)
			}
		}
	}
	if !p.res.procDone {
		if err := p.assignProcess(); err != nil {
			return err
		}
	}
	s.Process = p.res.proc
	if p.rules != nil {
		vals := ps.vals
		if vals == nil {
			vals = p.vals
		}
		p.rules.Apply(&s, vals, p.res.vals, (ps.has|p.res.hasDef)&amdahlRowBits != 0)
	}
	return p.fn(s)
}

// assignProcess numbers the resource's identity, on its first span.
func (p *otlpReader) assignProcess() error {
	p.res.procDone = true
	rs := &p.res
	rs.idKey = rs.idKey[:0]
	known := false
	for i := range rs.id {
		if !rs.has[i] {
			rs.idKey = append(rs.idKey, '-')
			continue
		}
		known = true
		rs.idKey = strconv.AppendInt(rs.idKey, int64(len(rs.id[i])), 10)
		rs.idKey = append(rs.idKey, ':')
		rs.idKey = append(rs.idKey, rs.id[i]...)
	}
	if !known {
		return nil
	}
	if n, ok := p.procs[string(rs.idKey)]; ok {
		rs.proc = n
		return nil
	}
	if len(p.procs) >= math.MaxUint32 {
		return p.errorAt(p.here(), "more than %d processes", uint32(math.MaxUint32))
	}
	rs.proc = uint32(len(p.procs) + 1)
	p.procs[string(rs.idKey)] = rs.proc
	return nil
}

// resource reads a Resource.
func (p *otlpReader) resource() error {
	p.res.seen = true
	return p.fields("a Resource", func(key []byte) error {
		if string(key) == "attributes" {
			return p.attributes(nil)
		}
		return p.skip()
	})
}

// attributes reads a list of KeyValue, applied to s, or to the resource if
// s is nil.
func (p *otlpReader) attributes(s *pendingSpan) error {
	ok, err := p.array("attributes")
	if err != nil || !ok {
		return err
	}
	for first := true; ; first = false {
		more, err := p.elem(first)
		if err != nil || !more {
			return err
		}
		if err := p.keyValue(); err != nil {
			return err
		}
		if s != nil {
			p.spanAttr(s)
		} else {
			p.resourceAttr()
		}
	}
}

// keyValue reads a KeyValue into p.akey, p.akind, p.aval and p.abool.
func (p *otlpReader) keyValue() error {
	p.akey, p.aval, p.akind = p.akey[:0], p.aval[:0], kindNone
	ok, err := p.object("a KeyValue")
	if err != nil || !ok {
		return err
	}
	for first := true; ; first = false {
		key, more, err := p.member(first)
		if err != nil || !more {
			return err
		}
		switch string(key) {
		case "key":
			var v []byte
			v, _, err = p.strOrNull()
			p.akey = append(p.akey[:0], v...)
		case "value":
			err = p.anyValue()
		default:
			err = p.skip()
		}
		if err != nil {
			return err
		}
	}
}

// anyValue reads an AnyValue; string, bool and int values are kept, the
// other kinds skipped.
func (p *otlpReader) anyValue() error {
	ok, err := p.object("an AnyValue")
	if err != nil || !ok {
		return err
	}
	for first := true; ; first = false {
		key, more, err := p.member(first)
		if err != nil || !more {
			return err
		}
		switch string(key) {
		case "stringValue", "string_value":
			v, null, err := p.strOrNull()
			if err != nil {
				return err
			}
			if !null {
				p.aval = append(p.aval[:0], v...)
				p.akind = kindString
			}
		case "intValue", "int_value":
			v, null, err := p.scalar()
			if err != nil {
				return err
			}
			if !null {
				p.aval = append(p.aval[:0], v...)
				p.akind = kindInt
			}
		case "boolValue", "bool_value":
			c, ok := p.ws()
			switch {
			case !ok:
				return p.endErr()
			case c == 't':
				p.akind, p.abool = kindBool, true
				err = p.lit("true")
			case c == 'f':
				p.akind, p.abool = kindBool, false
				err = p.lit("false")
			case c == 'n':
				err = p.lit("null")
			default:
				return p.unexpected(c, "want true or false")
			}
		default:
			err = p.skip()
		}
		if err != nil {
			return err
		}
	}
}

// scopeSpans reads one ScopeSpans.
func (p *otlpReader) scopeSpans() error {
	return p.fields("a ScopeSpans", func(key []byte) error {
		if string(key) == "spans" {
			return p.spanList()
		}
		return p.skip()
	})
}

func (p *otlpReader) spanList() error {
	ok, err := p.array("spans")
	if err != nil || !ok {
		return err
	}
	for first := true; ; first = false {
		more, err := p.elem(first)
		if err != nil || !more {
			return err
		}
		if err := p.span(); err != nil {
			return err
		}
	}
}

// span reads one Span and passes it on, or holds it until its resource is
// known.
func (p *otlpReader) span() error {
	c, ok := p.ws()
	if !ok {
		return p.endErr()
	}
	if c != '{' {
		return p.unexpected(c, "want '{' to begin a span")
	}
	at := p.here()
	if p.spans >= p.lim.MaxSpans {
		return p.errorAt(at, "more than %d spans (Limits.MaxSpans; report --max-spans raises it)", p.lim.MaxSpans)
	}
	p.spans++
	if err := p.open(); err != nil {
		return err
	}
	var s pendingSpan
	var haveTrace, haveSpan bool
	clear(p.vals)
	for first := true; ; first = false {
		key, more, err := p.member(first)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		switch string(key) {
		case "traceId", "trace_id":
			v, null, err := p.strOrNull()
			if err != nil {
				return err
			}
			if null {
				continue
			}
			if !decodeID(s.TraceID[:], v) || s.TraceID == (TraceID{}) {
				return p.spanError(p.at(p.valOff), "traceId", "want 32 hex digits, got %q", clip(v))
			}
			haveTrace = true
		case "spanId", "span_id":
			v, null, err := p.strOrNull()
			if err != nil {
				return err
			}
			if null {
				continue
			}
			if !decodeID(s.SpanID[:], v) || s.SpanID.IsZero() {
				return p.spanError(p.at(p.valOff), "spanId", "want 16 hex digits, got %q", clip(v))
			}
			haveSpan = true
		case "parentSpanId", "parent_span_id":
			v, null, err := p.strOrNull()
			if err != nil {
				return err
			}
			s.ParentID = SpanID{}
			if !null && len(v) > 0 && !decodeID(s.ParentID[:], v) {
				return p.spanError(p.at(p.valOff), "parentSpanId", "want 16 hex digits or \"\", got %q", clip(v))
			}
		case "name":
			v, _, err := p.strOrNull()
			if err != nil {
				return err
			}
			s.Name = p.strs.get(v)
		case "startTimeUnixNano", "start_time_unix_nano":
			s.Start, err = p.nanos("startTimeUnixNano", &s.Span)
		case "endTimeUnixNano", "end_time_unix_nano":
			s.End, err = p.nanos("endTimeUnixNano", &s.Span)
		case "kind":
			s.Kind, err = p.kind()
		case "attributes":
			err = p.attributes(&s)
		default:
			err = p.skip()
		}
		if err != nil {
			return err
		}
	}
	switch {
	case !haveTrace:
		return p.spanError(at, "traceId", "missing")
	case !haveSpan:
		return p.spanError(at, "spanId", "missing")
	}
	if p.res.seen && p.batch.n == 0 {
		return p.emit(&s)
	}
	if p.rules != nil {
		s.vals = slices.Clone(p.vals)
	}
	p.batch.add(&s) // at most Limits.MaxSpans, as spans are
	return nil
}

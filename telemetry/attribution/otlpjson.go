package attribution

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// Limits bounds what a reader accepts from outside; the zero value means the
// defaults. A negative field is an error.
type Limits struct {
	MaxSpans  int // spans in all (default 20_000_000); over it: error naming the bound
	MaxString int // bytes of one JSON string or number, as written (default 1 MiB)
	MaxDepth  int // JSON nesting depth (default 64)
}

const (
	defaultMaxSpans  = 20_000_000
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
	if l.MaxSpans == 0 {
		l.MaxSpans = defaultMaxSpans
	}
	if l.MaxString == 0 {
		l.MaxString = defaultMaxString
	}
	if l.MaxDepth == 0 {
		l.MaxDepth = defaultMaxDepth
	}
	return l, nil
}

// ReadOTLPJSON streams OTLP JSON trace data from r and calls fn for each span, in file order.
//
// The input is a sequence of OTLP/JSON ExportTraceServiceRequest objects,
// separated by any whitespace: the files of amdahl's trace exporter
// (otelsetup.NewTraceFileExporter) and of the OpenTelemetry Collector's file
// exporter, one per line, or one object of any size on one line. Ids may be
// hex (OTLP/JSON) or base64 (protojson's default); times a string of digits
// or a JSON number; field names lowerCamelCase or snake_case; fields in any
// order; unknown fields are skipped.
//
// Span attributes fill the Span as in FromSDK: amdahl.phase,
// amdahl.direction, amdahl.component, amdahl.outcome… (strings) and
// amdahl.remote (bool). Those string attributes on a resource apply to its
// spans that do not have them. Span.Process numbers the distinct
// resource identities (service.name, service.instance.id, host.name,
// process.pid) 1, 2, 3… in order of their first span; it is 0 for a resource
// with none of them. Strings are shared through in (a private Interner if
// nil).
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
func ReadOTLPJSON(r io.Reader, name string, lim Limits, in *Interner, fn func(Span) error) error {
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
	has uint8
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
}

func (rs *resourceState) reset() {
	rs.seen = false
	rs.hasDef = 0
	rs.has = [len(identityKeys)]bool{}
	rs.proc, rs.procDone = 0, false
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

type position struct{ line, col int64 }

func (p *otlpReader) here() position {
	return position{p.line, p.base + int64(p.pos) - p.lineOff + 1}
}

// at is the position of stream offset off on the current line.
func (p *otlpReader) at(off int64) position {
	return position{p.line, off - p.lineOff + 1}
}

func (p *otlpReader) offset() int64 { return p.base + int64(p.pos) }

func (p *otlpReader) errorAt(at position, format string, args ...any) error {
	return fmt.Errorf("%s:%d:%d: %s", p.name, at.line, at.col, fmt.Sprintf(format, args...))
}

func (p *otlpReader) spanError(at position, field, format string, args ...any) error {
	return fmt.Errorf("%s:%d:%d: span %d: %s: %s", p.name, at.line, at.col, p.spans, field, fmt.Sprintf(format, args...))
}

// endErr is the error for input that ends where more is needed.
func (p *otlpReader) endErr() error {
	at := p.here()
	if p.rerr == nil || p.rerr == io.EOF {
		return fmt.Errorf("%s:%d:%d: %w (truncated input)", p.name, at.line, at.col, io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("%s:%d:%d: read: %w", p.name, at.line, at.col, p.rerr)
}

// unexpected is the error for byte c at p.pos where want was expected.
func (p *otlpReader) unexpected(c byte, want string) error {
	if c > ' ' && c < utf8.RuneSelf {
		return p.errorAt(p.here(), "%s, got %q", want, c)
	}
	return p.errorAt(p.here(), "%s, got byte %#02x", want, c)
}

// tooLong is the error for the string whose opening quote is at stream
// offset quote.
func (p *otlpReader) tooLong(quote int64) error {
	return p.errorAt(p.at(quote), "string longer than %d bytes (Limits.MaxString)", p.lim.MaxString)
}

var errBadCount = errors.New("reader returned an invalid count")

// fill reads more input into the empty buffer; false at the end of input or
// on an error of r (in p.rerr).
func (p *otlpReader) fill() bool {
	if p.rerr != nil {
		return false
	}
	p.base += int64(p.end)
	p.pos, p.end = 0, 0
	for range maxEmptyReads {
		n, err := p.r.Read(p.buf)
		if n < 0 || n > len(p.buf) {
			p.rerr = errBadCount
			return false
		}
		p.end = n
		if err != nil {
			p.rerr = err
		}
		if n > 0 {
			return true
		}
		if err != nil {
			return false
		}
	}
	p.rerr = io.ErrNoProgress
	return false
}

// next consumes one byte.
func (p *otlpReader) next() (byte, error) {
	if p.pos >= p.end && !p.fill() {
		return 0, p.endErr()
	}
	c := p.buf[p.pos]
	p.pos++
	return c, nil
}

// ws skips whitespace and returns the next byte, not consumed; false at the
// end of input.
func (p *otlpReader) ws() (byte, bool) {
	if p.pos < p.end && p.buf[p.pos] > ' ' { // most often, in compact JSON
		return p.buf[p.pos], true
	}
	return p.wsSlow()
}

func (p *otlpReader) wsSlow() (byte, bool) {
	for {
		b := p.buf[:p.end]
		for i := p.pos; i < len(b); i++ {
			c := b[i]
			if c > ' ' {
				p.pos = i
				return c, true
			}
			switch c {
			case ' ', '\t', '\r':
			case '\n':
				p.line++
				p.lineOff = p.base + int64(i) + 1
			default:
				p.pos = i
				return c, true
			}
		}
		p.pos = len(b)
		if !p.fill() {
			return 0, false
		}
	}
}

// open consumes the '{' or '[' at p.pos, within Limits.MaxDepth.
func (p *otlpReader) open() error {
	p.depth++
	if p.depth > p.lim.MaxDepth {
		return p.errorAt(p.here(), "nesting deeper than %d (Limits.MaxDepth)", p.lim.MaxDepth)
	}
	p.pos++
	return nil
}

// object opens an object; false (and nil) if the value is null, which
// protobuf JSON reads as absent.
func (p *otlpReader) object(what string) (bool, error) { return p.openOrNull('{', what) }

// array opens an array; false (and nil) if the value is null.
func (p *otlpReader) array(what string) (bool, error) { return p.openOrNull('[', what) }

// openOrNull opens a value that starts with bracket, or reads null.
func (p *otlpReader) openOrNull(bracket byte, what string) (bool, error) {
	c, ok := p.ws()
	switch {
	case !ok:
		return false, p.endErr()
	case c == bracket:
		return true, p.open()
	case c == 'n':
		return false, p.lit("null")
	}
	return false, p.unexpected(c, "want '"+string(bracket)+"' to begin "+what)
}

// member reads the next key of an open object and the ':' after it; false
// (and nil) at the closing '}', which it consumes. The key is valid until
// the next read.
func (p *otlpReader) member(first bool) ([]byte, bool, error) {
	c, ok := p.ws()
	if !ok {
		return nil, false, p.endErr()
	}
	if c == '}' {
		p.pos++
		p.depth--
		return nil, false, nil
	}
	if !first {
		if c != ',' {
			return nil, false, p.unexpected(c, "want ',' or '}' after object member")
		}
		p.pos++
		if c, ok = p.ws(); !ok {
			return nil, false, p.endErr()
		}
	}
	if c != '"' {
		return nil, false, p.unexpected(c, "want '\"' to begin object key")
	}
	key, err := p.str(true)
	if err != nil {
		return nil, false, err
	}
	if p.pos < p.end && p.buf[p.pos] == ':' {
		p.pos++
		return key, true, nil
	}
	p.kbuf = append(p.kbuf[:0], key...) // ws may refill the buffer key is in
	if c, ok = p.ws(); !ok {
		return nil, false, p.endErr()
	}
	if c != ':' {
		return nil, false, p.unexpected(c, "want ':' after object key")
	}
	p.pos++
	return p.kbuf, true, nil
}

// elem moves to the next element of an open array; false (and nil) at the
// closing ']', which it consumes.
func (p *otlpReader) elem(first bool) (bool, error) {
	c, ok := p.ws()
	if !ok {
		return false, p.endErr()
	}
	if c == ']' {
		p.pos++
		p.depth--
		return false, nil
	}
	if !first {
		if c != ',' {
			return false, p.unexpected(c, "want ',' or ']' after array element")
		}
		p.pos++
	}
	return true, nil
}

// members reads the members of an open object to its closing '}'. fn is
// called with each key, valid only until fn's first read, and reads the
// member's value (p.skip for keys it does not know); its error stops the
// loop and is returned.
//
// members, fields and elems serve the loops that run once per request,
// ResourceSpans or ScopeSpans. The loops that run for every span (spanList,
// span, attributes, keyValue, anyValue) are written out: a call of fn for
// each of their members and elements made BenchmarkReadOTLPJSON1M ~6 %
// slower.
func (p *otlpReader) members(fn func(key []byte) error) error {
	for first := true; ; first = false {
		key, more, err := p.member(first)
		if err != nil || !more {
			return err
		}
		if err := fn(key); err != nil {
			return err
		}
	}
}

// fields reads the object what, or null, as members does.
func (p *otlpReader) fields(what string, fn func(key []byte) error) error {
	ok, err := p.object(what)
	if err != nil || !ok {
		return err
	}
	return p.members(fn)
}

// elems reads the array what, or null, to its closing ']'; fn reads each
// element, and its error stops the loop and is returned.
func (p *otlpReader) elems(what string, fn func() error) error {
	ok, err := p.array(what)
	if err != nil || !ok {
		return err
	}
	for first := true; ; first = false {
		more, err := p.elem(first)
		if err != nil || !more {
			return err
		}
		if err := fn(); err != nil {
			return err
		}
	}
}

// lit consumes the literal word (true, false, null).
func (p *otlpReader) lit(word string) error {
	at := p.here()
	for i := 0; i < len(word); i++ {
		c, err := p.next()
		if err != nil {
			return err
		}
		if c != word[i] {
			return p.errorAt(at, "invalid literal, want %s", word)
		}
	}
	return nil
}

// str reads the string whose opening quote is at p.pos; keep false only
// checks it. The result aliases p.buf or p.sbuf: it is valid until the next
// read.
func (p *otlpReader) str(keep bool) ([]byte, error) {
	p.pos++
	b := p.buf[:p.end]
	if i := p.pos + scanString(b[p.pos:]); i < len(b) && b[i] == '"' {
		if i-p.pos > p.lim.MaxString {
			return nil, p.tooLong(p.offset() - 1)
		}
		s := b[p.pos:i]
		p.pos = i + 1
		return s, nil
	}
	return p.strSlow(keep)
}

// strSlow is str for strings that cross the end of the buffer or have
// escapes; it decodes them into p.sbuf.
func (p *otlpReader) strSlow(keep bool) ([]byte, error) {
	start := p.offset()
	p.sbuf = p.sbuf[:0]
	for {
		if p.pos >= p.end && !p.fill() {
			return nil, p.endErr()
		}
		b := p.buf[:p.end]
		i := p.pos + scanString(b[p.pos:])
		if p.base+int64(i)-start > int64(p.lim.MaxString) {
			return nil, p.tooLong(start - 1)
		}
		if keep {
			p.sbuf = append(p.sbuf, b[p.pos:i]...)
		}
		p.pos = i
		if i == len(b) {
			continue
		}
		switch c := b[i]; {
		case c == '"':
			p.pos++
			return p.sbuf, nil
		case c < ' ':
			return nil, p.errorAt(p.here(), "control character %#02x in string", c)
		}
		p.pos++ // the backslash
		e, err := p.next()
		if err != nil {
			return nil, err
		}
		if e != 'u' {
			if err := p.escape(e, keep); err != nil {
				return nil, err
			}
			continue
		}
		r, err := p.hex4()
		if err != nil {
			return nil, err
		}
		// A high surrogate takes the \u low surrogate after it; any other
		// surrogate becomes U+FFFD, as in encoding/json.
		for {
			if r < 0xd800 || r >= 0xe000 {
				p.appendRune(r, keep)
				break
			}
			if r >= 0xdc00 {
				p.appendRune(utf8.RuneError, keep)
				break
			}
			if p.pos >= p.end && !p.fill() {
				return nil, p.endErr()
			}
			if p.buf[p.pos] != '\\' {
				p.appendRune(utf8.RuneError, keep)
				break
			}
			p.pos++
			if e, err = p.next(); err != nil {
				return nil, err
			}
			if e != 'u' {
				p.appendRune(utf8.RuneError, keep)
				if err := p.escape(e, keep); err != nil {
					return nil, err
				}
				break
			}
			r2, err := p.hex4()
			if err != nil {
				return nil, err
			}
			if r2 >= 0xdc00 && r2 < 0xe000 {
				p.appendRune(utf16.DecodeRune(r, r2), keep)
				break
			}
			p.appendRune(utf8.RuneError, keep)
			r = r2
		}
	}
}

// escape decodes the one-letter escape \e.
func (p *otlpReader) escape(e byte, keep bool) error {
	switch e {
	case '"', '\\', '/':
	case 'b':
		e = '\b'
	case 'f':
		e = '\f'
	case 'n':
		e = '\n'
	case 'r':
		e = '\r'
	case 't':
		e = '\t'
	default:
		return p.errorAt(position{p.line, p.offset() - p.lineOff}, "invalid escape in string")
	}
	if keep {
		p.sbuf = append(p.sbuf, e)
	}
	return nil
}

func (p *otlpReader) appendRune(r rune, keep bool) {
	if keep {
		p.sbuf = utf8.AppendRune(p.sbuf, r)
	}
}

// hex4 reads the four hex digits of a \u escape.
func (p *otlpReader) hex4() (rune, error) {
	var r rune
	for range 4 {
		c, err := p.next()
		if err != nil {
			return 0, err
		}
		v := unhex(c)
		if v < 0 {
			return 0, p.errorAt(position{p.line, p.offset() - p.lineOff}, "invalid \\u escape in string")
		}
		r = r<<4 | rune(v)
	}
	return r, nil
}

// scanString returns the index of the first '"', '\\' or control byte in
// b, or len(b); eight bytes at a time, as most bytes of OTLP JSON are in
// strings.
func scanString(b []byte) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ (lo * '"')
		e := x ^ (lo * '\\')
		// A byte is flagged if it is zero in q or e, or less than 0x20 in
		// x; borrows flag only bytes above a flagged one, so the lowest
		// flag is exact.
		if m := ((q-lo)&^q | (e-lo)&^e | (x-lo*0x20)&^x) & hi; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < ' ' {
			return i
		}
	}
	return len(b)
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}

func isNumByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// num reads the number that begins at p.pos and returns its text, which
// aliases p.buf or p.sbuf until the next read.
func (p *otlpReader) num() ([]byte, error) {
	start := p.offset()
	at := p.here()
	b := p.buf[:p.end]
	i := p.pos
	for i < len(b) && isNumByte(b[i]) {
		i++
	}
	var tok []byte
	if i < len(b) {
		tok = b[p.pos:i]
		p.pos = i
	} else {
		p.sbuf = p.sbuf[:0]
		for {
			if p.offset()-start > int64(p.lim.MaxString) {
				return nil, p.errorAt(at, "number longer than %d bytes (Limits.MaxString)", p.lim.MaxString)
			}
			if p.pos >= p.end && !p.fill() {
				if p.rerr != io.EOF {
					return nil, p.endErr()
				}
				break // a number may end the input; the caller sees the end
			}
			c := p.buf[p.pos]
			if !isNumByte(c) {
				break
			}
			p.sbuf = append(p.sbuf, c)
			p.pos++
		}
		tok = p.sbuf
	}
	if len(tok) > p.lim.MaxString {
		return nil, p.errorAt(at, "number longer than %d bytes (Limits.MaxString)", p.lim.MaxString)
	}
	if !validNumber(tok) {
		return nil, p.errorAt(at, "invalid number %q", clip(tok))
	}
	return tok, nil
}

// validNumber reports whether s is a JSON number.
func validNumber(s []byte) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// clip shortens s for an error message.
func clip(s []byte) string {
	const max = 40
	if len(s) > max {
		return string(s[:max]) + "…"
	}
	return string(s)
}

// skip reads and drops one JSON value of any kind.
func (p *otlpReader) skip() error {
	p.kinds = p.kinds[:0]
	for {
		c, ok := p.ws()
		if !ok {
			return p.endErr()
		}
		var err error
		switch {
		case c == '{' || c == '[':
			if err := p.open(); err != nil {
				return err
			}
			obj := c == '{'
			p.kinds = append(p.kinds, obj)
			c, ok := p.ws()
			if !ok {
				return p.endErr()
			}
			if obj && c == '}' || !obj && c == ']' {
				p.pos++
				p.depth--
				p.kinds = p.kinds[:len(p.kinds)-1]
				break
			}
			if obj {
				if err := p.skipKey(); err != nil {
					return err
				}
			}
			continue // to the first value inside
		case c == '"':
			_, err = p.str(false)
		case c == 't':
			err = p.lit("true")
		case c == 'f':
			err = p.lit("false")
		case c == 'n':
			err = p.lit("null")
		case c == '-' || '0' <= c && c <= '9':
			_, err = p.num()
		default:
			return p.unexpected(c, "want a JSON value")
		}
		if err != nil {
			return err
		}
		// After a value: close what ends here, then on to the next value.
		for {
			if len(p.kinds) == 0 {
				return nil
			}
			obj := p.kinds[len(p.kinds)-1]
			c, ok := p.ws()
			if !ok {
				return p.endErr()
			}
			if c == ',' {
				p.pos++
				if obj {
					if err := p.skipKey(); err != nil {
						return err
					}
				}
				break
			}
			if obj && c == '}' || !obj && c == ']' {
				p.pos++
				p.depth--
				p.kinds = p.kinds[:len(p.kinds)-1]
				continue
			}
			if obj {
				return p.unexpected(c, "want ',' or '}' after object member")
			}
			return p.unexpected(c, "want ',' or ']' after array element")
		}
	}
}

// skipKey reads an object key and the ':' after it.
func (p *otlpReader) skipKey() error {
	c, ok := p.ws()
	if !ok {
		return p.endErr()
	}
	if c != '"' {
		return p.unexpected(c, "want '\"' to begin object key")
	}
	if _, err := p.str(false); err != nil {
		return err
	}
	if c, ok = p.ws(); !ok {
		return p.endErr()
	}
	if c != ':' {
		return p.unexpected(c, "want ':' after object key")
	}
	p.pos++
	return nil
}

// strOrNull reads a string, or null (true). The string is valid until the
// next read; p.valOff is where it began.
func (p *otlpReader) strOrNull() ([]byte, bool, error) {
	c, ok := p.ws()
	p.valOff = p.offset()
	switch {
	case !ok:
		return nil, false, p.endErr()
	case c == '"':
		s, err := p.str(true)
		return s, false, err
	case c == 'n':
		return nil, true, p.lit("null")
	}
	return nil, false, p.unexpected(c, "want a string")
}

// scalar reads a string or a number and returns its text, or null (true).
// The text is valid until the next read; p.valOff is where it began.
func (p *otlpReader) scalar() ([]byte, bool, error) {
	c, ok := p.ws()
	p.valOff = p.offset()
	switch {
	case !ok:
		return nil, false, p.endErr()
	case c == '"':
		s, err := p.str(true)
		return s, false, err
	case c == '-' || '0' <= c && c <= '9':
		s, err := p.num()
		return s, false, err
	case c == 'n':
		return nil, true, p.lit("null")
	}
	return nil, false, p.unexpected(c, "want a string or a number")
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

// amdahlKey returns the index of k in amdahlKeys, or -1.
func amdahlKey(k []byte) int {
	switch string(k) { // constant cases, in amdahlKeys' order
	case string(telemetry.AttrPhase):
		return 0
	case string(telemetry.AttrDirection):
		return 1
	case string(telemetry.AttrComponent):
		return 2
	case string(telemetry.AttrScenario):
		return 3
	case string(telemetry.AttrVariant):
		return 4
	case string(telemetry.AttrOutcome):
		return 5
	}
	return -1
}

// spanAttr applies the KeyValue just read to s.
func (p *otlpReader) spanAttr(s *pendingSpan) {
	if string(p.akey) == string(telemetry.AttrRemote) {
		if p.akind == kindBool {
			s.Remote = p.abool
		}
		return
	}
	if p.akind != kindString {
		return
	}
	if i := amdahlKey(p.akey); i >= 0 {
		s.setAttr(amdahlKeys[i], p.strs.get(p.aval), nil)
		s.has |= 1 << i
	}
}

// resourceAttr applies the KeyValue just read to the resource.
func (p *otlpReader) resourceAttr() {
	for i, k := range identityKeys {
		if string(p.akey) == k {
			if p.akind == kindString || p.akind == kindInt {
				p.res.id[i] = append(p.res.id[i][:0], p.aval...)
				p.res.has[i] = true
			}
			return
		}
	}
	if p.akind != kindString {
		return
	}
	if i := amdahlKey(p.akey); i >= 0 {
		p.res.defaults[i] = p.strs.get(p.aval)
		p.res.hasDef |= 1 << i
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
			s.Start, err = p.nanos("startTimeUnixNano")
		case "endTimeUnixNano", "end_time_unix_nano":
			s.End, err = p.nanos("endTimeUnixNano")
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
	p.batch.add(&s) // at most Limits.MaxSpans, as spans are
	return nil
}

// nanos reads a time in Unix nanoseconds: a string of digits or a number.
func (p *otlpReader) nanos(field string) (int64, error) {
	v, null, err := p.scalar()
	if err != nil || null {
		return 0, err
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' || n > (math.MaxInt64-int64(c-'0'))/10 {
			return 0, p.spanError(p.at(p.valOff), field, "want an integer of Unix nanoseconds, got %q", clip(v))
		}
		n = n*10 + int64(c-'0')
	}
	if len(v) == 0 {
		return 0, p.spanError(p.at(p.valOff), field, "want an integer of Unix nanoseconds, got %q", "")
	}
	return n, nil
}

var (
	strictStd    = base64.StdEncoding.Strict()
	strictURL    = base64.URLEncoding.Strict()
	strictRawStd = base64.RawStdEncoding.Strict()
	strictRawURL = base64.RawURLEncoding.Strict()
)

// decodeID decodes hex (OTLP/JSON) or base64 (protojson's bytes, padded or
// not, standard or URL alphabet) into dst, and reports whether src was
// exactly len(dst) bytes in one of them.
func decodeID(dst, src []byte) bool {
	if len(src) == 2*len(dst) {
		for i := range dst {
			hi, lo := unhex(src[2*i]), unhex(src[2*i+1])
			if hi < 0 || lo < 0 {
				return false
			}
			dst[i] = byte(hi<<4 | lo)
		}
		return true
	}
	var enc *base64.Encoding
	url := false // protojson reads either alphabet
	for _, c := range src {
		if c == '-' || c == '_' {
			url = true
		}
	}
	switch {
	case len(src) == base64.StdEncoding.EncodedLen(len(dst)) && url:
		enc = strictURL
	case len(src) == base64.StdEncoding.EncodedLen(len(dst)):
		enc = strictStd
	case len(src) == base64.RawStdEncoding.EncodedLen(len(dst)) && url:
		enc = strictRawURL
	case len(src) == base64.RawStdEncoding.EncodedLen(len(dst)):
		enc = strictRawStd
	default:
		return false
	}
	var tmp [24]byte
	n, err := enc.Decode(tmp[:], src)
	if err != nil || n != len(dst) {
		return false
	}
	copy(dst, tmp[:n])
	return true
}

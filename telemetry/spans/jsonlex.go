package spans

// The JSON scanner under the OTLP reader: positions for errors, buffer
// refills, the structure (objects, arrays, members, literals), and
// skipping what the reader does not need, all within the reader's Limits;
// strings and numbers are in jsonstring.go.

import (
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

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

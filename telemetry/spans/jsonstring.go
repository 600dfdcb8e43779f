package spans

// The JSON scanner's strings (escapes, UTF-16 surrogates, invalid UTF-8)
// and numbers, within the reader's Limits.

import (
	"encoding/binary"
	"io"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

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

package spans

import (
	"encoding/base64"
	"math"
	"strconv"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// The values of a span or resource the reader keeps: attributes, times,
// kinds and ids.

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

// amdahlRowBits are the amdahlKeys that make a span one of amdahl's rows.
const amdahlRowBits = 1<<0 | 1<<1 | 1<<2

// keep stores the KeyValue just read in vals if the rules read its key.
func (p *otlpReader) keep(vals []string) {
	i, ok := p.keyAt[string(p.akey)]
	if !ok {
		return
	}
	switch p.akind {
	case kindString, kindInt:
		vals[i] = p.strs.get(p.aval)
	case kindBool:
		vals[i] = strconv.FormatBool(p.abool)
	}
}

// spanAttr applies the KeyValue just read to s.
func (p *otlpReader) spanAttr(s *pendingSpan) {
	if p.rules != nil {
		p.keep(p.vals)
	}
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
	if p.rules != nil {
		p.keep(p.res.vals)
	}
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

// nanos reads a time in Unix nanoseconds: a string of digits or a number.
// A time past what int64 nanoseconds hold (year 2262) is not an error:
// the span is marked, to be left out and counted (Diagnostics.Beyond).
func (p *otlpReader) nanos(field string, s *Span) (int64, error) {
	v, null, err := p.scalar()
	if err != nil || null {
		return 0, err
	}
	var n int64
	for i, c := range v {
		if c < '0' || c > '9' {
			return 0, p.spanError(p.at(p.valOff), field, "want an integer of Unix nanoseconds, got %q", clip(v))
		}
		if n > (math.MaxInt64-int64(c-'0'))/10 {
			for _, c := range v[i:] {
				if c < '0' || c > '9' {
					return 0, p.spanError(p.at(p.valOff), field, "want an integer of Unix nanoseconds, got %q", clip(v))
				}
			}
			s.flags |= flagBeyond
			return 0, nil
		}
		n = n*10 + int64(c-'0')
	}
	if len(v) == 0 {
		return 0, p.spanError(p.at(p.valOff), field, "want an integer of Unix nanoseconds, got %q", "")
	}
	return n, nil
}

// kind reads a span kind: OTLP's number, or its name (protojson may
// write "SPAN_KIND_SERVER"). An unknown kind is KindUnspecified.
func (p *otlpReader) kind() (SpanKind, error) {
	v, null, err := p.scalar()
	if err != nil || null {
		return 0, err
	}
	if len(v) == 1 && '0' <= v[0] && int(v[0]-'0') < len(kindNames) {
		return SpanKind(v[0] - '0'), nil
	}
	if k, err := ParseSpanKind(string(v)); err == nil {
		return k, nil
	}
	return KindUnspecified, nil
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

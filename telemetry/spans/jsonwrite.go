// The OTLP JSON encoding of the trace file: a span, its attributes and
// values, appended to a byte slice as the OTLP/JSON mapping of protobuf
// writes them (the Collector's file exporter's format).

package spans

import (
	"encoding/base64"
	"encoding/hex"
	"math"
	"strconv"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

func spanFlags(tf trace.TraceFlags, remote bool) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if remote {
		f |= flagIsRemote
	}
	return f
}

func appendSpan(b []byte, s *Record) []byte {
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
			b = appendCount(b, "droppedAttributesCount", ev.DroppedAttributes)
			if ev.Name != "" {
				b = appendKey(b, "name")
				b = appendString(b, ev.Name)
			}
			b = appendTime(b, "timeUnixNano", ev.Time)
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
			b = appendCount(b, "droppedAttributesCount", l.DroppedAttributes)
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

func appendScope(b []byte, s Scope) []byte {
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

package ipc

import (
	"slices"

	"go.opentelemetry.io/otel/trace"
)

// TraceParentSize is the size of a binary traceparent (AppendTraceParent).
const TraceParentSize = 1 + 16 + 8 + 1

// AppendTraceParent appends sc's W3C traceparent in binary, what the
// traceparent header carries without its hex: the version (0), the 16-byte
// trace id, the 8-byte parent span id and the trace flags (sampled and
// random only), TraceParentSize bytes. It appends nothing for an invalid
// sc. A packet carries its span this way (ipcpb's trace_parent fields): a
// fixed-size byte field costs a fraction of the string map the text
// headers would need, on both sides of every packet.
func AppendTraceParent(dst []byte, sc trace.SpanContext) []byte {
	if !sc.IsValid() {
		return dst
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	// Room for all of it first: appended piece by piece to an empty
	// field (a new packet's), the slice grew three times.
	dst = slices.Grow(dst, TraceParentSize)
	dst = append(dst, 0)
	dst = append(dst, tid[:]...)
	dst = append(dst, sid[:]...)
	return append(dst, byte(sc.TraceFlags()&(trace.FlagsSampled|trace.FlagsRandom)))
}

// ParseTraceParent returns the remote span context b carries
// (AppendTraceParent), with state as its tracestate (ignored if it does
// not parse, as the W3C specification asks); the zero SpanContext if b is
// not a version-0 binary traceparent of valid ids.
func ParseTraceParent(b []byte, state string) trace.SpanContext {
	if len(b) != TraceParentSize || b[0] != 0 || b[TraceParentSize-1]&^byte(trace.FlagsSampled|trace.FlagsRandom) != 0 {
		return trace.SpanContext{}
	}
	cfg := trace.SpanContextConfig{TraceFlags: trace.TraceFlags(b[TraceParentSize-1]), Remote: true}
	copy(cfg.TraceID[:], b[1:17])
	copy(cfg.SpanID[:], b[17:25])
	if state != "" {
		cfg.TraceState, _ = trace.ParseTraceState(state)
	}
	sc := trace.NewSpanContext(cfg)
	if !sc.IsValid() {
		return trace.SpanContext{}
	}
	return sc
}

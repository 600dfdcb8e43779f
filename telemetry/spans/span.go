package spans

import (
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"go.opentelemetry.io/otel/attribute"
)

// TraceID and SpanID are the W3C ids of a span; the zero SpanID is "no
// parent".
type (
	TraceID [16]byte
	SpanID  [8]byte
)

// String returns the id in lowercase hex.
func (t TraceID) String() string { return hex.EncodeToString(t[:]) }

// String returns the id in lowercase hex.
func (s SpanID) String() string { return hex.EncodeToString(s[:]) }

// Uint64 is s as a number, in the order of its bytes (big-endian).
func (s SpanID) Uint64() uint64 { return binary.BigEndian.Uint64(s[:]) }

// Compare orders trace ids as their bytes: -1, 0 or +1.
func (t TraceID) Compare(o TraceID) int {
	if c := cmp.Compare(binary.BigEndian.Uint64(t[:8]), binary.BigEndian.Uint64(o[:8])); c != 0 {
		return c
	}
	return cmp.Compare(binary.BigEndian.Uint64(t[8:]), binary.BigEndian.Uint64(o[8:]))
}

// IsZero reports whether s is the zero id (no parent).
func (s SpanID) IsZero() bool { return s == SpanID{} }

// Span is amdahl's one span model: what the live accounting, the trace
// file reader, the Collector connector and the attribution know of a
// span, whatever it was recorded or read from (the runtime's tracer, an
// SDK span, an OTLP JSON file, the Collector's pdata). It is compact
// (integer times, fixed-size ids, strings shared through an Interner) so
// that a million of them fit in little memory; what only an exporter
// needs (every attribute, events, links, status) is not in it.
type Span struct {
	TraceID  TraceID
	SpanID   SpanID
	ParentID SpanID // zero for a root
	// Start and End are Unix nanoseconds.
	Start, End int64
	Name       string
	// Component is amdahl.component (ipc, chunking, taskhost, runtime,
	// sidecar); "" when absent.
	Component string
	// Op is the row's operation when a rule set other than amdahl's gave
	// the row ("GET /items", "orders.Store/Put"); "" for amdahl's rows.
	Op string
	// Process identifies the process (the OTLP resource) that reported the
	// span: equal values are one process, 0 is unknown. A span whose
	// Process differs from its parent's is a far-side span, like Remote.
	Process uint32
	// Phase is 0 for spans that are not phases (amdahl.work, gRPC spans).
	Phase     telemetry.Phase
	Direction telemetry.Direction
	// Remote is amdahl.remote=true: the span was measured in another
	// process and placed in this trace by the parent (see Process).
	Remote bool
	// Failed is amdahl.outcome other than "ok" (on roots: a unit that
	// failed or was cancelled).
	Failed bool
	// Kind is the span's OTLP kind (KindUnspecified when not known).
	Kind SpanKind
	// Selected marks a span chosen as a unit of work by a unit selector
	// (Rules); the attribution's unit mode says whether it is read.
	Selected bool
	// flags: flagSemconv, flagBeyond.
	flags uint8
	// The fields are in this order so that the one-byte ones share one
	// word after Process: a reader holds a span per span of its input
	// (TestSpanSize).
}

// SpanKind is OTLP's span kind (SPAN_KIND_INTERNAL…), by its number.
type SpanKind uint8

// The span kinds, numbered as in OTLP.
const (
	KindUnspecified SpanKind = iota
	KindInternal
	KindServer
	KindClient
	KindProducer
	KindConsumer
)

var kindNames = [...]string{"unspecified", "internal", "server", "client", "producer", "consumer"}

// String returns the kind's lowercase name ("client").
func (k SpanKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseSpanKind returns the kind named s: "client", "CLIENT" or
// "SPAN_KIND_CLIENT".
func ParseSpanKind(s string) (SpanKind, error) {
	t := strings.ToLower(strings.TrimPrefix(strings.ToUpper(s), "SPAN_KIND_"))
	for i, n := range kindNames {
		if n == t {
			return SpanKind(i), nil
		}
	}
	return 0, fmt.Errorf("unknown span kind %q (valid: internal, server, client, producer, consumer)", s)
}

const (
	// flagSemconv: the row was set by the semconv rules (MarkSemconvRow).
	flagSemconv uint8 = 1 << iota
	// flagBeyond: a time was past what int64 nanoseconds hold (year
	// 2262).
	flagBeyond
)

// Beyond reports whether one of the span's times, as read, was past what
// int64 nanoseconds hold (year 2262): Start or End is then not the time.
func (s *Span) Beyond() bool { return s.flags&flagBeyond != 0 }

// MarkSemconvRow records that s's row was set by the semantic
// conventions' rules because the span had no amdahl attribute: in a trace
// of amdahl's (one with amdahl's attributes) such a span is no row
// (ClearSemconvRow).
func (s *Span) MarkSemconvRow() { s.flags |= flagSemconv }

// ClearSemconvRow makes a span whose row the semantic conventions' rules
// set (MarkSemconvRow) no row.
func (s *Span) ClearSemconvRow() {
	if s.flags&flagSemconv != 0 {
		s.Component, s.Phase, s.Direction, s.Op = "", 0, telemetry.None, ""
		s.flags &^= flagSemconv
	}
}

// Duration returns End - Start, never negative.
func (s Span) Duration() time.Duration {
	if s.End < s.Start {
		return 0
	}
	return time.Duration(s.End - s.Start)
}

// Interner shares the bytes of repeated strings (span names, components,
// attribute values) among spans. The zero value is ready to use; it is safe
// for concurrent use.
type Interner struct {
	mu sync.Mutex
	m  map[string]string
}

// maxInterned bounds the table; past it strings are copied, not shared,
// so hostile input with unique names cannot grow it without bound.
const maxInterned = 1 << 16

// Intern returns a string equal to b, shared with earlier calls.
func (in *Interner) Intern(b []byte) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if s, ok := in.m[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	if in.m == nil {
		in.m = make(map[string]string)
	}
	if len(in.m) < maxInterned {
		in.m[s] = s
	}
	return s
}

// InternString is Intern for a string.
func (in *Interner) InternString(s string) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.m[s]; ok {
		return v
	}
	if in.m == nil {
		in.m = make(map[string]string)
	}
	if len(in.m) < maxInterned {
		in.m[s] = s
	}
	return s
}

// SetAttribute applies one span attribute, if it is one attribution reads
// (amdahl.component, amdahl.phase, amdahl.direction, amdahl.outcome,
// amdahl.remote); any other is ignored. It does not allocate: a tracer
// that builds Spans itself (the runtime's, when nothing exports its
// spans) calls it for each attribute a span is given.
func (s *Span) SetAttribute(kv attribute.KeyValue) {
	switch kv.Key { // the keys of ReadsAttribute (TestReadsAttribute)
	case telemetry.AttrRemote:
		s.Remote = kv.Value.AsBool()
	case telemetry.AttrPhase, telemetry.AttrDirection, telemetry.AttrComponent, telemetry.AttrOutcome:
		// Only string values: Emit would format (and allocate for) any
		// other, and these keys are strings.
		if kv.Value.Type() == attribute.STRING {
			s.setAttr(string(kv.Key), kv.Value.AsString(), nil)
		}
	}
}

// SetString applies one string span attribute, as SetAttribute applies
// attribute.String(k, v), without building the attribute: a reader that
// has keys and values as strings (the Collector connector's pdata) calls
// it for each string attribute a span carries.
func (s *Span) SetString(k, v string) {
	switch attribute.Key(k) { // the string keys of SetAttribute
	case telemetry.AttrPhase, telemetry.AttrDirection, telemetry.AttrComponent, telemetry.AttrOutcome:
		s.setAttr(k, v, nil)
	}
}

// ReadsAttribute reports whether attribution reads attributes of key
// (SetAttribute applies them): a span given one is not the span it was.
func ReadsAttribute(key attribute.Key) bool {
	switch key {
	case telemetry.AttrRemote, telemetry.AttrPhase, telemetry.AttrDirection, telemetry.AttrComponent, telemetry.AttrOutcome:
		return true
	}
	return false
}

// setAttr applies one string attribute; in, if not nil, interns the value.
func (s *Span) setAttr(k, v string, in *Interner) {
	intern := func(v string) string {
		if in == nil {
			return v
		}
		return in.InternString(v)
	}
	switch k {
	case string(telemetry.AttrPhase):
		if p, err := telemetry.ParsePhase(v); err == nil {
			s.Phase = p
		}
	case string(telemetry.AttrDirection):
		if d, err := telemetry.ParseDirection(v); err == nil {
			s.Direction = d
		}
	case string(telemetry.AttrComponent):
		s.Component = intern(v)
	case string(telemetry.AttrOutcome):
		s.Failed = v != telemetry.OK.String()
	}
}

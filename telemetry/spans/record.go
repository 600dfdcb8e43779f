package spans

import (
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Record is an ended span whole, as an exporter writes it: what OTLP
// carries of a span, as values, with no SDK type. The tracer that
// records a run's spans makes one for each span when something exports
// them (Exporter); the SDK's read-only spans convert to it
// (otelsetup.RecordOf). Start and End are Unix nanoseconds.
//
// Leading, if not nil, are the span's first attributes, shared with other
// spans and encoded once (a phase's amdahl.component, amdahl.phase and
// amdahl.direction); Attributes follow them and must not repeat one of
// their keys. The span's attributes are then AllAttributes.
type Record struct {
	Name                string
	SpanContext, Parent trace.SpanContext
	Kind                trace.SpanKind
	Start, End          int64
	Leading             *SharedAttributes
	Attributes          []attribute.KeyValue
	Events              []Event
	Links               []Link
	Status              Status
	DroppedAttributes   int
	DroppedEvents       int
	DroppedLinks        int
	Resource            *Resource
	Scope               Scope
}

// Event is a span event: Time in Unix nanoseconds.
type Event struct {
	Name              string
	Time              int64
	Attributes        []attribute.KeyValue
	DroppedAttributes int
}

// Link is a span link.
type Link struct {
	SpanContext       trace.SpanContext
	Attributes        []attribute.KeyValue
	DroppedAttributes int
}

// Status is a span's status.
type Status struct {
	Code        codes.Code
	Description string
}

// Scope is the instrumentation scope of a span (its tracer's name,
// version, schema URL and attributes). Comparable.
type Scope struct {
	Name, Version, SchemaURL string
	Attributes               attribute.Set
}

// Resource is the entity that produced spans (service.name, host.name…).
// Immutable; spans of one process share one *Resource, and an encoder
// caches its encoding by pointer.
type Resource struct {
	attrs     attribute.Set
	schemaURL string
}

// NewResource returns the resource with attrs (deduplicated as
// attribute.NewSet does) and schemaURL.
func NewResource(schemaURL string, attrs ...attribute.KeyValue) *Resource {
	return &Resource{attrs: attribute.NewSet(attrs...), schemaURL: schemaURL}
}

// Set returns the resource's attributes (empty for nil).
func (r *Resource) Set() *attribute.Set {
	if r == nil {
		return attribute.EmptySet()
	}
	return &r.attrs
}

// SchemaURL returns the resource's schema URL ("" for nil).
func (r *Resource) SchemaURL() string {
	if r == nil {
		return ""
	}
	return r.schemaURL
}

// equivalent returns a key equal for resources with the same attributes.
func (r *Resource) equivalent() attribute.Distinct { return r.Set().Equivalent() }

// Exporter takes ended spans whole (the trace file's FileSink does).
// Export must not keep r's slices (Attributes, Events, Links) past its
// return: callers reuse them. r is a value so that the caller's record
// need not move to the heap for the call. Safe for concurrent use.
type Exporter interface {
	Export(r Record)
}

// AllAttributes returns the span's attributes: Leading's, then
// Attributes; in a new slice when there are Leading ones (they are
// shared with other spans: the caller may keep or change the result).
func (s *Record) AllAttributes() []attribute.KeyValue {
	if s.Leading == nil || len(s.Leading.kvs) == 0 {
		return s.Attributes
	}
	all := make([]attribute.KeyValue, 0, len(s.Leading.kvs)+len(s.Attributes))
	return append(append(all, s.Leading.kvs...), s.Attributes...)
}

// SharedAttributes are attributes that many spans begin with, encoded
// once (Record.Leading): a span that leads with them needs no attribute
// list of its own for them, and they are copied into the file rather
// than encoded again for each span. Immutable; safe to share.
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

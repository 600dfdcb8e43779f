package spans

import (
	"reflect"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// The exception event of RecordError, as the SDK records it
// (OpenTelemetry semantic conventions).
const (
	eventException          = "exception"
	attrExceptionType       = "exception.type"
	attrExceptionMessage    = "exception.message"
	attrExceptionStacktrace = "exception.stacktrace"
)

// errorType is exception.type of err, as the SDK writes it.
func errorType(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

// The SDK's default span limits (sdktrace.SpanLimits), which an
// exporting span keeps to.
const (
	maxSpanAttrs  = 128 // attributes of a span
	maxSpanEvents = 128 // events of a span (the oldest are dropped)
	maxSpanLinks  = 128 // links of a span (the oldest are dropped)
	maxItemAttrs  = 128 // attributes of an event or a link
)

// exportRecord is what an exporting span keeps besides its
// Span: what the SDK would hand an exporter.
type exportRecord struct {
	parent trace.SpanContext
	kind   trace.SpanKind
	// lead are a phase span's first attributes (phaseLead), shared and
	// encoded once; attrs follow them and repeat none of their keys (a
	// key of lead set again moves lead into attrs: unshare).
	lead          *SharedAttributes
	attrs         []attribute.KeyValue // in order set; deduplicated at snapshot
	events        []Event
	links         []Link
	status        Status
	droppedAttrs  int
	droppedEvents int
	droppedLinks  int
}

// addAttrs keeps the valid attributes of kv; an invalid one (empty key)
// is counted as dropped, as the SDK does. The list is deduplicated once
// it holds twice the limit, so a span set in a loop stays bounded.
func (r *exportRecord) addAttrs(kv []attribute.KeyValue) {
	for _, a := range kv {
		if !a.Valid() {
			r.droppedAttrs++
			continue
		}
		if r.lead.Has(a.Key) {
			r.unshare()
		}
		r.attrs = append(r.attrs, a)
		if len(r.attrs) >= 2*maxSpanAttrs {
			r.attrs = r.dedupeAttrs()
		}
	}
}

// unshare moves lead's attributes to the front of attrs, where a key of
// theirs set again can replace its value.
func (r *exportRecord) unshare() {
	if r.lead == nil {
		return
	}
	r.attrs = append(r.lead.KeyValues(), r.attrs...) // KeyValues is clipped: a copy
	r.lead = nil
}

// canBorrow reports whether attrs can be the record's attributes as they
// are: a few, all valid, none repeating a key of lead's or another's.
func (r *exportRecord) canBorrow(attrs []attribute.KeyValue) bool {
	if len(attrs) > fewAttrs || hasDupKey(attrs) {
		return false
	}
	for _, a := range attrs {
		if !a.Valid() || r.lead.Has(a.Key) {
			return false
		}
	}
	return true
}

// dedupeAttrs returns the attributes with each key once, where it was
// first set, with the value it was last set to, and at most maxSpanAttrs
// of them with lead's (the later keys are counted as dropped): the SDK's
// rules. A list that holds no key twice and is within the limit is
// returned as it is, not written to.
func (r *exportRecord) dedupeAttrs() []attribute.KeyValue {
	if r.lead != nil && r.lead.Len()+len(r.attrs) > maxSpanAttrs {
		r.unshare() // the limit cuts attrs after lead's
	}
	if len(r.attrs) <= fewAttrs && !hasDupKey(r.attrs) {
		return r.attrs
	}
	out := r.attrs[:0]
next:
	for _, a := range r.attrs {
		for i := range out {
			if out[i].Key == a.Key {
				out[i] = a
				continue next
			}
		}
		out = append(out, a)
	}
	clear(r.attrs[len(out):])
	if len(out) > maxSpanAttrs {
		r.droppedAttrs += len(out) - maxSpanAttrs
		clear(out[maxSpanAttrs:])
		out = out[:maxSpanAttrs]
	}
	return out
}

// fewAttrs is how many attributes are checked pair by pair for a key
// given twice (hasDupKey) rather than deduplicated: a phase's one or two.
const fewAttrs = 8

// hasDupKey reports whether a key is in kvs twice.
func hasDupKey(kvs []attribute.KeyValue) bool {
	for i := range kvs {
		for j := range i {
			if kvs[i].Key == kvs[j].Key {
				return true
			}
		}
	}
	return false
}

// itemAttrs returns an event's or a link's attributes within
// maxItemAttrs, and how many were dropped.
func itemAttrs(attrs []attribute.KeyValue) ([]attribute.KeyValue, int) {
	if len(attrs) > maxItemAttrs {
		return attrs[:maxItemAttrs], len(attrs) - maxItemAttrs
	}
	return attrs, 0
}

func (r *exportRecord) addEvent(name string, cfg trace.EventConfig) {
	attrs, dropped := itemAttrs(cfg.Attributes())
	if len(r.events) == maxSpanEvents {
		r.events = append(r.events[:0], r.events[1:]...)
		r.droppedEvents++
	}
	r.events = append(r.events, Event{Name: name, Attributes: attrs, DroppedAttributes: dropped, Time: cfg.Timestamp().UnixNano()})
}

func (r *exportRecord) addLink(l trace.Link) {
	if !l.SpanContext.IsValid() && len(l.Attributes) == 0 && l.SpanContext.TraceState().Len() == 0 {
		return // as the SDK: a link to nothing
	}
	if len(r.links) == maxSpanLinks { // as the SDK: the oldest goes
		r.links = append(r.links[:0], r.links[1:]...)
		r.droppedLinks++
	}
	attrs, dropped := itemAttrs(l.Attributes)
	r.links = append(r.links, Link{SpanContext: l.SpanContext, Attributes: attrs, DroppedAttributes: dropped})
}

// record is the ended span sp of tracer t, with context sc, as an
// exporter takes it.
func (r *exportRecord) record(t *Tracer, sc trace.SpanContext, sp *Span) Record {
	attrs := r.dedupeAttrs() // first: it may move lead into attrs
	return Record{
		Name: sp.Name, SpanContext: sc, Parent: r.parent, Kind: r.kind, Start: sp.Start, End: sp.End,
		Leading: r.lead, Attributes: attrs, Events: r.events, Links: r.links, Status: r.status,
		DroppedAttributes: r.droppedAttrs, DroppedEvents: r.droppedEvents, DroppedLinks: r.droppedLinks,
		Resource: t.p.export.res, Scope: t.scope,
	}
}

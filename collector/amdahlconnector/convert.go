package amdahlconnector

import (
	"hash/fnv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// Resource attribute keys the connector reads.
const (
	keyServiceName      = "service.name"
	keyServiceNamespace = "service.namespace"
	keyServiceInstance  = "service.instance.id"
	keyHostName         = "host.name"
	keyProcessPID       = "process.pid"
	keySource           = "amdahl.source"
	// keyOperation carries a row's operation when a rule set other than
	// amdahl's made it (attribution.Key.Op: "GET /items").
	keyOperation = "amdahl.operation"
)

// unitInfo is what a unit's metrics carry besides its row: read from its
// root span and the root's resource when the root arrives, since the
// attribution's Span keeps none of it.
type unitInfo struct {
	service, namespace string // the root's resource: the metrics' resource
	transport          string
	scenario           string
	variant            string
	outcome            string
}

// spanMeta is what the buffer needs of a converted span besides its
// spans.Span.
type spanMeta struct {
	root   bool  // a unit root (amdahl.work, selected) or a trace root (no parent)
	amdahl bool  // the span or its resource carries an amdahl row attribute
	info   int32 // a root's unitInfo in converter.infos; -1 for other spans
}

// converter turns OTLP spans into attribution Spans. It is used by one
// ConsumeTraces call at a time: the spans it converts and its scratch are
// its own, reused from call to call (the connector pools converters).
type converter struct {
	in      *spans.Interner
	variant []string
	rules   *attribution.SpanRules
	selects bool           // a unit selector may select any span
	keyAt   map[string]int // index of a rules key
	// keyMay has bit k[0]%64 of word len(k)%64 set for every rules key
	// k: most attribute keys are no rules key, and this tells most of
	// them so without hashing them for keyAt.
	keyMay [64]uint64
	vals   []string      // the span's values of the rules' keys
	res    resourceState // the resource of the spans being converted

	// The spans of one ConsumeTraces call, their metadata and their
	// roots' unitInfos (spanMeta.info).
	spans []spans.Span
	meta  []spanMeta
	infos []unitInfo

	// recent holds strings interned lately, by a cheap hash of their
	// bytes: most names and values repeat from span to span, and a hit
	// spares the Interner's lock and map.
	recent [256]string
}

// maxPooledSpans bounds the spans a pooled converter keeps room for: a
// larger batch's buffers are let go.
const maxPooledSpans = 1 << 16

func newConverter(in *spans.Interner, variant []string, rows *attribution.Rows, sel *attribution.Matcher) *converter {
	cv := &converter{in: in, variant: variant, rules: attribution.NewSpanRules(rows, sel, in), keyAt: map[string]int{}, selects: sel != nil}
	for i, k := range cv.rules.Keys() {
		cv.keyAt[k] = i
		if k != "" {
			cv.keyMay[len(k)%64] |= 1 << (k[0] % 64)
		}
	}
	cv.vals = make([]string, len(cv.keyAt))
	cv.res.vals = make([]string, len(cv.keyAt))
	cv.res.seen = make([]bool, len(cv.keyAt))
	return cv
}

// reset empties cv for the next call, letting go of what a large batch
// made it hold.
func (cv *converter) reset() {
	if cap(cv.spans) > maxPooledSpans {
		cv.spans, cv.meta = nil, nil
	}
	clear(cv.spans) // no string of a past batch kept alive
	cv.spans, cv.meta = cv.spans[:0], cv.meta[:0]
	clear(cv.infos)
	cv.infos = cv.infos[:0]
}

// keyIndex is the index of rules key k, or -1.
func (cv *converter) keyIndex(k string) int {
	if k != "" && cv.keyMay[len(k)%64]&(1<<(k[0]%64)) == 0 {
		return -1
	}
	if i, ok := cv.keyAt[k]; ok {
		return i
	}
	return -1
}

// intern returns s shared through the Interner.
func (cv *converter) intern(s string) string {
	if s == "" {
		return ""
	}
	h := (uint(len(s))*131 + uint(s[0])*31 + uint(s[len(s)/2])*7 + uint(s[len(s)-1])) % uint(len(cv.recent))
	if r := cv.recent[h]; r == s {
		return r
	}
	r := cv.in.InternString(s)
	cv.recent[h] = r
	return r
}

// resourceState is what a converter reads once per resource.
type resourceState struct {
	attrs     pcommon.Map
	process   uint32
	service   string
	namespace string
	// defaults: amdahl.* string attributes on the resource apply to its
	// spans that lack them (as attribution.ReadOTLPJSON does), by their
	// index in amdahlStringKeys, present where hasDefault has the bit.
	defaults   [len(amdahlStringKeys)]string
	hasDefault uint8
	amdahl     bool     // the resource carries an amdahl row attribute
	vals       []string // the resource's values of the rules' keys
	// seen: the rules' keys met (the first of a repeated key counts, as
	// pcommon.Map.Get reads it).
	seen []bool
}

// processOf numbers a resource's identity: equal identities (service.name,
// service.instance.id, host.name, process.pid) give equal numbers in every
// collector instance, so spans of one process that arrive in several
// batches, or through several tier-1 collectors, are one process; 0 when
// the resource has none of them (unknown, as in spans.Span).
func processOf(attrs pcommon.Map) uint32 {
	h := fnv.New64a()
	known := false
	for _, k := range [...]string{keyServiceName, keyServiceInstance, keyHostName, keyProcessPID} {
		v, ok := attrs.Get(k)
		if !ok {
			h.Write([]byte{0})
			continue
		}
		known = true
		s := v.AsString()
		h.Write([]byte{1, byte(len(s)), byte(len(s) >> 8)})
		h.Write([]byte(s))
	}
	if !known {
		return 0
	}
	x := h.Sum64()
	p := uint32(x) ^ uint32(x>>32)
	if p == 0 {
		p = 1
	}
	return p
}

// amdahlStringKeys are the span attributes attribution reads as strings;
// the first three make a row (spanMeta.amdahl).
var amdahlStringKeys = [...]attribute.Key{telemetry.AttrComponent, telemetry.AttrPhase, telemetry.AttrDirection, telemetry.AttrOutcome}

// amdahlKeyIndex is k's index in amdahlStringKeys, or -1.
func amdahlKeyIndex(k string) int {
	switch attribute.Key(k) {
	case telemetry.AttrComponent:
		return 0
	case telemetry.AttrPhase:
		return 1
	case telemetry.AttrDirection:
		return 2
	case telemetry.AttrOutcome:
		return 3
	}
	return -1
}

// resource makes rs the resource of the spans converted next.
func (cv *converter) resource(rs ptrace.ResourceSpans) {
	attrs := rs.Resource().Attributes()
	st := &cv.res
	st.attrs, st.process = attrs, processOf(attrs)
	st.amdahl, st.hasDefault = false, 0
	st.defaults = [len(amdahlStringKeys)]string{}
	clear(st.vals)
	clear(st.seen)
	attrs.Range(func(k string, v pcommon.Value) bool {
		if i := cv.keyIndex(k); i >= 0 && !st.seen[i] {
			st.vals[i], st.seen[i] = v.AsString(), true
		}
		if i := amdahlKeyIndex(k); i >= 0 && st.hasDefault&(1<<i) == 0 && v.Type() == pcommon.ValueTypeStr {
			st.defaults[i] = cv.intern(v.Str())
			st.hasDefault |= 1 << i
			st.amdahl = st.amdahl || i < 3
		}
		return true
	})
	// Read as pcommon.Map.Get does (the first of a repeated key).
	st.service, st.namespace = "", ""
	if v, ok := attrs.Get(keyServiceName); ok {
		st.service = cv.intern(v.AsString())
	}
	if v, ok := attrs.Get(keyServiceNamespace); ok {
		st.namespace = cv.intern(v.AsString())
	}
}

// span converts one span of the current resource into cv.spans.
func (cv *converter) span(sp ptrace.Span) {
	st := &cv.res
	cv.spans = append(cv.spans, spans.Span{
		TraceID:  spans.TraceID(sp.TraceID()),
		SpanID:   spans.SpanID(sp.SpanID()),
		ParentID: spans.SpanID(sp.ParentSpanID()),
		Start:    int64(sp.StartTimestamp()),
		End:      int64(sp.EndTimestamp()),
		Name:     cv.intern(sp.Name()),
		Process:  st.process,
		Kind:     spans.SpanKind(sp.Kind()), // OTLP's numbering both
	})
	s := &cv.spans[len(cv.spans)-1]
	clear(cv.vals)
	var set uint8 // amdahlStringKeys present on the span
	isWork := s.Name == telemetry.SpanWork
	wantInfo := isWork || s.ParentID.IsZero() || cv.selects
	var info unitInfo
	attrs := sp.Attributes()
	attrs.Range(func(k string, v pcommon.Value) bool {
		if i := cv.keyIndex(k); i >= 0 {
			cv.vals[i] = v.AsString()
		}
		switch attribute.Key(k) {
		case telemetry.AttrComponent, telemetry.AttrPhase, telemetry.AttrDirection, telemetry.AttrOutcome:
			if v.Type() != pcommon.ValueTypeStr {
				return true
			}
			i := amdahlKeyIndex(k)
			set |= 1 << i
			str := v.Str()
			if i == 0 {
				str = cv.intern(str)
			}
			if wantInfo && i == 3 {
				info.outcome = cv.intern(str)
			}
			s.SetString(k, str)
		case telemetry.AttrRemote:
			if v.Type() == pcommon.ValueTypeBool {
				s.SetAttribute(attribute.Bool(k, v.Bool()))
			}
		case telemetry.AttrTransport:
			if wantInfo {
				info.transport = cv.intern(v.AsString())
			}
		case telemetry.AttrScenario:
			if wantInfo {
				info.scenario = cv.intern(v.AsString())
			}
		}
		return true
	})
	for i, dv := range st.defaults {
		if st.hasDefault&(1<<i) != 0 && set&(1<<i) == 0 {
			s.SetString(string(amdahlStringKeys[i]), dv)
			if wantInfo && i == 3 {
				info.outcome = dv
			}
		}
	}
	m := spanMeta{amdahl: st.amdahl || set&0b111 != 0, info: -1}
	cv.rules.Apply(s, cv.vals, st.vals, m.amdahl)
	m.root = isWork || s.ParentID.IsZero() || s.Selected
	if m.root {
		info.service, info.namespace = st.service, st.namespace
		info.variant = cv.variantOf(attrs, st.attrs)
		m.info = int32(len(cv.infos))
		cv.infos = append(cv.infos, info)
	}
	cv.meta = append(cv.meta, m)
}

// variantOf is the first of the configured variant attributes present on
// the span, else on its resource; "" when none is.
func (cv *converter) variantOf(span, res pcommon.Map) string {
	for _, m := range [...]pcommon.Map{span, res} {
		for _, k := range cv.variant {
			if v, ok := m.Get(k); ok {
				if s := v.AsString(); s != "" {
					return cv.intern(s)
				}
			}
		}
	}
	return ""
}

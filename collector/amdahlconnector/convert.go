package amdahlconnector

import (
	"hash/fnv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
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

// inSpan is one span as the connector holds it: the attribution's compact
// Span, and for a unit root its unitInfo.
type inSpan struct {
	attribution.Span
	root   bool // a unit root (amdahl.work, selected) or a trace root (no parent)
	amdahl bool // the span or its resource carries an amdahl row attribute
	info   *unitInfo
}

// converter turns OTLP spans into attribution Spans. It is used by one
// ConsumeTraces call at a time (its scratch is not shared).
type converter struct {
	in      *attribution.Interner
	variant []string
	rules   *attribution.SpanRules
	selects bool           // a unit selector may select any span
	keyAt   map[string]int // index of a rules key
	vals    []string       // the span's values of the rules' keys
}

func newConverter(in *attribution.Interner, variant []string, rows *attribution.Rows, sel *attribution.Matcher) *converter {
	cv := &converter{in: in, variant: variant, rules: attribution.NewSpanRules(rows, sel, in), keyAt: map[string]int{}, selects: sel != nil}
	for i, k := range cv.rules.Keys() {
		cv.keyAt[k] = i
	}
	cv.vals = make([]string, len(cv.keyAt))
	return cv
}

// resourceState is what a converter reads once per resource.
type resourceState struct {
	attrs     pcommon.Map
	process   uint32
	service   string
	namespace string
	// defaults: amdahl.* string attributes on the resource apply to its
	// spans that lack them (as attribution.ReadOTLPJSON does).
	defaults []attribute.KeyValue
	amdahl   bool     // the resource carries an amdahl row attribute
	vals     []string // the resource's values of the rules' keys
}

// processOf numbers a resource's identity: equal identities (service.name,
// service.instance.id, host.name, process.pid) give equal numbers in every
// collector instance, so spans of one process that arrive in several
// batches, or through several tier-1 collectors, are one process; 0 when
// the resource has none of them (unknown, as in attribution.Span).
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

// amdahlStringKeys are the span attributes attribution reads as strings.
var amdahlStringKeys = [...]attribute.Key{telemetry.AttrComponent, telemetry.AttrPhase, telemetry.AttrDirection, telemetry.AttrOutcome}

func (cv *converter) resource(rs ptrace.ResourceSpans) resourceState {
	attrs := rs.Resource().Attributes()
	st := resourceState{attrs: attrs, process: processOf(attrs)}
	if v, ok := attrs.Get(keyServiceName); ok {
		st.service = cv.in.InternString(v.AsString())
	}
	if v, ok := attrs.Get(keyServiceNamespace); ok {
		st.namespace = cv.in.InternString(v.AsString())
	}
	for i, k := range amdahlStringKeys {
		if v, ok := attrs.Get(string(k)); ok && v.Type() == pcommon.ValueTypeStr {
			st.defaults = append(st.defaults, attribute.String(string(k), cv.in.InternString(v.Str())))
			st.amdahl = st.amdahl || i < 3
		}
	}
	st.vals = make([]string, len(cv.keyAt))
	for k, i := range cv.keyAt {
		if v, ok := attrs.Get(k); ok {
			st.vals[i] = v.AsString()
		}
	}
	return st
}

// span converts one span of resource st.
func (cv *converter) span(st *resourceState, sp ptrace.Span) inSpan {
	s := inSpan{Span: attribution.Span{
		TraceID:  attribution.TraceID(sp.TraceID()),
		SpanID:   attribution.SpanID(sp.SpanID()),
		ParentID: attribution.SpanID(sp.ParentSpanID()),
		Start:    int64(sp.StartTimestamp()),
		End:      int64(sp.EndTimestamp()),
		Name:     cv.in.InternString(sp.Name()),
		Process:  st.process,
		Kind:     attribution.SpanKind(sp.Kind()), // OTLP's numbering both
	}}
	clear(cv.vals)
	var set uint8 // amdahlStringKeys present on the span
	isWork := s.Name == telemetry.SpanWork
	var info *unitInfo
	if isWork || s.ParentID.IsZero() || cv.selects {
		info = &unitInfo{service: st.service, namespace: st.namespace}
	}
	sp.Attributes().Range(func(k string, v pcommon.Value) bool {
		if i, ok := cv.keyAt[k]; ok {
			cv.vals[i] = v.AsString()
		}
		switch attribute.Key(k) {
		case telemetry.AttrComponent, telemetry.AttrPhase, telemetry.AttrDirection, telemetry.AttrOutcome:
			if v.Type() != pcommon.ValueTypeStr {
				return true
			}
			str := v.Str()
			for i, ak := range amdahlStringKeys {
				if string(ak) == k {
					set |= 1 << i
				}
			}
			if attribute.Key(k) == telemetry.AttrComponent {
				str = cv.in.InternString(str)
			}
			if info != nil && attribute.Key(k) == telemetry.AttrOutcome {
				info.outcome = cv.in.InternString(str)
			}
			s.SetAttribute(attribute.String(k, str))
		case telemetry.AttrRemote:
			if v.Type() == pcommon.ValueTypeBool {
				s.SetAttribute(attribute.Bool(k, v.Bool()))
			}
		case telemetry.AttrTransport:
			if info != nil {
				info.transport = cv.in.InternString(v.AsString())
			}
		case telemetry.AttrScenario:
			if info != nil {
				info.scenario = cv.in.InternString(v.AsString())
			}
		}
		return true
	})
	for _, kv := range st.defaults {
		for i, ak := range amdahlStringKeys {
			if ak == kv.Key && set&(1<<i) == 0 {
				s.SetAttribute(kv)
				if info != nil && kv.Key == telemetry.AttrOutcome {
					info.outcome = kv.Value.AsString()
				}
			}
		}
	}
	s.amdahl = st.amdahl || set&0b111 != 0
	cv.rules.Apply(&s.Span, cv.vals, st.vals, s.amdahl)
	s.root = isWork || s.ParentID.IsZero() || s.Selected
	if s.root {
		info.variant = cv.variantOf(sp.Attributes(), st.attrs)
		s.info = info
	}
	return s
}

// variantOf is the first of the configured variant attributes present on
// the span, else on its resource; "" when none is.
func (cv *converter) variantOf(span, res pcommon.Map) string {
	for _, m := range [...]pcommon.Map{span, res} {
		for _, k := range cv.variant {
			if v, ok := m.Get(k); ok {
				if s := v.AsString(); s != "" {
					return cv.in.InternString(s)
				}
			}
		}
	}
	return ""
}

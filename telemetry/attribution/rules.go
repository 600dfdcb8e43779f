package attribution

import (
	"fmt"
	"slices"
	"strings"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// RowSource names where a span's row comes from.
type RowSource uint8

// The rule sets.
const (
	// RowsAuto is RowsAmdahl when any span of the input carries an amdahl
	// attribute (amdahl.phase, amdahl.component, amdahl.direction), else
	// RowsSemconv.
	RowsAuto RowSource = iota
	// RowsAmdahl: amdahl.component, amdahl.phase and amdahl.direction; a
	// span without amdahl.phase is no row and counts toward its nearest
	// row ancestor.
	RowsAmdahl
	// RowsSemconv: OpenTelemetry's semantic conventions (semconvRow).
	RowsSemconv
	// RowsFile: the rules of a rules file (ParseRules), then its fallback.
	RowsFile
	// RowsNone: no row (a rules file's fallback "none"): the span counts
	// toward its nearest row ancestor.
	RowsNone
)

// Rows is a rule set that gives each span its row. The zero value is
// RowsAuto. A Rows is read-only once made and safe for concurrent use.
type Rows struct {
	Source RowSource
	// Rules and Fallback are a rules file's (RowsFile only): the first
	// rule that matches a span gives its row; a span no rule matches
	// gets Fallback's (RowsAuto, RowsAmdahl, RowsSemconv or RowsNone).
	Rules    []Rule
	Fallback RowSource
	File     string
}

// ParseRowSource parses --rows' built-in names: auto, amdahl, semconv.
func ParseRowSource(s string) (RowSource, error) {
	switch s {
	case "auto", "":
		return RowsAuto, nil
	case "amdahl":
		return RowsAmdahl, nil
	case "semconv":
		return RowsSemconv, nil
	}
	return 0, fmt.Errorf("unknown rule set %q (valid: auto, amdahl, semconv, or a rules file)", s)
}

// Rule is one rule of a rules file: spans that Match get Row.
type Rule struct {
	Match Matcher
	Row   RowTemplate
	Line  int // in the rules file, for messages
}

// Matcher matches spans on name, kind, service.name and attributes. An
// empty field matches anything; patterns may hold '*' (any run of
// characters, '/' included); an attribute pattern "*" asks only that the
// attribute be present.
type Matcher struct {
	Name    string
	Kind    spans.SpanKind
	HasKind bool
	Service string
	Attrs   []AttrMatch
}

// AttrMatch is one attribute pattern of a Matcher.
type AttrMatch struct{ Key, Pattern string }

// RowTemplate is the row a rule sets. Component and Op are templates:
// "{name}", "{service}", "{kind}" and "{<attribute key>}" are replaced by
// the span's (an absent attribute by "").
type RowTemplate struct {
	Component string
	Phase     telemetry.Phase
	Direction telemetry.Direction
	Op        string
}

// semconvKeys are the span and resource attributes the semconv rules read.
var semconvKeys = []string{
	"service.name", "peer.service", "service.peer.name", "server.address",
	"rpc.method", "rpc.service", "rpc.system", "rpc.system.name",
	"http.request.method", "http.method", "http.route", "url.template",
	"db.query.summary", "db.operation.name", "db.operation", "db.collection.name", "db.sql.table",
	"db.system.name", "db.system",
	"messaging.operation.name", "messaging.operation", "messaging.operation.type",
	"messaging.destination.name", "messaging.destination.template", "messaging.system",
}

// Slots of semconvKeys in a spanView's values (the first keys of every
// reader's table).
const (
	aServiceName = iota
	aPeerService
	aServicePeerName
	aServerAddress
	aRPCMethod
	aRPCService
	aRPCSystem
	aRPCSystemName
	aHTTPMethod
	aHTTPMethodOld
	aHTTPRoute
	aURLTemplate
	aDBSummary
	aDBOperation
	aDBOperationOld
	aDBCollection
	aDBTable
	aDBSystemName
	aDBSystem
	aMsgOperation
	aMsgOperationOld
	aMsgOperationType
	aMsgDestination
	aMsgDestinationTemplate
	aMsgSystem
)

// attrTable numbers the attribute keys a reader keeps: semconvKeys first,
// then the keys rules and a unit selector name.
type attrTable struct {
	keys []string
	at   map[string]int
}

func newAttrTable(rows *Rows, units *Matcher) *attrTable {
	t := &attrTable{at: map[string]int{}}
	add := func(k string) int {
		if i, ok := t.at[k]; ok {
			return i
		}
		t.at[k] = len(t.keys)
		t.keys = append(t.keys, k)
		return len(t.keys) - 1
	}
	for _, k := range semconvKeys {
		add(k)
	}
	if rows != nil {
		for _, r := range rows.Rules {
			for _, a := range r.Match.Attrs {
				add(a.Key)
			}
			for _, k := range templateKeys(r.Row.Component) {
				add(k)
			}
			for _, k := range templateKeys(r.Row.Op) {
				add(k)
			}
		}
	}
	if units != nil {
		for _, a := range units.Attrs {
			add(a.Key)
		}
	}
	return t
}

// spanView is what rules read of a span: its name and kind, and the
// values of the reader's attribute table (the span's, else its
// resource's; "" when absent).
type spanView struct {
	name string
	kind spans.SpanKind
	tab  *attrTable
	span []string
	res  []string
}

func (v *spanView) attr(i int) string {
	if i < len(v.span) && v.span[i] != "" {
		return v.span[i]
	}
	if i < len(v.res) {
		return v.res[i]
	}
	return ""
}

func (v *spanView) attrKey(k string) string {
	if i, ok := v.tab.at[k]; ok {
		return v.attr(i)
	}
	return ""
}

func (v *spanView) service() string { return v.attr(aServiceName) }

// match reports whether the span matches m.
func (m *Matcher) match(v *spanView) bool {
	if m.HasKind && m.Kind != v.kind {
		return false
	}
	if m.Name != "" && !matchGlob(m.Name, v.name) {
		return false
	}
	if m.Service != "" && !matchGlob(m.Service, v.service()) {
		return false
	}
	for _, a := range m.Attrs {
		val := v.attrKey(a.Key)
		if val == "" || a.Pattern != "*" && !matchGlob(a.Pattern, val) {
			return false
		}
	}
	return true
}

// matchGlob matches s against pattern, where '*' is any run of bytes.
func matchGlob(pattern, s string) bool {
	star, at := -1, 0
	p := 0
	for i := 0; i < len(s); {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, at = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			at++
			i = at
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// rowBuilder evaluates rules into a span's row fields, interning what it
// builds.
type rowBuilder struct {
	buf    []byte
	intern func([]byte) string
}

// semconv sets s's row from OpenTelemetry's semantic conventions:
//
//   - component: service.name; for a CLIENT or PRODUCER span the peer
//     (peer.service, service.peer.name, server.address), else the
//     service;
//   - phase: CLIENT and PRODUCER spans send, SERVER and CONSUMER spans
//     execute (receive: a messaging receive); an INTERNAL span named
//     "<word>.<phase>" that phase of component <word>;
//   - op: the operation its convention names (rpc.method; the HTTP
//     method and route or URL template; db.query.summary, or the DB
//     operation and collection; the messaging operation and
//     destination), else the span's name;
//   - a span that is none of these (INTERNAL, or of no kind) is the row
//     "service/name".
func (rb *rowBuilder) semconv(s *spans.Span, v *spanView) {
	s.Component, s.Phase, s.Direction, s.Op = "", 0, telemetry.None, ""
	switch v.kind {
	case spans.KindClient, spans.KindProducer:
		s.Phase = telemetry.Send
		s.Component = firstOf(v, aPeerService, aServicePeerName, aServerAddress, aServiceName)
	case spans.KindServer, spans.KindConsumer:
		s.Phase = telemetry.Execute
		s.Component = v.service()
	default:
		if comp, ph, ok := strings.Cut(v.name, "."); ok {
			if p, ok := phaseNamed(ph); ok && comp != "" {
				s.Component, s.Phase = comp, p
				return
			}
		}
		s.Component, s.Op = v.service(), v.name
		if s.Op == "" {
			s.Op = "(unnamed)"
		}
		return
	}
	if op := strings.ToLower(firstOf(v, aMsgOperationType, aMsgOperationOld)); op == "receive" && v.attr(aMsgSystem) != "" {
		s.Phase = telemetry.Receive
	}
	s.Op = rb.op(v)
	if s.Component == "" {
		s.Component = "unknown_service"
	}
}

func firstOf(v *spanView, slots ...int) string {
	for _, i := range slots {
		if a := v.attr(i); a != "" {
			return a
		}
	}
	return ""
}

// op is the operation's name by its convention.
func (rb *rowBuilder) op(v *spanView) string {
	if m := v.attr(aRPCMethod); m != "" && firstOf(v, aRPCSystemName, aRPCSystem) != "" {
		if svc := v.attr(aRPCService); svc != "" && !strings.Contains(m, "/") {
			return rb.join(svc, "/", m)
		}
		return m
	}
	if m := firstOf(v, aHTTPMethod, aHTTPMethodOld); m != "" {
		if r := firstOf(v, aHTTPRoute, aURLTemplate); r != "" {
			return rb.join(m, " ", r)
		}
		if len(v.name) > len(m) && strings.HasPrefix(v.name, m) && v.name[len(m)] == ' ' {
			return v.name // "GET /item/{id}": otelhttp names a server span by the route the mux matched
		}
		return m
	}
	if sys := firstOf(v, aDBSystemName, aDBSystem); sys != "" {
		if q := v.attr(aDBSummary); q != "" {
			return q
		}
		if op := firstOf(v, aDBOperation, aDBOperationOld); op != "" {
			if c := firstOf(v, aDBCollection, aDBTable); c != "" {
				return rb.join(op, " ", c)
			}
			return op
		}
		return sys
	}
	if sys := v.attr(aMsgSystem); sys != "" {
		op := firstOf(v, aMsgOperation, aMsgOperationOld, aMsgOperationType)
		if d := firstOf(v, aMsgDestinationTemplate, aMsgDestination); d != "" {
			if op == "" {
				return d
			}
			return rb.join(op, " ", d)
		}
		if op != "" {
			return op
		}
		return sys
	}
	if v.name == "" {
		return "(unnamed)"
	}
	return v.name
}

func (rb *rowBuilder) join(a, sep, b string) string {
	rb.buf = append(append(append(rb.buf[:0], a...), sep...), b...)
	return rb.intern(rb.buf)
}

// apply sets s's row by the rule set: amdahl's attributes are already
// applied when the span was read; hasAmdahl says whether the span (or its
// resource) carried one.
func (rb *rowBuilder) apply(rows *Rows, s *spans.Span, v *spanView, hasAmdahl bool) {
	switch rows.Source {
	case RowsAmdahl:
	case RowsSemconv:
		rb.semconv(s, v)
	case RowsAuto:
		if !hasAmdahl {
			rb.semconv(s, v)
			s.MarkSemconvRow()
		}
	case RowsFile:
		for i := range rows.Rules {
			r := &rows.Rules[i]
			if r.Match.match(v) {
				s.Phase, s.Direction = r.Row.Phase, r.Row.Direction
				s.Component = rb.template(r.Row.Component, v)
				s.Op = rb.template(r.Row.Op, v)
				return
			}
		}
		rb.apply(&Rows{Source: rows.Fallback}, s, v, hasAmdahl)
	case RowsNone:
		s.Component, s.Phase, s.Direction, s.Op = "", 0, telemetry.None, ""
	}
}

// template expands {name}, {service}, {kind} and {attribute key} in t.
func (rb *rowBuilder) template(t string, v *spanView) string {
	if !strings.Contains(t, "{") {
		return t
	}
	rb.buf = rb.buf[:0]
	for t != "" {
		i := strings.IndexByte(t, '{')
		if i < 0 {
			rb.buf = append(rb.buf, t...)
			break
		}
		rb.buf = append(rb.buf, t[:i]...)
		j := strings.IndexByte(t[i:], '}')
		key := t[i+1 : i+j]
		switch key {
		case "name":
			rb.buf = append(rb.buf, v.name...)
		case "service":
			rb.buf = append(rb.buf, v.service()...)
		case "kind":
			rb.buf = append(rb.buf, v.kind.String()...)
		default:
			rb.buf = append(rb.buf, v.attrKey(key)...)
		}
		t = t[i+j+1:]
	}
	return rb.intern(rb.buf)
}

// templateKeys lists the attribute keys template t reads.
func templateKeys(t string) []string {
	var keys []string
	for {
		i := strings.IndexByte(t, '{')
		if i < 0 {
			return keys
		}
		j := strings.IndexByte(t[i:], '}')
		if j < 0 {
			return keys
		}
		if k := t[i+1 : i+j]; !slices.Contains([]string{"name", "service", "kind"}, k) {
			keys = append(keys, k)
		}
		t = t[i+j+1:]
	}
}

// UnitMode says which spans are units of work.
type UnitMode uint8

// The unit modes.
const (
	// UnitsAuto is UnitsAmdahl when the input holds an amdahl.work span,
	// else UnitsRoots. A Builder, which cannot look ahead, takes it for
	// UnitsAmdahl.
	UnitsAuto UnitMode = iota
	// UnitsAmdahl: amdahl.work spans.
	UnitsAmdahl
	// UnitsRoots: every trace's root span (no parent); a trace whose
	// root was not exported has its topmost span stand in
	// (Diagnostics.RootMissing, Work.StandIn).
	UnitsRoots
	// UnitsSelected: the spans a selector matched (Span.Selected).
	UnitsSelected
)

// ParseUnits parses --unit: "auto", "amdahl" (amdahl.work spans),
// "roots", or a selector: comma-separated KEY=PATTERN, KEY one of name,
// kind, service (service.name) or an attribute key, PATTERN with '*'
// for any run of characters ("kind=server,service=frontend",
// "name=GET /checkout*", "http.route=*"). Every KEY must match.
func ParseUnits(s string) (UnitMode, *Matcher, error) {
	switch strings.TrimSpace(s) {
	case "auto", "":
		return UnitsAuto, nil, nil
	case "amdahl":
		return UnitsAmdahl, nil, nil
	case "roots":
		return UnitsRoots, nil, nil
	}
	if len(s) > 4096 {
		return 0, nil, fmt.Errorf("unit selector: %d bytes, want at most 4096", len(s))
	}
	var m Matcher
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return 0, nil, fmt.Errorf("unit selector %q: want auto, amdahl, roots or KEY=PATTERN[,KEY=PATTERN…] (KEY name, kind, service or an attribute), got %q", s, part)
		}
		switch k {
		case "name":
			m.Name = v
		case "service", "service.name":
			m.Service = v
		case "kind":
			kind, err := spans.ParseSpanKind(v)
			if err != nil {
				return 0, nil, fmt.Errorf("unit selector %q: %w", s, err)
			}
			m.Kind, m.HasKind = kind, true
		default:
			m.Attrs = append(m.Attrs, AttrMatch{Key: k, Pattern: v})
		}
	}
	return UnitsSelected, &m, nil
}

package attribution

import (
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// SpanRules gives spans read from elsewhere than an OTLP JSON file (the
// OpenTelemetry Collector connector reads the Collector's pdata) their
// rows and unit selection by the rules ReadOTLPJSON applies: a rule set
// (Rows) and a unit selector (Matcher, for UnitsSelected). A SpanRules is
// not safe for concurrent use: make one per goroutine (NewSpanRules is
// cheap next to the spans it serves).
type SpanRules struct {
	rows  *Rows
	units *Matcher
	tab   *attrTable
	rb    rowBuilder
}

// NewSpanRules returns the rules of rows (nil: RowsAuto) and units (nil:
// no selector); strings it makes are shared through in (a private
// Interner if nil).
func NewSpanRules(rows *Rows, units *Matcher, in *spans.Interner) *SpanRules {
	if rows == nil {
		rows = &Rows{}
	}
	if in == nil {
		in = &spans.Interner{}
	}
	return &SpanRules{rows: rows, units: units, tab: newAttrTable(rows, units),
		rb: rowBuilder{intern: in.Intern}}
}

// Keys returns the attribute keys the rules read; Apply takes their values
// in this order.
func (r *SpanRules) Keys() []string { return r.tab.keys }

// Apply sets s's row (Component, Phase, Direction, Op) and Selected by the
// rules. s.Name and s.Kind must be set, and amdahl's own attributes
// already applied (SetAttribute); hasAmdahl says whether the span or its
// resource carried one (amdahl.component, amdahl.phase, amdahl.direction).
// span and res hold the values of Keys() on the span and on its resource
// ("" when absent; a shorter slice leaves the rest absent); Apply does not
// retain them.
func (r *SpanRules) Apply(s *spans.Span, span, res []string, hasAmdahl bool) {
	v := spanView{name: s.Name, kind: s.Kind, tab: r.tab, span: span, res: res}
	r.rb.apply(r.rows, s, &v, hasAmdahl)
	if r.units != nil {
		s.Selected = r.units.match(&v)
	}
}

// phaseNamed is telemetry.ParsePhase without its error (which a span
// named "amdahl.work" would have the semconv rules allocate, span after
// span).
func phaseNamed(s string) (telemetry.Phase, bool) {
	for p := telemetry.Queue; p <= telemetry.Execute; p++ {
		if p.String() == s {
			return p, true
		}
	}
	return 0, false
}

package attribution

import (
	"bytes"
	"testing"

	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// BenchmarkRuleMatch is the cost per span of giving a span its row: the
// semantic conventions' rules and a rules file's (two rules, then the
// conventions), on the spans of the demo shop.
func BenchmarkRuleMatch(b *testing.B) {
	rows, err := ParseRules("rules.yaml", []byte(demoRules))
	if err != nil {
		b.Fatal(err)
	}
	var all []spans.Span
	var views []spanView
	tab := newAttrTable(rows, nil)
	f, c, p := demoUnit("bench", 0, 0, 0)
	for _, group := range []struct {
		svc string
		sp  []tspan
	}{{"frontend", f}, {"cart", c}, {"pricing", p}} {
		for _, s := range group.sp {
			vals := make([]string, len(tab.keys))
			for i := 0; i+1 < len(s.attrs); i += 2 {
				if j, ok := tab.at[s.attrs[i]]; ok {
					vals[j] = s.attrs[i+1]
				}
			}
			res := make([]string, len(tab.keys))
			res[aServiceName] = group.svc
			views = append(views, spanView{name: s.name, kind: spans.SpanKind(s.kind), tab: tab, span: vals, res: res})
			all = append(all, spans.Span{Name: s.name})
		}
	}
	var in spans.Interner
	rb := rowBuilder{intern: in.Intern}
	for _, tc := range []struct {
		name string
		rows *Rows
	}{{"semconv", &Rows{Source: RowsSemconv}}, {"file", rows}} {
		b.Run(tc.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				for i := range views {
					rb.apply(tc.rows, &all[i], &views[i], false)
				}
				n += len(views)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/span")
		})
	}
}

// BenchmarkReadSemconv reads the demo shop's OTLP JSON (units by trace
// roots, rows by the conventions) beside amdahl's own shape read as
// amdahl's: the cost per span of anyone's traces against amdahl's.
func BenchmarkReadSemconv(b *testing.B) {
	for _, tc := range []struct {
		name string
		data []byte
	}{{"semconv", demoFile(2000, nil)}, {"amdahl", gapUnits(2800, nil)}} {
		b.Run(tc.name, func(b *testing.B) {
			spans := 0
			for b.Loop() {
				d, err := Input{}.Read(bytes.NewReader(tc.data), "bench", nil, func(Work) {})
				if err != nil {
					b.Fatal(err)
				}
				spans += d.Spans
			}
			b.SetBytes(int64(len(tc.data)))
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(spans), "ns/span")
		})
	}
}

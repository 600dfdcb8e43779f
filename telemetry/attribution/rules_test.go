package attribution

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func readInput(t *testing.T, inp Input, data []byte) (Report, []Work, error) {
	t.Helper()
	var acc Accumulator
	var works []Work
	d, err := inp.Read(bytes.NewReader(data), "t.jsonl", nil, func(w Work) {
		acc.Add(w)
		works = append(works, w)
	})
	acc.AddDiagnostics(d)
	return acc.Report(false), works, err
}

const demoRules = `# the cart's handlers by route; the rest by the conventions
fallback: semconv
rules:
  - match: {kind: server, service: cart}
    row: {component: cart-api, phase: execute, op: "{http.route}"}
  - match:
      attributes: {db.system.name: "*"}
    row: {component: "db:{db.collection.name}", phase: send, direction: request}
`

// TestRulesFile: a rules file's first matching rule gives the row, its
// fallback the others'.
func TestRulesFile(t *testing.T) {
	rows, err := ParseRules("rules.yaml", []byte(demoRules))
	if err != nil {
		t.Fatal(err)
	}
	rep, _, err := readInput(t, Input{Rows: rows}, demoFile(10, nil))
	if err != nil {
		t.Fatal(err)
	}
	got := rowQ(rep)
	for row, q := range map[string]float64{"cart-api.execute /cart": 0.1, "db:items.send/request": 0.2, "pricing.execute shop.Pricing/Quote": 0.3} {
		if g, ok := got[row]; !ok || g < q-1e-6 || g > q+1e-6 {
			t.Errorf("row %q: q %v (present %v), want %v; rows %v", row, g, ok, q, rowNames(rep))
		}
	}
	none, err := ParseRules("none.yaml", []byte("fallback: none\nrules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	rep, _, err = readInput(t, Input{Rows: none, Units: UnitsRoots}, demoFile(3, nil))
	if err != nil {
		t.Fatal(err)
	}
	if names := rowNames(rep); len(names) != 2 || names[0] != "gap start → end" || names[1] != "other" {
		t.Errorf("fallback none: rows %v, want only other (one gap, the whole unit)", names)
	}
}

// TestLoadRows: --rows names a built-in rule set or a rules file; an
// empty name is a file's, and fails.
func TestLoadRows(t *testing.T) {
	for name, want := range map[string]RowSource{"auto": RowsAuto, "amdahl": RowsAmdahl, "semconv": RowsSemconv} {
		if rows, err := LoadRows(name); err != nil || rows.Source != want {
			t.Errorf("LoadRows(%q) = %+v, %v; want source %v", name, rows, err, want)
		}
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(demoRules), 0o644); err != nil {
		t.Fatal(err)
	}
	if rows, err := LoadRows(path); err != nil || rows.Source != RowsFile || len(rows.Rules) != 2 || rows.Fallback != RowsSemconv {
		t.Errorf("LoadRows(%s) = %+v, %v; want the file's two rules, fallback semconv", path, rows, err)
	}
	for _, name := range []string{"", "Semconv", filepath.Join(t.TempDir(), "none.yaml")} {
		if rows, err := LoadRows(name); err == nil || !strings.Contains(err.Error(), "rules file") {
			t.Errorf("LoadRows(%q) = %+v, %v; want a rules file's error", name, rows, err)
		}
	}
}

// TestRulesFileErrors: every error names the file, line and column.
func TestRulesFileErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"rules:\n  - match: {kind: sever}\n    row: {phase: send}\n", `r.yaml:2:19: rules[0].match.kind: unknown span kind "sever"`},
		{"rules:\n  - match: {name: x}\n    row: {phase: sending}\n", `r.yaml:3:18: rules[0].row.phase: unknown phase "sending"`},
		{"rules:\n  - match: {name: x}\n    row: {component: c}\n", `r.yaml:3:10: rules[0].row: a row needs a phase or an op`},
		{"rules:\n  - match: {name: x}\n", `r.yaml:2:5: rules[0]: a rule needs a row`},
		{"fallback: sometimes\n", `r.yaml:1:11: fallback: unknown rule set "sometimes"`},
		{"rules:\n  - mtch: {}\n", `r.yaml:2:5: rules[0]: unknown key "mtch" (valid: match, row)`},
		{"rules:\n  - match: &m {name: x}\n    row: {op: y}\n", `r.yaml:2:12: rules[0]: match: anchors and aliases are not supported`},
		{"rules:\n  - row: {op: \"{name\"}\n", `r.yaml:2:15: rules[0].row.op: unbalanced braces`},
		{"rules: [\n", `r.yaml:1:8: invalid YAML: did not find expected node content`},
		{"rules: []\n---\nrules: []\n", `r.yaml:2:1: more than one YAML document`},
		{"", `r.yaml: empty`},
		{"rules:\n  - row: {op: " + strings.Repeat("x", 300) + "}\n", `r.yaml:2:15: rules[0].row.op: 300 bytes, want at most 256`},
	} {
		_, err := ParseRules("r.yaml", []byte(tc.in))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: got error %v, want %q…", tc.in, err, tc.want)
		}
	}
	if _, err := ParseRules("r.yaml", bytes.Repeat([]byte("#"), maxRulesBytes+1)); err == nil || !strings.Contains(err.Error(), "1048576 bytes") {
		t.Errorf("a file over the bound: error %v", err)
	}
}

// TestUnitSelector: a selector makes units of the spans it matches; a
// match inside another is part of the outer unit; one trace may hold
// units of several services.
func TestUnitSelector(t *testing.T) {
	for _, tc := range []struct {
		sel   string
		units int
		e2e   time.Duration
	}{
		{"kind=server", 10, 10 * time.Millisecond}, // cart's and pricing's inside frontend's
		{"kind=server,service=cart", 10, 3 * time.Millisecond},
		{"service=*c*,kind=SERVER", 20, 3 * time.Millisecond}, // cart's and pricing's: two units a trace
		{"http.route=/c*", 10, 10 * time.Millisecond},
		{"name=shop.Pricing/Quote,kind=client", 10, 4 * time.Millisecond},
	} {
		mode, m, err := ParseUnits(tc.sel)
		if err != nil {
			t.Fatal(err)
		}
		rep, _, err := readInput(t, Input{Units: mode, Select: m}, demoFile(10, nil))
		if err != nil {
			t.Fatalf("%s: %v", tc.sel, err)
		}
		if rep.Works != tc.units || rep.E2EMean != tc.e2e {
			t.Errorf("--unit %s: %d units of mean e2e %v, want %d of %v", tc.sel, rep.Works, rep.E2EMean, tc.units, tc.e2e)
		}
	}
	for _, bad := range []string{"kind", "kind=sideways", "=x", "name="} {
		if _, _, err := ParseUnits(bad); err == nil {
			t.Errorf("--unit %q: no error", bad)
		}
	}
	mode, m, _ := ParseUnits("service=nobody")
	if _, _, err := readInput(t, Input{Units: mode, Select: m}, demoFile(2, nil)); err == nil || !strings.Contains(err.Error(), "no spans matching the unit selector") {
		t.Errorf("a selector that matches nothing: error %v", err)
	}
}

// TestRootMissing: a trace whose root was not exported is counted, and
// its topmost span stands in, marked.
func TestRootMissing(t *testing.T) {
	var front, cart, pricing tres
	front.service, cart.service, pricing.service = "frontend", "cart", "pricing"
	for i := range 4 {
		f, c, p := demoUnit(fmt.Sprint("demo", i), float64(i)*20, 0, 0)
		if i < 2 {
			f = f[1:] // the root was not exported
		}
		front.spans = append(front.spans, f...)
		cart.spans = append(cart.spans, c...)
		pricing.spans = append(pricing.spans, p...)
	}
	rep, works, err := readInput(t, Input{}, otlpFile(front, cart, pricing))
	if err != nil {
		t.Fatal(err)
	}
	standIns := 0
	for _, w := range works {
		if w.StandIn {
			standIns++
			if w.Root.Name != "HTTP GET" {
				t.Errorf("stand-in root %q, want the topmost span, HTTP GET", w.Root.Name)
			}
		}
	}
	if rep.Works != 4 || rep.Diagnostics.RootMissing != 2 || standIns != 2 || !strings.Contains(rep.Diagnostics.line(), "traces without their root 2") {
		t.Errorf("%d units, %d traces without a root counted, %d stand-ins; want 4, 2, 2 (%s)", rep.Works, rep.Diagnostics.RootMissing, standIns, rep.Diagnostics.line())
	}
}

// TestSemconvRows: the conventions' operation names, old and new
// attribute names alike.
func TestSemconvRows(t *testing.T) {
	for _, tc := range []struct {
		kind  int
		name  string
		attrs []string
		want  string
	}{
		{kServer, "GET /items/{id}", []string{"http.method", "GET", "http.route", "/items/{id}"}, "svc.execute GET /items/{id}"},
		{kClient, "HTTP POST", []string{"http.request.method", "POST", "peer.service", "stock"}, "stock.send POST"},
		{kClient, "shop.Cart/Get", []string{"rpc.system", "grpc", "rpc.service", "shop.Cart", "rpc.method", "Get", "net.peer.name", "x"}, "svc.send shop.Cart/Get"},
		{kClient, "SELECT", []string{"db.system", "mysql", "db.operation", "SELECT", "db.sql.table", "orders", "server.address", "db1"}, "db1.send SELECT orders"},
		{kClient, "q", []string{"db.system.name", "redis", "db.query.summary", "GET cart:*"}, "svc.send GET cart:*"},
		{kProducer, "publish orders", []string{"messaging.system", "kafka", "messaging.operation.name", "publish", "messaging.destination.name", "orders"}, "svc.send publish orders"},
		{kConsumer, "process orders", []string{"messaging.system", "kafka", "messaging.operation.type", "process", "messaging.destination.name", "orders"}, "svc.execute process orders"},
		{kClient, "receive orders", []string{"messaging.system", "kafka", "messaging.operation.type", "receive", "messaging.destination.name", "orders"}, "svc.receive receive orders"},
		{kInternal, "chunking.serialize", nil, "chunking.serialize"},
		{kInternal, "compute", nil, "svc/compute"},
		{0, "legacy", nil, "svc/legacy"},
	} {
		data := otlpFile(tres{service: "svc", spans: []tspan{{"t", "r", "", tc.name, tc.kind, 0, 1, tc.attrs, nil, nil}}})
		rep, _, err := readInput(t, Input{Rows: &Rows{Source: RowsSemconv}}, data)
		if err != nil {
			t.Fatal(err)
		}
		if names := rowNames(rep); len(names) != 1 || names[0] != tc.want {
			t.Errorf("%s %v: rows %v, want %q", tc.name, tc.attrs, names, tc.want)
		}
	}
}

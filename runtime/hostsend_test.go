package runtime

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// rowHostSend is the row of a task host's send of its reply.
const rowHostSend = "taskhost.send/reply"

// TestOneViewOfTheHostSend: the task host's send of its reply is a row of
// the run's own table, the same row (spans, mean, p99, q) as amdahl
// report reads from the run's trace file, and no span ends after its
// parent, neither in the trace file nor among the spans the parent and
// its hosts export to an OTLP backend, where the host's own
// taskhost.send is a child of the parent's runtime.host.
//
// It runs with the trace file alone (amdahl run --out: the runtime's own
// tracer, units kept in records) and with the trace file beside an OTLP
// backend that the hosts export to too (the SDK's spans). A host that
// read the send's end after its write returned could be preempted there
// while the parent read the reply and ended runtime.host: its span then
// ended after its parent's, in a few units of every hundred.
func TestOneViewOfTheHostSend(t *testing.T) {
	units := 400
	if testing.Short() {
		units = 150
	}
	t.Run("trace file", func(t *testing.T) { testOneViewOfTheHostSend(t, units, false) })
	t.Run("trace file and otlp", func(t *testing.T) { testOneViewOfTheHostSend(t, units, true) })
}

func testOneViewOfTheHostSend(t *testing.T, units int, otlp bool) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	opts := []otelsetup.Option{otelsetup.WithLookupEnv(noEnv), otelsetup.WithTraceFile(path)}
	var col *traceCollector
	if otlp {
		col = newTraceCollector(t)
		opts = append(opts, otelsetup.WithOTLP(col.addr, "grpc"))
	}
	tel, err := otelsetup.Setup(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := scenario.Parse("small.yaml", []byte("name: small\ncount: 1\nworkloads:\n  - kind: taskhost\n    task: {config_mean: 8KB, config_min: 1KB, config_cap: 64KB, environment: 2KB, execute_passes: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	sc.Count = units
	cfg := testConfig(t, testSettings(t), nil)
	cfg.UseTelemetry(tel)
	if otlp {
		cfg.Hosts.Env = append(cfg.Hosts.Env, otelsetup.EnvOTLPEndpoint+"="+col.addr)
	}
	sum, err := Run(ctx, cfg, sc)
	if err != nil {
		t.Fatal(err)
	}
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatalf("telemetry shutdown: %v", err)
	}
	if sum.OK != units || sum.Attribution.Works != units {
		t.Fatalf("got %d ok, %d attributed; want %d of each (%v)", sum.OK, sum.Attribution.Works, units, sum.Examples)
	}

	// The table's row, and amdahl report's of the trace file.
	var acc attribution.Accumulator
	diag, err := attribution.ReadFile(path, spans.Limits{}, nil, acc.Add)
	if err != nil {
		t.Fatal(err)
	}
	acc.AddDiagnostics(diag)
	live, file := rowOf(sum.Attribution, rowHostSend), rowOf(acc.Report(false), rowHostSend)
	switch {
	case live == nil:
		t.Errorf("the run's table has no %s row; rows: %v", rowHostSend, rowNames(sum.Attribution))
	case live.Spans != units || live.Q <= 0:
		t.Errorf("the run's %s row: %d spans, q %.4f; want %d spans and some critical time", rowHostSend, live.Spans, live.Q, units)
	}
	if !reflect.DeepEqual(live, file) {
		t.Errorf("%s row: the run's table %+v, amdahl report of its trace file %+v", rowHostSend, live, file)
	}

	// No span ends after its parent: in the trace file, and in the backend.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var inFile []spans.Span
	if err := spans.ReadOTLPJSON(f, path, spans.Limits{}, nil, nil, func(s spans.Span) error { inFile = append(inFile, s); return nil }); err != nil {
		t.Fatal(err)
	}
	checkEndsInParents(t, "trace file", inFile)
	if otlp {
		var exported []spans.Span
		sends := 0
		for _, e := range col.spans() {
			sp := e.span
			var s spans.Span
			copy(s.TraceID[:], sp.GetTraceId())
			copy(s.SpanID[:], sp.GetSpanId())
			copy(s.ParentID[:], sp.GetParentSpanId())
			s.Name, s.Start, s.End = sp.GetName(), int64(sp.GetStartTimeUnixNano()), int64(sp.GetEndTimeUnixNano())
			exported = append(exported, s)
			if s.Name == "taskhost.send" && e.service == HostServiceName {
				sends++
			}
		}
		if sends != units {
			t.Errorf("the backend got %d taskhost.send spans from the hosts, want %d", sends, units)
		}
		checkEndsInParents(t, "otlp backend", exported)
	}
}

// checkEndsInParents fails for every span that ends after its parent.
func checkEndsInParents(t *testing.T, where string, all []spans.Span) {
	t.Helper()
	byID := make(map[spans.SpanID]*spans.Span, len(all))
	for i := range all {
		byID[all[i].SpanID] = &all[i]
	}
	late := map[string]int{}
	var first string
	for _, s := range all {
		p, ok := byID[s.ParentID]
		if !ok || s.End <= p.End {
			continue
		}
		k := s.Name + " after " + p.Name
		late[k]++
		if first == "" {
			first = fmt.Sprintf("%s %s ends %d ns after its parent %s", s.Name, hex.EncodeToString(s.SpanID[:]), s.End-p.End, p.Name)
		}
	}
	if len(late) > 0 {
		t.Errorf("%s: spans that end after their parent, by names: %v (of %d spans; e.g. %s)", where, late, len(all), first)
	}
}

func rowOf(r attribution.Report, name string) *attribution.Row {
	for i := range r.Rows {
		if r.Rows[i].Name == name {
			return &r.Rows[i]
		}
	}
	return nil
}

func rowNames(r attribution.Report) []string {
	var out []string
	for _, row := range r.Rows {
		out = append(out, row.Name)
	}
	return out
}

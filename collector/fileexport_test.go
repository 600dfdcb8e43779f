package collector_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// shopTraces is n checkouts of three services as otelhttp records them:
// frontend's server span (10 ms) with an HTTP client call to cart (2–6
// ms) and cart's server span inside it (3–5 ms), in three resources.
func shopTraces(n int) ptrace.Traces {
	td := ptrace.NewTraces()
	res := map[string]ptrace.SpanSlice{}
	for _, svc := range []string{"frontend", "cart"} {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", svc)
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName("go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp")
		res[svc] = ss.Spans()
	}
	t0 := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	at := func(ms float64) pcommon.Timestamp {
		return pcommon.NewTimestampFromTime(t0.Add(time.Duration(ms * float64(time.Millisecond))))
	}
	for i := range n {
		var tid pcommon.TraceID
		copy(tid[:], fmt.Sprintf("trace%011d", i))
		base := float64(i) * 20
		span := func(svc, name string, kind ptrace.SpanKind, id, parent byte, start, end float64) ptrace.Span {
			s := res[svc].AppendEmpty()
			s.SetTraceID(tid)
			s.SetSpanID(pcommon.SpanID{byte(i >> 8), byte(i), 0, 0, 0, 0, 0, id})
			if parent != 0 {
				s.SetParentSpanID(pcommon.SpanID{byte(i >> 8), byte(i), 0, 0, 0, 0, 0, parent})
			}
			s.SetName(name)
			s.SetKind(kind)
			s.SetStartTimestamp(at(base + start))
			s.SetEndTimestamp(at(base + end))
			s.Attributes().PutStr("http.request.method", "GET")
			return s
		}
		span("frontend", "GET /checkout", ptrace.SpanKindServer, 1, 0, 0, 10).Attributes().PutStr("http.route", "/checkout")
		span("frontend", "HTTP GET", ptrace.SpanKindClient, 2, 1, 2, 6).Attributes().PutStr("server.address", "cart")
		span("cart", "GET /cart", ptrace.SpanKindServer, 3, 2, 3, 5).Attributes().PutStr("http.route", "/cart")
	}
	return td
}

// TestFileExporterFraming: the Collector's own file exporter (JSON, its
// framing: one request per line) writes traces that amdahl's reader
// attributes: units by the trace roots, rows by the conventions.
func TestFileExporterFraming(t *testing.T) {
	path := filepath.Join(t.TempDir(), "traces.jsonl")
	f := fileexporter.NewFactory()
	cfg := f.CreateDefaultConfig().(*fileexporter.Config)
	cfg.Path = path
	ctx := context.Background()
	exp, err := f.CreateTraces(ctx, exportertest.NewNopSettings(f.Type()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	for range 2 { // two requests: two lines, the same checkouts twice
		if err := exp.ConsumeTraces(ctx, shopTraces(10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := exp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var acc attribution.Accumulator
	d, err := attribution.ReadFile(path, spans.Limits{}, nil, acc.Add) // units and rows "auto"
	if err != nil {
		t.Fatal(err)
	}
	acc.AddDiagnostics(d)
	rep := acc.Report(false)
	if rep.Works != 10 || d.Duplicates != 30 || rep.E2EMean != 10*time.Millisecond {
		t.Fatalf("%d units of mean e2e %v, %d duplicates; want 10 of 10ms, 30 (the second request)", rep.Works, rep.E2EMean, d.Duplicates)
	}
	want := map[string]float64{"frontend.execute GET /checkout": 0.6, "cart.send GET": 0.2, "cart.execute GET /cart": 0.2}
	for _, r := range rep.Rows {
		if q, ok := want[r.Name]; !ok || r.Q < q-1e-9 || r.Q > q+1e-9 {
			t.Errorf("row %s q %v, want %v (present %v)", r.Name, r.Q, q, ok)
		}
	}
}

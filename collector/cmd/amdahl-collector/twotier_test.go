package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/amdahl-rt/amdahl/collector/internal/otlpfile"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// recorded is a real amdahl run's spans (mixed, 200 units, the parent and
// its task hosts exporting over OTLP), as the Collector's file exporter
// wrote them.
var recorded = filepath.Join("..", "..", "amdahlconnector", "testdata", "mixed-otlp.jsonl.gz")

// readRecorded returns the file's requests, one ptrace.Traces per line.
func readRecorded(t *testing.T) []ptrace.Traces {
	t.Helper()
	out, err := otlpfile.Read(recorded)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// split deals td's spans to two requests by their span id, so that most
// traces have spans in both (each keeps its resource and scope).
func split(td ptrace.Traces) [2]ptrace.Traces {
	out := [2]ptrace.Traces{ptrace.NewTraces(), ptrace.NewTraces()}
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		for j := 0; j < rs.ScopeSpans().Len(); j++ {
			ss := rs.ScopeSpans().At(j)
			var dst [2]ptrace.SpanSlice
			for side := range out {
				nrs := out[side].ResourceSpans().AppendEmpty()
				rs.Resource().CopyTo(nrs.Resource())
				nss := nrs.ScopeSpans().AppendEmpty()
				ss.Scope().CopyTo(nss.Scope())
				dst[side] = nss.Spans()
			}
			for k := 0; k < ss.Spans().Len(); k++ {
				sp := ss.Spans().At(k)
				id := sp.SpanID()
				sp.CopyTo(dst[id[7]&1].AppendEmpty())
			}
		}
	}
	return out
}

// send exports td to the OTLP gRPC receiver at addr.
func send(t *testing.T, addr string, td ptrace.Traces) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ptraceotlp.NewGRPCClient(cc).Export(ctx, ptraceotlp.NewExportRequestFromTraces(td)); err != nil {
		t.Fatalf("export to %s: %v", addr, err)
	}
}

// fileTraces returns the trace ids in a file exporter's output.
func fileTraces(t *testing.T, path string) map[pcommon.TraceID]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	ids := map[pcommon.TraceID]int{}
	var um ptrace.JSONUnmarshaler
	for sc.Scan() {
		td, err := um.UnmarshalTraces(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		rss := td.ResourceSpans()
		for i := 0; i < rss.Len(); i++ {
			for j := 0; j < rss.At(i).ScopeSpans().Len(); j++ {
				ss := rss.At(i).ScopeSpans().At(j).Spans()
				for k := 0; k < ss.Len(); k++ {
					ids[ss.At(k).TraceID()]++
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// tier2Config is a tier-2 collector: the connector, the spans it
// receives written by a file exporter (for amdahl report), its metrics
// on a Prometheus exporter. docs/collector.md shows the same.
func tier2Config(otlp, prom, file string) string {
	return fmt.Sprintf(`
receivers:
  otlp:
    protocols:
      grpc: {endpoint: %s}
connectors:
  amdahl:
    wait: 2s
    metrics_flush_interval: 500ms
exporters:
  prometheus:
    endpoint: %s
  file:
    path: %s
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces: {receivers: [otlp], exporters: [amdahl, file]}
    metrics: {receivers: [amdahl], exporters: [prometheus]}
`, otlp, prom, file)
}

// tier1Config is a tier-1 collector: every span of a trace to the same
// tier-2 (load_balancing, static resolver, routing by trace id).
func tier1Config(otlp string, backends []string) string {
	return fmt.Sprintf(`
receivers:
  otlp:
    protocols:
      grpc: {endpoint: %s}
exporters:
  load_balancing:
    routing_key: traceID
    protocol:
      otlp:
        tls: {insecure: true}
        timeout: 10s
    resolver:
      static:
        hostnames: [%s]
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces: {receivers: [otlp], exporters: [load_balancing]}
`, otlp, strings.Join(backends, ", "))
}

// TestTwoTiers: two tier-1 collectors (load_balancing by trace id) in
// front of two tier-2 collectors (the connector); every trace's spans are
// dealt to both tier-1s. No trace is split between the tier-2s, and q of
// every row from Prometheus (summed over both tier-2s) equals amdahl
// report of the spans the tier-2s wrote (file exporter) within 0.5 pp.
func TestTwoTiers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four collectors and Prometheus")
	}
	dir := t.TempDir()
	var t2otlp, t2prom, files []string
	var tier2 []*proc
	for i := range 2 {
		otlp := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		prom := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		file := filepath.Join(dir, fmt.Sprintf("tier2-%d.jsonl", i))
		p := startCollector(t, fmt.Sprintf("tier2-%d", i), tier2Config(otlp, prom, file))
		waitListening(t, p, otlp)
		waitListening(t, p, prom)
		t2otlp, t2prom, files = append(t2otlp, otlp), append(t2prom, prom), append(files, file)
		tier2 = append(tier2, p)
	}
	var t1 []string
	var tier1 []*proc
	for i := range 2 {
		otlp := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		p := startCollector(t, fmt.Sprintf("tier1-%d", i), tier1Config(otlp, t2otlp))
		waitListening(t, p, otlp)
		t1, tier1 = append(t1, otlp), append(tier1, p)
	}
	prom := startPrometheus(t, t2prom...)

	input := readRecorded(t)
	var sent int
	for _, td := range input {
		sent += td.SpanCount()
		parts := split(td)
		for side, part := range parts {
			send(t, t1[side], part)
		}
	}
	want := reportOfFiles(t, recorded)
	series := `amdahl_work_duration_seconds_count{amdahl_source="collector"}`
	waitFor(t, prom, "sum("+series+")", float64(want.Works), 60*time.Second)
	// Both tier-2s must have been scraped since: the count above is a sum.
	sampleAfter(t, prom, series, "sum("+series+")", float64(want.Works), time.Now())

	crit, err := promQuery(context.Background(), prom, `sum by (amdahl_component, amdahl_phase, amdahl_direction, amdahl_gap_from, amdahl_gap_to) (amdahl_phase_critical_seconds_sum{amdahl_source="collector"})`, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	work, ok := scalar(t, prom, `sum(amdahl_work_duration_seconds_sum{amdahl_source="collector"})`)
	if !ok {
		t.Fatal("no amdahl_work_duration_seconds_sum")
	}
	instances, _ := scalar(t, prom, `count(count by (instance) (amdahl_work_duration_seconds_count{amdahl_source="collector"}))`)
	if instances != 2 {
		t.Errorf("%v tier-2 instances have units, want 2", instances)
	}
	got := map[string]float64{}
	for _, s := range crit {
		got[rowName(s.Metric)] = s.Value / work
	}

	// Stop the collectors (tier 1 first) so the file exporters flush.
	for _, p := range append(tier1, tier2...) {
		p.stop()
	}
	// What the tier-2s wrote: each trace in one file only, all spans.
	var wrote []io.Reader
	seen := map[pcommon.TraceID]int{}
	for i, f := range files {
		ids := fileTraces(t, f)
		for id := range ids {
			seen[id]++
		}
		if len(ids) == 0 {
			t.Errorf("%s: no trace reached tier-2 %d", f, i)
		}
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		wrote = append(wrote, r, strings.NewReader("\n"))
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("trace %s was split between the tier-2s", id)
		}
	}
	var acc attribution.Accumulator
	d, err := attribution.Read(io.MultiReader(wrote...), "tier-2 files", spans.Limits{}, nil, acc.Add)
	if err != nil {
		t.Fatal(err)
	}
	if d.Spans != sent {
		t.Errorf("the tier-2s wrote %d spans, %d were sent", d.Spans, sent)
	}
	rep := acc.Report(false)
	var worst float64
	var lines []string
	if len(rep.Gaps) == 0 {
		t.Error("amdahl report found no gap: the gaps' q are not checked")
	}
	for _, r := range append(rep.Rows, rep.Gaps...) {
		if !r.Key.Phase.Valid() && !r.Key.Gap {
			continue // "other": the sum of the gaps
		}
		diff := math.Abs(got[r.Name] - r.Q)
		worst = max(worst, diff)
		if diff > 0.005 {
			t.Errorf("row %s: Prometheus q %.3f%%, amdahl report %.3f%% (more than 0.5 pp apart)", r.Name, 100*got[r.Name], 100*r.Q)
		}
		lines = append(lines, fmt.Sprintf("%-30s report %7.3f%%  prometheus %7.3f%%", r.Name, 100*r.Q, 100*got[r.Name]))
		delete(got, r.Name)
	}
	for row, q := range got {
		t.Errorf("row %s: Prometheus q %.3f%%, not in amdahl report", row, 100*q)
	}
	sort.Strings(lines)
	t.Logf("%d traces over 2 tier-2s (%d units, %d spans), largest q difference %.4f pp:\n%s",
		len(seen), rep.Works, d.Spans, 100*worst, strings.Join(lines, "\n"))
}

// reportOfFiles is amdahl report's attribution of a gzipped trace file.
func reportOfFiles(t *testing.T, path string) attribution.Report {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var acc attribution.Accumulator
	if _, err := attribution.Read(zr, path, spans.Limits{}, nil, acc.Add); err != nil {
		t.Fatal(err)
	}
	return acc.Report(false)
}

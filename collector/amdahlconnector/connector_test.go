package amdahlconnector

import (
	"compress/gzip"
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/amdahl-rt/amdahl/collector/internal/otlpfile"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// mixedFile is a trace file of `amdahl run --scenario mixed` (200 units,
// task hosts and chunked completions), as its --out writes it.
var mixedFile = filepath.Join("testdata", "mixed.jsonl.gz")

// readTraces reads an OTLP JSON lines file (gzipped) as the Collector's
// receivers would hand it on: one ptrace.Traces per line.
func readTraces(t testing.TB, path string) []ptrace.Traces {
	t.Helper()
	out, err := otlpfile.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// reportOf is amdahl report's attribution of the same file.
func reportOf(t testing.TB, path string) attribution.Report {
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
	d, err := attribution.Read(zr, path, spans.Limits{}, nil, acc.Add)
	if err != nil {
		t.Fatal(err)
	}
	acc.AddDiagnostics(d)
	return acc.Report(false)
}

// split returns td as batches of one span each, the order of arrival
// reversed within each trace (the root arrives last, as it ends last).
func splitSpans(td ptrace.Traces) []ptrace.Traces {
	var out []ptrace.Traces
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		for j := 0; j < rs.ScopeSpans().Len(); j++ {
			ss := rs.ScopeSpans().At(j)
			for k := 0; k < ss.Spans().Len(); k++ {
				one := ptrace.NewTraces()
				nrs := one.ResourceSpans().AppendEmpty()
				rs.Resource().CopyTo(nrs.Resource())
				nss := nrs.ScopeSpans().AppendEmpty()
				ss.Scope().CopyTo(nss.Scope())
				ss.Spans().At(k).CopyTo(nss.Spans().AppendEmpty())
				out = append(out, one)
			}
		}
	}
	return out
}

// fakeClock is the connector's clock in tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// newTest returns a connector (not started: the test drives expire) with a
// fake clock, a metrics sink and test telemetry.
func newTest(t *testing.T, cfg *Config) (*amdahlConnector, *consumertest.MetricsSink, *fakeClock, *componenttest.Telemetry) {
	t.Helper()
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	set := connectortest.NewNopSettings(typ)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	sink := new(consumertest.MetricsSink)
	c, err := newConnector(set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	c.now = clk.now
	return c, sink, clk, tel
}

// qOf computes each row's q from the last metrics sent, as the dashboards'
// QCritical does: Σ amdahl.phase.critical sum by row / Σ
// amdahl.work.duration sum. It also returns the number of units.
func qOf(t *testing.T, sink *consumertest.MetricsSink) (map[string]float64, uint64) {
	t.Helper()
	all := sink.AllMetrics()
	if len(all) == 0 {
		t.Fatal("no metrics sent")
	}
	md := all[len(all)-1] // cumulative: the last holds everything
	crit := map[string]float64{}
	var work float64
	var units uint64
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		sms := rms.At(i).ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				m := ms.At(k)
				dps := m.Histogram().DataPoints()
				for l := 0; l < dps.Len(); l++ {
					dp := dps.At(l)
					switch m.Name() {
					case telemetry.MetricWorkDuration:
						work += dp.Sum()
						units += dp.Count()
					case telemetry.MetricPhaseCritical:
						crit[rowOf(dp.Attributes())] += dp.Sum()
					}
				}
			}
		}
	}
	q := map[string]float64{}
	for r, v := range crit {
		q[r] = v / work
	}
	return q, units
}

func rowOf(a pcommon.Map) string {
	get := func(k string) string {
		if v, ok := a.Get(k); ok {
			return v.AsString()
		}
		return ""
	}
	if get("amdahl.phase") == telemetry.PhaseGap {
		return "gap " + get("amdahl.gap.from") + " → " + get("amdahl.gap.to") // as attribution.Key.String
	}
	r := get("amdahl.component") + "." + get("amdahl.phase")
	if d := get("amdahl.direction"); d != "" {
		r += "/" + d
	}
	return r
}

// TestSameQAsReport: the connector fed a run's spans one at a time, in
// an order where each root comes after its children, emits the q of
// amdahl report of the same file on every row and every gap of "other"
// (amdahl.phase="gap" by its ends, as the runtime records them), and as
// many units.
func TestSameQAsReport(t *testing.T) {
	c, sink, clk, _ := newTest(t, createDefaultConfig())
	for _, td := range readTraces(t, mixedFile) {
		batches := splitSpans(td)
		for i := len(batches) - 1; i >= 0; i-- {
			if err := c.ConsumeTraces(context.Background(), batches[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	clk.advance(c.cfg.Wait)
	c.expire(clk.now())
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, units := qOf(t, sink)
	want := reportOf(t, mixedFile)
	if int(units) != want.Works {
		t.Errorf("units %d, want %d (amdahl report's)", units, want.Works)
	}
	rows := 0
	for _, r := range want.Rows {
		if !r.Key.Phase.Valid() {
			continue
		}
		rows++
		if d := math.Abs(got[r.Name] - r.Q); d > 1e-9 {
			t.Errorf("row %s: q %.6f, want %.6f (amdahl report's)", r.Name, got[r.Name], r.Q)
		}
	}
	if len(want.Gaps) == 0 {
		t.Fatal("amdahl report found no gap in the recorded run: the test would not check gaps")
	}
	for _, g := range want.Gaps {
		rows++
		if d := math.Abs(got[g.Name] - g.Q); d > 1e-9 {
			t.Errorf("%s: q %.6f, want %.6f (amdahl report's)", g.Name, got[g.Name], g.Q)
		}
	}
	if len(got) != rows {
		t.Errorf("%d rows, want %d: %v", len(got), rows, got)
	}
}

// TestMetricShape: names, units, temporality, buckets and attributes are
// the runtime's (telemetry.DurationBuckets; amdahl.* attributes), plus
// amdahl.source; the resource is the unit root's service.
func TestMetricShape(t *testing.T) {
	c, sink, _, _ := newTest(t, createDefaultConfig())
	for _, td := range readTraces(t, mixedFile) {
		if err := c.ConsumeTraces(context.Background(), td); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	md := sink.AllMetrics()[0]
	if n := md.ResourceMetrics().Len(); n != 1 {
		t.Fatalf("%d resources, want 1", n)
	}
	rm := md.ResourceMetrics().At(0)
	if v, _ := rm.Resource().Attributes().Get("service.name"); v.AsString() != "amdahl" {
		t.Errorf("resource service.name %q, want amdahl", v.AsString())
	}
	if v, ok := rm.Resource().Attributes().Get("service.instance.id"); !ok || v.AsString() == "" {
		t.Error("resource has no service.instance.id")
	}
	seen := map[string]bool{}
	gaps := 0
	ms := rm.ScopeMetrics().At(0).Metrics()
	for i := 0; i < ms.Len(); i++ {
		m := ms.At(i)
		seen[m.Name()] = true
		if m.Unit() != "s" || m.Type() != pmetric.MetricTypeHistogram ||
			m.Histogram().AggregationTemporality() != pmetric.AggregationTemporalityCumulative {
			t.Errorf("%s: unit %q type %v temporality %v, want s, Histogram, Cumulative", m.Name(), m.Unit(), m.Type(), m.Histogram().AggregationTemporality())
		}
		dps := m.Histogram().DataPoints()
		for j := 0; j < dps.Len(); j++ {
			dp := dps.At(j)
			if got := dp.ExplicitBounds().AsRaw(); !equalFloats(got, telemetry.DurationBuckets) {
				t.Fatalf("%s: bounds %v, want telemetry.DurationBuckets", m.Name(), got)
			}
			var n uint64
			for _, b := range dp.BucketCounts().AsRaw() {
				n += b
			}
			if n != dp.Count() {
				t.Errorf("%s: buckets hold %d, count %d", m.Name(), n, dp.Count())
			}
			keys := map[string]string{}
			dp.Attributes().Range(func(k string, v pcommon.Value) bool { keys[k] = v.AsString(); return true })
			if keys["amdahl.source"] != "collector" || keys["amdahl.scenario"] != "mixed" || keys["amdahl.variant"] != "baseline" ||
				keys["amdahl.transport"] == "" {
				t.Errorf("%s: attributes %v, want amdahl.source=collector, scenario mixed, variant baseline, a transport", m.Name(), keys)
			}
			_, hasPhase := keys["amdahl.phase"]
			_, hasOutcome := keys["amdahl.outcome"]
			_, hasComponent := keys["amdahl.component"]
			if keys["amdahl.phase"] == telemetry.PhaseGap {
				// A gap: its ends, no component, critical time only (as
				// telemetry.Component.RecordCriticalGap).
				gaps++
				if m.Name() != telemetry.MetricPhaseCritical || hasComponent || hasOutcome || keys["amdahl.gap.from"] == "" || keys["amdahl.gap.to"] == "" {
					t.Errorf("%s: gap attributes %v", m.Name(), keys)
				}
				continue
			}
			if m.Name() == telemetry.MetricWorkDuration && (hasPhase || !hasOutcome) ||
				m.Name() != telemetry.MetricWorkDuration && (!hasPhase || hasOutcome || !hasComponent || keys["amdahl.component"] == "") {
				t.Errorf("%s: attributes %v", m.Name(), keys)
			}
		}
	}
	for _, n := range []string{telemetry.MetricWorkDuration, telemetry.MetricPhaseDuration, telemetry.MetricPhaseCritical} {
		if !seen[n] {
			t.Errorf("no %s", n)
		}
	}
	if gaps == 0 {
		t.Error("no gap series")
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// trace builds a small amdahl trace: a root amdahl.work and one phase
// child per name, in one resource.
type traceBuilder struct {
	td  ptrace.Traces
	ss  ptrace.SpanSlice
	tid pcommon.TraceID
	t0  time.Time
}

func newTrace(id byte, resAttrs map[string]string) *traceBuilder {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	for k, v := range resAttrs {
		rs.Resource().Attributes().PutStr(k, v)
	}
	return &traceBuilder{td: td, ss: rs.ScopeSpans().AppendEmpty().Spans(), tid: pcommon.TraceID([16]byte{id, 1}), t0: time.Unix(1_700_000_000, 0)}
}

func (b *traceBuilder) span(id, parent byte, name string, from, to time.Duration, attrs map[string]string) ptrace.Span {
	s := b.ss.AppendEmpty()
	s.SetTraceID(b.tid)
	s.SetSpanID(pcommon.SpanID([8]byte{id}))
	if parent != 0 {
		s.SetParentSpanID(pcommon.SpanID([8]byte{parent}))
	}
	s.SetName(name)
	s.SetStartTimestamp(pcommon.NewTimestampFromTime(b.t0.Add(from)))
	s.SetEndTimestamp(pcommon.NewTimestampFromTime(b.t0.Add(to)))
	for k, v := range attrs {
		s.Attributes().PutStr(k, v)
	}
	return s
}

// unitTrace is a unit of 10 ms: ipc.send/request 2 ms then
// taskhost.execute 6 ms, the rest the root's own.
func unitTrace(id byte, withRoot bool, rootAttrs map[string]string) ptrace.Traces {
	b := newTrace(id, map[string]string{"service.name": "svc", "service.version": "2.0"})
	b.span(2, 1, "ipc.send", time.Millisecond, 3*time.Millisecond, map[string]string{"amdahl.component": "ipc", "amdahl.phase": "send", "amdahl.direction": "request"})
	b.span(3, 1, "taskhost.execute", 3*time.Millisecond, 9*time.Millisecond, map[string]string{"amdahl.component": "taskhost", "amdahl.phase": "execute"})
	if withRoot {
		b.span(1, 0, "amdahl.work", 0, 10*time.Millisecond, rootAttrs)
	}
	return b.td
}

func rootOnly(id byte) ptrace.Traces {
	b := newTrace(id, map[string]string{"service.name": "svc"})
	b.span(1, 0, "amdahl.work", 0, 10*time.Millisecond, nil)
	return b.td
}

// TestHoldsUntilRootPlusWait: a unit is attributed wait after its root
// arrived, not before, and not while its root is missing.
func TestHoldsUntilRootPlusWait(t *testing.T) {
	cfg := createDefaultConfig()
	c, sink, clk, _ := newTest(t, cfg)
	ctx := context.Background()
	if err := c.ConsumeTraces(ctx, unitTrace(1, false, nil)); err != nil {
		t.Fatal(err)
	}
	clk.advance(cfg.Wait * 2)
	c.expire(clk.now())
	if tr, s, _ := c.sizes(); tr != 1 || s != 2 {
		t.Fatalf("without its root: %d traces, %d spans held, want 1, 2", tr, s)
	}
	if err := c.ConsumeTraces(ctx, rootOnly(1)); err != nil {
		t.Fatal(err)
	}
	clk.advance(cfg.Wait - time.Millisecond)
	c.expire(clk.now())
	if tr, _, _ := c.sizes(); tr != 1 {
		t.Fatalf("before the wait: %d traces held, want 1", tr)
	}
	clk.advance(time.Millisecond)
	c.expire(clk.now())
	if tr, s, b := c.sizes(); tr != 0 || s != 0 || b != 0 {
		t.Fatalf("after the wait: %d traces, %d spans, %d bytes held, want none", tr, s, b)
	}
	if err := c.flush(ctx); err != nil {
		t.Fatal(err)
	}
	q, units := qOf(t, sink)
	if units != 1 || math.Abs(q["ipc.send/request"]-0.2) > 1e-9 || math.Abs(q["taskhost.execute"]-0.6) > 1e-9 {
		t.Fatalf("units %d, q %v; want 1 unit, ipc.send/request 0.2, taskhost.execute 0.6", units, q)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// sumMetric is the sum of a health counter's points with reason (all
// points if reason is ""); 0 if nothing was recorded.
func sumMetric(t *testing.T, tel *componenttest.Telemetry, name, reason string) int64 {
	t.Helper()
	m, err := tel.GetMetric(name)
	if err != nil {
		return 0
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: data %T, want an int64 sum", name, m.Data)
	}
	var n int64
	for _, dp := range sum.DataPoints {
		if r, _ := dp.Attributes.Value(attrReason); reason == "" || r.Emit() == reason {
			n += dp.Value
		}
	}
	return n
}

// TestBounds: each bound drops what it must, counts it in the health
// metrics, never attributes a late span twice, and logs once per interval.
func TestBounds(t *testing.T) {
	ctx := context.Background()
	t.Run("max_traces evicts the oldest", func(t *testing.T) {
		cfg := createDefaultConfig()
		cfg.MaxTraces = 2
		c, sink, clk, tel := newTest(t, cfg)
		for id := byte(1); id <= 3; id++ {
			if err := c.ConsumeTraces(ctx, unitTrace(id, true, nil)); err != nil {
				t.Fatal(err)
			}
		}
		clk.advance(cfg.Wait)
		c.expire(clk.now())
		c.report(true)
		if err := c.flush(ctx); err != nil {
			t.Fatal(err)
		}
		if _, units := qOf(t, sink); units != 2 {
			t.Errorf("%d units attributed, want 2", units)
		}
		if n := sumMetric(t, tel, MetricTracesEvicted, reasonMaxTraces); n != 1 {
			t.Errorf("traces evicted (max_traces) %d, want 1", n)
		}
		// The evicted trace's late spans are refused, not attributed.
		if err := c.ConsumeTraces(ctx, unitTrace(1, true, nil)); err != nil {
			t.Fatal(err)
		}
		c.report(true)
		if n := sumMetric(t, tel, MetricSpansRefused, reasonDropped); n != 3 {
			t.Errorf("spans refused (trace_dropped) %d, want 3", n)
		}
		_ = c.Shutdown(ctx)
	})
	t.Run("max_spans_per_trace refuses and drops the trace", func(t *testing.T) {
		cfg := createDefaultConfig()
		cfg.MaxSpansPerTrace = 2
		c, sink, clk, tel := newTest(t, cfg)
		if err := c.ConsumeTraces(ctx, unitTrace(1, true, nil)); err != nil {
			t.Fatal(err)
		}
		if err := c.ConsumeTraces(ctx, unitTrace(2, false, nil)); err != nil {
			t.Fatal(err)
		}
		clk.advance(cfg.Wait)
		c.expire(clk.now())
		c.report(true)
		if n := sumMetric(t, tel, MetricSpansRefused, reasonMaxSpans); n != 1 {
			t.Errorf("spans refused (max_spans_per_trace) %d, want 1", n)
		}
		if n := sumMetric(t, tel, MetricTracesEvicted, reasonMaxSpans); n != 1 {
			t.Errorf("traces evicted (max_spans_per_trace) %d, want 1", n)
		}
		if err := c.flush(ctx); err != nil {
			t.Fatal(err)
		}
		if len(sink.AllMetrics()) != 0 {
			t.Errorf("a truncated trace was attributed")
		}
		_ = c.Shutdown(ctx)
	})
	t.Run("max_bytes evicts the oldest", func(t *testing.T) {
		cfg := createDefaultConfig()
		per := int64(traceBytes + 3*spanBytes + 200)
		cfg.MaxBytes = 2 * per
		c, _, _, tel := newTest(t, cfg)
		for id := byte(1); id <= 4; id++ {
			if err := c.ConsumeTraces(ctx, unitTrace(id, true, nil)); err != nil {
				t.Fatal(err)
			}
			if _, _, b := c.sizes(); b > cfg.MaxBytes {
				t.Fatalf("%d bytes held, over max_bytes %d", b, cfg.MaxBytes)
			}
		}
		c.report(true)
		if n := sumMetric(t, tel, MetricTracesEvicted, reasonMaxBytes); n < 2 {
			t.Errorf("traces evicted (max_bytes) %d, want ≥ 2", n)
		}
		_ = c.Shutdown(ctx)
	})
	t.Run("late spans are counted, not attributed twice", func(t *testing.T) {
		cfg := createDefaultConfig()
		c, sink, clk, tel := newTest(t, cfg)
		if err := c.ConsumeTraces(ctx, unitTrace(1, true, nil)); err != nil {
			t.Fatal(err)
		}
		clk.advance(cfg.Wait)
		c.expire(clk.now())
		if err := c.ConsumeTraces(ctx, unitTrace(1, true, nil)); err != nil {
			t.Fatal(err)
		}
		clk.advance(cfg.Wait)
		c.expire(clk.now())
		c.report(true)
		if n := sumMetric(t, tel, MetricSpansLate, ""); n != 3 {
			t.Errorf("late spans %d, want 3", n)
		}
		if err := c.flush(ctx); err != nil {
			t.Fatal(err)
		}
		if _, units := qOf(t, sink); units != 1 {
			t.Errorf("%d units, want 1", units)
		}
		if n := sumMetric(t, tel, MetricUnitsAttributed, ""); n != 1 {
			t.Errorf("units attributed %d, want 1", n)
		}
		_ = c.Shutdown(ctx)
	})
	t.Run("a trace without root times out", func(t *testing.T) {
		cfg := createDefaultConfig()
		c, _, clk, tel := newTest(t, cfg)
		if err := c.ConsumeTraces(ctx, unitTrace(1, false, nil)); err != nil {
			t.Fatal(err)
		}
		clk.advance(cfg.TraceTimeout)
		c.expire(clk.now())
		c.report(true)
		if n := sumMetric(t, tel, MetricTracesEvicted, reasonTimeout); n != 1 {
			t.Errorf("traces evicted (timeout) %d, want 1", n)
		}
		_ = c.Shutdown(ctx)
	})
}

// TestLogsOncePerInterval: many evictions make one warning per
// log_interval, with the counts.
func TestLogsOncePerInterval(t *testing.T) {
	ctx := context.Background()
	cfg := createDefaultConfig()
	cfg.MaxTraces = 1
	c, _, clk, _ := newTest(t, cfg)
	core, logs := observer.New(zapcore.WarnLevel)
	c.logger = zap.New(core)
	for id := byte(1); id <= 50; id++ {
		if err := c.ConsumeTraces(ctx, unitTrace(id, true, nil)); err != nil {
			t.Fatal(err)
		}
		clk.advance(time.Second)
		c.report(false)
	}
	// 50 s of evictions: the first is logged at once, the rest a minute later.
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d warnings in 50 s, want 1", n)
	}
	clk.advance(cfg.LogInterval)
	c.report(false)
	all := logs.All()
	if len(all) != 2 {
		t.Fatalf("%d warnings after the interval, want 2", len(all))
	}
	if n := all[0].ContextMap()["traces_evicted_max_traces"]; n != int64(1) {
		t.Errorf("first warning: traces_evicted_max_traces %v, want 1", n)
	}
	if n := all[1].ContextMap()["traces_evicted_max_traces"]; n != int64(48) {
		t.Errorf("second warning: traces_evicted_max_traces %v, want 48", n)
	}
	_ = c.Shutdown(ctx)
}

// TestVariantAttribute: the variant comes from the first configured
// attribute present, on the root span then its resource.
func TestVariantAttribute(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		keys  []string
		attrs map[string]string
		want  string
	}{
		{"amdahl.variant on the root", nil, map[string]string{"amdahl.variant": "canary"}, "canary"},
		{"else service.version of the resource", nil, nil, "2.0"},
		{"configured key", []string{"deployment"}, map[string]string{"deployment": "blue", "amdahl.variant": "x"}, "blue"},
		{"none present", []string{"nope"}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := createDefaultConfig()
			if tc.keys != nil {
				cfg.VariantAttributes = tc.keys
			}
			c, sink, _, _ := newTest(t, cfg)
			if err := c.ConsumeTraces(ctx, unitTrace(1, true, tc.attrs)); err != nil {
				t.Fatal(err)
			}
			if err := c.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			md := sink.AllMetrics()[0]
			dp := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Histogram().DataPoints().At(0)
			got := ""
			v, ok := dp.Attributes().Get("amdahl.variant")
			if ok {
				got = v.AsString()
			}
			if got != tc.want || ok != (tc.want != "") {
				t.Fatalf("amdahl.variant %q (present %v), want %q", got, ok, tc.want)
			}
		})
	}
}

// TestRunFlushes: started, the connector attributes and flushes by
// itself, and Shutdown stops its goroutine (goleak checks).
func TestRunFlushes(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Wait = 20 * time.Millisecond
	cfg.FlushInterval = 20 * time.Millisecond
	set := connectortest.NewNopSettings(typ)
	sink := new(consumertest.MetricsSink)
	c, err := NewFactory().CreateTracesToMetrics(context.Background(), set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	if err := c.ConsumeTraces(context.Background(), unitTrace(1, true, nil)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for sink.DataPointCount() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if sink.DataPointCount() == 0 {
		t.Fatal("nothing flushed within 10 s")
	}
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSemconvTraces: traces with no amdahl attribute (OTel SDK and contrib
// instrumentations) are attributed with amdahl report's defaults: each
// trace's root is a unit, rows come from the semantic conventions, with
// the operation in amdahl.operation.
func TestSemconvTraces(t *testing.T) {
	c, sink, _, _ := newTest(t, createDefaultConfig())
	if err := c.ConsumeTraces(context.Background(), semconvTraces(50)); err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	q, units := qOf(t, sink)
	if units != 50 {
		t.Fatalf("%d units, want 50 (one per trace root)", units)
	}
	var ops []string
	md := sink.AllMetrics()[len(sink.AllMetrics())-1]
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		rm := md.ResourceMetrics().At(i)
		if v, _ := rm.Resource().Attributes().Get("service.name"); v.AsString() != "frontend" {
			t.Errorf("resource service.name %q, want frontend (the units' root service)", v.AsString())
		}
		ms := rm.ScopeMetrics().At(0).Metrics()
		for j := 0; j < ms.Len(); j++ {
			if ms.At(j).Name() != telemetry.MetricPhaseCritical {
				continue
			}
			dps := ms.At(j).Histogram().DataPoints()
			for k := 0; k < dps.Len(); k++ {
				if v, ok := dps.At(k).Attributes().Get("amdahl.operation"); ok {
					ops = append(ops, rowOf(dps.At(k).Attributes())+" "+v.AsString())
				}
			}
		}
	}
	want := "frontend.execute GET /checkout"
	found := false
	for _, o := range ops {
		found = found || o == want
	}
	if !found {
		t.Errorf("rows with operations %q, want one %q", ops, want)
	}
	var sum float64
	for _, v := range q {
		sum += v
	}
	if sum <= 0 || sum > 1+1e-9 {
		t.Errorf("q adds up to %v, want in (0, 1]", sum)
	}
}

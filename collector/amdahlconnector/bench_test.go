package amdahlconnector

import (
	"context"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/collector/internal/otlpfile"
	"github.com/open-telemetry/opentelemetry-collector-contrib/connector/spanmetricsconnector"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// semconvTraces builds n traces of services instrumented only with the
// OTel SDK and the contrib instrumentations (no amdahl attribute): an HTTP
// server root in "frontend", three parallel gRPC client calls to
// "backend" (server spans there, each with a database client span) and a
// serial cache call, as otelhttp, otelgrpc and a database client name and
// attribute them (semantic conventions v1.44), and two internal spans. 13 spans
// a trace.
func semconvTraces(n int) ptrace.Traces {
	td := ptrace.NewTraces()
	front := td.ResourceSpans().AppendEmpty()
	front.Resource().Attributes().PutStr("service.name", "frontend")
	front.Resource().Attributes().PutStr("service.instance.id", "frontend-1")
	back := td.ResourceSpans().AppendEmpty()
	back.Resource().Attributes().PutStr("service.name", "backend")
	back.Resource().Attributes().PutStr("service.instance.id", "backend-1")
	fs := front.ScopeSpans().AppendEmpty().Spans()
	bs := back.ScopeSpans().AppendEmpty().Spans()
	t0 := time.Unix(1_800_000_000, 0)
	var sid uint64
	span := func(ss ptrace.SpanSlice, tid pcommon.TraceID, parent pcommon.SpanID, name string, kind ptrace.SpanKind, from, to time.Duration) ptrace.Span {
		sid++
		s := ss.AppendEmpty()
		s.SetTraceID(tid)
		s.SetSpanID(pcommon.SpanID([8]byte{byte(sid >> 56), byte(sid >> 48), byte(sid >> 40), byte(sid >> 32), byte(sid >> 24), byte(sid >> 16), byte(sid >> 8), byte(sid)}))
		s.SetParentSpanID(parent)
		s.SetName(name)
		s.SetKind(kind)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(t0.Add(from)))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(to)))
		return s
	}
	for i := range n {
		tid := pcommon.TraceID([16]byte{0xbe, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)})
		ms := time.Millisecond
		root := span(fs, tid, pcommon.SpanID{}, "GET /checkout", ptrace.SpanKindServer, 0, 20*ms)
		for k, v := range map[string]string{"http.request.method": "GET", "http.route": "/checkout", "url.path": "/checkout", "url.scheme": "http", "server.address": "frontend"} {
			root.Attributes().PutStr(k, v)
		}
		root.Attributes().PutInt("http.response.status_code", 200)
		for j := range 3 {
			from := time.Duration(j) * ms
			c := span(fs, tid, root.SpanID(), "shop.Backend/GetItem", ptrace.SpanKindClient, from+ms, from+12*ms)
			c.Attributes().PutStr("rpc.system.name", "grpc")
			c.Attributes().PutStr("rpc.method", "shop.Backend/GetItem")
			c.Attributes().PutStr("server.address", "backend")
			s := span(bs, tid, c.SpanID(), "shop.Backend/GetItem", ptrace.SpanKindServer, from+2*ms, from+11*ms)
			s.Attributes().PutStr("rpc.system.name", "grpc")
			s.Attributes().PutStr("rpc.method", "shop.Backend/GetItem")
			s.Attributes().PutStr("rpc.response.status_code", "OK")
			db := span(bs, tid, s.SpanID(), "SELECT items", ptrace.SpanKindClient, from+3*ms, from+10*ms)
			db.Attributes().PutStr("db.system.name", "postgresql")
			db.Attributes().PutStr("db.operation.name", "SELECT")
			db.Attributes().PutStr("db.collection.name", "items")
		}
		cache := span(fs, tid, root.SpanID(), "HTTP GET", ptrace.SpanKindClient, 15*ms, 19*ms)
		cache.Attributes().PutStr("http.request.method", "GET")
		cache.Attributes().PutStr("url.full", "http://cache:8080/items")
		cache.Attributes().PutStr("server.address", "cache")
		cache.Attributes().PutInt("server.port", 8080)
		_ = span(fs, tid, root.SpanID(), "render", ptrace.SpanKindInternal, 19*ms, 20*ms)
		_ = span(fs, tid, root.SpanID(), "auth", ptrace.SpanKindInternal, 0, ms)
	}
	return td
}

// retrace gives every span of batches a trace id of generation gen, so
// that each pass is new traces to the connector (not late spans).
func retrace(batches []ptrace.Traces, gen uint32) {
	for _, td := range batches {
		otlpfile.Retrace(td, gen)
	}
}

// traceIDs returns the distinct trace ids of batches.
func traceIDs(batches []ptrace.Traces) map[pcommon.TraceID]bool {
	ids := map[pcommon.TraceID]bool{}
	for _, td := range batches {
		rss := td.ResourceSpans()
		for i := 0; i < rss.Len(); i++ {
			sss := rss.At(i).ScopeSpans()
			for j := 0; j < sss.Len(); j++ {
				ss := sss.At(j).Spans()
				for k := 0; k < ss.Len(); k++ {
					ids[ss.At(k).TraceID()] = true
				}
			}
		}
	}
	return ids
}

// cpuTime is the process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkVsSpanMetrics feeds the same recorded traces — a real amdahl
// run (testdata/mixed.jsonl.gz) and semconv traces of an OTel-SDK
// instrumented service pair — through the amdahl connector (held,
// attributed once due: the whole per-span cost) and through the contrib
// span_metrics connector (v0.161.0, default config), alternating within
// each iteration. It reports each one's CPU per span (process CPU time:
// GC included), its spans/s per core, the ratio amdahl/spanmetrics, and
// the amdahl connector's heap bytes per open trace.
func BenchmarkVsSpanMetrics(b *testing.B) {
	for _, tc := range []struct {
		name  string
		input func(b *testing.B) []ptrace.Traces
	}{
		{"amdahl", func(b *testing.B) []ptrace.Traces { return readTraces(b, mixedFile) }},
		{"semconv", func(b *testing.B) []ptrace.Traces { return []ptrace.Traces{semconvTraces(200)} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			batches := tc.input(b)
			spans := 0
			for _, td := range batches {
				spans += td.SpanCount()
			}
			ctx := context.Background()
			a, _, clk, _ := newTestB(b)
			smf := spanmetricsconnector.NewFactory()
			sm, err := smf.CreateTracesToMetrics(ctx, connectortest.NewNopSettings(smf.Type()), smf.CreateDefaultConfig(), consumertest.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			var amdahlCPU, smCPU time.Duration
			var gen uint32
			b.ResetTimer()
			for b.Loop() {
				gen++
				b.StopTimer()
				retrace(batches, gen)
				b.StartTimer()
				c0 := cpuTime()
				for _, td := range batches {
					if err := a.ConsumeTraces(ctx, td); err != nil {
						b.Fatal(err)
					}
				}
				clk.advance(a.cfg.Wait)
				a.expire(clk.now())
				c1 := cpuTime()
				for _, td := range batches {
					if err := sm.ConsumeTraces(ctx, td); err != nil {
						b.Fatal(err)
					}
				}
				c2 := cpuTime()
				amdahlCPU += c1 - c0
				smCPU += c2 - c1
			}
			n := float64(b.N) * float64(spans)
			b.ReportMetric(float64(amdahlCPU.Nanoseconds())/n, "amdahl-cpu-ns/span")
			b.ReportMetric(float64(smCPU.Nanoseconds())/n, "spanmetrics-cpu-ns/span")
			b.ReportMetric(n/amdahlCPU.Seconds(), "amdahl-spans/s/core")
			b.ReportMetric(float64(amdahlCPU)/float64(smCPU), "cpu-ratio")
			b.StopTimer()
			b.ReportMetric(bytesPerOpenTrace(b, batches), "B/open-trace")
			b.ReportMetric(float64(spans)/float64(len(traceIDs(batches))), "spans/trace")
			_ = sm.Shutdown(ctx)
			_ = a.Shutdown(ctx)
		})
	}
}

// bytesPerOpenTrace is the heap the amdahl connector holds per open trace
// while 20 copies of batches' traces wait for their roots' wait.
func bytesPerOpenTrace(b *testing.B, batches []ptrace.Traces) float64 {
	a, _, _, _ := newTestB(b)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	for g := range uint32(20) {
		b.StopTimer()
		retrace(batches, 1<<31+g)
		b.StartTimer()
		for _, td := range batches {
			if err := a.ConsumeTraces(context.Background(), td); err != nil {
				b.Fatal(err)
			}
		}
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	traces, _, _ := a.sizes()
	runtime.KeepAlive(a)
	_ = a.Shutdown(context.Background())
	if traces == 0 {
		b.Fatal("no trace held")
	}
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(traces)
}

// newTestB is newTest for benchmarks: a connector with a fake clock and
// nop telemetry.
func newTestB(b *testing.B) (*amdahlConnector, connector.Traces, *fakeClock, error) {
	b.Helper()
	c, err := newConnector(connectortest.NewNopSettings(typ), createDefaultConfig(), consumertest.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	c.now = clk.now
	return c, nil, clk, nil
}

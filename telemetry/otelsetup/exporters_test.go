package otelsetup

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/grpc"
)

// otlpMetricsServer is a real OTLP/gRPC metrics service on loopback.
type otlpMetricsServer struct {
	colmetricpb.UnimplementedMetricsServiceServer
	mu   sync.Mutex
	reqs []*colmetricpb.ExportMetricsServiceRequest
}

func (s *otlpMetricsServer) Export(_ context.Context, req *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

// histogram returns the last data point of the named histogram received.
func (s *otlpMetricsServer) histogram(name string) *metricpb.HistogramDataPoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	var last *metricpb.HistogramDataPoint
	for _, r := range s.reqs {
		for _, rm := range r.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if h := m.GetHistogram(); m.Name == name && h != nil && len(h.DataPoints) > 0 {
						last = h.DataPoints[len(h.DataPoints)-1]
					}
				}
			}
		}
	}
	return last
}

// collector serves both OTLP services on 127.0.0.1:0 until the test ends.
type collector struct {
	addr    string // http://127.0.0.1:port
	traces  *otlpServer
	metrics *otlpMetricsServer
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{addr: "http://" + ln.Addr().String(), traces: &otlpServer{got: make(chan struct{}, 1)}, metrics: &otlpMetricsServer{}}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c.traces)
	colmetricpb.RegisterMetricsServiceServer(srv, c.metrics)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return c
}

func (c *collector) spans() int {
	c.traces.mu.Lock()
	defer c.traces.mu.Unlock()
	n := 0
	for _, r := range c.traces.reqs {
		for _, rs := range r.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				n += len(ss.Spans)
			}
		}
	}
	return n
}

// record ends a unit with one phase and records a critical-path row.
func record(t *testing.T, tel *Telemetry) {
	t.Helper()
	ctx := context.Background()
	c, err := tel.Component("runtime")
	if err != nil {
		t.Fatal(err)
	}
	wctx, w := c.StartWork(ctx)
	_, ph := c.Start(wctx, telemetry.Dispatch, telemetry.None)
	ph.End()
	w.End(telemetry.OK, nil)
	c.RecordCritical(ctx, c.Name(), telemetry.Dispatch, telemetry.None, 3*time.Millisecond)
}

// TestOTLPMetricsExport: with an OTLP metrics exporter selected, Shutdown
// exports the histograms, explicit buckets kept, to a real gRPC collector,
// while /metrics serves them too.
func TestOTLPMetricsExport(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  func(addr string) map[string]string
	}{
		// amdahl's own path: grpc because no protocol is given.
		{"metrics endpoint", func(addr string) map[string]string {
			return map[string]string{EnvOTLPMetricsEndpoint: addr}
		}},
		// autoexport's path: exporter and protocol named.
		{"OTEL_METRICS_EXPORTER=otlp", func(addr string) map[string]string {
			return map[string]string{EnvMetricsExporter: "otlp", EnvOTLPEndpoint: addr, EnvOTLPProtocol: "grpc", EnvTracesExporter: "none"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			col := newCollector(t)
			env := tc.env(col.addr)
			env[EnvMetricsAddr] = "127.0.0.1:0"
			ctx := context.Background()
			tel, err := Setup(ctx, WithLookupEnv(processEnv(t, env)))
			if err != nil {
				t.Fatal(err)
			}
			record(t, tel)

			resp, err := http.Get("http://" + tel.MetricsAddr() + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			parser := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := parser.TextToMetricFamilies(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := fams["amdahl_phase_critical_seconds"]; !ok {
				t.Errorf("/metrics lacks amdahl_phase_critical_seconds beside OTLP")
			}

			if err := tel.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			dp := col.metrics.histogram(telemetry.MetricPhaseCritical)
			if dp == nil {
				t.Fatalf("collector got no %s histogram (%d requests)", telemetry.MetricPhaseCritical, len(col.metrics.reqs))
			}
			if dp.Count != 1 || dp.GetSum() != 0.003 {
				t.Errorf("%s: got count %d sum %v, want 1 and 0.003", telemetry.MetricPhaseCritical, dp.Count, dp.GetSum())
			}
			if !slices.Equal(dp.ExplicitBounds, telemetry.DurationBuckets) {
				t.Errorf("%s bounds: got %v, want %v", telemetry.MetricPhaseCritical, dp.ExplicitBounds, telemetry.DurationBuckets)
			}
			if n := col.spans(); n != 0 {
				t.Errorf("collector got %d spans, want none (traces not selected)", n)
			}
		})
	}
}

// TestTracesExporterNone: OTEL_TRACES_EXPORTER=none wins over an endpoint.
func TestTracesExporterNone(t *testing.T) {
	col := newCollector(t)
	ctx := context.Background()
	tel, err := Setup(ctx, WithLookupEnv(processEnv(t, map[string]string{
		EnvOTLPEndpoint: col.addr, EnvTracesExporter: "none",
	})))
	if err != nil {
		t.Fatal(err)
	}
	record(t, tel)
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := col.spans(); n != 0 {
		t.Errorf("collector got %d spans, want none", n)
	}
	if c := tel.OTLPSpanCounts(); c != (SpanCounts{}) {
		t.Errorf("OTLPSpanCounts: got %+v, want zero (no exporter)", c)
	}
	col.metrics.mu.Lock()
	defer col.metrics.mu.Unlock()
	if n := len(col.metrics.reqs); n != 0 {
		t.Errorf("collector got %d metric exports, want none (the generic endpoint alone is traces only)", n)
	}
}

// TestWithOTLPBeatsEnv: WithOTLP sends spans (and, with
// OTEL_METRICS_EXPORTER=otlp, metrics) to its endpoint whatever
// OTEL_TRACES_EXPORTER and the endpoint and protocol variables say.
func TestWithOTLPBeatsEnv(t *testing.T) {
	col := newCollector(t)
	ctx := context.Background()
	tel, err := Setup(ctx, WithLookupEnv(processEnv(t, map[string]string{
		EnvTracesExporter: "none", EnvMetricsExporter: "otlp",
		EnvOTLPEndpoint: "http://127.0.0.1:1", EnvOTLPProtocol: "http/protobuf",
	})), WithOTLP(col.addr, "grpc"))
	if err != nil {
		t.Fatal(err)
	}
	record(t, tel)
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := col.spans(); n != 2 {
		t.Errorf("collector got %d spans, want 2", n)
	}
	if c := tel.OTLPSpanCounts(); c.Ended != 2 || c.Exported != 2 {
		t.Errorf("OTLPSpanCounts: got %+v, want 2 ended and exported", c)
	}
	if col.metrics.histogram(telemetry.MetricPhaseCritical) == nil {
		t.Errorf("collector got no %s histogram", telemetry.MetricPhaseCritical)
	}
}

// TestExporterSelectionErrors: an unknown or unusable exporter setting is a
// *ConfigError naming the variable, and nothing is started.
func TestExporterSelectionErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		setting string
	}{
		{"unknown traces exporter", map[string]string{EnvTracesExporter: "jaeger"}, EnvTracesExporter},
		{"traces exporter in capitals", map[string]string{EnvTracesExporter: "OTLP"}, EnvTracesExporter},
		{"unknown metrics exporter", map[string]string{EnvMetricsExporter: "statsd"}, EnvMetricsExporter},
		{"metrics exporter list", map[string]string{EnvMetricsExporter: "otlp,prometheus"}, EnvMetricsExporter},
		{"prometheus without an address", map[string]string{EnvMetricsExporter: "prometheus"}, EnvMetricsExporter},
		{"metrics protocol", map[string]string{EnvMetricsExporter: "otlp", EnvOTLPMetricsProtocol: "http/json"}, EnvOTLPMetricsProtocol},
		{"traces protocol", map[string]string{EnvTracesExporter: "otlp", EnvOTLPTracesProtocol: "udp"}, EnvOTLPTracesProtocol},
		{"metrics endpoint", map[string]string{EnvOTLPMetricsEndpoint: "collector:4317"}, EnvOTLPMetricsEndpoint},
		{"traces endpoint", map[string]string{EnvOTLPTracesEndpoint: "collector:4317"}, EnvOTLPTracesEndpoint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := Setup(context.Background(), WithLookupEnv(envOf(tc.env)))
			if err == nil {
				tel.Shutdown(context.Background())
				t.Fatal("got nil error")
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Setting != tc.setting {
				t.Fatalf("got %v, want a ConfigError naming %s", err, tc.setting)
			}
		})
	}
}

// TestLookupEnvAgainstProcessEnv: autoexport reads the process environment;
// when WithLookupEnv selected something else, Setup refuses rather than
// build what the process environment says (here: autoexport's own
// Prometheus server on :9464).
func TestLookupEnvAgainstProcessEnv(t *testing.T) {
	processEnv(t, map[string]string{EnvMetricsExporter: "prometheus"})
	tel, err := Setup(context.Background(), WithLookupEnv(envOf(map[string]string{EnvMetricsExporter: "console"})))
	if err == nil {
		tel.Shutdown(context.Background())
		t.Fatal("got nil error")
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Setting != EnvMetricsExporter {
		t.Fatalf("got %v, want a ConfigError naming %s", err, EnvMetricsExporter)
	}
}

// TestPrometheusExporterIsAmdahls: OTEL_METRICS_EXPORTER=prometheus is the
// private registry served at AMDAHL_METRICS_ADDR, with no reader of
// autoexport's (which would come with a server on localhost:9464).
func TestPrometheusExporterIsAmdahls(t *testing.T) {
	ctx := context.Background()
	tel, err := Setup(ctx, WithLookupEnv(processEnv(t, map[string]string{
		EnvMetricsExporter: "prometheus", EnvMetricsAddr: "127.0.0.1:0",
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	if mr, err := (&config{metrics: signalEnv{selectedExporter: exporterPrometheus}}).metricReader(ctx); mr != nil || err != nil {
		t.Errorf("metric reader for prometheus: got %v, %v; want none", mr, err)
	}
	record(t, tel)
	resp, err := http.Get("http://" + tel.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/metrics: status %d, want 200", resp.StatusCode)
	}
}

// TestRemoteSpansNotExported: spans synthesised from a child's timings
// (amdahl.remote=true) reach the in-process span processors but not the
// OTLP exporter, unless WithRemoteSpans(true): the child exports its own.
func TestRemoteSpansNotExported(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remote bool
		want   int // spans at the collector
	}{
		{"default", false, 2},
		{"WithRemoteSpans", true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			col := newCollector(t)
			ctx := context.Background()
			rec := tracetest.NewSpanRecorder()
			tel, err := Setup(ctx, WithLookupEnv(noEnv), WithOTLP(col.addr, "grpc"), WithSpanProcessor(rec), WithRemoteSpans(tc.remote))
			if err != nil {
				t.Fatal(err)
			}
			c, err := tel.Component("taskhost")
			if err != nil {
				t.Fatal(err)
			}
			record(t, tel)
			now := time.Now()
			c.RecordSpan(ctx, telemetry.Execute, telemetry.None, now, now.Add(time.Millisecond), telemetry.AttrRemote.Bool(true))
			if err := tel.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if n := col.spans(); n != tc.want {
				t.Errorf("collector got %d spans, want %d", n, tc.want)
			}
			if n := len(rec.Ended()); n != 3 {
				t.Errorf("span processor got %d spans, want 3 (the remote one included)", n)
			}
			if c := tel.OTLPSpanCounts(); c.Ended != int64(tc.want) || c.Dropped() != 0 {
				t.Errorf("OTLPSpanCounts: got %+v, want %d ended, none dropped", c, tc.want)
			}
		})
	}
}

// TestSpanConsumers: remote spans are wanted exactly when something set
// up here would get them (RemoteSpansWanted), and the spans go to nothing
// but later-registered processors exactly when no exporter, trace file,
// recorder, span processor, sampler of the program's or Pyroscope would
// see one (SpansOnlyForAttribution).
func TestSpanConsumers(t *testing.T) {
	col := newCollector(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name         string
		env          map[string]string
		opts         []Option
		remote, only bool
	}{
		{"nothing", nil, nil, false, true},
		{"profile files only", nil, []Option{WithProfileDir(filepath.Join(dir, "prof"))}, false, true},
		{"metrics only", nil, []Option{WithMetricsAddr("127.0.0.1:0")}, false, true},
		{"OTLP", nil, []Option{WithOTLP(col.addr, "grpc")}, false, false},
		{"OTLP with remote spans", nil, []Option{WithOTLP(col.addr, "grpc"), WithRemoteSpans(true)}, true, false},
		{"remote spans without an exporter", nil, []Option{WithRemoteSpans(true)}, false, true},
		{"trace file", nil, []Option{WithTraceFile(filepath.Join(dir, "trace.jsonl"))}, true, false},
		{"recorder", nil, []Option{WithRecorder()}, true, false},
		{"span processor", nil, []Option{WithSpanProcessor(tracetest.NewSpanRecorder())}, true, false},
		{"sampler", nil, []Option{WithSampler(sdktrace.TraceIDRatioBased(0.5))}, false, false},
		// The runtime's own tracer applies it (Sampler).
		{"sampler from the environment", map[string]string{EnvTracesSampler: "traceidratio"}, nil, false, true},
		{"SDK disabled", nil, []Option{WithRecorder(), WithSDKDisabled(true)}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			tel, err := Setup(ctx, append([]Option{WithLookupEnv(processEnv(t, tc.env))}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tel.Shutdown(ctx) }()
			if got := tel.RemoteSpansWanted(); got != tc.remote {
				t.Errorf("RemoteSpansWanted: got %v, want %v", got, tc.remote)
			}
			if got := tel.SpansOnlyForAttribution(); got != tc.only {
				t.Errorf("SpansOnlyForAttribution: got %v, want %v", got, tc.only)
			}
		})
	}
	var nilTel *Telemetry
	if nilTel.RemoteSpansWanted() || nilTel.SpansOnlyForAttribution() {
		t.Error("a nil Telemetry wants remote spans or says its spans are only for attribution")
	}
}

// TestMetricsOnlyWhenRead: with nothing to read them, metrics are not
// recorded (a no-op meter provider, /metrics answers 404); an address, a
// reader or WithMetricsHandler turns them on.
func TestMetricsOnlyWhenRead(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []Option
		want bool
	}{
		{"nothing", nil, false},
		{"address", []Option{WithMetricsAddr("127.0.0.1:0")}, true},
		{"handler", []Option{WithMetricsHandler()}, true},
		{"reader", []Option{WithMetricReader(sdkmetric.NewManualReader())}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := Setup(ctx, append([]Option{WithLookupEnv(noEnv)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tel.Shutdown(ctx) }()
			_, noop := tel.MeterProvider().(metricnoop.MeterProvider)
			if noop == tc.want {
				t.Fatalf("meter provider %T: recording %v, want %v", tel.MeterProvider(), !noop, tc.want)
			}
			record(t, tel)
			resp := httptest.NewRecorder()
			tel.MetricsHandler().ServeHTTP(resp, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			served := resp.Code == http.StatusOK && strings.Contains(resp.Body.String(), "amdahl_phase_duration")
			if served != tc.want {
				t.Errorf("MetricsHandler: status %d, phase metric served %v, want %v", resp.Code, served, tc.want)
			}
			if err := tel.ForceFlush(ctx); err != nil {
				t.Errorf("ForceFlush: %v", err)
			}
		})
	}
}

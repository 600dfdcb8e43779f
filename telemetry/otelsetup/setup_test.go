package otelsetup

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
	"github.com/google/pprof/profile"
	"github.com/grafana/pyroscope-go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// noEnv isolates Setup from the test machine's environment.
func noEnv(string) (string, bool) { return "", false }

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// processEnv sets m in the process environment for the test, where the
// exporters and autoexport read it, and blanks every other variable Setup
// or the exporters would read (empty is unset to both).
func processEnv(t *testing.T, m map[string]string) func(string) (string, bool) {
	t.Helper()
	for _, k := range []string{
		EnvSDKDisabled, EnvTracesExporter, EnvMetricsExporter,
		EnvOTLPEndpoint, EnvOTLPTracesEndpoint, EnvOTLPMetricsEndpoint,
		EnvOTLPProtocol, EnvOTLPTracesProtocol, EnvOTLPMetricsProtocol,
		EnvTraceFile, EnvMetricsAddr, EnvProfileDir, EnvPhaseLabels,
		EnvPyroscopeAddress, EnvPyroscopeAppName, "OTEL_SERVICE_NAME", "OTEL_TRACES_SAMPLER",
		"OTEL_METRICS_PRODUCERS", "OTEL_EXPORTER_OTLP_HEADERS",
	} {
		t.Setenv(k, m[k])
	}
	for k, v := range m {
		t.Setenv(k, v)
	}
	return os.LookupEnv
}

// otlpServer is a real OTLP/gRPC trace service on loopback. With hold set,
// Export waits until hold is closed.
type otlpServer struct {
	coltracepb.UnimplementedTraceServiceServer
	mu   sync.Mutex
	reqs []*coltracepb.ExportTraceServiceRequest
	got  chan struct{}
	hold chan struct{}
}

func (s *otlpServer) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	if s.hold != nil {
		select {
		case <-s.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	select {
	case s.got <- struct{}{}:
	default:
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func TestOTLPGRPCExport(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	col := &otlpServer{got: make(chan struct{}, 1)}
	coltracepb.RegisterTraceServiceServer(srv, col)
	go srv.Serve(ln)
	defer srv.Stop()

	ctx := context.Background()
	// The exporter reads the endpoint from the process environment.
	tel, err := Setup(ctx, WithLookupEnv(processEnv(t, map[string]string{
		EnvOTLPEndpoint: "http://" + ln.Addr().String(), EnvOTLPProtocol: "grpc",
		"OTEL_SERVICE_NAME": "otlp-test",
	})))
	if err != nil {
		t.Fatal(err)
	}
	c, err := tel.Component("runtime")
	if err != nil {
		t.Fatal(err)
	}
	wctx, w := c.StartWork(ctx)
	_, ph := c.Start(wctx, telemetry.Dispatch, telemetry.None)
	ph.End()
	w.End(telemetry.OK, nil)
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	var names []string
	parents := map[string][]byte{}
	ids := map[string][]byte{}
	for _, r := range col.reqs {
		for _, rs := range r.ResourceSpans {
			svc := ""
			for _, a := range rs.Resource.Attributes {
				if a.Key == "service.name" {
					svc = a.Value.GetStringValue()
				}
			}
			if svc != "otlp-test" {
				t.Errorf("service.name %q, want otlp-test", svc)
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
					parents[s.Name], ids[s.Name] = s.ParentSpanId, s.SpanId
					if s.Name == "runtime.dispatch" {
						found := false
						for _, a := range s.Attributes {
							found = found || (a.Key == string(telemetry.AttrPhase) && a.Value.GetStringValue() == "dispatch")
						}
						if !found {
							t.Errorf("runtime.dispatch lacks amdahl.phase=dispatch: %v", s.Attributes)
						}
					}
				}
			}
		}
	}
	if len(names) != 2 {
		t.Fatalf("collector got spans %v, want 2", names)
	}
	if !bytes.Equal(parents["runtime.dispatch"], ids[telemetry.SpanWork]) {
		t.Errorf("dispatch parent %x, want root %x", parents["runtime.dispatch"], ids[telemetry.SpanWork])
	}
}

func TestTraceFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	ctx := context.Background()
	tel, err := Setup(ctx, WithLookupEnv(noEnv), WithTraceFile(path), WithRecorder())
	if err != nil {
		t.Fatal(err)
	}
	c, _ := tel.Component("chunking", telemetry.AttrTransport.String("chunking"))
	wctx, w := c.StartWork(ctx, telemetry.AttrWorkID.Int(1))
	_, ph := c.Start(wctx, telemetry.Serialize, telemetry.Request)
	ph.Span().SetAttributes(telemetry.AttrBytes.Int(4096))
	ph.End()
	_, ph = c.Start(wctx, telemetry.Send, telemetry.Request)
	ph.End()
	w.End(telemetry.OK, nil)
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	recorded := tel.Recorder().Spans()

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// OTLP/JSON: hex ids, not base64.
	want := recorded[0].SpanContext().TraceID().String()
	if !strings.Contains(string(raw), `"traceId":"`+want+`"`) {
		t.Fatalf("trace file lacks hex traceId %s:\n%s", want, raw)
	}
	reqs, err := spans.ReadTraceFile(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{} // name -> span id hex
	for _, r := range reqs {
		for _, rs := range r.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					got[s.Name] = hexID(s.SpanId)
				}
			}
		}
	}
	if len(got) != len(recorded) {
		t.Fatalf("file has %d spans, recorder %d", len(got), len(recorded))
	}
	for _, s := range recorded {
		if got[s.Name()] != s.SpanContext().SpanID().String() {
			t.Errorf("%s: file span id %s, want %s", s.Name(), got[s.Name()], s.SpanContext().SpanID())
		}
	}
	// And back again: re-marshalling a read request yields the same line.
	line, err := spans.MarshalTraceLine(reqs[0])
	if err != nil {
		t.Fatal(err)
	}
	again, err := spans.UnmarshalTraceLine(line)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.ResourceSpans[0].ScopeSpans[0].Spans) != len(reqs[0].ResourceSpans[0].ScopeSpans[0].Spans) {
		t.Error("re-marshalled request lost spans")
	}
	if _, err := spans.ReadTraceFile(strings.NewReader("{}\nnot json\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad line: got %v, want error naming line 2", err)
	}
}

func hexID(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

func TestMetricsEndpoint(t *testing.T) {
	ctx := context.Background()
	tel, err := Setup(ctx, WithLookupEnv(noEnv), WithMetricsAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	c, _ := tel.Component("ipc", telemetry.AttrTransport.String("ipc"), telemetry.AttrScenario.String("taskhost"), telemetry.AttrVariant.String("baseline"))
	_, ph := c.Start(ctx, telemetry.Send, telemetry.Request)
	ph.End()
	c.RecordCritical(ctx, c.Name(), telemetry.Send, telemetry.Request, time.Millisecond)

	resp, err := http.Get("http://" + tel.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"amdahl_phase_duration_seconds", "amdahl_phase_critical_seconds"} {
		fam, ok := fams[name]
		if !ok {
			t.Fatalf("no %s in /metrics (have %d families)", name, len(fams))
		}
		labels := map[string]string{}
		for _, lp := range fam.Metric[0].Label {
			labels[lp.GetName()] = lp.GetValue()
		}
		for k, v := range map[string]string{"amdahl_phase": "send", "amdahl_direction": "request",
			"amdahl_transport": "ipc", "amdahl_scenario": "taskhost", "amdahl_variant": "baseline", "amdahl_component": "ipc"} {
			if labels[k] != v {
				t.Errorf("%s: label %s=%q, want %q", name, k, labels[k], v)
			}
		}
		if n := len(fam.Metric[0].GetHistogram().GetBucket()); n != len(telemetry.DurationBuckets)+1 { // + le="+Inf"
			t.Errorf("%s: %d buckets, want %d", name, n, len(telemetry.DurationBuckets)+1)
		}
	}
}

// A scraper that asks for OpenMetrics (Prometheus does) gets the
// histograms' exemplars: the trace id of a sampled unit that fell in the
// bucket. Plain text has none.
func TestMetricsEndpointExemplars(t *testing.T) {
	ctx := context.Background()
	tel, err := Setup(ctx, WithLookupEnv(noEnv), WithMetricsAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	c, _ := tel.Component("ipc", telemetry.AttrScenario.String("taskhost"), telemetry.AttrVariant.String("baseline"))
	wctx, w := c.StartWork(ctx)
	_, ph := c.Start(wctx, telemetry.Send, telemetry.Request)
	ph.End()
	w.End(telemetry.OK, nil)
	traceID := trace.SpanContextFromContext(wctx).TraceID().String()

	get := func(accept string) string {
		req, err := http.NewRequest(http.MethodGet, "http://"+tel.MetricsAddr()+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	om := get("application/openmetrics-text;version=1.0.0")
	for _, name := range []string{"amdahl_work_duration_seconds_bucket", "amdahl_phase_duration_seconds_bucket"} {
		found := false
		for line := range strings.SplitSeq(om, "\n") {
			if strings.HasPrefix(line, name+"{") && strings.Contains(line, `# {`) && strings.Contains(line, `trace_id="`+traceID+`"`) {
				found = true
			}
		}
		if !found {
			t.Errorf("OpenMetrics /metrics: no %s exemplar with trace_id %s", name, traceID)
		}
	}
	if text := get(""); strings.Contains(text, "trace_id") {
		t.Error("plain-text /metrics carries exemplars")
	}
}

func TestPyroscopeUploadHasPhaseLabels(t *testing.T) {
	var (
		mu       sync.Mutex
		cpuProfs []*profile.Profile
		errs     []error
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer w.WriteHeader(http.StatusOK)
		if r.URL.Path != "/ingest" || r.URL.Query().Get("units") != "samples" {
			return // non-CPU uploads
		}
		_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
			return
		}
		mr := multipart.NewReader(r.Body, params["boundary"])
		for part, err := mr.NextPart(); err == nil; part, err = mr.NextPart() {
			if part.FormName() != "profile" {
				continue
			}
			b, _ := io.ReadAll(part)
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err == nil {
				var prof *profile.Profile
				if prof, err = profile.Parse(zr); err == nil {
					mu.Lock()
					cpuProfs = append(cpuProfs, prof)
					mu.Unlock()
					continue
				}
			}
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}))
	defer srv.Close()

	ctx := context.Background()
	tel, err := Setup(ctx, WithLookupEnv(noEnv), WithPyroscope(PyroscopeConfig{
		ServerAddress: srv.URL, UploadRate: time.Hour,
		ProfileTypes: []pyroscope.ProfileType{pyroscope.ProfileCPU},
	}))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := tel.Component("taskhost")
	// Burn CPU inside a phase until the profile has samples: 100 Hz means
	// ~10 ms per sample; 400 ms gives dozens. Measured by CPU work, not sleep.
	_, ph := c.Start(ctx, telemetry.Execute, telemetry.None)
	deadline := time.Now().Add(400 * time.Millisecond)
	x := 1.0
	for time.Now().Before(deadline) {
		for i := 0; i < 10000; i++ {
			x = math.Sqrt(x + float64(i))
		}
	}
	ph.End()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	_ = x
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Fatalf("bad uploads: %v", errors.Join(errs...))
	}
	labelled := 0
	for _, p := range cpuProfs {
		for _, s := range p.Sample {
			if v := s.Label[telemetry.LabelPhase]; len(v) == 1 && v[0] == "execute" {
				labelled++
			}
		}
	}
	if labelled == 0 {
		t.Fatalf("got %d CPU profiles and no sample labelled phase=execute", len(cpuProfs))
	}
}

func TestProfileDir(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	tel, err := Setup(ctx, WithLookupEnv(noEnv), WithProfileDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tel.Shutdown(ctx); err != nil { // idempotent
		t.Fatal(err)
	}
	for _, f := range []string{"cpu.pprof", "heap.pprof"} {
		fh, err := os.Open(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := profile.Parse(fh); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		fh.Close()
	}
}

// TestPhaseLabelsDefault: the phase labels are on when Setup profiles the
// process (a profile directory, Pyroscope), off when nothing would read
// them, and as set when AMDAHL_PHASE_LABELS or WithPhaseLabels says.
func TestPhaseLabelsDefault(t *testing.T) {
	dir := t.TempDir()
	pyro := "http://127.0.0.1:1" // nothing listens there
	for _, tc := range []struct {
		name string
		env  map[string]string
		opts []Option
		want bool
	}{
		{"nothing profiles", nil, nil, false},
		{"a profile directory", nil, []Option{WithProfileDir(dir)}, true},
		{"AMDAHL_PROFILE_DIR", map[string]string{EnvProfileDir: dir}, nil, true},
		{"pyroscope", map[string]string{EnvPyroscopeAddress: pyro}, nil, true},
		{"forced on", map[string]string{EnvPhaseLabels: "true"}, nil, true},
		{"forced off with a profile", map[string]string{EnvPhaseLabels: "false", EnvProfileDir: dir}, nil, false},
		{"auto with a profile", map[string]string{EnvPhaseLabels: "auto", EnvProfileDir: dir}, nil, true},
		{"option beats the variable", map[string]string{EnvPhaseLabels: "false"}, []Option{WithPhaseLabels(true)}, true},
		{"option off with a profile", nil, []Option{WithProfileDir(dir), WithPhaseLabels(false)}, false},
		{"sdk disabled", map[string]string{EnvSDKDisabled: "true", EnvProfileDir: dir}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := Setup(context.Background(), append([]Option{WithLookupEnv(envOf(tc.env))}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer tel.Shutdown(context.Background())
			if got := tel.PhaseLabels(); got != tc.want {
				t.Errorf("PhaseLabels() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBadConfig(t *testing.T) {
	unwritable := filepath.Join(t.TempDir(), "missing-dir", "trace.jsonl")
	for _, tc := range []struct {
		name    string
		env     map[string]string
		opts    []Option
		setting string
	}{
		{"unknown protocol", map[string]string{EnvOTLPEndpoint: "http://127.0.0.1:4317", EnvOTLPProtocol: "carrier-pigeon"}, nil, EnvOTLPProtocol},
		{"malformed endpoint", map[string]string{EnvOTLPEndpoint: "::not a url"}, nil, EnvOTLPEndpoint},
		{"endpoint without scheme", nil, []Option{WithOTLP("127.0.0.1:4317", "grpc")}, EnvOTLPEndpoint},
		{"unwritable trace file", map[string]string{EnvTraceFile: unwritable}, nil, EnvTraceFile},
		{"bad metrics addr", map[string]string{EnvMetricsAddr: "nowhere"}, nil, EnvMetricsAddr},
		{"bad phase labels", map[string]string{EnvPhaseLabels: "maybe"}, nil, EnvPhaseLabels},
		{"bad sdk disabled", map[string]string{EnvSDKDisabled: "yes"}, nil, EnvSDKDisabled},
		{"bad setting with the sdk disabled", map[string]string{EnvSDKDisabled: "true", EnvMetricsAddr: "nowhere"}, nil, EnvMetricsAddr},
		{"bad pyroscope address", map[string]string{EnvPyroscopeAddress: "pyroscope:4040"}, nil, EnvPyroscopeAddress},
		{"profile dir with pyroscope", map[string]string{EnvPyroscopeAddress: "http://127.0.0.1:1", EnvProfileDir: t.TempDir()}, nil, EnvProfileDir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]Option{WithLookupEnv(envOf(tc.env))}, tc.opts...)
			tel, err := Setup(context.Background(), opts...)
			if err == nil {
				tel.Shutdown(context.Background())
				t.Fatal("got nil error")
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Setting != tc.setting {
				t.Fatalf("got %v, want a ConfigError naming %s", err, tc.setting)
			}
			if !strings.Contains(err.Error(), tc.setting) {
				t.Errorf("message %q does not name %s", err, tc.setting)
			}
		})
	}
}

func TestOptionBeatsEnv(t *testing.T) {
	ctx := context.Background()
	tel, err := Setup(ctx, WithLookupEnv(envOf(map[string]string{EnvMetricsAddr: "nowhere"})), WithMetricsAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatalf("option should override a bad env value: %v", err)
	}
	tel.Shutdown(ctx)
}

// TestResourceAttributes: WithResourceAttributes puts its attributes on
// the resource of every span, beside service.name, and WithServiceName
// still names the service.
func TestResourceAttributes(t *testing.T) {
	ctx := context.Background()
	tel, err := Setup(ctx, WithLookupEnv(envOf(nil)), WithRecorder(), WithServiceName("worker"),
		WithResourceAttributes(attribute.String("deployment.environment.name", "test"), attribute.Int("host.index", 3)))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	_, span := tel.TracerProvider().Tracer("t").Start(ctx, "x")
	span.End()
	got := tel.Recorder().Spans()
	if len(got) != 1 {
		t.Fatalf("%d spans recorded, want 1", len(got))
	}
	res := got[0].Resource()
	for k, want := range map[attribute.Key]string{"deployment.environment.name": "test", "host.index": "3", "service.name": "worker"} {
		if v, ok := res.Set().Value(k); !ok || v.Emit() != want {
			t.Errorf("resource %s = %q (set %v), want %q", k, v.Emit(), ok, want)
		}
	}
}

func TestSDKDisabled(t *testing.T) {
	dir := t.TempDir()
	tracePath, profileDir := filepath.Join(dir, "trace.jsonl"), filepath.Join(dir, "profiles")
	ctx := context.Background()
	given := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	tel, err := Setup(ctx, WithLookupEnv(envOf(map[string]string{
		EnvSDKDisabled: "TRUE", EnvTraceFile: tracePath, EnvMetricsAddr: "127.0.0.1:0", EnvProfileDir: profileDir,
		EnvOTLPEndpoint: "http://127.0.0.1:1",
	})), WithRecorder(), WithSpanProcessor(given), WithMetricReader(reader))
	if err != nil {
		t.Fatal(err)
	}
	if !tel.SDKDisabled() {
		t.Error("SDKDisabled() = false, want true")
	}
	if tp, ok := tel.TracerProvider().(tracenoop.TracerProvider); !ok {
		t.Errorf("TracerProvider() is a %T, want a no-op one", tp)
	}
	if mp, ok := tel.MeterProvider().(metricnoop.MeterProvider); !ok {
		t.Errorf("MeterProvider() is a %T, want a no-op one", mp)
	}
	if addr := tel.MetricsAddr(); addr != "" {
		t.Errorf("/metrics served on %s, want not served", addr)
	}
	registered := tracetest.NewSpanRecorder()
	tel.RegisterSpanProcessor(registered)

	c, err := tel.Component("runtime", telemetry.AttrTransport.String("ipc"))
	if err != nil || c == nil {
		t.Fatalf("Component: got %v, %v; want a component", c, err)
	}
	wctx, w := c.StartWork(ctx)
	_, ph := c.Start(wctx, telemetry.Dispatch, telemetry.None)
	if ph.Span().IsRecording() {
		t.Error("phase span is recording")
	}
	ph.End()
	w.End(telemetry.OK, nil)
	c.RecordCritical(ctx, c.Name(), telemetry.Dispatch, telemetry.None, time.Millisecond)
	tel.UnregisterSpanProcessor(registered)
	if err := tel.ForceFlush(ctx); err != nil {
		t.Errorf("ForceFlush: %v", err)
	}
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	if n := len(registered.Ended()) + len(given.Ended()) + len(tel.Recorder().Spans()); n != 0 {
		t.Errorf("span processors saw %d spans, want none", n)
	}
	for _, p := range []string{tracePath, profileDir} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: got %v, want it not created", p, err)
		}
	}
	// Setup handed the reader to no provider; Shutdown still shut it down.
	if err := reader.Collect(ctx, &metricdata.ResourceMetrics{}); err == nil {
		t.Error("metric reader given to Setup not shut down")
	}
	resp := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(resp, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if resp.Code != http.StatusNotFound {
		t.Errorf("MetricsHandler: status %d, want 404", resp.Code)
	}
}

func TestSDKDisabledFalse(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		env  string
		opts []Option
	}{
		{"env false", "false", nil},
		{"option beats env", "true", []Option{WithSDKDisabled(false)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := Setup(ctx, append([]Option{WithLookupEnv(envOf(map[string]string{EnvSDKDisabled: tc.env}))}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer tel.Shutdown(ctx)
			if tel.SDKDisabled() {
				t.Error("SDKDisabled() = true, want false")
			}
			if _, ok := tel.TracerProvider().(*sdktrace.TracerProvider); !ok {
				t.Errorf("TracerProvider() is a %T, want the SDK's", tel.TracerProvider())
			}
		})
	}
}

// TestOTLPDropsCounted fills the OTLP queue while the collector holds the
// first export: the spans that do not fit are dropped, never waited for, and
// counted.
func TestOTLPDropsCounted(t *testing.T) {
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "1") // read by the SDK; batches of 1 too
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	col := &otlpServer{got: make(chan struct{}, 1), hold: make(chan struct{})}
	coltracepb.RegisterTraceServiceServer(srv, col)
	go srv.Serve(ln)
	defer srv.Stop()

	ctx := context.Background()
	tel, err := Setup(ctx, WithLookupEnv(noEnv), WithOTLP("http://"+ln.Addr().String(), "grpc"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	tr := tel.TracerProvider().Tracer("drops")
	for range n {
		_, s := tr.Start(ctx, "s")
		s.End()
	}
	// At most one span is in the held export and one in the queue.
	if c := tel.OTLPSpanCounts(); c.Ended != n || c.Dropped() < n-2 {
		t.Errorf("while held: got %+v (dropped %d), want %d ended, at least %d not exported", c, c.Dropped(), n, n-2)
	}
	close(col.hold)
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	c := tel.OTLPSpanCounts()
	col.mu.Lock()
	received := 0
	for _, r := range col.reqs {
		for _, rs := range r.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				received += len(ss.Spans)
			}
		}
	}
	col.mu.Unlock()
	if c.Ended != n || c.Failed != 0 || c.Exported != int64(received) || c.Exported < 1 || c.Dropped() < n-2 {
		t.Errorf("got %+v (dropped %d), collector received %d; want %d ended, none failed, exported = received ≥ 1, at least %d dropped",
			c, c.Dropped(), received, n, n-2)
	}
	if (*Telemetry)(nil).OTLPSpanCounts() != (SpanCounts{}) {
		t.Error("nil Telemetry: got counts, want zero")
	}
}

// TestSamplerFromEnvironment: OTEL_TRACES_SAMPLER and its argument are
// read through the lookup, as the SDK would read them, and the tracer
// provider samples with that sampler, which Sampler returns for a
// runtime's own tracer; a bad name or ratio is a *ConfigError naming the
// variable; a sampler of the program's wins and is not returned.
func TestSamplerFromEnvironment(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, arg string
		want      string // the sampler's description; "" none
		sampled   bool   // a root of TracerProvider's
		bad       string // the setting named by the error
	}{
		{"", "", "", true, ""},
		{"always_on", "", "AlwaysOnSampler", true, ""},
		{"ALWAYS_OFF", "", "AlwaysOffSampler", false, ""},
		{"traceidratio", "", "TraceIDRatioBased{1}", true, ""},
		{"traceidratio", "0", "TraceIDRatioBased{0}", false, ""},
		{"parentbased_traceidratio", "0.0", "ParentBased{root:TraceIDRatioBased{0}", false, ""},
		{"traceidratio", " 1 ", "TraceIDRatioBased{1}", true, ""},
		{"parentbased_always_off", "", "ParentBased{root:AlwaysOffSampler", false, ""},
		{"parentbased_always_on", "", "ParentBased{root:AlwaysOnSampler", true, ""},
		{"traceidratio", "1.5", "", false, EnvTracesSamplerArg},
		{"parentbased_traceidratio", "tenth", "", false, EnvTracesSamplerArg},
		{"traceidratio", "NaN", "", false, EnvTracesSamplerArg},
		{"jaeger_remote", "", "", false, EnvTracesSampler},
	} {
		t.Run(tc.name+"/"+tc.arg, func(t *testing.T) {
			tel, err := Setup(ctx, WithLookupEnv(envOf(map[string]string{EnvTracesSampler: tc.name, EnvTracesSamplerArg: tc.arg})))
			if tc.bad != "" {
				var ce *ConfigError
				if !errors.As(err, &ce) || ce.Setting != tc.bad {
					t.Fatalf("got %v, want a *ConfigError for %s", err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tel.Shutdown(ctx) }()
			got := ""
			if s := tel.Sampler(); s != nil {
				got = s.Description()
			}
			if !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
				t.Errorf("Sampler: %q, want %q", got, tc.want)
			}
			if tc.name != "" && !tel.SpansOnlyForAttribution() {
				t.Error("a sampler from the environment took the runtime's own tracer away (SpansOnlyForAttribution false)")
			}
			_, span := tel.TracerProvider().Tracer("test").Start(ctx, "root")
			defer span.End()
			if got := span.SpanContext().IsSampled(); got != tc.sampled {
				t.Errorf("a root is sampled: %v, want %v", got, tc.sampled)
			}
		})
	}
	t.Run("not behind the lookup", func(t *testing.T) {
		// The SDK would read the process environment itself.
		t.Setenv(EnvTracesSampler, "always_off")
		tel, err := Setup(ctx, WithLookupEnv(noEnv))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tel.Shutdown(ctx) }()
		_, span := tel.TracerProvider().Tracer("test").Start(ctx, "root")
		defer span.End()
		if !span.SpanContext().IsSampled() || tel.Sampler() != nil {
			t.Error("the process environment's OTEL_TRACES_SAMPLER was read behind WithLookupEnv")
		}
	})
	t.Run("the program's", func(t *testing.T) {
		tel, err := Setup(ctx, WithLookupEnv(envOf(map[string]string{EnvTracesSampler: "always_on"})), WithSampler(sdktrace.NeverSample()))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tel.Shutdown(ctx) }()
		_, span := tel.TracerProvider().Tracer("test").Start(ctx, "root")
		defer span.End()
		if span.SpanContext().IsSampled() || tel.Sampler() != nil || tel.SpansOnlyForAttribution() {
			t.Error("WithSampler's sampler did not win, or was handed to the runtime's own tracer")
		}
	})
}

// TestPropagatorsFromEnvironment: OTEL_PROPAGATORS chooses Propagator's
// fields; a name amdahl does not link, an unknown one, or none beside
// another is a *ConfigError naming the variable.
func TestPropagatorsFromEnvironment(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		value string
		want  []string // Propagator().Fields(), sorted
		bad   string   // a word the error must hold; "" none
	}{
		{"", []string{"baggage", "traceparent", "tracestate"}, ""},
		{"tracecontext,baggage", []string{"baggage", "traceparent", "tracestate"}, ""},
		{"tracecontext", []string{"traceparent", "tracestate"}, ""},
		{" baggage , tracecontext, baggage ", []string{"baggage", "traceparent", "tracestate"}, ""},
		{"baggage", []string{"baggage"}, ""},
		{"none", nil, ""},
		{"b3", nil, "not built into amdahl"},
		{"tracecontext,jaeger", nil, `"jaeger" is not built into amdahl`},
		{"TraceContext", nil, "unknown propagator"},
		{"none,tracecontext", nil, "none alone"},
		{" , ,", nil, "no propagator named"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			tel, err := Setup(ctx, WithLookupEnv(envOf(map[string]string{EnvPropagators: tc.value})))
			if tc.bad != "" {
				var ce *ConfigError
				if !errors.As(err, &ce) || ce.Setting != EnvPropagators || !strings.Contains(err.Error(), tc.bad) {
					t.Fatalf("got %v, want a *ConfigError for %s saying %q", err, EnvPropagators, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tel.Shutdown(ctx) }()
			got := tel.Propagator().Fields()
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Propagator().Fields() = %q, want %q", got, tc.want)
			}
		})
	}
	if got := (*Telemetry)(nil).Propagator().Fields(); !slices.Contains(got, "traceparent") {
		t.Errorf("a nil Telemetry's Propagator has fields %q, want the default's", got)
	}
}

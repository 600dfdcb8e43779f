package otelsetup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	otelpyroscope "github.com/grafana/otel-profiling-go"
)

// Environment variables read by Setup (see doc.go for the whole contract).
const (
	EnvSDKDisabled         = "OTEL_SDK_DISABLED"
	EnvTracesExporter      = "OTEL_TRACES_EXPORTER"
	EnvMetricsExporter     = "OTEL_METRICS_EXPORTER"
	EnvOTLPEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvOTLPTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvOTLPMetricsEndpoint = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
	EnvOTLPProtocol        = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvOTLPTracesProtocol  = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvOTLPMetricsProtocol = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
	EnvTraceFile           = "AMDAHL_TRACE_FILE"
	EnvMetricsAddr         = "AMDAHL_METRICS_ADDR"
	EnvProfileDir          = "AMDAHL_PROFILE_DIR"
	EnvPhaseLabels         = "AMDAHL_PHASE_LABELS"
	EnvPyroscopeAddress    = "PYROSCOPE_SERVER_ADDRESS"
	EnvPyroscopeAppName    = "PYROSCOPE_APPLICATION_NAME"
	// EnvTracesSampler and EnvTracesSamplerArg choose the sampler, as
	// the OTel specification names them (Sampler).
	EnvTracesSampler    = "OTEL_TRACES_SAMPLER"
	EnvTracesSamplerArg = "OTEL_TRACES_SAMPLER_ARG"
	// EnvPropagators chooses what carries a unit's context across a
	// process boundary (Propagator), as the OTel specification names it.
	EnvPropagators = "OTEL_PROPAGATORS"
)

// Option configures Setup. Options are applied after the environment, so an
// option wins over the variable it corresponds to.
type Option func(*config)

type config struct {
	disabled       bool
	serviceName    string
	recorder       bool
	traceFile      string
	otlpEndpoint   string // WithOTLP only
	otlpProtocol   string
	traces         signalEnv
	metrics        signalEnv
	processors     []sdktrace.SpanProcessor
	sampler        sdktrace.Sampler // WithSampler's
	envSampler     sdktrace.Sampler // OTEL_TRACES_SAMPLER's
	metricsAddr    string
	metricsHandler bool
	readers        []sdkmetric.Reader
	profileDir     string
	pyroscope      PyroscopeConfig
	phaseLabels    labelMode
	resourceAttrs  []attribute.KeyValue
	lookupEnv      func(string) (string, bool)
	remoteSpans    bool                          // export amdahl.remote=true spans to OTLP/console
	propagator     propagation.TextMapPropagator // OTEL_PROPAGATORS's; nil: the default
}

// WithSDKDisabled turns the OpenTelemetry SDK off (true) or on (false),
// overriding OTEL_SDK_DISABLED: see Setup for what a disabled SDK leaves.
func WithSDKDisabled(disabled bool) Option { return func(c *config) { c.disabled = disabled } }

// WithServiceName sets service.name (default "amdahl"; OTEL_SERVICE_NAME
// overrides the default, this option overrides both).
func WithServiceName(name string) Option { return func(c *config) { c.serviceName = name } }

// WithResourceAttributes adds attributes to the resource.
func WithResourceAttributes(kv ...attribute.KeyValue) Option {
	return func(c *config) { c.resourceAttrs = append(c.resourceAttrs, kv...) }
}

// WithRecorder keeps every ended span in memory (the embedded default that
// feeds attribution); read them with (*Telemetry).Recorder.
func WithRecorder() Option { return func(c *config) { c.recorder = true } }

// WithTraceFile writes spans to path as OTLP JSON, one
// ExportTraceServiceRequest per line (the Collector file exporter's format).
// The file is created (truncated) by Setup. Every span ended before Shutdown
// is written: when the exporter falls behind, ending a span waits for it.
func WithTraceFile(path string) Option { return func(c *config) { c.traceFile = path } }

// WithOTLP exports spans to an OTLP endpoint (a URL: http://host:4317) with
// protocol "grpc" (also for "") or "http/protobuf", whatever OTEL_TRACES_EXPORTER
// and the OTEL_EXPORTER_OTLP_*ENDPOINT and *PROTOCOL variables say. Metrics
// go there too when OTEL_METRICS_EXPORTER=otlp. The exporters still read the
// other OTEL_EXPORTER_OTLP_* variables (headers, timeout, …).
func WithOTLP(endpoint, protocol string) Option {
	return func(c *config) { c.otlpEndpoint, c.otlpProtocol = endpoint, protocol }
}

// WithRemoteSpans makes the OTLP (or console) span exporter export the
// spans a parent synthesised from a child's reply timings
// (amdahl.remote=true) too (default false). By default it leaves them out:
// the task hosts that ran those phases export their own spans, set up by
// runtime.ServeHost from the environment the parent passes on, and a
// backend must get each span once. The recorder, the trace file and the
// span processors of WithSpanProcessor and RegisterSpanProcessor
// (attribution) always get them. Turn this on for task hosts that do not
// export (a program that does not call runtime.ServeHost).
func WithRemoteSpans(on bool) Option { return func(c *config) { c.remoteSpans = on } }

// WithSpanProcessor adds a span processor (tests: tracetest.NewSpanRecorder).
func WithSpanProcessor(sp sdktrace.SpanProcessor) Option {
	return func(c *config) { c.processors = append(c.processors, sp) }
}

// WithSampler sets the sampler (default: the SDK's, which honours
// OTEL_TRACES_SAMPLER).
func WithSampler(s sdktrace.Sampler) Option { return func(c *config) { c.sampler = s } }

// WithMetricsAddr serves the Prometheus exposition at http://addr/metrics
// ("127.0.0.1:0" picks a free port; see (*Telemetry).MetricsAddr).
func WithMetricsAddr(addr string) Option { return func(c *config) { c.metricsAddr = addr } }

// WithMetricsHandler records metrics for MetricsHandler, which the program
// serves itself. Without it, an address (WithMetricsAddr, AMDAHL_METRICS_ADDR),
// an OTLP or console metrics exporter or a reader (WithMetricReader),
// nothing would read the metrics, and none is recorded.
func WithMetricsHandler() Option { return func(c *config) { c.metricsHandler = true } }

// WithMetricReader adds a metric reader (tests: sdkmetric.NewManualReader).
func WithMetricReader(r sdkmetric.Reader) Option {
	return func(c *config) { c.readers = append(c.readers, r) }
}

// WithProfileDir writes cpu.pprof (whole run) and heap.pprof (at Shutdown)
// into dir. CPU samples carry the phase labels.
func WithProfileDir(dir string) Option { return func(c *config) { c.profileDir = dir } }

// WithPyroscope enables continuous profiling to a Pyroscope server.
func WithPyroscope(pc PyroscopeConfig) Option { return func(c *config) { c.pyroscope = pc } }

// WithPhaseLabels turns the pprof phase labels on or off (default: on
// when Setup starts a profiler, see Telemetry.PhaseLabels).
func WithPhaseLabels(on bool) Option {
	return func(c *config) {
		c.phaseLabels = labelsOff
		if on {
			c.phaseLabels = labelsOn
		}
	}
}

// labelMode is AMDAHL_PHASE_LABELS (WithPhaseLabels): auto unless set.
type labelMode uint8

const (
	labelsAuto labelMode = iota // on when Setup starts a profiler
	labelsOn
	labelsOff
)

// labels reports whether phase bodies run under the pprof phase label: as
// set, or (auto) when this process profiles its CPU (a profile directory
// or Pyroscope, and the SDK not disabled), the only readers of the labels
// Setup knows of. A label costs every phase body a goroutine label switch
// (0.15–0.6 µs of a taskhost unit's parent CPU on the 2-vCPU VM, per
// perf) that no profile would read.
func (c *config) labels() bool {
	if c.phaseLabels == labelsAuto {
		return !c.disabled && (c.profileDir != "" || c.pyroscope.ServerAddress != "")
	}
	return c.phaseLabels == labelsOn
}

// WithLookupEnv replaces os.LookupEnv (tests, or a program that reads its
// settings from elsewhere) for the variables Setup reads itself, which
// include the selection of exporters (OTEL_TRACES_EXPORTER,
// OTEL_METRICS_EXPORTER, whether an OTLP endpoint is set) and the sampler
// (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG). The exporters,
// autoexport and the SDK read the values they use (OTEL_EXPORTER_OTLP_*,
// OTEL_BSP_*, …) from the process environment: a
// lookup that hides every variable selects no exporter, and one that
// selects an exporter the process environment contradicts is a
// *ConfigError.
func WithLookupEnv(f func(string) (string, bool)) Option { return func(c *config) { c.lookupEnv = f } }

// ConfigError is a bad telemetry setting; Setting names the option or
// environment variable.
type ConfigError struct {
	Setting string
	Value   string
	Reason  string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("telemetry: %s=%q: %s", e.Setting, e.Value, e.Reason)
}

// Telemetry holds the providers built by Setup. Its methods are safe for
// concurrent use; a nil *Telemetry is valid and disabled.
type Telemetry struct {
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	sdkTP          *sdktrace.TracerProvider // nil with the SDK disabled
	mp             *sdkmetric.MeterProvider // nil with the SDK disabled
	registry       *prometheus.Registry
	propagator     propagation.TextMapPropagator
	recorder       *Recorder
	phaseLabels    bool
	otlpCounts     *spanCounter           // nil without OTLP
	traceFile      bool                   // spans go to a trace file
	traceFileProc  sdktrace.SpanProcessor // the trace file's writer, registered on sdkTP
	resource       *resource.Resource     // sdkTP's
	remoteWanted   bool                   // something set up here gets amdahl.remote=true spans
	sampler        sdktrace.Sampler       // OTEL_TRACES_SAMPLER's, for a runtime's own tracer (Sampler)
	// spansOnlyRegistered: only span processors registered after Setup
	// would see a span (SpansOnlyForAttribution); spansOnlyFile: those
	// and the trace file's writer (TraceFileOnly).
	spansOnlyRegistered bool
	spansOnlyFile       bool

	metricsLn  net.Listener
	metricsSrv *http.Server
	serveDone  chan struct{}

	profiles *profiles

	// With the SDK disabled, the span processors and metric readers given
	// to Setup, which no provider owns: Shutdown shuts them down.
	unusedProcessors []sdktrace.SpanProcessor
	unusedReaders    []sdkmetric.Reader

	shutdownOnce sync.Once
	shutdownErr  error
}

// Setup builds tracer, meter and (optionally) profiler providers: defaults,
// then the environment, then opts, then validation. Any invalid setting is a
// *ConfigError and nothing is left running. The caller owns the result and
// must call Shutdown.
//
// With the SDK disabled (OTEL_SDK_DISABLED=true, WithSDKDisabled) the
// settings are still validated, but the tracer and meter providers are
// no-ops: no span or metric is recorded, nothing is exported, no file is
// created, /metrics is not served and no profile is taken.
// RegisterSpanProcessor does nothing, so a span processor registered there
// (a runtime's attribution) sees no span; a Recorder (WithRecorder) stays
// empty; Component returns a Component that records nothing.
func Setup(ctx context.Context, opts ...Option) (*Telemetry, error) {
	c := config{lookupEnv: os.LookupEnv}
	for _, o := range opts { // first pass only for WithLookupEnv
		o(&c)
	}
	c = config{lookupEnv: c.lookupEnv}
	if err := c.fromEnv(); err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}

	t := &Telemetry{propagator: c.propagator, phaseLabels: c.labels()} // nil: Propagator's default
	ok := false
	defer func() {
		if !ok {
			_ = t.Shutdown(ctx)
		}
	}()

	if c.disabled {
		t.tracerProvider = tracenoop.NewTracerProvider()
		t.meterProvider = metricnoop.NewMeterProvider()
		if c.recorder {
			t.recorder = NewRecorder()
		}
		t.unusedProcessors, t.unusedReaders = c.processors, c.readers
		ok = true
		return t, nil
	}

	res, err := c.resource(ctx)
	if err != nil {
		return nil, err
	}

	// Traces.
	// The sampler is always given: the SDK would otherwise read
	// OTEL_TRACES_SAMPLER from the process environment, behind
	// WithLookupEnv.
	sampler := sdktrace.ParentBased(sdktrace.AlwaysSample()) // the SDK's default
	switch {
	case c.sampler != nil:
		sampler = c.sampler
	case c.envSampler != nil:
		sampler, t.sampler = c.envSampler, c.envSampler
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(sampler)}
	for _, sp := range c.processors {
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(sp))
	}
	if c.recorder {
		t.recorder = NewRecorder()
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(t.recorder))
	}
	if c.traceFile != "" {
		fe, err := NewTraceFileExporter(c.traceFile)
		if err != nil {
			return nil, &ConfigError{Setting: EnvTraceFile, Value: c.traceFile, Reason: err.Error()}
		}
		// Attribution reads the file back, so it must hold every span: a
		// span end waits for room in a full queue (the exporter is local
		// and fast) instead of being dropped, the SDK's default.
		t.traceFile = true
		t.traceFileProc = newFileBatcher(fe)
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(t.traceFileProc))
	}
	exp, err := c.spanExporter(ctx)
	if err != nil {
		return nil, err
	}
	if exp != nil {
		// Never make the program wait for a remote backend: the queue
		// drops spans when full (the SDK's default). The SDK does not
		// report drops (but as an experimental metric on the global meter
		// provider), so they are counted around it: OTLPSpanCounts.
		t.otlpCounts = new(spanCounter)
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(&countingProcessor{
			SpanProcessor: sdktrace.NewBatchSpanProcessor(&countingExporter{SpanExporter: exp, n: t.otlpCounts}),
			n:             t.otlpCounts,
			dropRemote:    !c.remoteSpans,
		}))
	}
	t.sdkTP = sdktrace.NewTracerProvider(tpOpts...)
	t.tracerProvider = t.sdkTP
	// The resource the SDK's spans carry: sdktrace.WithResource merges
	// the process environment's (OTEL_RESOURCE_ATTRIBUTES) under res.
	if merged, merr := resource.Merge(resource.Environment(), res); merr == nil {
		t.resource = merged
	} else {
		t.resource = res // the SDK only reports the merge's error, too
	}
	t.remoteWanted = c.recorder || c.traceFile != "" || len(c.processors) > 0 || (exp != nil && c.remoteSpans)
	// A sampler from the environment is one a runtime's own tracer
	// applies (Sampler); one of the program's (WithSampler) may read
	// what only the SDK's spans carry.
	t.spansOnlyFile = !c.recorder && len(c.processors) == 0 && exp == nil &&
		c.sampler == nil && c.pyroscope.ServerAddress == ""
	t.spansOnlyRegistered = t.spansOnlyFile && c.traceFile == ""

	// Metrics: recorded when something reads them: /metrics (served at
	// an address, or by the program through MetricsHandler), an OTLP or
	// console exporter, or a reader given to Setup. With none of them the
	// meter provider is a no-op: a metric nobody reads costs every phase
	// its recording and nothing else.
	mr, err := c.metricReader(ctx)
	if err != nil {
		return nil, err
	}
	if c.metricsAddr != "" || c.metricsHandler || mr != nil || len(c.readers) > 0 {
		// A private Prometheus registry, served by MetricsHandler.
		t.registry = prometheus.NewRegistry()
		pexp, err := otelprom.New(otelprom.WithRegisterer(t.registry))
		if err != nil {
			return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
		}
		mpOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(pexp)}
		// OTLP (or console) beside Prometheus: a periodic reader, exported
		// every OTEL_METRIC_EXPORT_INTERVAL and once more by Shutdown. The
		// histograms' explicit buckets are advisory boundaries on the
		// instruments, which every reader's default aggregation keeps.
		if mr != nil {
			mpOpts = append(mpOpts, sdkmetric.WithReader(mr))
		}
		for _, r := range c.readers {
			mpOpts = append(mpOpts, sdkmetric.WithReader(r))
		}
		t.mp = sdkmetric.NewMeterProvider(mpOpts...)
		t.meterProvider = t.mp
	} else {
		t.meterProvider = metricnoop.NewMeterProvider()
	}
	if c.metricsAddr != "" {
		if err := t.serveMetrics(c.metricsAddr); err != nil {
			return nil, err
		}
	}

	// Profiles.
	if t.profiles, err = startProfiles(c.profileDir, c.pyroscope, serviceName(res)); err != nil {
		return nil, err
	}
	if t.profiles != nil && t.profiles.pyro != nil {
		// Root spans carry span_id/span_name labels so a flame graph can be
		// opened from a trace.
		t.tracerProvider = otelpyroscope.NewTracerProvider(t.sdkTP)
	}
	ok = true
	return t, nil
}

func (c *config) env(name string) (string, bool) {
	v, ok := c.lookupEnv(name)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

func (c *config) fromEnv() error {
	if v, ok := c.env(EnvSDKDisabled); ok {
		// The spec reads any value but "true" as false; a typo that left
		// the SDK on would go unnoticed, so only true and false are taken.
		switch strings.ToLower(v) {
		case "true":
			c.disabled = true
		case "false":
			c.disabled = false
		default:
			return &ConfigError{Setting: EnvSDKDisabled, Value: v, Reason: "want true or false"}
		}
	}
	c.readSignalEnv(&c.traces, EnvTracesExporter, EnvOTLPTracesEndpoint, EnvOTLPTracesProtocol)
	c.readSignalEnv(&c.metrics, EnvMetricsExporter, EnvOTLPMetricsEndpoint, EnvOTLPMetricsProtocol)
	if v, ok := c.env(EnvTraceFile); ok {
		c.traceFile = v
	}
	if v, ok := c.env(EnvMetricsAddr); ok {
		c.metricsAddr = v
	}
	if v, ok := c.env(EnvProfileDir); ok {
		c.profileDir = v
	}
	if v, ok := c.env(EnvPhaseLabels); ok {
		switch strings.ToLower(v) {
		case "1", "true", "on":
			c.phaseLabels = labelsOn
		case "0", "false", "off":
			c.phaseLabels = labelsOff
		case "auto":
			c.phaseLabels = labelsAuto
		default:
			return &ConfigError{Setting: EnvPhaseLabels, Value: v, Reason: "want true, false or auto"}
		}
	}
	if v, ok := c.env(EnvTracesSampler); ok {
		arg, _ := c.env(EnvTracesSamplerArg)
		s, err := parseSampler(v, arg)
		if err != nil {
			return err
		}
		c.envSampler = s
	}
	if v, ok := c.env(EnvPropagators); ok {
		p, err := parsePropagators(v)
		if err != nil {
			return err
		}
		c.propagator = p
	}
	if v, ok := c.env(EnvPyroscopeAddress); ok {
		c.pyroscope.ServerAddress = v
	}
	if v, ok := c.env(EnvPyroscopeAppName); ok {
		c.pyroscope.ApplicationName = v
	}
	return nil
}

func (c *config) validate() error {
	if c.otlpEndpoint != "" {
		switch c.otlpProtocol {
		case "":
			c.otlpProtocol = "grpc"
		case "grpc", "http/protobuf":
		default:
			return &ConfigError{Setting: EnvOTLPProtocol, Value: c.otlpProtocol,
				Reason: "unsupported protocol (valid: grpc, http/protobuf)"}
		}
		if !isHTTPURL(c.otlpEndpoint) {
			return &ConfigError{Setting: EnvOTLPEndpoint, Value: c.otlpEndpoint,
				Reason: "want a URL such as http://127.0.0.1:4317"}
		}
	}
	if err := c.selectTraces(); err != nil {
		return err
	}
	if err := c.selectMetrics(); err != nil {
		return err
	}
	if c.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.metricsAddr); err != nil {
			return &ConfigError{Setting: EnvMetricsAddr, Value: c.metricsAddr, Reason: "want host:port"}
		}
	}
	if c.pyroscope.ServerAddress != "" {
		u, err := url.Parse(c.pyroscope.ServerAddress)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &ConfigError{Setting: EnvPyroscopeAddress, Value: c.pyroscope.ServerAddress,
				Reason: "want a URL such as http://127.0.0.1:4040"}
		}
	}
	if c.profileDir != "" && c.pyroscope.ServerAddress != "" {
		return &ConfigError{Setting: EnvProfileDir, Value: c.profileDir,
			Reason: "cannot be combined with " + EnvPyroscopeAddress + ": the CPU profiler has one owner"}
	}
	if c.profileDir != "" && !c.disabled {
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			return &ConfigError{Setting: EnvProfileDir, Value: c.profileDir, Reason: err.Error()}
		}
	}
	return nil
}

func (c *config) resource(ctx context.Context) (*resource.Resource, error) {
	// Later options win: the default name, then OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES, then WithServiceName.
	attrs := append([]attribute.KeyValue{semconv.ServiceName("amdahl"), semconv.ServiceVersion(telemetry.Version)}, c.resourceAttrs...)
	opts := []resource.Option{resource.WithSchemaURL(semconv.SchemaURL), resource.WithTelemetrySDK(),
		resource.WithAttributes(attrs...), resource.WithFromEnv()}
	if v, ok := c.env("OTEL_SERVICE_NAME"); ok { // also through WithLookupEnv
		opts = append(opts, resource.WithAttributes(semconv.ServiceName(v)))
	}
	if c.serviceName != "" {
		opts = append(opts, resource.WithAttributes(semconv.ServiceName(c.serviceName)))
	}
	res, err := resource.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	return res, nil
}

func newOTLPExporter(ctx context.Context, endpoint, protocol string) (*otlptrace.Exporter, error) {
	var (
		exp *otlptrace.Exporter
		err error
	)
	switch protocol {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(endpoint))
	default:
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	}
	if err != nil {
		return nil, &ConfigError{Setting: EnvOTLPEndpoint, Value: endpoint, Reason: err.Error()}
	}
	return exp, nil
}

func (t *Telemetry) serveMetrics(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return &ConfigError{Setting: EnvMetricsAddr, Value: addr, Reason: err.Error()}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", t.MetricsHandler())
	t.metricsLn = ln
	t.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	t.serveDone = make(chan struct{})
	go func() {
		defer close(t.serveDone)
		_ = t.metricsSrv.Serve(ln)
	}()
	return nil
}

// TracerProvider returns the tracer provider (a no-op one for nil).
func (t *Telemetry) TracerProvider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.tracerProvider
}

// MeterProvider returns the meter provider (nil for a nil Telemetry).
func (t *Telemetry) MeterProvider() metric.MeterProvider {
	if t == nil {
		return nil
	}
	return t.meterProvider
}

// SDKDisabled reports whether the SDK is disabled (OTEL_SDK_DISABLED,
// WithSDKDisabled): the providers are no-ops.
func (t *Telemetry) SDKDisabled() bool { return t != nil && t.sdkTP == nil }

// Propagator returns the propagators OTEL_PROPAGATORS names, W3C trace
// context and baggage by default (and for a nil Telemetry). With
// OTEL_PROPAGATORS=none it is a composite of none: its Fields are empty
// and it injects and extracts nothing.
func (t *Telemetry) Propagator() propagation.TextMapPropagator {
	if t == nil || t.propagator == nil {
		return defaultPropagator
	}
	return t.propagator
}

// defaultPropagator is OTEL_PROPAGATORS's default, tracecontext,baggage.
var defaultPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// parsePropagators reads OTEL_PROPAGATORS: a comma-separated list of
// tracecontext and baggage, or none. The specification's other names
// (b3, b3multi, jaeger, xray, ottrace) need propagators amdahl does not
// link, and are refused rather than ignored: the program would carry a
// context its peers do not read.
func parsePropagators(v string) (propagation.TextMapPropagator, error) {
	var ps []propagation.TextMapPropagator
	seen := map[string]bool{}
	for name := range strings.SplitSeq(v, ",") {
		name = strings.TrimSpace(name)
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		switch name {
		case "tracecontext":
			ps = append(ps, propagation.TraceContext{})
		case "baggage":
			ps = append(ps, propagation.Baggage{})
		case "none":
		case "b3", "b3multi", "jaeger", "xray", "ottrace":
			return nil, &ConfigError{Setting: EnvPropagators, Value: v,
				Reason: fmt.Sprintf("propagator %q is not built into amdahl: want tracecontext and baggage (comma-separated), or none", name)}
		default:
			return nil, &ConfigError{Setting: EnvPropagators, Value: v,
				Reason: fmt.Sprintf("unknown propagator %q: want tracecontext and baggage (comma-separated), or none", name)}
		}
	}
	if len(seen) == 0 {
		return nil, &ConfigError{Setting: EnvPropagators, Value: v, Reason: "no propagator named: want tracecontext and baggage (comma-separated), or none"}
	}
	if seen["none"] && len(seen) > 1 {
		return nil, &ConfigError{Setting: EnvPropagators, Value: v, Reason: "none with other propagators: want none alone"}
	}
	return propagation.NewCompositeTextMapPropagator(ps...), nil
}

// Recorder returns the in-memory span recorder, or nil when WithRecorder was
// not given.
func (t *Telemetry) Recorder() *Recorder {
	if t == nil {
		return nil
	}
	return t.recorder
}

// MetricsAddr returns the address /metrics is served on ("" when not served).
func (t *Telemetry) MetricsAddr() string {
	if t == nil || t.metricsLn == nil {
		return ""
	}
	return t.metricsLn.Addr().String()
}

// MetricsHandler returns the Prometheus exposition handler of the private
// registry. Metrics are recorded only when something reads them: serve
// this handler yourself only with WithMetricsHandler (or an address,
// WithMetricsAddr); otherwise it answers 404.
func (t *Telemetry) MetricsHandler() http.Handler {
	if t == nil || t.registry == nil {
		return http.NotFoundHandler()
	}
	// OpenMetrics when the scraper asks for it (Prometheus does): only
	// that format carries the histograms' exemplars (trace_id, span_id).
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// Component builds the instrumentation of one component with static
// attributes; nil (disabled) for a nil Telemetry.
func (t *Telemetry) Component(name string, attrs ...attribute.KeyValue) (*telemetry.Component, error) {
	if t == nil {
		return nil, nil
	}
	return telemetry.NewComponent(name, telemetry.ComponentConfig{
		TracerProvider: t.tracerProvider, MeterProvider: t.meterProvider,
		PhaseLabels: t.phaseLabels, Attributes: attrs,
	})
}

// ForceFlush exports every span ended so far.
func (t *Telemetry) ForceFlush(ctx context.Context) error {
	if t == nil || t.sdkTP == nil {
		return nil
	}
	err := t.sdkTP.ForceFlush(ctx)
	if t.mp != nil {
		err = errors.Join(err, t.mp.ForceFlush(ctx))
	}
	return err
}

// Shutdown flushes and stops everything: spans, metrics, the /metrics server,
// profiles (pyroscope: Flush(true) before Stop; pprof files closed). It is
// idempotent; later calls return the first call's result.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.shutdownOnce.Do(func() {
		var errs []error
		if t.profiles != nil {
			errs = append(errs, t.profiles.stop())
		}
		if t.sdkTP != nil {
			errs = append(errs, t.sdkTP.Shutdown(ctx))
		}
		if t.mp != nil {
			errs = append(errs, t.mp.Shutdown(ctx))
		}
		for _, sp := range t.unusedProcessors {
			errs = append(errs, sp.Shutdown(ctx))
		}
		for _, r := range t.unusedReaders {
			errs = append(errs, r.Shutdown(ctx))
		}
		if t.metricsSrv != nil {
			if err := t.metricsSrv.Shutdown(ctx); err != nil {
				errs = append(errs, err, t.metricsSrv.Close())
			}
			<-t.serveDone
		}
		t.shutdownErr = errors.Join(errs...)
	})
	return t.shutdownErr
}

func serviceName(res *resource.Resource) string {
	if v, ok := res.Set().Value(semconv.ServiceNameKey); ok {
		return v.AsString()
	}
	return "amdahl"
}

// Exporting reports whether anything recorded leaves the process: spans go
// to an exporter (OTLP, console or the trace file) or profiles are taken
// (files or Pyroscope). A task host with nothing to export records nothing
// (runtime.ServeHost). False for a nil Telemetry or with the SDK disabled.
func (t *Telemetry) Exporting() bool {
	return t != nil && t.sdkTP != nil && (t.otlpCounts != nil || t.traceFile || t.profiles != nil)
}

// RemoteSpansWanted reports whether anything set up here would get the
// spans a parent synthesises from a child's reply timings
// (amdahl.remote=true): the recorder (WithRecorder), the trace file, a
// span processor given to Setup (WithSpanProcessor), or the OTLP or
// console exporter with WithRemoteSpans. When false, such spans would
// reach only the span processors registered later (a runtime's own
// attribution), so a runtime may account those phases without making
// SDK spans of them (runtime.Config.UseTelemetry does). False for a nil
// Telemetry or with the SDK disabled.
func (t *Telemetry) RemoteSpansWanted() bool { return t != nil && t.sdkTP != nil && t.remoteWanted }

// SpansOnlyForAttribution reports whether the spans recorded on
// TracerProvider would reach nothing but the span processors registered
// after Setup (RegisterSpanProcessor: a runtime's attribution): no
// exporter (OTLP or console), no trace file, no recorder, no span
// processor given to Setup, no sampler of the program's (WithSampler;
// OTEL_TRACES_SAMPLER's is applied by the runtime's tracer: Sampler) and
// no Pyroscope (whose span_id labels come from
// the SDK's spans). A runtime then records its spans with its own tracer,
// straight into its attribution, instead of the SDK's
// (runtime.Config.UseTelemetry). False for a nil Telemetry or with the
// SDK disabled.
func (t *Telemetry) SpansOnlyForAttribution() bool {
	return t != nil && t.sdkTP != nil && t.spansOnlyRegistered
}

// Sampler returns the sampler OTEL_TRACES_SAMPLER (and
// OTEL_TRACES_SAMPLER_ARG) chose, which TracerProvider's spans are
// sampled with, and which a runtime's own tracer must apply to the traces
// it starts when it records them instead (SpansOnlyForAttribution,
// TraceFileOnly; runtime.Config.Sampler). nil when the variable is not
// set (the SDK's default: parent-based, always on), when the program gave
// its own (WithSampler), for a nil Telemetry and with the SDK disabled.
func (t *Telemetry) Sampler() sdktrace.Sampler {
	if t == nil || t.sdkTP == nil {
		return nil
	}
	return t.sampler
}

// parseSampler returns the sampler OTEL_TRACES_SAMPLER names, with arg
// (OTEL_TRACES_SAMPLER_ARG, "" when unset) the ratio of the trace-id
// ratio samplers (1 when unset), as the SDK reads them. Where the SDK
// would log a bad name or ratio and go on with another sampler, it is a
// *ConfigError: a run meant to sample a tenth of its traces must not
// record all of them, or none, unnoticed.
func parseSampler(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (sdktrace.Sampler, error) {
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1), nil
		}
		v, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(v >= 0 && v <= 1) {
			return nil, &ConfigError{Setting: EnvTracesSamplerArg, Value: arg, Reason: "want a ratio from 0 to 1 for " + name}
		}
		return sdktrace.TraceIDRatioBased(v), nil
	}
	switch strings.ToLower(name) {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return ratio()
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		s, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.ParentBased(s), nil
	}
	return nil, &ConfigError{Setting: EnvTracesSampler, Value: name,
		Reason: "want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio"}
}

// TraceFileOnly returns the span processor that writes the trace file
// (WithTraceFile, AMDAHL_TRACE_FILE; it waits for room rather than drop a
// span) and the tracer provider's resource, when the spans recorded on
// TracerProvider would reach nothing but that file and the span
// processors registered after Setup: as SpansOnlyForAttribution, with a
// trace file. A runtime then records its spans with its own tracer and
// hands each, as a read-only span with that resource, to the processor
// (runtime.Config.UseTelemetry), instead of making SDK spans. nil
// otherwise, for a nil Telemetry and with the SDK disabled.
func (t *Telemetry) TraceFileOnly() (sdktrace.SpanProcessor, *resource.Resource) {
	if t == nil || t.sdkTP == nil || !t.spansOnlyFile || t.traceFileProc == nil {
		return nil, nil
	}
	return t.traceFileProc, t.resource
}

// PhaseLabels reports whether phase bodies run under the pprof phase label
// (AMDAHL_PHASE_LABELS, WithPhaseLabels). By default (auto) they do when
// Setup profiles the process's CPU (WithProfileDir, WithPyroscope, or
// their variables); a program that profiles itself otherwise (its own
// net/http/pprof, go test -cpuprofile) sets AMDAHL_PHASE_LABELS=true or
// WithPhaseLabels(true) to see phases in its profiles.
func (t *Telemetry) PhaseLabels() bool { return t != nil && t.phaseLabels }

// RegisterSpanProcessor adds sp to the tracer provider (a runtime's
// attribution registers itself for the life of the runtime); nothing for a
// nil Telemetry or with the SDK disabled, where sp would see no span.
func (t *Telemetry) RegisterSpanProcessor(sp sdktrace.SpanProcessor) {
	if t != nil && t.sdkTP != nil {
		t.sdkTP.RegisterSpanProcessor(sp)
	}
}

// UnregisterSpanProcessor removes sp from the tracer provider and shuts it
// down; nothing for a nil Telemetry or with the SDK disabled.
func (t *Telemetry) UnregisterSpanProcessor(sp sdktrace.SpanProcessor) {
	if t != nil && t.sdkTP != nil {
		t.sdkTP.UnregisterSpanProcessor(sp)
	}
}

// SpanCounts counts the spans that went through one exporter's batch span
// processor.
type SpanCounts struct {
	// Ended is the sampled spans ended, handed to the processor.
	Ended int64
	// Exported is the spans the exporter accepted; Failed those in batches
	// it returned an error for (after its own retries).
	Exported, Failed int64
}

// Dropped returns the spans neither exported nor failed: dropped because
// the processor's queue was full, or still queued. After Shutdown, or after
// a ForceFlush while no span ended, none is queued.
func (c SpanCounts) Dropped() int64 { return c.Ended - c.Exported - c.Failed }

// OTLPSpanCounts returns the counts of the span exporter selected by
// WithOTLP or OTEL_TRACES_EXPORTER (otlp, or console), whose queue drops
// spans when full (OTEL_BSP_MAX_QUEUE_SIZE) rather than slow the program;
// zero without one (none, or unset without an OTLP endpoint).
func (t *Telemetry) OTLPSpanCounts() SpanCounts {
	if t == nil || t.otlpCounts == nil {
		return SpanCounts{}
	}
	return SpanCounts{Ended: t.otlpCounts.ended.Load(), Exported: t.otlpCounts.exported.Load(), Failed: t.otlpCounts.failed.Load()}
}

type spanCounter struct{ ended, exported, failed atomic.Int64 }

// countingProcessor counts the spans its batch span processor is handed
// (the unsampled ones it ignores are not counted).
type countingProcessor struct {
	sdktrace.SpanProcessor
	n          *spanCounter
	dropRemote bool // leave out amdahl.remote=true spans (WithRemoteSpans)
}

func (p *countingProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if p.dropRemote && isRemote(s) {
		return
	}
	if s.SpanContext().IsSampled() {
		p.n.ended.Add(1)
	}
	p.SpanProcessor.OnEnd(s)
}

// isRemote reports whether s is a span a parent synthesised from a child's
// reply timings (amdahl.remote=true).
func isRemote(s sdktrace.ReadOnlySpan) bool {
	for _, kv := range s.Attributes() {
		if kv.Key == telemetry.AttrRemote && kv.Value.AsBool() {
			return true
		}
	}
	return false
}

// countingExporter counts the spans of the batches it exports.
type countingExporter struct {
	sdktrace.SpanExporter
	n *spanCounter
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.n.failed.Add(int64(len(spans)))
	} else {
		e.n.exported.Add(int64(len(spans)))
	}
	return err
}

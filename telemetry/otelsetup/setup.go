package otelsetup

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
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

	// Profiles first: the CPU of setting up the rest is in them.
	if t.profiles, err = startProfiles(c.profileDir, c.pyroscope, serviceName(res)); err != nil {
		return nil, err
	}
	if err := t.setupTraces(ctx, &c, res); err != nil {
		return nil, err
	}
	if err := t.setupMetrics(ctx, &c, res); err != nil {
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
	for name, setting := range map[string]*string{EnvTraceFile: &c.traceFile, EnvMetricsAddr: &c.metricsAddr, EnvProfileDir: &c.profileDir,
		EnvPyroscopeAddress: &c.pyroscope.ServerAddress, EnvPyroscopeAppName: &c.pyroscope.ApplicationName} {
		if v, ok := c.env(name); ok {
			*setting = v
		}
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
	return nil
}

func (c *config) validate() error {
	if c.otlpEndpoint != "" {
		c.otlpProtocol = cmp.Or(c.otlpProtocol, "grpc")
		withOTLP := signalEnv{endpoint: c.otlpEndpoint, endpointSetting: EnvOTLPEndpoint,
			protocol: c.otlpProtocol, protocolSetting: EnvOTLPProtocol}
		if err := withOTLP.validateOTLP(); err != nil {
			return err
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

// setupTraces builds the SDK's tracer provider of c on res: the sampler,
// the program's span processors, the recorder, the trace file's writer
// and the OTLP (or console) exporter, and what the Telemetry reports of
// who reads the spans.
func (t *Telemetry) setupTraces(ctx context.Context, c *config, res *resource.Resource) error {
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
		fw, err := spans.CreateFile(c.traceFile)
		if err != nil {
			return &ConfigError{Setting: EnvTraceFile, Value: c.traceFile, Reason: err.Error()}
		}
		// Attribution reads the file back, so it must hold every span: a
		// span end waits for room in a full queue (the exporter is local
		// and fast) instead of being dropped, the SDK's default.
		t.traceFileSink = spans.NewFileSink(fw)
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(ExporterProcessor(t.traceFileSink)))
	}
	exp, err := c.spanExporter(ctx)
	if err != nil {
		return err
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
	return nil
}

// setupMetrics builds the meter provider of c on res.
func (t *Telemetry) setupMetrics(ctx context.Context, c *config, res *resource.Resource) error {
	// Metrics: recorded when something reads them: /metrics (served at
	// an address, or by the program through MetricsHandler), an OTLP or
	// console exporter, or a reader given to Setup. With none of them the
	// meter provider is a no-op: a metric nobody reads costs every phase
	// its recording and nothing else.
	mr, err := c.metricReader(ctx)
	if err != nil {
		return err
	}
	if c.metricsAddr != "" || c.metricsHandler || mr != nil || len(c.readers) > 0 {
		// A private Prometheus registry, served by MetricsHandler.
		t.registry = prometheus.NewRegistry()
		pexp, err := otelprom.New(otelprom.WithRegisterer(t.registry))
		if err != nil {
			return fmt.Errorf("telemetry: prometheus exporter: %w", err)
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
			return err
		}
	}
	return nil
}

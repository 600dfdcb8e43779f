package otelsetup

import (
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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

// WithResourceAttributes adds attributes to the resource of every span
// and metric (deployment.environment.name, host.index, …). For a key
// given more than once the later wins: the defaults, then these, then
// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, then WithServiceName.
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

// WithProfileDir writes cpu.pprof (from Setup, before the exporters are
// set up, to the end of Shutdown), heap.pprof (at Shutdown, while the CPU
// profile still runs) and cpu-window.json (the process's CPU time when the
// CPU profile started and stopped, and the part of it the Go runtime's
// sysmon thread used meanwhile, which no sample holds: proccpu.Window)
// into dir. CPU samples carry the phase labels. The profile samples at
// runtime/pprof's 100 Hz.
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
// that no profile would read (BenchmarkPhase, spans+metrics against
// spans+metrics+labels).
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

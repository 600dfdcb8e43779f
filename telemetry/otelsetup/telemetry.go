package otelsetup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

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
	otlpCounts     *spanCounter       // nil without OTLP
	traceFileSink  *spans.FileSink    // the trace file's writer, registered on sdkTP (ExporterProcessor); nil without one
	resource       *resource.Resource // sdkTP's
	remoteWanted   bool               // something set up here gets amdahl.remote=true spans
	sampler        sdktrace.Sampler   // OTEL_TRACES_SAMPLER's, for a runtime's own tracer (Sampler)
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
// then the profiles (pyroscope: Flush(true) before Stop; pprof files
// closed, the heap profile written before the CPU profile stops). It is
// idempotent; later calls return the first call's result.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.shutdownOnce.Do(func() {
		var errs []error
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
		// The profiles stop last: the CPU of flushing spans and metrics
		// is in them.
		if t.profiles != nil {
			errs = append(errs, t.profiles.stop())
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
	return t != nil && t.sdkTP != nil && (t.otlpCounts != nil || t.traceFileSink != nil || t.profiles != nil)
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

// TraceFileOnly returns the exporter that writes the trace file
// (WithTraceFile, AMDAHL_TRACE_FILE; it waits for room rather than drop a
// span) and the tracer provider's resource, when the spans recorded on
// TracerProvider would reach nothing but that file and the span
// processors registered after Setup: as SpansOnlyForAttribution, with a
// trace file. A runtime then records its spans with its own tracer and
// hands each, as a spans.Record with that resource, to the exporter
// (runtime.Config.UseTelemetry), instead of making SDK spans. nil
// otherwise, for a nil Telemetry and with the SDK disabled. The
// exporter is Telemetry's: its Shutdown closes the file.
func (t *Telemetry) TraceFileOnly() (spans.Exporter, *spans.Resource) {
	if t == nil || t.sdkTP == nil || !t.spansOnlyFile || t.traceFileSink == nil {
		return nil, nil
	}
	return t.traceFileSink, ResourceOf(t.resource)
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

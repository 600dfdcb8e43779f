package otelsetup

import (
	"context"
	"net/url"
	"os"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Exporter names of OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER.
const (
	exporterOTLP       = "otlp"
	exporterConsole    = "console"
	exporterPrometheus = "prometheus"
	exporterNone       = "none"
)

// signalEnv is what Setup reads of one signal's OTLP variables: enough to
// select and validate an exporter. The values themselves (endpoint,
// protocol, headers, timeout, …) are read again by the exporter, from the
// process environment.
type signalEnv struct {
	exporter         string // OTEL_TRACES_EXPORTER or OTEL_METRICS_EXPORTER, as given
	endpoint         string // the signal's endpoint variable, else the generic one
	endpointSetting  string // the variable endpoint came from
	protocol         string // the signal's protocol variable, else the generic one
	protocolSetting  string // the variable protocol came from
	selectedExporter string // after validate: the exporter to build
}

func (c *config) readSignalEnv(s *signalEnv, exporterVar, endpointVar, protocolVar string) {
	s.exporter, _ = c.env(exporterVar)
	if v, ok := c.env(endpointVar); ok {
		s.endpoint, s.endpointSetting = v, endpointVar
	} else if v, ok := c.env(EnvOTLPEndpoint); ok {
		s.endpoint, s.endpointSetting = v, EnvOTLPEndpoint
	}
	if v, ok := c.env(protocolVar); ok {
		s.protocol, s.protocolSetting = v, protocolVar
	} else if v, ok := c.env(EnvOTLPProtocol); ok {
		s.protocol, s.protocolSetting = v, EnvOTLPProtocol
	}
}

// selectTraces decides the span exporter: WithOTLP, else
// OTEL_TRACES_EXPORTER, else otlp when an OTLP endpoint variable is set and
// none otherwise (no endpoint, no export).
func (c *config) selectTraces() error {
	s := &c.traces
	if c.otlpEndpoint != "" {
		s.selectedExporter = exporterOTLP
		return nil
	}
	name := s.exporter
	if name == "" {
		name = exporterNone
		if s.endpoint != "" {
			name = exporterOTLP
		}
	}
	switch name {
	case exporterOTLP:
		if err := s.validateOTLP(); err != nil {
			return err
		}
	case exporterConsole, exporterNone:
	default:
		return &ConfigError{Setting: EnvTracesExporter, Value: name, Reason: "unknown exporter (valid: otlp, console, none)"}
	}
	s.selectedExporter = name
	return nil
}

// selectMetrics decides the metric exporter besides the Prometheus one,
// which is always there: OTEL_METRICS_EXPORTER, else otlp when
// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is set and none otherwise. The
// generic OTEL_EXPORTER_OTLP_ENDPOINT alone does not turn metrics on: it
// means traces here, and trace-only backends (Jaeger) refuse metrics.
func (c *config) selectMetrics() error {
	s := &c.metrics
	name := s.exporter
	if name == "" {
		name = exporterNone
		if s.endpointSetting == EnvOTLPMetricsEndpoint {
			name = exporterOTLP
		}
	}
	switch name {
	case exporterOTLP:
		if c.otlpEndpoint == "" {
			if err := s.validateOTLP(); err != nil {
				return err
			}
		}
	case exporterPrometheus:
		// autoexport would start its own server (localhost:9464) on a
		// registry of its own; amdahl's private registry is always there.
		if c.metricsAddr == "" {
			return &ConfigError{Setting: EnvMetricsExporter, Value: name,
				Reason: "/metrics is served at " + EnvMetricsAddr + " (host:port), which is unset"}
		}
	case exporterConsole, exporterNone:
	default:
		return &ConfigError{Setting: EnvMetricsExporter, Value: name, Reason: "unknown exporter (valid: otlp, prometheus, console, none)"}
	}
	s.selectedExporter = name
	return nil
}

// validateOTLP rejects what the exporters would silently replace by their
// defaults (a malformed endpoint) or what autoexport reports late.
func (s *signalEnv) validateOTLP() error {
	switch s.protocol {
	case "", "grpc", "http/protobuf":
	default:
		return &ConfigError{Setting: s.protocolSetting, Value: s.protocol,
			Reason: "unsupported protocol (valid: grpc, http/protobuf)"}
	}
	if s.endpoint != "" && !isHTTPURL(s.endpoint) {
		return &ConfigError{Setting: s.endpointSetting, Value: s.endpoint,
			Reason: "want a URL such as http://127.0.0.1:4317"}
	}
	return nil
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// spanExporter builds the selected span exporter; nil for none.
func (c *config) spanExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	s := &c.traces
	switch {
	case c.otlpEndpoint != "": // WithOTLP beats the environment
		return newOTLPExporter(ctx, c.otlpEndpoint, c.otlpProtocol)
	case s.selectedExporter == exporterNone:
		return nil, nil
	case s.selectedExporter == exporterOTLP && s.protocol == "":
		// amdahl's default protocol is grpc; autoexport's (the
		// specification's) is http/protobuf, which would send an
		// existing OTEL_EXPORTER_OTLP_ENDPOINT=http://…:4317 the wrong
		// protocol.
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, &ConfigError{Setting: s.endpointSetting, Value: s.endpoint, Reason: err.Error()}
		}
		return exp, nil
	}
	if err := agreesWithProcessEnv(EnvTracesExporter, s.selectedExporter); err != nil {
		return nil, err
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, &ConfigError{Setting: EnvTracesExporter, Value: s.selectedExporter, Reason: err.Error()}
	}
	return exp, nil
}

// metricReader builds the selected metric reader besides Prometheus; nil
// for none and prometheus. Every reader it returns is periodic: the meter
// provider's Shutdown exports what was recorded since the last export.
func (c *config) metricReader(ctx context.Context) (sdkmetric.Reader, error) {
	s := &c.metrics
	switch {
	case s.selectedExporter == exporterNone || s.selectedExporter == exporterPrometheus:
		return nil, nil
	case s.selectedExporter == exporterOTLP && c.otlpEndpoint != "": // WithOTLP
		var (
			exp sdkmetric.Exporter
			err error
		)
		if c.otlpProtocol == "http/protobuf" {
			exp, err = otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(c.otlpEndpoint))
		} else {
			exp, err = otlpmetricgrpc.New(ctx, otlpmetricgrpc.WithEndpointURL(c.otlpEndpoint))
		}
		if err != nil {
			return nil, &ConfigError{Setting: EnvOTLPEndpoint, Value: c.otlpEndpoint, Reason: err.Error()}
		}
		return sdkmetric.NewPeriodicReader(exp), nil
	case s.selectedExporter == exporterOTLP && s.protocol == "":
		exp, err := otlpmetricgrpc.New(ctx) // grpc by default, as for traces
		if err != nil {
			return nil, &ConfigError{Setting: s.endpointSetting, Value: s.endpoint, Reason: err.Error()}
		}
		return sdkmetric.NewPeriodicReader(exp), nil
	}
	if err := agreesWithProcessEnv(EnvMetricsExporter, s.selectedExporter); err != nil {
		return nil, err
	}
	r, err := autoexport.NewMetricReader(ctx)
	if err != nil {
		return nil, &ConfigError{Setting: EnvMetricsExporter, Value: s.selectedExporter, Reason: err.Error()}
	}
	return r, nil
}

// agreesWithProcessEnv guards the one place where WithLookupEnv and the
// process environment could disagree: autoexport reads OTEL_*_EXPORTER with
// os.Getenv (unset meaning otlp). Building something other than what Setup
// selected — a Prometheus server of autoexport's own, say — would be worse
// than an error.
func agreesWithProcessEnv(name, selected string) error {
	v := os.Getenv(name)
	if v == selected || (v == "" && selected == exporterOTLP) {
		return nil
	}
	return &ConfigError{Setting: name, Value: selected,
		Reason: "the process environment says " + `"` + v + `"` + "; autoexport reads the process environment, not WithLookupEnv"}
}

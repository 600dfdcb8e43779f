package main

import (
	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/loadbalancingexporter"
	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/prometheusexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/batchprocessor"
	"go.opentelemetry.io/collector/processor/memorylimiterprocessor"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"

	"github.com/amdahl-rt/amdahl/collector/amdahlconnector"
)

// components returns the distribution's factories, as the collector
// builder (OCB) generates them from builder-config.yaml; the modules maps
// are what `amdahl-collector components` prints, and the test checks them
// against the manifest.
func components() (otelcol.Factories, error) {
	var err error
	f := otelcol.Factories{Telemetry: otelconftelemetry.NewFactory()}
	if f.Extensions, err = otelcol.MakeFactoryMap[extension.Factory](); err != nil {
		return otelcol.Factories{}, err
	}
	if f.Receivers, err = otelcol.MakeFactoryMap(otlpreceiver.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	f.ReceiverModules = modules(f.Receivers, map[string]string{"otlp": "go.opentelemetry.io/collector/receiver/otlpreceiver v0.161.0"})
	if f.Processors, err = otelcol.MakeFactoryMap[processor.Factory](memorylimiterprocessor.NewFactory(), batchprocessor.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	f.ProcessorModules = modules(f.Processors, map[string]string{
		"memory_limiter": "go.opentelemetry.io/collector/processor/memorylimiterprocessor v0.161.0",
		"batch":          "go.opentelemetry.io/collector/processor/batchprocessor v0.161.0",
	})
	if f.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](otlpexporter.NewFactory(), prometheusexporter.NewFactory(),
		loadbalancingexporter.NewFactory(), fileexporter.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	f.ExporterModules = modules(f.Exporters, map[string]string{
		"otlp_grpc":      "go.opentelemetry.io/collector/exporter/otlpexporter v0.161.0",
		"prometheus":     "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/prometheusexporter v0.161.0",
		"load_balancing": "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/loadbalancingexporter v0.161.0",
		"file":           "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter v0.161.0",
	})
	if f.Connectors, err = otelcol.MakeFactoryMap[connector.Factory](amdahlconnector.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	f.ConnectorModules = modules(f.Connectors, map[string]string{"amdahl": "github.com/amdahl-rt/amdahl/collector v0.0.0"})
	return f, nil
}

// modules maps each factory type (and each deprecated alias, which
// MakeFactoryMap registers under the same factory) to its module.
func modules[F component.Factory](m map[component.Type]F, byType map[string]string) map[component.Type]string {
	out := make(map[component.Type]string, len(m))
	for t, f := range m {
		out[t] = byType[f.Type().String()]
	}
	return out
}

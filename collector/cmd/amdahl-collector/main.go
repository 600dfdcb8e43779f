// Command amdahl-collector is an OpenTelemetry Collector distribution with
// the amdahl connector (type amdahl: traces → amdahl.phase.critical,
// amdahl.phase.duration, amdahl.work.duration), the OTLP receiver, the
// memory_limiter and batch processors, and the Prometheus, OTLP (otlp_grpc),
// load_balancing and file exporters, all at Collector v0.161.0 (stable
// modules v1.67.0). builder-config.yaml beside the module is the same
// distribution as a collector builder (OCB) manifest.
//
// With no --config (and no --set) it runs the embedded default.yaml: OTLP
// in on 127.0.0.1:4317 (gRPC) and 127.0.0.1:4318 (HTTP), the connector,
// Prometheus out on 127.0.0.1:8889. Any --config or --set replaces the
// default entirely. docs/collector.md describes the topologies.
package main

import (
	_ "embed"
	"log"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/confmap/provider/yamlprovider"
	"go.opentelemetry.io/collector/otelcol"

	"github.com/amdahl-rt/amdahl/telemetry"
)

//go:embed default.yaml
var defaultConfig string

func settings() otelcol.CollectorSettings {
	return otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "amdahl-collector",
			Description: "OpenTelemetry Collector with the amdahl connector (critical-path attribution of traces)",
			Version:     telemetry.Version,
		},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				URIs: []string{"yaml:" + defaultConfig},
				ProviderFactories: []confmap.ProviderFactory{
					envprovider.NewFactory(), fileprovider.NewFactory(), yamlprovider.NewFactory(),
				},
				DefaultScheme: "env",
			},
		},
		ProviderModules: map[string]string{
			"env":  "go.opentelemetry.io/collector/confmap/provider/envprovider v1.67.0",
			"file": "go.opentelemetry.io/collector/confmap/provider/fileprovider v1.67.0",
			"yaml": "go.opentelemetry.io/collector/confmap/provider/yamlprovider v1.67.0",
		},
	}
}

// newCommand returns the collector's command line (otelcol.NewCommand):
// run by default, and the validate, components and print-config commands.
func newCommand() *cobra.Command { return otelcol.NewCommand(settings()) }

func main() {
	if err := newCommand().Execute(); err != nil {
		log.Fatalf("amdahl-collector: %v", err)
	}
}

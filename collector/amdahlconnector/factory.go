// Package amdahlconnector is an OpenTelemetry Collector connector (type
// amdahl, traces → metrics) that computes, for every unit of work in the
// traces it receives, where its end-to-end time went on the critical path,
// with the same engine as `amdahl report` (package attribution), and emits
// the runtime's own histograms amdahl.work.duration, amdahl.phase.duration
// and amdahl.phase.critical, so that amdahl's Grafana dashboards work on
// production traces unchanged. README.md describes its configuration,
// bounds and health metrics.
package amdahlconnector

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/consumer"

	"github.com/amdahl-rt/amdahl/collector/amdahlconnector/internal/metadata"
)

// NewFactory returns the factory of the amdahl connector.
func NewFactory() connector.Factory {
	return connector.NewFactory(metadata.Type,
		func() component.Config { return createDefaultConfig() },
		connector.WithTracesToMetrics(createTracesToMetrics, metadata.TracesToMetricsStability))
}

func createTracesToMetrics(_ context.Context, set connector.Settings, cfg component.Config, next consumer.Metrics) (connector.Traces, error) {
	c, ok := cfg.(*Config)
	if !ok {
		return nil, fmt.Errorf("amdahl connector: config of type %T, want *amdahlconnector.Config", cfg)
	}
	return newConnector(set, c, next)
}

// Package metadata holds the amdahl connector's type, stability and
// instrumentation scope, as mdatagen's generated_status.go does for
// contrib components (from ../../metadata.yaml).
package metadata

import "go.opentelemetry.io/collector/component"

var (
	// Type is the connector's type name in a Collector configuration.
	Type = component.MustNewType("amdahl")
	// ScopeName is the instrumentation scope of the connector's own
	// metrics and of the metrics it emits.
	ScopeName = "github.com/amdahl-rt/amdahl/collector/amdahlconnector"
)

// TracesToMetricsStability is the stability of the traces → metrics pair.
const TracesToMetricsStability = component.StabilityLevelAlpha

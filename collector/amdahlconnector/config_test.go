package amdahlconnector

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
)

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	custom := createDefaultConfig()
	custom.Wait = 2 * time.Second
	custom.TraceTimeout = 30 * time.Second
	custom.MaxTraces = 5000
	custom.MaxSpansPerTrace = 2000
	custom.MaxBytes = 64 << 20
	custom.DoneTraces = 10000
	custom.MaxSeries = 500
	custom.FlushInterval = 5 * time.Second
	custom.LogInterval = 30 * time.Second
	custom.Source = "tier2"
	custom.VariantAttributes = []string{"deployment.environment.name", "service.version"}
	for _, tc := range []struct {
		id   component.ID
		want *Config
	}{
		{component.NewID(typ), createDefaultConfig()},
		{component.NewIDWithName(typ, "custom"), custom},
	} {
		t.Run(tc.id.String(), func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig()
			sub, err := cm.Sub(tc.id.String())
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Unmarshal(cfg); err != nil {
				t.Fatal(err)
			}
			if err := confmap.Validate(cfg); err != nil {
				t.Fatalf("validate: %v", err)
			}
			if !reflect.DeepEqual(cfg, tc.want) {
				t.Fatalf("got %+v, want %+v", cfg, tc.want)
			}
		})
	}
}

// TestValidateNamesFields: every bad value is reported, each naming its
// field.
func TestValidateNamesFields(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := NewFactory().CreateDefaultConfig()
	sub, err := cm.Sub("amdahl/bad")
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Unmarshal(cfg); err != nil {
		t.Fatal(err)
	}
	err = confmap.Validate(cfg)
	if err == nil {
		t.Fatal("bad config validated")
	}
	for _, want := range []string{"wait: 0s: want > 0", "trace_timeout: -1s", "metrics_flush_interval", "log_interval",
		"max_traces: 0: want 1 to", "max_spans_per_trace: 20000000: want 1 to 10000000", "max_bytes: 10: want ≥",
		"done_traces: 0", "max_series: 0", "source: empty", "variant_attributes[0]: empty key",
		"units: ", "sideways", "rows: ", "no-such-rules.yaml"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// The wait must fit in the timeout.
	c := createDefaultConfig()
	c.Wait, c.TraceTimeout = time.Minute, time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "trace_timeout: 1s: want ≥ wait (1m0s)") {
		t.Fatalf("wait > timeout: got %v", err)
	}
	if err := createDefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	// An empty rule set is auto's, as amdahl report's --rows auto.
	c = createDefaultConfig()
	c.Rows = ""
	if err := c.Validate(); err != nil {
		t.Fatalf("rows empty: %v", err)
	}
}

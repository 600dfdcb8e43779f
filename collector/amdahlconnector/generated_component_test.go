package amdahlconnector

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pipeline"
)

// The tests mdatagen generates for a connector (factory type, config
// struct, lifecycle), with the config of metadata.yaml's tests::config.

var typ = component.MustNewType("amdahl")

func TestComponentFactoryType(t *testing.T) {
	if got := NewFactory().Type(); got != typ {
		t.Fatalf("factory type %v, want %v", got, typ)
	}
}

func TestComponentConfigStruct(t *testing.T) {
	if err := componenttest.CheckConfigStruct(NewFactory().CreateDefaultConfig()); err != nil {
		t.Fatal(err)
	}
}

func TestComponentLifecycle(t *testing.T) {
	factory := NewFactory()
	create := func(ctx context.Context, set connector.Settings, cfg component.Config) (component.Component, error) {
		router := connector.NewMetricsRouter(map[pipeline.ID]consumer.Metrics{pipeline.NewID(pipeline.SignalMetrics): consumertest.NewNop()})
		return factory.CreateTracesToMetrics(ctx, set, cfg, router)
	}
	cm, err := confmaptest.LoadConf("metadata.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := factory.CreateDefaultConfig()
	sub, err := cm.Sub("tests::config")
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Unmarshal(&cfg); err != nil {
		t.Fatal(err)
	}
	t.Run("traces_to_metrics-shutdown", func(t *testing.T) {
		c, err := create(context.Background(), connectortest.NewNopSettings(typ), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("traces_to_metrics-lifecycle", func(t *testing.T) {
		host := componenttest.NewNopHost()
		for i := range 2 {
			c, err := create(context.Background(), connectortest.NewNopSettings(typ), cfg)
			if err != nil {
				t.Fatalf("connector %d: %v", i, err)
			}
			if err := c.Start(context.Background(), host); err != nil {
				t.Fatalf("connector %d: start: %v", i, err)
			}
			if err := c.Shutdown(context.Background()); err != nil {
				t.Fatalf("connector %d: shutdown: %v", i, err)
			}
			if err := c.Shutdown(context.Background()); err != nil {
				t.Fatalf("connector %d: second shutdown: %v", i, err)
			}
		}
	})
}

package amdahlconnector

import (
	"context"
	"errors"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/amdahl-rt/amdahl/collector/amdahlconnector/internal/metadata"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// Health metrics of the connector, through the Collector's own telemetry
// (TelemetrySettings.MeterProvider; served on the Collector's :8888 by
// default). Names follow mdatagen's otelcol_ prefix.
const (
	MetricTracesOpen        = "otelcol_connector_amdahl_traces_open"
	MetricSpansBuffered     = "otelcol_connector_amdahl_spans_buffered"
	MetricBytesBuffered     = "otelcol_connector_amdahl_bytes_buffered"
	MetricUnitsAttributed   = "otelcol_connector_amdahl_units_attributed"
	MetricTracesEvicted     = "otelcol_connector_amdahl_traces_evicted"
	MetricSpansLate         = "otelcol_connector_amdahl_spans_late"
	MetricSpansRefused      = "otelcol_connector_amdahl_spans_refused"
	MetricSpansUnattributed = "otelcol_connector_amdahl_spans_unattributed"
	MetricSeriesDropped     = "otelcol_connector_amdahl_datapoints_dropped"
)

// attrReason is the reason attribute of evictions and refusals.
const attrReason = attribute.Key("reason")

// health holds the connector's own instruments.
type health struct {
	unitsAttributed   metric.Int64Counter
	tracesEvicted     metric.Int64Counter
	spansLate         metric.Int64Counter
	spansRefused      metric.Int64Counter
	spansUnattributed metric.Int64Counter
	pointsDropped     metric.Int64Counter
	reg               metric.Registration
}

// gauges reads the buffer's sizes for the observable gauges.
type gauges func() (traces, spans, bytes int64)

func newHealth(set component.TelemetrySettings, read gauges) (*health, error) {
	m := set.MeterProvider.Meter(metadata.ScopeName, metric.WithInstrumentationVersion(telemetry.Version))
	h := &health{}
	var errs []error
	counter := func(name, desc, unit string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		return c
	}
	h.unitsAttributed = counter(MetricUnitsAttributed, "Units of work attributed (their metrics recorded).", "{unit}")
	h.tracesEvicted = counter(MetricTracesEvicted, "Traces dropped before they could be attributed, by reason: max_traces, max_bytes, max_spans_per_trace, timeout (no root arrived), shutdown.", "{trace}")
	h.spansLate = counter(MetricSpansLate, "Spans that arrived after their trace was attributed (not attributed again).", "{span}")
	h.spansRefused = counter(MetricSpansRefused, "Spans refused at a bound, by reason: max_spans_per_trace, max_bytes, trace_dropped (their trace was dropped earlier).", "{span}")
	h.spansUnattributed = counter(MetricSpansUnattributed, "Spans of attributed traces that belong to no unit of work (no unit root above them).", "{span}")
	h.pointsDropped = counter(MetricSeriesDropped, "Measurements not recorded because their series would pass max_series.", "{measurement}")
	traces, err := m.Int64ObservableGauge(MetricTracesOpen, metric.WithDescription("Traces held, waiting for their units' roots and the wait."), metric.WithUnit("{trace}"))
	errs = append(errs, err)
	spans, err := m.Int64ObservableGauge(MetricSpansBuffered, metric.WithDescription("Spans held."), metric.WithUnit("{span}"))
	errs = append(errs, err)
	bytes, err := m.Int64ObservableGauge(MetricBytesBuffered, metric.WithDescription("Bytes held, as max_bytes counts them."), metric.WithUnit("By"))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	h.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t, s, b := read()
		o.ObserveInt64(traces, t)
		o.ObserveInt64(spans, s)
		o.ObserveInt64(bytes, b)
		return nil
	}, traces, spans, bytes)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func reasonOpt(reason string) metric.AddOption {
	return metric.WithAttributeSet(attribute.NewSet(attrReason.String(reason)))
}

// Package dashboards builds amdahl's Grafana dashboards as Go code with the
// Grafana Foundation SDK and writes them as classic (v1) dashboard JSON for
// file provisioning. Every Prometheus query uses only the metric and label
// names of the telemetry contract (telemetry/doc.go); the tests run each of
// them against a real Prometheus scraping a real amdahl /metrics endpoint.
package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/grafana/grafana-foundation-sdk/go/bargauge"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/grafanapyroscope"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Datasource uids the dashboards refer to; provision datasources with these.
const (
	PrometheusUID = "amdahl-prometheus"
	PyroscopeUID  = "amdahl-pyroscope"
)

var promDS = dashboard.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr(PrometheusUID)}

// sel is the label filter every query applies (Grafana variables).
const sel = `amdahl_scenario=~"$scenario", amdahl_variant=~"$variant"`

// Queries of the attribution dashboard, exported so tests and docs use the
// same text.
var (
	// QCritical is each phase's critical-path share q.
	QCritical = `sum by (amdahl_component, amdahl_phase, amdahl_direction) (rate(amdahl_phase_critical_seconds_sum{` + sel + `}[$__rate_interval]))` +
		` / ignoring(amdahl_component, amdahl_phase, amdahl_direction) group_left sum(rate(amdahl_work_duration_seconds_sum{` + sel + `}[$__rate_interval]))`
	// QNaive is each phase's naive share (span time / e2e time).
	QNaive = `sum by (amdahl_component, amdahl_phase, amdahl_direction) (rate(amdahl_phase_duration_seconds_sum{` + sel + `}[$__rate_interval]))` +
		` / ignoring(amdahl_component, amdahl_phase, amdahl_direction) group_left sum(rate(amdahl_work_duration_seconds_sum{` + sel + `}[$__rate_interval]))`
	// QPredicted is q·r for the improvement $r chosen on the dashboard.
	QPredicted = `(` + QCritical + `) * $r`
	// QE2EP99 and QE2EP50 are the end-to-end latency quantiles.
	QE2EP99 = `histogram_quantile(0.99, sum by (le) (rate(amdahl_work_duration_seconds_bucket{` + sel + `}[$__rate_interval])))`
	QE2EP50 = `histogram_quantile(0.50, sum by (le) (rate(amdahl_work_duration_seconds_bucket{` + sel + `}[$__rate_interval])))`
	// QPhaseP99 is each phase's p99 duration.
	QPhaseP99 = `histogram_quantile(0.99, sum by (le, amdahl_component, amdahl_phase, amdahl_direction) (rate(amdahl_phase_duration_seconds_bucket{` + sel + `}[$__rate_interval])))`
	// QThroughput is units of work completed per second, by outcome.
	QThroughput = `sum by (amdahl_outcome) (rate(amdahl_work_duration_seconds_count{` + sel + `}[$__rate_interval]))`
	// QCriticalPerWork is each phase's mean critical time per unit of work,
	// by variant: the input of r in an A/B run.
	QCriticalPerWork = `sum by (amdahl_component, amdahl_phase, amdahl_direction, amdahl_variant) (rate(amdahl_phase_critical_seconds_sum{amdahl_scenario=~"$scenario"}[$__rate_interval]))` +
		` / ignoring(amdahl_component, amdahl_phase, amdahl_direction) group_left sum by (amdahl_variant) (rate(amdahl_work_duration_seconds_count{amdahl_scenario=~"$scenario"}[$__rate_interval]))`
)

// Attribution builds the "amdahl — attribution" dashboard.
func Attribution() (dashboard.Dashboard, error) {
	legend := "{{amdahl_component}}.{{amdahl_phase}} {{amdahl_direction}}"
	b := dashboard.NewDashboardBuilder("amdahl — attribution").
		Uid("amdahl-attribution").
		Tags([]string{"amdahl"}).
		Refresh("10s").
		Time("now-15m", "now").
		Timezone(common.TimeZoneUtc).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewQueryVariableBuilder("scenario").Label("scenario").Datasource(promDS).
			Query(dashboard.StringOrMap{String: cog.ToPtr(`label_values(amdahl_work_duration_seconds_count, amdahl_scenario)`)}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).IncludeAll(true).Multi(true).AllValue(".*")).
		WithVariable(dashboard.NewQueryVariableBuilder("variant").Label("variant").Datasource(promDS).
			Query(dashboard.StringOrMap{String: cog.ToPtr(`label_values(amdahl_work_duration_seconds_count, amdahl_variant)`)}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).IncludeAll(true).Multi(true).AllValue(".*")).
		WithVariable(dashboard.NewCustomVariableBuilder("r").Label("assumed improvement r").
			Values(dashboard.StringOrMap{String: cog.ToPtr("0.1,0.25,0.5,0.9")})).
		WithRow(dashboard.NewRowBuilder("End to end")).
		WithPanel(timeseries.NewPanelBuilder().Id(1).Title("End-to-end latency p50 / p99").Unit("s").Datasource(promDS).
			WithTarget(prometheus.NewDataqueryBuilder().RefId("A").Expr(QE2EP50).LegendFormat("p50")).
			WithTarget(prometheus.NewDataqueryBuilder().RefId("B").Expr(QE2EP99).LegendFormat("p99"))).
		WithPanel(timeseries.NewPanelBuilder().Id(2).Title("Units of work per second").Unit("ops").Datasource(promDS).
			WithTarget(prometheus.NewDataqueryBuilder().RefId("A").Expr(QThroughput).LegendFormat("{{amdahl_outcome}}"))).
		WithRow(dashboard.NewRowBuilder("Where the time goes")).
		WithPanel(bargauge.NewPanelBuilder().Id(3).Title("Critical-path share q per phase").Unit("percentunit").
			Orientation(common.VizOrientationHorizontal).Datasource(promDS).Min(0).Max(1).
			WithTarget(prometheus.NewDataqueryBuilder().RefId("A").Instant().Expr(QCritical).LegendFormat(legend))).
		WithPanel(bargauge.NewPanelBuilder().Id(4).Title("Naive share (span time / e2e; > q where phases overlap)").Unit("percentunit").
			Orientation(common.VizOrientationHorizontal).Datasource(promDS).Min(0).
			WithTarget(prometheus.NewDataqueryBuilder().RefId("A").Instant().Expr(QNaive).LegendFormat(legend))).
		WithPanel(stat.NewPanelBuilder().Id(5).Title("Predicted e2e gain q·r for r = $r").Unit("percentunit").Datasource(promDS).
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
			WithTarget(prometheus.NewDataqueryBuilder().RefId("A").Instant().Expr(QPredicted).LegendFormat(legend))).
		WithPanel(timeseries.NewPanelBuilder().Id(6).Title("Phase p99").Unit("s").Datasource(promDS).
			WithTarget(prometheus.NewDataqueryBuilder().RefId("A").Expr(QPhaseP99).LegendFormat(legend))).
		WithRow(dashboard.NewRowBuilder("A/B")).
		WithPanel(table.NewPanelBuilder().Id(7).Title("Critical time per unit of work, by variant (r = 1 − candidate/baseline)").
			Unit("s").Datasource(promDS).
			// The SDK's default footer has a null reducer, which Grafana's
			// schema (and the strict decoder) rejects.
			Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{"sum"})).
			WithTarget(prometheus.NewDataqueryBuilder().RefId("A").Instant().Format(prometheus.PromQueryFormatTable).Expr(QCriticalPerWork))).
		WithRow(dashboard.NewRowBuilder("Profiles")).
		WithPanel(dashboard.NewPanelBuilder().Id(8).Type("flamegraph").Title("CPU by phase (pprof label phase)").
			Datasource(dashboard.DataSourceRef{Type: cog.ToPtr("grafana-pyroscope-datasource"), Uid: cog.ToPtr(PyroscopeUID)}).
			WithTarget(grafanapyroscope.NewDataqueryBuilder().RefId("A").QueryType("profile").
				ProfileTypeId("process_cpu:cpu:nanoseconds:cpu:nanoseconds").
				LabelSelector(`{service_name="amdahl"}`).GroupBy([]string{"phase"})))
	d, err := b.Build()
	if err != nil {
		return dashboard.Dashboard{}, fmt.Errorf("build attribution dashboard: %w", err)
	}
	return d, nil
}

// All returns every dashboard by file name.
func All() (map[string]dashboard.Dashboard, error) {
	a, err := Attribution()
	if err != nil {
		return nil, err
	}
	return map[string]dashboard.Dashboard{"amdahl-attribution.json": a}, nil
}

// Marshal returns the dashboard as indented classic dashboard JSON.
func Marshal(d dashboard.Dashboard) ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("marshal dashboard: %w", err)
	}
	return append(b, '\n'), nil
}

// Write writes every dashboard into dir (created if missing) and returns the
// paths written.
func Write(dir string) ([]string, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("write dashboards: %w", err)
	}
	var paths []string
	for name, d := range all {
		b, err := Marshal(d)
		if err != nil {
			return nil, err
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return nil, fmt.Errorf("write dashboards: %w", err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// Package dashboards builds amdahl's Grafana dashboards as Go code with the
// Grafana Foundation SDK and writes them as classic (v1) dashboard JSON for
// file provisioning, with the Grafana provisioning files and a compose file
// that runs Grafana, Prometheus, Tempo, Jaeger and Pyroscope beside them
// (provision.go). Every Prometheus query uses only the metric and label
// names of the telemetry contract (telemetry/doc.go, ipc/metrics.go,
// chunking/metrics.go); the tests run each of them against a real
// Prometheus scraping a real amdahl run.
//
// Panels never name a datasource uid: each dashboard has datasource
// variables (ds_prometheus, ds_pyroscope, ds_tempo, ds_jaeger) whose
// default is the datasource the provisioning files create, so the
// dashboards also work against datasources a user already has.
package dashboards

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/bargauge"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/grafanapyroscope"
	"github.com/grafana/grafana-foundation-sdk/go/piechart"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/tempo"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"

	"github.com/amdahl-rt/amdahl/chunking"
)

// Uids of the datasources the provisioning files create; the dashboards'
// datasource variables default to them.
const (
	PrometheusUID = "amdahl-prometheus"
	PyroscopeUID  = "amdahl-pyroscope"
	TempoUID      = "amdahl-tempo"
	JaegerUID     = "amdahl-jaeger"
)

// Plugin ids of the datasource types the dashboards use.
const (
	TypePrometheus = "prometheus"
	TypePyroscope  = "grafana-pyroscope-datasource"
	TypeTempo      = "tempo"
	TypeJaeger     = "jaeger"
)

// Datasource variables: name, plugin type and default uid.
var dsVars = []struct{ name, typ, uid, label string }{
	{"ds_prometheus", TypePrometheus, PrometheusUID, "Prometheus"},
	{"ds_pyroscope", TypePyroscope, PyroscopeUID, "Pyroscope"},
	{"ds_tempo", TypeTempo, TempoUID, "Tempo"},
	{"ds_jaeger", TypeJaeger, JaegerUID, "Jaeger"},
}

func dsRef(typ, variable string) dashboard.DataSourceRef {
	return dashboard.DataSourceRef{Type: cog.ToPtr(typ), Uid: cog.ToPtr("${" + variable + "}")}
}

var (
	promDS  = dsRef(TypePrometheus, "ds_prometheus")
	pyroDS  = dsRef(TypePyroscope, "ds_pyroscope")
	tempoDS = dsRef(TypeTempo, "ds_tempo")
	jaegDS  = dsRef(TypeJaeger, "ds_jaeger")
)

// sel is the label filter of every amdahl series (Grafana variables).
const sel = `amdahl_scenario=~"$scenario", amdahl_variant=~"$variant"` + src

// src keeps the series of one source: the runtime's own (no amdahl_source
// label) or the amdahl connector's in the OpenTelemetry Collector
// (amdahl_source="collector"), so a unit both account is counted once.
const src = `, amdahl_source=~"$source"`

// Values of the source variable (regexes).
const (
	SourceRuntime   = "(runtime)?"
	SourceCollector = "collector"
)

// attributed, added to sel, keeps the work time of the units that
// amdahl_phase_critical_seconds covers: under a sampler, a unit whose
// trace was not sampled has amdahl_sampled="false" (telemetry.AttrSampled);
// without one no series has the label. q's denominator.
const attributed = `, amdahl_sampled!="false"`

// svc keeps the series of the processes whose resource service.name is
// $service_name: the Prometheus exporter puts resource attributes on
// target_info only, joined by job and instance.
// The Collector's Prometheus exporter puts service.name in job
// (service.namespace/service.name), not on target_info: scraped with
// honor_labels, its series are matched by job.
const svc = ` and on(job, instance) (target_info{service_name=~"$service_name"} or target_info{service_name="", job=~"(.+/)?($service_name)"})`

// rateOf is the per-second rate over the window win of the series
// name{labels} of the selected services.
func rateOf(name, labels, win string) string {
	return `(rate(` + name + `{` + labels + `}[` + win + `])` + svc + `)`
}

// rate is rateOf the series name{sel, extra} over winSeries.
func rate(name, extra string) string { return rateOf(name, sel+extra, winSeries) }

// gauge is the series name{sel} of the selected services.
func gauge(name string) string { return `(` + name + `{` + sel + `}` + svc + `)` }

// Row labels: one attribution row is a component, phase and direction.
const (
	row       = `amdahl_component, amdahl_phase, amdahl_direction`
	rowLegend = `{{amdahl_component}}.{{amdahl_phase}} {{amdahl_direction}}`
)

// variantSel is sel with one variant ($baseline or $candidate) instead of
// the $variant selection.
func variantSel(variant string) string {
	return `amdahl_scenario=~"$scenario", amdahl_variant="` + variant + `"` + src
}

// Windows: $__rate_interval for time series; $__range for the A/B
// panels, which compare the whole time range, so that two variants run
// one after the other (amdahl ab with AMDAHL_METRICS_ADDR) meet in it.
const (
	winSeries = "$__rate_interval"
	winRange  = "$__range"
)

// Attribution queries.
var (
	// QCritical is each row's critical-path share q over the time range.
	QCritical = qOf(sel, winRange)
	// QNaive is each row's naive share (span time / e2e time) over the
	// time range.
	QNaive = `sum by (` + row + `) ` + rateOf("amdahl_phase_duration_seconds_sum", sel, winRange) +
		` / ignoring(` + row + `) group_left sum(` + rateOf("amdahl_work_duration_seconds_sum", sel, winRange) + `)`
	// QCriticalPerWork is each row's mean critical time per unit of work,
	// by variant, over the time range.
	QCriticalPerWork = `sum by (` + row + `, amdahl_variant) ` + rateOf("amdahl_phase_critical_seconds_sum", sel, winRange) +
		` / ignoring(` + row + `) group_left sum by (amdahl_variant) ` + rateOf("amdahl_work_duration_seconds_count", sel+attributed, winRange)
)

// qOf is each row's q over win, of the series the label filter labels
// keeps (sel, or a variantSel).
func qOf(labels, win string) string {
	return `sum by (` + row + `) ` + rateOf("amdahl_phase_critical_seconds_sum", labels, win) +
		` / ignoring(` + row + `) group_left sum(` + rateOf("amdahl_work_duration_seconds_sum", labels+attributed, win) + `)`
}

// rOf is each row's r = 1 − mean span duration in $candidate / in
// $baseline, from the variant labels (amdahl ab's r).
func rOf(win string) string {
	return `1 - (` + meanRow("$candidate", win) + `) / (` + meanRow("$baseline", win) + `)`
}

// qrOf is q·r per row, q of $baseline.
func qrOf(win string) string {
	return `(` + qOf(variantSel("$baseline"), win) + `) * (` + rOf(win) + `)`
}

// predicted is Σ q·r over the rows: the predicted e2e gain.
func predicted(win string) string { return `sum(` + qrOf(win) + `)` }

// measured is the measured e2e gain: 1 − mean e2e in $candidate / in
// $baseline.
func measured(win string) string {
	return `1 - (` + meanE2E("$candidate", win) + `) / (` + meanE2E("$baseline", win) + `)`
}

func meanRow(variant, win string) string {
	return `sum by (` + row + `) ` + rateOf("amdahl_phase_duration_seconds_sum", variantSel(variant), win) +
		` / sum by (` + row + `) ` + rateOf("amdahl_phase_duration_seconds_count", variantSel(variant), win)
}

func meanE2E(variant, win string) string {
	return `sum(` + rateOf("amdahl_work_duration_seconds_sum", variantSel(variant), win) + `) / sum(` +
		rateOf("amdahl_work_duration_seconds_count", variantSel(variant), win) + `)`
}

// quantile is histogram_quantile(q) of the histogram name by the labels by.
func quantile(q, name, by string) string {
	return `histogram_quantile(` + q + `, sum by (le` + by + `) ` + rate(name+"_bucket", "") + `)`
}

// variables returns the variables every dashboard has: the datasource
// variables, source, service_name (one value when single), scenario and
// variant.
func variables(b *dashboard.DashboardBuilder, single bool) *dashboard.DashboardBuilder {
	for _, v := range dsVars {
		b = b.WithVariable(dashboard.NewDatasourceVariableBuilder(v.name).Label(v.label + " datasource").Type(v.typ).
			Current(current(v.uid, v.uid)))
	}
	query := func(name, label, q string) *dashboard.QueryVariableBuilder {
		return queryVar(name, label, q).IncludeAll(true).Multi(true).AllValue(".*")
	}
	service := query("service_name", "service", `label_values(target_info, service_name)`)
	if single {
		// Pyroscope and Jaeger take one service name, not a regex.
		service = queryOne("service_name", "service", `label_values(target_info, service_name)`, "amdahl")
	}
	source := dashboard.NewCustomVariableBuilder("source").Label("source").
		Description("the runtime's own series, or the amdahl connector's in the OpenTelemetry Collector (docs/collector.md)").
		Values(dashboard.StringOrMap{String: cog.ToPtr("runtime : " + SourceRuntime + ", collector : " + SourceCollector)}).
		Current(current("runtime", SourceRuntime))
	return b.
		WithVariable(source).
		WithVariable(service).
		WithVariable(query("scenario", "scenario", `label_values(amdahl_work_duration_seconds_count, amdahl_scenario)`)).
		WithVariable(query("variant", "variant", `label_values(amdahl_work_duration_seconds_count, amdahl_variant)`))
}

// queryVar is a variable whose values the Prometheus query q gives,
// refreshed when the time range changes.
func queryVar(name, label, q string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).Label(label).Datasource(promDS).
		Query(dashboard.StringOrMap{String: cog.ToPtr(q)}).Refresh(dashboard.VariableRefreshOnTimeRangeChanged)
}

// queryOne is a single-valued query variable whose value starts as def.
func queryOne(name, label, q, def string) *dashboard.QueryVariableBuilder {
	return queryVar(name, label, q).Current(current(def, def))
}

// current is a variable's current value, shown as text.
func current(text, value string) dashboard.VariableOption {
	return dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr(text)},
		Value: dashboard.StringOrArrayOfString{String: cog.ToPtr(value)}}
}

// newDashboard is a dashboard with the variables every dashboard has,
// service_name single-valued when single.
func newDashboard(title, uid string, single bool) *dashboard.DashboardBuilder {
	return variables(dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Tags([]string{"amdahl"}).
		Refresh("10s").
		Time("now-15m", "now").
		Timezone(common.TimeZoneUtc).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Link(dashboard.NewDashboardLinkBuilder("amdahl").Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{"amdahl"}).AsDropdown(true).KeepTime(true).IncludeVars(true)), single)
}

func promQuery(ref, expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().RefId(ref).Expr(expr).LegendFormat(legend).Datasource(common.DataSourceRef{
		Type: promDS.Type, Uid: promDS.Uid})
}

func series(id uint32, title, unit string) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().Id(id).Title(title).Unit(unit).Datasource(promDS)
}

// Attribution builds "amdahl — attribution": where the end-to-end time
// goes (q, naive share) and what an A/B comparison predicts (q·r) against
// what it measured.
func Attribution() (dashboard.Dashboard, error) {
	const variants = `label_values(amdahl_work_duration_seconds_count, amdahl_variant)`
	b := newDashboard("amdahl — attribution", "amdahl-attribution", false).
		WithVariable(queryOne("baseline", "baseline variant", variants, "baseline")).
		WithVariable(queryOne("candidate", "candidate variant", variants, "candidate")).
		WithRow(dashboard.NewRowBuilder("Where the time goes: $variant")).
		WithPanel(bargauge.NewPanelBuilder().Id(1).Title("Critical-path share q per row (time range)").Unit("percentunit").
			Orientation(common.VizOrientationHorizontal).Datasource(promDS).Min(0).Max(1).
			WithTarget(promQuery("A", QCritical, rowLegend).Instant())).
		WithPanel(bargauge.NewPanelBuilder().Id(2).Title("Naive share per row (span time / e2e; > q where phases overlap; time range)").Unit("percentunit").
			Orientation(common.VizOrientationHorizontal).Datasource(promDS).Min(0).
			WithTarget(promQuery("A", QNaive, rowLegend).Instant())).
		WithPanel(table.NewPanelBuilder().Id(3).Title("Critical time per unit of work, by variant (time range)").Unit("s").Datasource(promDS).
			// The SDK's default footer has a null reducer, which Grafana's
			// schema (and the strict decoder) rejects.
			Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{"sum"})).
			WithTarget(promQuery("A", QCriticalPerWork, "").Instant().Format(prometheus.PromQueryFormatTable))).
		WithPanel(series(8, "Critical-path share q over time", "percentunit").
			WithTarget(promQuery("A", qOf(sel, winSeries), rowLegend))).
		WithRow(dashboard.NewRowBuilder("A/B: $candidate against $baseline, over the time range")).
		WithPanel(bargauge.NewPanelBuilder().Id(4).Title("r per row: 1 − mean span time in $candidate / in $baseline").Unit("percentunit").
			Orientation(common.VizOrientationHorizontal).Datasource(promDS).
			WithTarget(promQuery("A", rOf(winRange), rowLegend).Instant())).
		WithPanel(bargauge.NewPanelBuilder().Id(5).Title("q·r per row (q of $baseline)").Unit("percentunit").
			Orientation(common.VizOrientationHorizontal).Datasource(promDS).
			WithTarget(promQuery("A", qrOf(winRange), rowLegend).Instant())).
		WithPanel(stat.NewPanelBuilder().Id(6).Title("Predicted (Σ q·r) vs measured e2e gain").Unit("percentunit").Datasource(promDS).
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
			WithTarget(promQuery("A", predicted(winRange), "predicted Σ q·r").Instant()).
			WithTarget(promQuery("B", measured(winRange), "measured 1 − e2e($candidate)/e2e($baseline)").Instant())).
		WithPanel(series(7, "Predicted vs measured e2e gain over time (variants running side by side)", "percentunit").
			WithTarget(promQuery("A", predicted(winSeries), "predicted Σ q·r")).
			WithTarget(promQuery("B", measured(winSeries), "measured")))
	return build(b, "attribution")
}

// Phases builds "amdahl — phases": latency quantiles per row and
// direction with exemplars, throughput and outcomes.
func Phases() (dashboard.Dashboard, error) {
	e2e := "amdahl_work_duration_seconds"
	ph := "amdahl_phase_duration_seconds"
	b := newDashboard("amdahl — phases", "amdahl-phases", false).
		WithRow(dashboard.NewRowBuilder("End to end")).
		WithPanel(series(1, "End-to-end latency p50 / p95 / p99 (exemplars link to traces)", "s").
			WithTarget(promQuery("A", quantile("0.50", e2e, ", amdahl_variant"), "p50 {{amdahl_variant}}").Exemplar(true)).
			WithTarget(promQuery("B", quantile("0.95", e2e, ", amdahl_variant"), "p95 {{amdahl_variant}}").Exemplar(true)).
			WithTarget(promQuery("C", quantile("0.99", e2e, ", amdahl_variant"), "p99 {{amdahl_variant}}").Exemplar(true))).
		WithPanel(series(2, "Throughput: units of work per second", "ops").
			WithTarget(promQuery("A", `sum by (amdahl_variant) `+rate(e2e+"_count", ""), "{{amdahl_variant}}"))).
		WithPanel(series(3, "Outcomes per second", "ops").
			WithTarget(promQuery("A", `sum by (amdahl_variant, amdahl_outcome) `+rate(e2e+"_count", ""), "{{amdahl_variant}} {{amdahl_outcome}}"))).
		WithRow(dashboard.NewRowBuilder("Per row and direction")).
		WithPanel(series(4, "Phase p50", "s").
			WithTarget(promQuery("A", quantile("0.50", ph, ", "+row), rowLegend).Exemplar(true))).
		WithPanel(series(5, "Phase p95", "s").
			WithTarget(promQuery("A", quantile("0.95", ph, ", "+row), rowLegend).Exemplar(true))).
		WithPanel(series(6, "Phase p99", "s").
			WithTarget(promQuery("A", quantile("0.99", ph, ", "+row), rowLegend).Exemplar(true))).
		WithPanel(series(7, "Phases per second", "ops").
			WithTarget(promQuery("A", `sum by (`+row+`) `+rate(ph+"_count", ""), rowLegend))).
		WithPanel(series(8, "Critical-path p99 per row", "s").
			WithTarget(promQuery("A", quantile("0.99", "amdahl_phase_critical_seconds", ", "+row), rowLegend).Exemplar(true)))
	return build(b, "phases")
}

// IPC builds "amdahl — ipc": the pipe endpoint's backpressure and volume.
func IPC() (dashboard.Dashboard, error) {
	const byOp = `amdahl_ipc_op, amdahl_direction, amdahl_transport`
	b := newDashboard("amdahl — ipc", "amdahl-ipc", false).
		WithRow(dashboard.NewRowBuilder("Backpressure")).
		WithPanel(series(1, "Send blocked: seconds blocked per second, by direction", "percentunit").
			WithTarget(promQuery("A", `sum by (amdahl_direction, amdahl_transport) `+rate("amdahl_ipc_send_blocked_seconds_sum", ""), "{{amdahl_direction}} {{amdahl_transport}}"))).
		WithPanel(series(2, "Send blocked p99 per packet", "s").
			WithTarget(promQuery("A", quantile("0.99", "amdahl_ipc_send_blocked_seconds", ", amdahl_direction"), "{{amdahl_direction}}").Exemplar(true))).
		WithPanel(series(3, "Async send queue depth (packets)", "short").
			WithTarget(promQuery("A", `sum by (amdahl_variant, amdahl_transport) `+gauge("amdahl_ipc_queue_depth"), "{{amdahl_variant}} {{amdahl_transport}}"))).
		WithPanel(series(4, "Async send queue bytes", "bytes").
			WithTarget(promQuery("A", `sum by (amdahl_variant, amdahl_transport) `+gauge("amdahl_ipc_queue_bytes"), "{{amdahl_variant}} {{amdahl_transport}}"))).
		WithPanel(table.NewPanelBuilder().Id(5).Title("Send buffer: requested vs effective (last connection)").Unit("bytes").Datasource(promDS).
			Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{"sum"})).
			WithTarget(promQuery("A", `max by (amdahl_variant, amdahl_transport) `+gauge("amdahl_ipc_buffer_requested_bytes"), "requested").Instant().Format(prometheus.PromQueryFormatTable)).
			WithTarget(promQuery("B", `max by (amdahl_variant, amdahl_transport) `+gauge("amdahl_ipc_buffer_effective_bytes"), "effective").Instant().Format(prometheus.PromQueryFormatTable))).
		WithRow(dashboard.NewRowBuilder("Volume")).
		WithPanel(series(6, "Bytes per second, by op and direction", "Bps").
			WithTarget(promQuery("A", `sum by (`+byOp+`) `+rate("amdahl_ipc_bytes_total", ""), "{{amdahl_ipc_op}} {{amdahl_direction}} {{amdahl_transport}}"))).
		WithPanel(series(7, "Packets per second, by op and direction", "pps").
			WithTarget(promQuery("A", `sum by (`+byOp+`) `+rate("amdahl_ipc_packets_total", ""), "{{amdahl_ipc_op}} {{amdahl_direction}} {{amdahl_transport}}"))).
		WithPanel(series(8, "Handshakes per second, by outcome", "ops").
			WithTarget(promQuery("A", `sum by (amdahl_outcome, amdahl_ipc_field) `+rate("amdahl_ipc_handshakes_total", ""), "{{amdahl_outcome}} {{amdahl_ipc_field}}")))
	return build(b, "ipc")
}

// Chunking builds "amdahl — chunking": completion planning, retries and
// the sidecar's reassembly.
func Chunking() (dashboard.Dashboard, error) {
	b := newDashboard("amdahl — chunking", "amdahl-chunking", false).
		WithRow(dashboard.NewRowBuilder("Planning")).
		WithPanel(series(1, "Chunks per completion (mean)", "short").
			WithTarget(promQuery("A", `sum by (amdahl_variant) `+rate("amdahl_chunking_chunks_sum", "")+
				` / sum by (amdahl_variant) `+rate("amdahl_chunking_chunks_count", ""), "{{amdahl_variant}}"))).
		WithPanel(series(2, "Sizing computations per completion, by kind", "short").
			WithTarget(promQuery("A", `sum by (amdahl_variant, amdahl_sizing_kind) `+rate("amdahl_chunking_sizing_computations_total", "")+
				` / ignoring(amdahl_sizing_kind) group_left sum by (amdahl_variant) `+rate("amdahl_chunking_chunks_count", ""), "{{amdahl_variant}} {{amdahl_sizing_kind}}"))).
		WithPanel(series(3, "Planned chunk bytes per second", "Bps").
			WithTarget(promQuery("A", `sum by (amdahl_variant) `+rate("amdahl_chunking_bytes_total", ""), "{{amdahl_variant}}"))).
		WithPanel(series(4, "Completions per second", "ops").
			WithTarget(promQuery("A", `sum by (amdahl_variant) `+rate("amdahl_chunking_chunks_count", ""), "{{amdahl_variant}}"))).
		WithRow(dashboard.NewRowBuilder("Failures")).
		WithPanel(series(5, "Retries per second, by gRPC code", "ops").
			WithTarget(promQuery("A", `sum by (amdahl_rpc_code) `+rate("amdahl_chunking_retries_total", ""), "{{amdahl_rpc_code}}"))).
		WithPanel(series(6, "Rejected completions per second, by reason", "ops").
			WithTarget(promQuery("A", `sum by (amdahl_reason) `+rate("amdahl_chunking_rejections_total", ""), "{{amdahl_reason}}"))).
		WithRow(dashboard.NewRowBuilder("Sidecar")).
		WithPanel(series(7, "Partial buffers held", "short").
			WithTarget(promQuery("A", `sum by (amdahl_variant) `+gauge("amdahl_sidecar_partial_buffers"), "{{amdahl_variant}}"))).
		WithPanel(series(8, "Duplicate chunks per second", "ops").
			WithTarget(promQuery("A", `sum by (amdahl_variant) `+rate("amdahl_sidecar_duplicates_total", ""), "{{amdahl_variant}}"))).
		WithPanel(series(9, "Protocol errors per second, by reason", "ops").
			WithTarget(promQuery("A", `sum by (amdahl_reason) `+rate("amdahl_sidecar_protocol_errors_total", ""), "{{amdahl_reason}}"))).
		WithPanel(series(10, "Refused calls per second, by bound", "ops").
			WithTarget(promQuery("A", `sum by (amdahl_reason) `+rate("amdahl_sidecar_rejections_total", ""), "{{amdahl_reason}}")))
	return build(b, "chunking")
}

// Pyroscope profile types the flame graphs show.
const (
	ProfileCPU   = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
	ProfileAlloc = "memory:alloc_space:bytes:space:bytes"
)

// jaegerQuery is a Jaeger search query; the SDK has no Jaeger package.
type jaegerQuery struct {
	RefID       string                `json:"refId"`
	QueryType   string                `json:"queryType"`
	Service     string                `json:"service"`
	Operation   string                `json:"operation,omitempty"`
	MinDuration string                `json:"minDuration,omitempty"`
	Limit       int                   `json:"limit,omitempty"`
	Datasource  *common.DataSourceRef `json:"datasource,omitempty"`
}

func (jaegerQuery) ImplementsDataqueryVariant() {}
func (q jaegerQuery) Equals(o variants.Dataquery) bool {
	x, ok := o.(jaegerQuery)
	return ok && x.RefID == q.RefID && x.Service == q.Service && x.Operation == q.Operation
}
func (jaegerQuery) DataqueryType() string { return TypeJaeger }
func (q jaegerQuery) Validate() error {
	if q.Service == "" || q.QueryType == "" {
		return fmt.Errorf("jaeger query: service and queryType are required")
	}
	return nil
}

// built is a cog.Builder of a value already built (the Jaeger query).
type built[T any] struct{ v T }

func (b built[T]) Build() (T, error) { return b.v, nil }

// Profiles builds "amdahl — profiles and traces": each service's CPU
// share by phase (Pyroscope metrics grouped by the phase label), CPU and allocation flame
// graphs per phase for the parent (service $service_name) and the task
// hosts ($host_service_name), the parent's chunking serialize per step
// (the step pprof label: size, validate, pack, encode; the legacy
// planner's repeated sizing is step=size), and the slowest units' traces in Tempo and
// Jaeger. A trace opens its profile through the Tempo datasource's
// traces-to-profiles link (provisioning).
func Profiles() (dashboard.Dashboard, error) {
	phases := "queue,dispatch,serialize,send,receive,deserialize,execute"
	// flame is a flame graph of the profiles selector selects; with
	// repeat, one panel per value of that variable.
	flame := func(id uint32, title, unit, profile, selector, repeat string) *dashboard.PanelBuilder {
		p := dashboard.NewPanelBuilder().Id(id).Type("flamegraph").Title(title).Unit(unit).Datasource(pyroDS).
			WithTarget(grafanapyroscope.NewDataqueryBuilder().RefId("A").QueryType("profile").
				ProfileTypeId(profile).LabelSelector(selector).GroupBy([]string{}))
		if repeat != "" {
			p = p.Repeat(repeat).RepeatDirection(dashboard.PanelRepeatDirectionH).MaxPerRow(4)
		}
		return p
	}
	// share: the CPU of a service by pprof label phase, over the time
	// range (a Pyroscope metrics query per label value): the samples
	// without the label are the series with an empty phase, what no
	// phase label reached (amdahl profile books them by stack).
	share := func(id uint32, title, service string) *piechart.PanelBuilder {
		return piechart.NewPanelBuilder().Id(id).Title(title).Unit("ns").Datasource(pyroDS).Span(12).
			Description("CPU by the pprof label phase over the time range; the slice without a phase is CPU no label reached: " +
				"gRPC's client transport, the Go runtime (GC, scheduler), start-up. `amdahl profile` books those by stack.").
			PieType(piechart.PieChartTypeDonut).DisplayLabels([]piechart.PieChartLabels{piechart.PieChartLabelsName, piechart.PieChartLabelsPercent}).
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"sum"}).Values(false)).
			WithTarget(grafanapyroscope.NewDataqueryBuilder().RefId("A").QueryType("metrics").ProfileTypeId(ProfileCPU).
				LabelSelector(`{service_name="` + service + `"}`).GroupBy([]string{"phase"}))
	}
	steps := strings.Join(chunking.SerializeSteps(), ",")
	b := newDashboard("amdahl — profiles and traces", "amdahl-profiles", true).
		WithVariable(dashboard.NewCustomVariableBuilder("phase").Label("phase (pprof label)").
			Values(dashboard.StringOrMap{String: cog.ToPtr(phases)}).Multi(true).IncludeAll(true)).
		WithVariable(dashboard.NewCustomVariableBuilder("step").Label("chunking serialize step (pprof label)").
			Values(dashboard.StringOrMap{String: cog.ToPtr(steps)}).Multi(true).IncludeAll(true)).
		WithVariable(dashboard.NewTextBoxVariableBuilder("host_service_name").Label("task host service").
			DefaultValue(dashboard.StringOrMap{String: cog.ToPtr("amdahl-taskhost")}).
			Current(current("amdahl-taskhost", "amdahl-taskhost"))).
		WithVariable(dashboard.NewTextBoxVariableBuilder("min_duration").Label("slow unit: at least").
			DefaultValue(dashboard.StringOrMap{String: cog.ToPtr("10ms")}).
			Current(current("10ms", "10ms"))).
		WithRow(dashboard.NewRowBuilder("CPU share by phase (pprof labels)")).
		WithPanel(share(8, "Parent CPU by phase", "$service_name")).
		WithPanel(share(9, "Task host CPU by phase", "$host_service_name")).
		WithRow(dashboard.NewRowBuilder("Parent: CPU by phase")).
		WithPanel(flame(1, "Parent CPU, phase $phase", "ns", ProfileCPU, `{service_name="$service_name", phase=~"$phase"}`, "phase")).
		WithRow(dashboard.NewRowBuilder("Task hosts: CPU by phase")).
		WithPanel(flame(2, "Task host CPU, phase $phase", "ns", ProfileCPU, `{service_name="$host_service_name", phase=~"$phase"}`, "phase")).
		WithRow(dashboard.NewRowBuilder("Parent: chunking serialize by step")).
		WithPanel(flame(7, "Parent CPU, serialize step $step", "ns", ProfileCPU,
			`{service_name="$service_name", phase="serialize", step=~"$step"}`, "step")).
		WithRow(dashboard.NewRowBuilder("Allocations")).
		WithPanel(flame(3, "Parent allocated bytes", "bytes", ProfileAlloc, `{service_name="$service_name"}`, "")).
		WithPanel(flame(4, "Task host allocated bytes", "bytes", ProfileAlloc, `{service_name="$host_service_name"}`, "")).
		WithRow(dashboard.NewRowBuilder("Traces")).
		WithPanel(table.NewPanelBuilder().Id(5).Title("Slow units (Tempo, TraceQL): open a trace, then its profile").Unit("ms").Datasource(tempoDS).
			Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{"sum"})).
			WithTarget(tempo.NewDataqueryBuilder().RefId("A").QueryType("traceql").Limit(20).
				Query(`{resource.service.name=~"$service_name" && name="amdahl.work" && span.amdahl.scenario=~"$scenario" && span.amdahl.variant=~"$variant" && duration >= $min_duration}`))).
		WithPanel(table.NewPanelBuilder().Id(6).Title("Slow units (Jaeger search)").Unit("ms").Datasource(jaegDS).
			Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{"sum"})).
			WithTarget(built[variants.Dataquery]{jaegerQuery{RefID: "A", QueryType: "search", Service: "$service_name",
				Operation: "amdahl.work", MinDuration: "$min_duration", Limit: 20,
				Datasource: &common.DataSourceRef{Type: jaegDS.Type, Uid: jaegDS.Uid}}}))
	return build(b, "profiles")
}

func build(b *dashboard.DashboardBuilder, name string) (dashboard.Dashboard, error) {
	d, err := b.Build()
	if err != nil {
		return dashboard.Dashboard{}, fmt.Errorf("build %s dashboard: %w", name, err)
	}
	return d, nil
}

// All returns every dashboard by file name.
func All() (map[string]dashboard.Dashboard, error) {
	out := map[string]dashboard.Dashboard{}
	for name, f := range map[string]func() (dashboard.Dashboard, error){
		"amdahl-attribution.json": Attribution,
		"amdahl-phases.json":      Phases,
		"amdahl-ipc.json":         IPC,
		"amdahl-chunking.json":    Chunking,
		"amdahl-profiles.json":    Profiles,
	} {
		d, err := f()
		if err != nil {
			return nil, err
		}
		out[name] = d
	}
	return out, nil
}

// Marshal returns the dashboard as indented classic dashboard JSON.
func Marshal(d dashboard.Dashboard) ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("marshal dashboard: %w", err)
	}
	return append(b, '\n'), nil
}

// WriteJSON writes every dashboard into dir (created if missing) and
// returns the paths written, sorted.
func WriteJSON(dir string) ([]string, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for name, d := range all {
		if files[name], err = Marshal(d); err != nil {
			return nil, err
		}
	}
	return writeFiles(dir, files)
}

// writeFiles writes files (contents by slash-separated path) under dir,
// creating directories as needed, and returns the paths written, sorted.
func writeFiles(dir string, files map[string][]byte) ([]string, error) {
	var paths []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("write dashboards: %w", err)
		}
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return nil, fmt.Errorf("write dashboards: %w", err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

package amdahlconnector

import (
	"sort"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// The three histograms, as the runtime records them (telemetry/names.go):
// same names, unit, buckets, descriptions and attributes.
type metricID uint8

const (
	metricWork metricID = iota
	metricPhase
	metricCritical
	numMetrics
)

var metricDefs = [numMetrics]struct{ name, desc string }{
	metricWork:     {telemetry.MetricWorkDuration, "End-to-end duration of a unit of work, submission to result delivered."},
	metricPhase:    {telemetry.MetricPhaseDuration, "Duration of one phase of a unit of work."},
	metricCritical: {telemetry.MetricPhaseCritical, "Exclusive time of one phase on the critical path of a unit of work."},
}

// seriesKey identifies one histogram series: its metric, its resource (the
// unit root's service) and its data point attributes. Empty strings are
// attributes left out.
type seriesKey struct {
	metric             metricID
	service, namespace string
	component          string
	phase              telemetry.Phase
	direction          telemetry.Direction
	transport          string
	scenario           string
	variant            string
	outcome            string
}

// histogram is one cumulative explicit-bucket series.
type histogram struct {
	counts   []uint64 // len(telemetry.DurationBuckets)+1
	sum      float64
	count    uint64
	min, max float64
}

func (h *histogram) record(v float64) {
	i := sort.SearchFloat64s(telemetry.DurationBuckets, v) // first bound ≥ v: (lo, hi] buckets
	h.counts[i]++
	if h.count == 0 || v < h.min {
		h.min = v
	}
	if h.count == 0 || v > h.max {
		h.max = v
	}
	h.sum += v
	h.count++
}

// aggregator sums units into cumulative histograms. Not safe for
// concurrent use: the connector serialises it.
type aggregator struct {
	source    string
	instance  string // service.instance.id of every resource: this collector's
	maxSeries int
	start     pcommon.Timestamp
	series    map[seriesKey]*histogram
	// dropped counts data points of series past maxSeries since last read.
	dropped int64
}

func newAggregator(cfg *Config, instance string, start time.Time) *aggregator {
	return &aggregator{source: cfg.Source, instance: instance, maxSeries: cfg.MaxSeries,
		start: pcommon.NewTimestampFromTime(start), series: map[seriesKey]*histogram{}}
}

func (a *aggregator) record(k seriesKey, v float64) {
	h := a.series[k]
	if h == nil {
		if len(a.series) >= a.maxSeries {
			a.dropped++
			return
		}
		h = &histogram{counts: make([]uint64, len(telemetry.DurationBuckets)+1)}
		a.series[k] = h
	}
	h.record(v)
}

// add records one unit: its end-to-end duration, each phase span's
// duration and each row's critical time, as the runtime does
// (runtime.onWork, telemetry.Component): rows without a phase ("other")
// are not recorded.
func (a *aggregator) add(w attribution.Work, u *unitInfo) {
	k := seriesKey{metric: metricWork, service: u.service, namespace: u.namespace,
		transport: u.transport, scenario: u.scenario, variant: u.variant, outcome: u.outcome}
	if k.outcome == "" {
		k.outcome = telemetry.OK.String()
		if w.Root.Failed {
			k.outcome = telemetry.Failed.String()
		}
	}
	a.record(k, w.E2E().Seconds())
	k.outcome = ""
	k.metric = metricPhase
	for _, n := range w.Nodes {
		if !n.Key.Phase.Valid() {
			continue
		}
		k.component, k.phase, k.direction = n.Key.Component, n.Key.Phase, n.Key.Direction
		a.record(k, n.Dur.Seconds())
	}
	k.metric = metricCritical
	for _, s := range w.Stats {
		if !s.Key.Phase.Valid() {
			continue
		}
		k.component, k.phase, k.direction = s.Key.Component, s.Key.Phase, s.Key.Direction
		a.record(k, s.Critical.Seconds())
	}
}

// resourceKey is a series' resource.
type resourceKey struct{ service, namespace string }

// build returns every series as cumulative histograms at now, one
// ResourceMetrics per unit-root service, in a fresh pmetric.Metrics (the
// next consumer may fan it out); empty if nothing was recorded.
func (a *aggregator) build(now time.Time, scopeName, scopeVersion string) pmetric.Metrics {
	md := pmetric.NewMetrics()
	if len(a.series) == 0 {
		return md
	}
	keys := make([]seriesKey, 0, len(a.series))
	for k := range a.series {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return lessSeries(keys[i], keys[j]) })
	ts := pcommon.NewTimestampFromTime(now)
	var (
		cur     resourceKey
		sm      pmetric.ScopeMetrics
		metrics [numMetrics]pmetric.HistogramDataPointSlice
		have    [numMetrics]bool
		started bool
	)
	for _, k := range keys {
		if rk := (resourceKey{k.service, k.namespace}); !started || rk != cur {
			started, cur = true, rk
			rm := md.ResourceMetrics().AppendEmpty()
			ra := rm.Resource().Attributes()
			if k.service != "" {
				ra.PutStr(keyServiceName, k.service)
			}
			if k.namespace != "" {
				ra.PutStr(keyServiceNamespace, k.namespace)
			}
			ra.PutStr(keyServiceInstance, a.instance)
			sm = rm.ScopeMetrics().AppendEmpty()
			sm.Scope().SetName(scopeName)
			sm.Scope().SetVersion(scopeVersion)
			have = [numMetrics]bool{}
		}
		if !have[k.metric] {
			have[k.metric] = true
			m := sm.Metrics().AppendEmpty()
			m.SetName(metricDefs[k.metric].name)
			m.SetDescription(metricDefs[k.metric].desc)
			m.SetUnit("s")
			h := m.SetEmptyHistogram()
			h.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
			metrics[k.metric] = h.DataPoints()
		}
		h := a.series[k]
		dp := metrics[k.metric].AppendEmpty()
		dp.SetStartTimestamp(a.start)
		dp.SetTimestamp(ts)
		dp.SetCount(h.count)
		dp.SetSum(h.sum)
		dp.SetMin(h.min)
		dp.SetMax(h.max)
		dp.BucketCounts().FromRaw(h.counts)
		dp.ExplicitBounds().FromRaw(telemetry.DurationBuckets)
		at := dp.Attributes()
		if k.component != "" || k.metric != metricWork {
			at.PutStr(string(telemetry.AttrComponent), k.component)
		}
		if k.phase.Valid() {
			at.PutStr(string(telemetry.AttrPhase), k.phase.String())
		}
		if k.direction != telemetry.None {
			at.PutStr(string(telemetry.AttrDirection), k.direction.String())
		}
		for _, kv := range [...]struct{ k, v string }{
			{string(telemetry.AttrTransport), k.transport},
			{string(telemetry.AttrScenario), k.scenario},
			{string(telemetry.AttrVariant), k.variant},
			{string(telemetry.AttrOutcome), k.outcome},
		} {
			if kv.v != "" {
				at.PutStr(kv.k, kv.v)
			}
		}
		at.PutStr(keySource, a.source)
	}
	return md
}

func lessSeries(x, y seriesKey) bool {
	if x.service != y.service {
		return x.service < y.service
	}
	if x.namespace != y.namespace {
		return x.namespace < y.namespace
	}
	if x.metric != y.metric {
		return x.metric < y.metric
	}
	if x.component != y.component {
		return x.component < y.component
	}
	if x.phase != y.phase {
		return x.phase < y.phase
	}
	if x.direction != y.direction {
		return x.direction < y.direction
	}
	for _, p := range [...][2]string{{x.transport, y.transport}, {x.scenario, y.scenario}, {x.variant, y.variant}, {x.outcome, y.outcome}} {
		if p[0] != p[1] {
			return p[0] < p[1]
		}
	}
	return false
}

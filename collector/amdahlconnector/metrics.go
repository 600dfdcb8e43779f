package amdahlconnector

import (
	"cmp"
	"maps"
	"slices"
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
	metric metricID
	unitKey
	row     attribution.Key
	outcome string
}

// unitKey is what the series of one unit share: its resource and the
// root's attributes.
type unitKey struct {
	service, namespace string
	transport          string
	scenario           string
	variant            string
}

// unitSeries are the series of the units of one unitKey: a unit's rows
// are found by their attribution.Key alone (cheaper to hash than a whole
// seriesKey, per phase span).
type unitSeries struct {
	work map[string]*histogram          // by outcome
	rows map[attribution.Key]*rowSeries // amdahl.phase.duration and .critical
	// The rows of the last unit added, one per entry of its Work.Stats:
	// units of one shape have the same Stats keys, found again by
	// comparing them (interned strings: mostly their pointers) rather
	// than by hashing each.
	lastKeys []attribution.Key
	lastRows []*rowSeries
}

type rowSeries struct{ phase, critical *histogram }

// histogram is one cumulative explicit-bucket series.
type histogram struct {
	counts   []uint64 // len(telemetry.DurationBuckets)+1
	sum      float64
	count    uint64
	min, max float64
}

func (h *histogram) record(v float64) {
	// The first bound ≥ v: (lo, hi] buckets (sort.SearchFloat64s, without
	// its calls).
	b := telemetry.DurationBuckets
	i, j := 0, len(b)
	for i < j {
		m := int(uint(i+j) >> 1)
		if !(b[m] >= v) {
			i = m + 1
		} else {
			j = m
		}
	}
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
	units     map[unitKey]*unitSeries
	series    int
	// gaps are the distinct gaps (their two ends) recorded, at most maxGaps.
	gaps map[[2]string]struct{}
	// The last unit's series: consecutive units mostly share them.
	lastKey   unitKey
	lastUnits *unitSeries
	// dropped counts measurements of series past maxSeries since last read.
	dropped int64
}

func newAggregator(cfg *Config, instance string, start time.Time) *aggregator {
	return &aggregator{source: cfg.Source, instance: instance, maxSeries: cfg.MaxSeries,
		start: pcommon.NewTimestampFromTime(start), units: map[unitKey]*unitSeries{}, gaps: map[[2]string]struct{}{}}
}

// maxGaps bounds the distinct gaps recorded by their ends, as the
// runtime's telemetry.Component does (telemetry/doc.go: 256); later ones
// are recorded with both ends telemetry.GapMore.
const maxGaps = 256

// newHistogram returns a new series, or nil past maxSeries.
func (a *aggregator) newHistogram() *histogram {
	if a.series >= a.maxSeries {
		return nil
	}
	a.series++
	return &histogram{counts: make([]uint64, len(telemetry.DurationBuckets)+1)}
}

func (a *aggregator) record(h *histogram, v float64) {
	if h == nil {
		a.dropped++
		return
	}
	h.record(v)
}

func (a *aggregator) unit(k unitKey) *unitSeries {
	if a.lastUnits != nil && a.lastKey == k {
		return a.lastUnits
	}
	u := a.units[k]
	if u == nil {
		u = &unitSeries{work: map[string]*histogram{}, rows: map[attribution.Key]*rowSeries{}}
		a.units[k] = u
	}
	a.lastKey, a.lastUnits = k, u
	return u
}

func (a *aggregator) row(u *unitSeries, k attribution.Key) *rowSeries {
	if k.Gap {
		k = a.gapKey(k)
	}
	r := u.rows[k]
	if r == nil {
		r = &rowSeries{}
		u.rows[k] = r
	}
	return r
}

// gapKey is gap k, or past maxGaps distinct gaps the gap of both ends
// telemetry.GapMore, as the runtime records them.
func (a *aggregator) gapKey(k attribution.Key) attribution.Key {
	ends := [2]string{k.Component, k.Op}
	if _, ok := a.gaps[ends]; ok {
		return k
	}
	if len(a.gaps) >= maxGaps {
		return attribution.Key{Gap: true, Component: telemetry.GapMore, Op: telemetry.GapMore}
	}
	a.gaps[ends] = struct{}{}
	return k
}

// rows returns the series of each of stats' rows (nil for a key that is
// neither a row nor a gap).
func (a *aggregator) rows(u *unitSeries, stats []attribution.KeyStat) []*rowSeries {
	if len(stats) == len(u.lastKeys) {
		same := true
		for i := range stats {
			if !sameKey(&stats[i].Key, &u.lastKeys[i]) {
				same = false
				break
			}
		}
		if same {
			return u.lastRows
		}
	}
	u.lastKeys, u.lastRows = u.lastKeys[:0], u.lastRows[:0]
	for i := range stats {
		k := stats[i].Key
		var r *rowSeries
		if k.IsRow() || k.Gap {
			r = a.row(u, k)
		}
		u.lastKeys = append(u.lastKeys, k)
		u.lastRows = append(u.lastRows, r)
	}
	return u.lastRows
}

// sameKey is k == o, comparing the fields that differ most often first.
func sameKey(k, o *attribution.Key) bool {
	return k.Phase == o.Phase && k.Direction == o.Direction && k.Gap == o.Gap && k.Component == o.Component && k.Op == o.Op
}

// add records one unit: its end-to-end duration, each phase span's
// duration and each row's and gap's critical time, as the runtime does
// (runtime.onWork, telemetry.Component): "other" itself is not recorded,
// its gaps are.
func (a *aggregator) add(w attribution.Work, info *unitInfo) {
	u := a.unit(unitKey{service: info.service, namespace: info.namespace,
		transport: info.transport, scenario: info.scenario, variant: info.variant})
	outcome := info.outcome
	if outcome == "" {
		outcome = telemetry.OK.String()
		if w.Root.Failed {
			outcome = telemetry.Failed.String()
		}
	}
	h, ok := u.work[outcome]
	if !ok {
		h = a.newHistogram()
		u.work[outcome] = h
	}
	a.record(h, w.E2E().Seconds())
	rows := a.rows(u, w.Stats)
	for i := range w.Nodes {
		n := &w.Nodes[i]
		if n.Row < 0 || !n.Key.IsRow() {
			continue
		}
		r := rows[n.Row]
		if r.phase == nil {
			r.phase = a.newHistogram()
		}
		a.record(r.phase, n.Dur.Seconds())
	}
	for i, r := range rows {
		if r == nil {
			continue
		}
		if r.critical == nil {
			r.critical = a.newHistogram()
		}
		a.record(r.critical, w.Stats[i].Critical.Seconds())
	}
}

// all returns every series with its key.
func (a *aggregator) all() map[seriesKey]*histogram {
	out := make(map[seriesKey]*histogram, a.series)
	for uk, u := range a.units {
		for o, h := range u.work {
			if h != nil {
				out[seriesKey{metric: metricWork, unitKey: uk, outcome: o}] = h
			}
		}
		for rk, r := range u.rows {
			if r.phase != nil {
				out[seriesKey{metric: metricPhase, unitKey: uk, row: rk}] = r.phase
			}
			if r.critical != nil {
				out[seriesKey{metric: metricCritical, unitKey: uk, row: rk}] = r.critical
			}
		}
	}
	return out
}

// resourceKey is a series' resource.
type resourceKey struct{ service, namespace string }

// build returns every series as cumulative histograms at now, one
// ResourceMetrics per unit-root service, in a fresh pmetric.Metrics (the
// next consumer may fan it out); empty if nothing was recorded.
func (a *aggregator) build(now time.Time, scopeName, scopeVersion string) pmetric.Metrics {
	md := pmetric.NewMetrics()
	series := a.all()
	if len(series) == 0 {
		return md
	}
	keys := slices.SortedFunc(maps.Keys(series), compareSeries)
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
		h := series[k]
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
		if k.row.Gap {
			at.PutStr(string(telemetry.AttrPhase), telemetry.PhaseGap)
			at.PutStr(string(telemetry.AttrGapFrom), k.row.Component)
			at.PutStr(string(telemetry.AttrGapTo), k.row.Op)
		} else if k.metric != metricWork {
			at.PutStr(string(telemetry.AttrComponent), k.row.Component)
			if k.row.Phase.Valid() {
				at.PutStr(string(telemetry.AttrPhase), k.row.Phase.String())
			}
			if k.row.Direction != telemetry.None {
				at.PutStr(string(telemetry.AttrDirection), k.row.Direction.String())
			}
			if k.row.Op != "" {
				at.PutStr(keyOperation, k.row.Op)
			}
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

// compareSeries orders series by resource, metric, row (a gap after the
// row of the same names), then the unit's attributes.
func compareSeries(x, y seriesKey) int {
	gap := func(k seriesKey) int {
		if k.row.Gap {
			return 1
		}
		return 0
	}
	return cmp.Or(cmp.Compare(x.service, y.service), cmp.Compare(x.namespace, y.namespace), cmp.Compare(x.metric, y.metric),
		cmp.Compare(x.row.Component, y.row.Component), cmp.Compare(x.row.Phase, y.row.Phase), cmp.Compare(x.row.Direction, y.row.Direction),
		cmp.Compare(x.row.Op, y.row.Op), cmp.Compare(gap(x), gap(y)),
		cmp.Compare(x.transport, y.transport), cmp.Compare(x.scenario, y.scenario), cmp.Compare(x.variant, y.variant), cmp.Compare(x.outcome, y.outcome))
}

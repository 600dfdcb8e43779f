package amdahlconnector

import (
	"strconv"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// TestGapsBounded: past maxGaps distinct gaps, further ones are recorded
// with both ends telemetry.GapMore (as the runtime's RecordCriticalGap),
// and gaps count toward max_series like rows.
func TestGapsBounded(t *testing.T) {
	cfg := createDefaultConfig()
	a := newAggregator(cfg, "test", time.Unix(0, 0))
	const distinct = maxGaps + 44
	for i := range distinct {
		w := attribution.Work{
			Root: spans.Span{Start: 0, End: 10},
			Stats: []attribution.KeyStat{
				{Key: attribution.Key{Component: "ipc", Phase: telemetry.Send, Direction: telemetry.Request}, Critical: 4},
				{Key: attribution.Key{Gap: true, Component: "g" + strconv.Itoa(i), Op: attribution.GapEnd}, Critical: 6},
			},
		}
		a.add(w, &unitInfo{service: "svc"})
	}
	md := a.build(time.Unix(1, 0), "scope", "v")
	gaps, more := 0, uint64(0)
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		ms := rms.At(i).ScopeMetrics().At(0).Metrics()
		for j := 0; j < ms.Len(); j++ {
			dps := ms.At(j).Histogram().DataPoints()
			for k := 0; k < dps.Len(); k++ {
				at := dps.At(k).Attributes()
				if ph, ok := at.Get("amdahl.phase"); !ok || ph.AsString() != telemetry.PhaseGap {
					continue
				}
				gaps++
				if from, ok := at.Get("amdahl.gap.from"); ok && from.AsString() == telemetry.GapMore {
					more = dps.At(k).Count()
				}
			}
		}
	}
	if gaps != maxGaps+1 {
		t.Errorf("%d gap series, want %d distinct and one %q", gaps, maxGaps, telemetry.GapMore)
	}
	if more != distinct-maxGaps {
		t.Errorf("%q series counts %d gaps, want %d", telemetry.GapMore, more, distinct-maxGaps)
	}

	// max_series bounds gaps as it bounds rows.
	cfg.MaxSeries = 10
	a = newAggregator(cfg, "test", time.Unix(0, 0))
	for i := range 20 {
		a.add(attribution.Work{Root: spans.Span{End: 10}, Stats: []attribution.KeyStat{
			{Key: attribution.Key{Gap: true, Component: attribution.GapStart, Op: "r" + strconv.Itoa(i)}, Critical: 10},
		}}, &unitInfo{})
	}
	if a.series != cfg.MaxSeries || a.dropped == 0 {
		t.Errorf("%d series, %d dropped: want %d and some dropped", a.series, a.dropped, cfg.MaxSeries)
	}
}

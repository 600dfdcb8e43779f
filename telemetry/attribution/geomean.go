package attribution

import (
	"fmt"
	"math"
)

// GeoMean returns the geometric mean of ratios with Student's t interval
// at level (0 < level < 1) over their logarithms: the way amdahl ab, and
// the scripts that pool runs, state a ratio of paired measurements. With
// one ratio the interval is the value itself. It is an error when ratios
// is empty or holds a value that is not finite and positive (a ratio of
// two durations or rates never is).
func GeoMean(ratios []float64, level float64) (Interval, error) {
	if len(ratios) == 0 {
		return Interval{}, fmt.Errorf("geometric mean of no ratios")
	}
	if !(level > 0 && level < 1) {
		return Interval{}, fmt.Errorf("interval level %v: want 0 < level < 1", level)
	}
	logs := make([]float64, len(ratios))
	for i, r := range ratios {
		if !(r > 0) || math.IsInf(r, 0) {
			return Interval{}, fmt.Errorf("ratio %d is %v: want a finite positive number", i+1, r)
		}
		logs[i] = math.Log(r)
	}
	m := MeanLogInterval(logs, level)
	return Interval{Value: math.Exp(m.Value), Lo: math.Exp(m.Lo), Hi: math.Exp(m.Hi)}, nil
}

// MeanLogInterval returns the mean of logs with Student's t interval at
// level; with one value the interval is that value. Pooling sets of
// paired runs takes it over the sets' mean log ratios.
func MeanLogInterval(logs []float64, level float64) Interval {
	if len(logs) == 1 {
		return Interval{Value: logs[0], Lo: logs[0], Hi: logs[0]}
	}
	return meanT(logs, level)
}

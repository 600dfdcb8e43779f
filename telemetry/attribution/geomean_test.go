package attribution

import (
	"math"
	"testing"
)

func TestGeoMean(t *testing.T) {
	// Ratios 1/1.1 and 1.1: the logs cancel, so the geometric mean is 1;
	// t(0.975, 1) = 12.706, sd of the logs = log(1.1)*sqrt(2).
	got, err := GeoMean([]float64{1 / 1.1, 1.1}, 0.95)
	if err != nil {
		t.Fatal(err)
	}
	half := 12.7062 * math.Log(1.1) * math.Sqrt2 / math.Sqrt2
	if math.Abs(got.Value-1) > 1e-12 || math.Abs(got.Lo-math.Exp(-half)) > 1e-3 || math.Abs(got.Hi-math.Exp(half)) > 1e-2 {
		t.Errorf("GeoMean = %+v, want 1 [%.4f, %.4f]", got, math.Exp(-half), math.Exp(half))
	}
	one, err := GeoMean([]float64{0.97}, 0.95)
	if err != nil || one.Value != 0.97 || one.Lo != 0.97 || one.Hi != 0.97 {
		t.Errorf("GeoMean of one = %+v, %v; want 0.97 [0.97, 0.97]", one, err)
	}
	for _, bad := range [][]float64{nil, {1, 0}, {1, -2}, {math.Inf(1)}, {math.NaN()}} {
		if _, err := GeoMean(bad, 0.95); err == nil {
			t.Errorf("GeoMean(%v) = nil error, want one", bad)
		}
	}
	if _, err := GeoMean([]float64{1, 2}, 1); err == nil {
		t.Error("GeoMean at level 1: nil error, want one")
	}
}

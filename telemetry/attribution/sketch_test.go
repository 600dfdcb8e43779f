package attribution

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Every quantile the sketch returns is within 1 % of the exact one, from
// nanoseconds to hours.
func TestSketchAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, tc := range []struct {
		name string
		draw func() time.Duration
	}{
		{"tiny", func() time.Duration { return time.Duration(rng.IntN(2000)) }},
		{"log-normal µs", func() time.Duration { return time.Duration(50_000 * math.Exp(rng.NormFloat64())) }},
		{"wide", func() time.Duration { return time.Duration(math.Exp(rng.Float64() * 30)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Sketch
			var all []time.Duration
			for range 20_000 {
				d := tc.draw()
				s.Add(d)
				all = append(all, d)
			}
			slices.Sort(all)
			for _, q := range []float64{0, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1} {
				rank := int(math.Ceil(q * float64(len(all))))
				want := all[max(rank-1, 0)]
				got := s.Quantile(q)
				if math.Abs(float64(got-want)) > 0.01*float64(want) {
					t.Errorf("q%v: got %v, want %v ± 1 %%", q, got, want)
				}
			}
		})
	}
}

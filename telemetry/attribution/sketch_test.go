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

// The table-driven sketchBucket agrees with its definition,
// sketchBucketLog, on every slot's ends, around every bucket boundary the
// table holds, on random durations over the whole range, and past the
// table.
func TestSketchBucketTable(t *testing.T) {
	check := func(d time.Duration) {
		t.Helper()
		if got, want := sketchBucket(d), sketchBucketLog(d); got != want {
			t.Fatalf("sketchBucket(%d) = %d, sketchBucketLog = %d", d, got, want)
		}
	}
	for i, s := range buildSlots() {
		n := slotMinLen + i>>slotBits
		lo := int64(1<<slotBits|i&(1<<slotBits-1)) << (n - 1 - slotBits)
		hi := lo + 1<<(n-1-slotBits)
		check(time.Duration(lo))
		check(time.Duration(hi - 1))
		if s.next != noBoundary {
			next := lo + int64(s.next)
			if next <= lo || next >= hi {
				t.Fatalf("slot %d [%d, %d): boundary %d outside it", i, lo, hi, next)
			}
			for d := max(next-3, lo); d <= min(next+3, hi-1); d++ {
				check(time.Duration(d))
			}
		}
	}
	for d := time.Duration(1); d < 1<<16; d++ {
		check(d)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 1_000_000 {
		check(time.Duration(math.Exp(rng.Float64() * math.Log(math.MaxInt64))))
	}
	for _, d := range []time.Duration{1<<slotMaxLen - 1, 1 << slotMaxLen, 1<<52 - 1, 1<<62 + 12345, math.MaxInt64} {
		check(d)
	}
}

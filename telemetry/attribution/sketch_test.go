package attribution

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// quantileSketch is what the accuracy and merge tests use of Sketch and
// FineSketch.
type quantileSketch interface {
	Add(time.Duration)
	Quantile(float64) time.Duration
	Count() uint64
}

// sketchKinds are the two sketches and their accuracy.
var sketchKinds = []struct {
	name     string
	new      func() quantileSketch
	merge    func(dst, src quantileSketch)
	accuracy float64
}{
	{"Sketch", func() quantileSketch { return new(Sketch) }, func(d, s quantileSketch) { d.(*Sketch).Merge(s.(*Sketch)) }, 0.01},
	{"FineSketch", func() quantileSketch { return new(FineSketch) }, func(d, s quantileSketch) { d.(*FineSketch).Merge(s.(*FineSketch)) }, 0.0005},
}

// Every quantile a sketch returns is within its accuracy (1 %, 0.05 %) of
// the exact one, and half a nanosecond for the estimate's rounding to
// whole nanoseconds, from nanoseconds to hours.
func TestSketchAccuracy(t *testing.T) {
	for _, kind := range sketchKinds {
		rng := rand.New(rand.NewPCG(1, 1))
		for _, tc := range []struct {
			name string
			draw func() time.Duration
		}{
			{"tiny", func() time.Duration { return time.Duration(rng.IntN(2000)) }},
			{"log-normal µs", func() time.Duration { return time.Duration(50_000 * math.Exp(rng.NormFloat64())) }},
			{"wide", func() time.Duration { return time.Duration(math.Exp(rng.Float64() * 30)) }},
		} {
			t.Run(kind.name+"/"+tc.name, func(t *testing.T) {
				s := kind.new()
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
					if math.Abs(float64(got-want)) > kind.accuracy*float64(want)+0.5 {
						t.Errorf("q%v: got %v, want %v ± %v %%", q, got, want, 100*kind.accuracy)
					}
				}
			})
		}
	}
}

// A FineSketch tells apart two medians 0.5 % apart, which a Sketch's 2 %
// buckets report as one (or as 2 % apart): what an A/B comparison of
// end-to-end medians needs.
func TestFineSketchResolves(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var coarseA, coarseB Sketch
	var fineA, fineB FineSketch
	for range 50_000 {
		d := time.Duration(3_300_000 * math.Exp(0.05*rng.NormFloat64())) // about 3.3 ms ± 5 %
		coarseA.Add(d)
		fineA.Add(d)
		d = time.Duration(float64(d) * 1.005)
		coarseB.Add(d)
		fineB.Add(d)
	}
	ratio := func(a, b time.Duration) float64 { return float64(b) / float64(a) }
	if r := ratio(fineA.Quantile(0.5), fineB.Quantile(0.5)); math.Abs(r-1.005) > 0.0015 {
		t.Errorf("FineSketch: p50 ratio %.4f, want 1.005 ± 0.0015", r)
	}
	if r := ratio(coarseA.Quantile(0.5), coarseB.Quantile(0.5)); math.Abs(r-1.005) < 0.004 {
		t.Errorf("Sketch: p50 ratio %.4f: its 2 %% buckets were expected to miss a 0.5 %% shift", r)
	}
}

// Merging sketches, in any order of their ranges, gives the sketch of all
// their durations: the same count and quantiles.
func TestSketchMerge(t *testing.T) {
	for _, kind := range sketchKinds {
		t.Run(kind.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			all := kind.new()
			merged := kind.new()
			// Each part's durations lie below the last one's, then one
			// spans them all, then one lies within them, then one is
			// empty: merging must extend the buckets at both ends and
			// place a part's buckets by their own first one.
			for _, scale := range []float64{1e6, 1e4, 50, 1e9, 1e5, 0} {
				part := kind.new()
				for range 2_000 {
					if scale == 0 {
						break
					}
					d := time.Duration(scale * math.Exp(rng.NormFloat64()))
					if scale == 1e9 {
						d = time.Duration(math.Exp(rng.Float64() * 25))
					}
					part.Add(d)
					all.Add(d)
				}
				kind.merge(merged, part)
			}
			if merged.Count() != all.Count() {
				t.Fatalf("count: merged %d, all %d", merged.Count(), all.Count())
			}
			for q := 0.0; q <= 1; q += 0.01 {
				if got, want := merged.Quantile(q), all.Quantile(q); got != want {
					t.Errorf("q%.2f: merged %v, all %v", q, got, want)
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

// Durations that keep falling, each a bucket below the last, grow a
// FineSketch's buckets downwards by doubling: a few allocations, not one
// per duration.
func TestFineSketchFallingDurations(t *testing.T) {
	allocs := testing.AllocsPerRun(1, func() {
		var s FineSketch
		d := 10 * time.Second
		for range 20_000 {
			s.Add(d)
			d = time.Duration(float64(d) / 1.0011)
		}
		if s.Count() != 20_000 {
			t.Fatalf("count %d, want 20000", s.Count())
		}
	})
	if allocs > 64 {
		t.Errorf("%v allocations for 20,000 falling durations, want at most 64", allocs)
	}
}

// BenchmarkSketchAdd: what one duration costs a Sketch (its slot table)
// and a FineSketch (a logarithm), over e2e-like times of 0.3 to 2.3 ms.
func BenchmarkSketchAdd(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	ds := make([]time.Duration, 4096)
	for i := range ds {
		ds[i] = time.Duration(300_000 + rng.IntN(2_000_000))
	}
	b.Run("sketch=coarse", func(b *testing.B) {
		var s Sketch
		for i := 0; b.Loop(); i++ {
			s.Add(ds[i&4095])
		}
	})
	b.Run("sketch=fine", func(b *testing.B) {
		var s FineSketch
		for i := 0; b.Loop(); i++ {
			s.Add(ds[i&4095])
		}
	})
}

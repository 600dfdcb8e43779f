package attribution

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

func TestStudentQuantile(t *testing.T) {
	for _, tc := range []struct {
		p    float64
		df   int
		want float64
	}{{0.975, 1, 12.706}, {0.975, 2, 4.303}, {0.975, 3, 3.182}, {0.975, 4, 2.776}, {0.975, 9, 2.262}, {0.975, 30, 2.042}, {0.995, 5, 4.032}} {
		if got := studentQuantile(tc.p, tc.df); math.Abs(got-tc.want)/tc.want > 0.005 {
			t.Errorf("t(%v, %d) = %.4f, want %.3f", tc.p, tc.df, got, tc.want)
		}
	}
}

// A/A over few pairs of runs, each pair sharing the machine's state and
// each run its own: Compare's paired interval (Student's t over the
// pairs) holds 0 about 95 times in 100; a percentile bootstrap over the
// pairs holds it fewer times, plain, and more once expanded for few
// clusters.
func TestFewPairsCoverage(t *testing.T) {
	if testing.Short() {
		t.Skip("coverage simulation")
	}
	const sims, pairs = 200, 6
	held, plain, expanded := 0, 0, 0
	for s := range sims {
		rng := rand.New(rand.NewPCG(uint64(s), 42))
		var bs, cs Side
		for r := range pairs {
			drift := math.Exp(0.3 * rng.NormFloat64())
			for i, side := range []*Side{&bs, &cs} {
				run := math.Exp(0.1 * rng.NormFloat64()) // the run's own conditions
				var spans []spans.Span
				for u := range 30 {
					j := drift * run * math.Exp(0.2*rng.NormFloat64())
					spans = append(spans, serialUnit(fmt.Sprint(s, "/", r, "/", i, "/", u), 5*j, 1*j, 3*j, 4*j)...)
				}
				side.Runs = append(side.Runs, sideOf(t, spans).Runs...)
			}
		}
		c, err := Compare(bs, cs, CompareOptions{Paired: true, Iterations: 200, Seed: uint64(s)})
		if err != nil {
			t.Fatal(err)
		}
		if c.Measured.Contains(0) {
			held++
		}
		// The plain percentile interval, for comparison: n = 0 skips the
		// expansion.
		b, cc := flatten(bs, map[Key]int{}, false), flatten(cs, map[Key]int{}, false)
		var vals []float64
		for it := range 200 {
			bw, cw := resamplePair(rand.New(rand.NewPCG(uint64(s), uint64(it)+1)), b, cc, true, true)
			mean := func(sd *side, w []int32) float64 {
				var sum, n float64
				for u, k := range w {
					sum += float64(k) * sd.e2e[u]
					n += float64(k)
				}
				return sum / n
			}
			vals = append(vals, 1-mean(cc, cw)/mean(b, bw))
		}
		if lo, hi := percentileInterval(vals, 0.95, 0); lo <= 0 && 0 <= hi {
			plain++
		}
		if lo, hi := percentileInterval(vals, 0.95, pairs); lo <= 0 && 0 <= hi {
			expanded++
		}
	}
	t.Logf("A/A over %d pairs, %d simulations: the t interval held 0 %d times, the bootstrap's %d plain and %d expanded", pairs, sims, held, plain, expanded)
	if held < sims*91/100 || held > sims*99/100 {
		t.Errorf("t interval held 0 in %d of %d, want about 95 %%", held, sims)
	}
	if plain >= expanded {
		t.Errorf("plain %d ≥ expanded %d: the expansion did nothing", plain, expanded)
	}
}

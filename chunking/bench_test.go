package chunking

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

type benchCase struct {
	name string
	r    *dtpb.OrchestratorResponse
}

func benchCases() []benchCase {
	mk := func(n, size int) *dtpb.OrchestratorResponse {
		acts := make([]*dtpb.OrchestratorAction, n)
		for i := range acts {
			acts[i] = task(int32(i), size)
		}
		return response(acts...)
	}
	over := mk(100, 1024)
	over.Actions[0] = task(0, DefaultMaxChunkBytes+1)
	tiny := make([]*dtpb.OrchestratorAction, 20_000)
	for i := range tiny {
		tiny[i] = &dtpb.OrchestratorAction{Id: int32(i), OrchestratorActionType: &dtpb.OrchestratorAction_CreateTimer{
			CreateTimer: &dtpb.CreateTimerAction{FireAt: &timestamppb.Timestamp{Seconds: 1_800_000_000}}}}
	}
	return []benchCase{
		{"64x128KiB", mk(64, 128<<10)},
		{"32x2MiB", mk(32, 2<<20)},
		{"100x1KiB", mk(100, 1024)},
		{"oversized-first-of-100", over},
		{"20000-tiny", response(tiny...)},
	}
}

// BenchmarkPlanEncode measures planning plus the encoding of every chunk:
// cached encodes once with the planned sizes; legacy marshals each chunk
// the way gRPC's codec would (proto.Marshal). "marshal" is the physical
// limit: one bare proto.Marshal of the whole response.
func BenchmarkPlanEncode(b *testing.B) {
	ctx := context.Background()
	for _, bc := range benchCases() {
		b.Run(bc.name+"/marshal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := proto.Marshal(bc.r); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, lp := range []bool{false, true} {
			for _, alg := range []Algorithm{Legacy, Cached} {
				p := newPlanner(b, PlannerConfig{Algorithm: alg, LargePayloads: lp, Accounting: Payload})
				b.Run(fmt.Sprintf("%s/lp=%v/%v", bc.name, lp, alg), func(b *testing.B) {
					b.ReportAllocs()
					sizings := 0
					for b.Loop() {
						pl, _ := p.Plan(ctx, bc.r)
						sizings += pl.ActionSizings + pl.ResponseSizings
						for i, c := range pl.Chunks {
							size := -1
							if pl.Sizes != nil {
								size = pl.Sizes[i]
							}
							if _, err := Encode(c, size); err != nil {
								b.Fatal(err)
							}
						}
					}
					b.ReportMetric(float64(sizings)/float64(b.N), "sizings/op")
				})
			}
		}
	}
}

// planEncode plans r and encodes every chunk, as Sender.Complete does.
func planEncode(b *testing.B, p *Planner, r *dtpb.OrchestratorResponse) *Plan {
	pl, err := p.Plan(context.Background(), r)
	if err != nil {
		b.Fatal(err)
	}
	for i, c := range pl.Chunks {
		size := -1
		if pl.Sizes != nil {
			size = pl.Sizes[i]
		}
		if _, err := Encode(c, size); err != nil {
			b.Fatal(err)
		}
	}
	return pl
}

// medianRatio is the median of num[i]/den[i].
func medianRatio(num, den []time.Duration) float64 {
	r := make([]float64, len(num))
	for i := range num {
		r[i] = float64(num[i]) / float64(den[i])
	}
	slices.Sort(r)
	if len(r)%2 == 0 {
		return (r[len(r)/2-1] + r[len(r)/2]) / 2
	}
	return r[len(r)/2]
}

// BenchmarkPlanEncodeRatio runs, in each iteration, one bare proto.Marshal
// of the response, one legacy plan+encode and one cached plan+encode, in
// an order that rotates, and reports the median over iterations of their
// ratios within an iteration: on a shared, noisy machine the three of one
// iteration see the same load, which separate benchmarks do not.
// legacy/cached is the speed-up of the size-once planner; cached/marshal
// its cost against the physical limit. For a response of 1 MiB or more,
// each run starts after runtime.GC(), so that the garbage of one (64 MiB
// for 32x2MiB) is not collected on the time of the next; smaller ones
// leave little garbage and would drown in the collections. Payload
// accounting, default limit, as BenchmarkPlanEncode.
func BenchmarkPlanEncodeRatio(b *testing.B) {
	for _, bc := range benchCases() {
		for _, lp := range []bool{false, true} {
			legacy := newPlanner(b, PlannerConfig{Algorithm: Legacy, LargePayloads: lp, Accounting: Payload})
			cached := newPlanner(b, PlannerConfig{Algorithm: Cached, LargePayloads: lp, Accounting: Payload})
			gc := func() {}
			if proto.Size(bc.r) >= 1<<20 {
				gc = runtime.GC
			}
			b.Run(fmt.Sprintf("%s/lp=%v", bc.name, lp), func(b *testing.B) {
				var marshal, leg, cac []time.Duration
				run := []func(){
					func() {
						gc()
						t := time.Now()
						if _, err := proto.Marshal(bc.r); err != nil {
							b.Fatal(err)
						}
						marshal = append(marshal, time.Since(t))
					},
					func() {
						gc()
						t := time.Now()
						planEncode(b, legacy, bc.r)
						leg = append(leg, time.Since(t))
					},
					func() {
						gc()
						t := time.Now()
						planEncode(b, cached, bc.r)
						cac = append(cac, time.Since(t))
					},
				}
				i := 0
				for b.Loop() {
					for k := range run {
						run[(i+k)%len(run)]()
					}
					i++
				}
				b.ReportMetric(medianRatio(leg, cac), "legacy/cached")
				b.ReportMetric(medianRatio(cac, marshal), "cached/marshal")
				b.ReportMetric(medianRatio(leg, marshal), "legacy/marshal")
			})
		}
	}
}

// BenchmarkStepLabels is what the pprof labels (phase=serialize and the
// step labels inside it) cost planning: each iteration plans with a
// component that sets labels and one that does not, in alternating order,
// and on/off is the median of their ratios. 32x2MiB has 32 chunks of one
// action (the most label changes per byte); 120000-tiny-1MiB is chunked
// with many tiny actions per chunk; 20000-tiny is direct.
func BenchmarkStepLabels(b *testing.B) {
	cases := []struct {
		name string
		r    *dtpb.OrchestratorResponse
		max  int
	}{
		{"20000-tiny", benchCases()[4].r, 0},
		{"32x2MiB", benchCases()[1].r, 0},
		{"120000-tiny-1MiB", tinyResponse(120_000), MinMaxChunkBytes},
	}
	ctx := context.Background()
	for _, bc := range cases {
		for _, alg := range []Algorithm{Legacy, Cached} {
			cfg := PlannerConfig{Algorithm: alg, Accounting: Payload, MaxChunkBytes: bc.max}
			cfg.Component = labelledComponent(b, true)
			on := newPlanner(b, cfg)
			cfg.Component = labelledComponent(b, false)
			off := newPlanner(b, cfg)
			b.Run(fmt.Sprintf("%s/%v", bc.name, alg), func(b *testing.B) {
				var ton, toff []time.Duration
				timed := func(p *Planner, into *[]time.Duration) {
					t := time.Now()
					if _, err := p.Plan(ctx, bc.r); err != nil {
						b.Fatal(err)
					}
					*into = append(*into, time.Since(t))
				}
				i := 0
				for b.Loop() {
					if i%2 == 0 {
						timed(on, &ton)
						timed(off, &toff)
					} else {
						timed(off, &toff)
						timed(on, &ton)
					}
					i++
				}
				b.ReportMetric(medianRatio(ton, toff), "on/off")
			})
		}
	}
}

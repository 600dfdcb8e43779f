package chunking

import (
	"context"
	"fmt"
	"testing"

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

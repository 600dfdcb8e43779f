package chunking

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

// BenchmarkEndToEnd sends a chunked completion (64 × 128 KiB, 3 chunks)
// through the real sidecar on loopback: "complete" plans, encodes and sends
// with Sender.Complete; "preencoded" sends the same chunks, planned and
// encoded outside the timer, as plain unary calls. Their ratio is the share
// of planning and encoding in a completion's end-to-end time.
func BenchmarkEndToEnd(b *testing.B) {
	rg := startRig(b, SidecarConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := dtpb.GetWorkItems(ctx, rg.conn, &dtpb.GetWorkItemsRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		cancel()
		for {
			if _, err := st.Recv(); err != nil {
				return
			}
		}
	}()
	lease := func(instance string) string {
		if n := len(rg.sc.DrainCompletions()); n > 1 {
			b.Fatalf("%d completions since the last lease, want at most 1", n)
		}
		rg.sc.Submit(&dtpb.OrchestratorRequest{InstanceId: instance})
		wi, err := st.Recv()
		if err != nil {
			b.Fatal(err)
		}
		return wi.GetCompletionToken()
	}
	base := benchCases()[0].r
	mk := func(tok string) *dtpb.OrchestratorResponse {
		return &dtpb.OrchestratorResponse{InstanceId: base.InstanceId, CompletionToken: tok, Actions: base.Actions,
			CustomStatus: base.CustomStatus, OrchestrationTraceContext: base.OrchestrationTraceContext}
	}
	for _, alg := range []Algorithm{Legacy, Cached} {
		p := newPlanner(b, PlannerConfig{Algorithm: alg})
		s, err := NewSender(rg.conn, SenderConfig{Planner: p})
		if err != nil {
			b.Fatal(err)
		}
		b.Run("complete/"+alg.String(), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				r := mk(lease(base.InstanceId))
				b.StartTimer()
				if _, err := s.Complete(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	p := newPlanner(b, PlannerConfig{})
	b.Run("preencoded", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			pl, _ := p.Plan(ctx, mk(lease(base.InstanceId)))
			enc := make([]Encoded, len(pl.Chunks))
			for i, c := range pl.Chunks {
				if enc[i], err = Encode(c, pl.Sizes[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			for i := range enc {
				if err := rg.conn.Invoke(ctx, dtpb.MethodCompleteOrchestratorTask, &enc[i], &dtpb.CompleteTaskResponse{}, grpc.ForceCodecV2(Codec{})); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

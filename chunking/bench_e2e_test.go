package chunking

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/internal/proccpu"
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

// BenchmarkOrchestration runs one small orchestration a loop through the
// real sidecar on loopback, as the runtime's orchestrated task units do:
// StartInstance, its work item from the GetWorkItems stream, and a
// one-action completion (Sender.Complete). It reports the process's CPU
// per orchestration (cpu-ns/op, client and sidecar together) beside its
// latency, by how the sidecar runs calls: workers=default keeps
// DefaultStreamWorkers goroutines (SidecarConfig.StreamWorkers),
// workers=none a new goroutine per call, whose stack grows on nearly
// every call; labels=on the sidecar's pprof labels, against labels=off;
// client-labels=on the client connection's (LabelledCredentials), with
// the sidecar's off, against labels=off.
//
//	go test -run '^$' -bench Orchestration -benchtime 20000x -count 6 ./chunking/
func BenchmarkOrchestration(b *testing.B) {
	for _, w := range []struct {
		name string
		cfg  SidecarConfig
		dial []grpc.DialOption
	}{
		{"workers=default", SidecarConfig{OnApplied: func(Completion) {}}, nil},
		{"workers=none", SidecarConfig{OnApplied: func(Completion) {}, ServerOptions: []grpc.ServerOption{grpc.NumStreamWorkers(0)}}, nil},
		// The sidecar's pprof labels (a Component with PhaseLabels: the
		// stats handler that labels gRPC's goroutines, labels.go) against
		// the same Component without them.
		{"labels=off", SidecarConfig{OnApplied: func(Completion) {}, Component: labelledComponent(b, false)}, nil},
		{"labels=on", SidecarConfig{OnApplied: func(Completion) {}, Component: labelledComponent(b, true)}, nil},
		{"client-labels=on", SidecarConfig{OnApplied: func(Completion) {}, Component: labelledComponent(b, false)},
			[]grpc.DialOption{grpc.WithTransportCredentials(LabelledCredentials(insecure.NewCredentials(), labelledComponent(b, true)))}},
	} {
		b.Run(w.name, func(b *testing.B) {
			rg := startRig(b, w.cfg, w.dial...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := dtpb.GetWorkItems(ctx, rg.conn, &dtpb.GetWorkItemsRequest{})
			if err != nil {
				b.Fatal(err)
			}
			s, err := NewSender(rg.conn, SenderConfig{Planner: newPlanner(b, PlannerConfig{})})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu0 := proccpu.Used()
			for b.Loop() {
				start, err := dtpb.StartInstance(ctx, rg.conn, &dtpb.CreateInstanceRequest{})
				if err != nil {
					b.Fatal(err)
				}
				wi, err := st.Recv()
				if err != nil {
					b.Fatal(err)
				}
				r := response(task(0, 100))
				r.InstanceId = start.GetInstanceId()
				if _, err := s.Complete(ctx, withToken(r, wi.GetCompletionToken())); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(proccpu.Used()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

package chunking

import (
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

func task(id int32, input int) *dtpb.OrchestratorAction {
	return &dtpb.OrchestratorAction{Id: id, OrchestratorActionType: &dtpb.OrchestratorAction_ScheduleTask{
		ScheduleTask: &dtpb.ScheduleTaskAction{Name: "activity", Input: wrapperspb.String(strings.Repeat("x", input))}}}
}

// actionOfSize returns a ScheduleTask action whose serialized size is
// exactly n bytes (n ≥ 32).
func actionOfSize(t testing.TB, id int32, n int) *dtpb.OrchestratorAction {
	t.Helper()
	a := task(id, 0)
	over := proto.Size(a)
	for l := n - over; l >= 0 && l > n-over-20; l-- {
		a = task(id, l)
		if s := proto.Size(a); s == n {
			return a
		}
	}
	t.Fatalf("cannot build an action of exactly %d bytes", n)
	return nil
}

func response(acts ...*dtpb.OrchestratorAction) *dtpb.OrchestratorResponse {
	return &dtpb.OrchestratorResponse{
		InstanceId:      "instance-1",
		CompletionToken: "token-1",
		Actions:         acts,
		CustomStatus:    wrapperspb.String("custom"),
		RequiresHistory: true,
		OrchestrationTraceContext: &dtpb.OrchestrationTraceContext{
			SpanID: wrapperspb.String("span-1"), SpanStartTime: timestamppb.New(timestamppb.Now().AsTime().Truncate(1e9))},
	}
}

func newPlanner(t testing.TB, cfg PlannerConfig) *Planner {
	t.Helper()
	p, err := NewPlanner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkMatrix checks the reference field matrix of a plan of r, and that
// the chunks' actions concatenate to r's in order.
//
//nolint:staticcheck // SA1019
func checkMatrix(t testing.TB, r *dtpb.OrchestratorResponse, pl *Plan) {
	t.Helper()
	if pl.Oversized != nil {
		return
	}
	if pl.Direct {
		if len(pl.Chunks) != 1 || pl.Chunks[0] != r {
			t.Fatalf("direct plan: got %d chunks (same object %v), want the original response", len(pl.Chunks), len(pl.Chunks) == 1 && pl.Chunks[0] == r)
		}
		return
	}
	var got []*dtpb.OrchestratorAction
	n := len(pl.Chunks)
	for i, c := range pl.Chunks {
		if c == r {
			t.Fatalf("chunk %d is the original response", i)
		}
		if c.InstanceId != r.InstanceId || c.CompletionToken != r.CompletionToken || c.RequiresHistory != r.RequiresHistory ||
			!proto.Equal(c.CustomStatus, r.CustomStatus) {
			t.Errorf("chunk %d: instanceId/token/requiresHistory/customStatus not copied", i)
		}
		if want := i < n-1; c.IsPartial != want {
			t.Errorf("chunk %d: isPartial %v, want %v", i, c.IsPartial, want)
		}
		if n == 1 {
			if c.ChunkIndex != nil {
				t.Errorf("lone chunk: chunkIndex %v, want absent", c.ChunkIndex)
			}
		} else if c.ChunkIndex == nil || c.ChunkIndex.Value != int32(i) {
			t.Errorf("chunk %d: chunkIndex %v, want %d", i, c.ChunkIndex, i)
		}
		if i == 0 {
			if c.NumEventsProcessed != nil {
				t.Errorf("chunk 0: numEventsProcessed %v, want absent", c.NumEventsProcessed)
			}
			if !proto.Equal(c.OrchestrationTraceContext, r.OrchestrationTraceContext) {
				t.Errorf("chunk 0: trace context %v, want %v", c.OrchestrationTraceContext, r.OrchestrationTraceContext)
			}
		} else {
			if c.NumEventsProcessed == nil || c.NumEventsProcessed.Value != 0 {
				t.Errorf("chunk %d: numEventsProcessed %v, want present 0", i, c.NumEventsProcessed)
			}
			if c.OrchestrationTraceContext != nil {
				t.Errorf("chunk %d: trace context present, want absent", i)
			}
		}
		if len(c.Actions) == 0 && len(r.Actions) > 0 {
			t.Errorf("chunk %d has no actions", i)
		}
		got = append(got, c.Actions...)
	}
	if len(got) != len(r.Actions) {
		t.Fatalf("reassembled %d actions, want %d", len(got), len(r.Actions))
	}
	for i := range got {
		if got[i] != r.Actions[i] {
			t.Fatalf("action %d out of order or replaced", i)
		}
	}
}

func ids(acts []*dtpb.OrchestratorAction) []int32 {
	var out []int32
	for _, a := range acts {
		out = append(out, a.GetId())
	}
	return out
}

func newRand() *rand.Rand { return rand.New(rand.NewPCG(7, 11)) }

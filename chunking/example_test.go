package chunking_test

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

func ExamplePlanner_Plan() {
	p, err := chunking.NewPlanner(chunking.PlannerConfig{MaxChunkBytes: 1 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	r := &dtpb.OrchestratorResponse{InstanceId: "order-42", CompletionToken: "tok"}
	for i := range 3 {
		r.Actions = append(r.Actions, &dtpb.OrchestratorAction{Id: int32(i),
			OrchestratorActionType: &dtpb.OrchestratorAction_ScheduleTask{ScheduleTask: &dtpb.ScheduleTaskAction{
				Name: "ship", Input: wrapperspb.String(strings.Repeat("x", 700<<10))}}})
	}
	pl, _ := p.Plan(context.Background(), r)
	for i, c := range pl.Chunks {
		//nolint:staticcheck // SA1019: the chunk fields are the protocol.
		fmt.Printf("chunk %d: index=%d partial=%v actions=%d bytes=%d\n", i, c.GetChunkIndex().GetValue(), c.GetIsPartial(), len(c.Actions), pl.Sizes[i])
	}
	fmt.Println("action sizings:", pl.ActionSizings, "response sizings:", pl.ResponseSizings)

	r.Actions[1].GetScheduleTask().Input = wrapperspb.String(strings.Repeat("x", 1100<<10))
	pl, _ = p.Plan(context.Background(), r)
	fmt.Println(pl.Oversized)
	// Output:
	// chunk 0: index=0 partial=true actions=1 bytes=716841
	// chunk 1: index=1 partial=true actions=1 bytes=716847
	// chunk 2: index=2 partial=false actions=1 bytes=716845
	// action sizings: 3 response sizings: 0
	// A single orchestrator action of type ScheduleTask with id 1 exceeds the 1.00MB limit: 1.07MB. Enable large-payload externalization to Azure Blob Storage to support oversized actions.
}

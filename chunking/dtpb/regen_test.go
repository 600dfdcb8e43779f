package dtpb

import (
	"testing"

	"github.com/amdahl-rt/amdahl/internal/protogen"
)

// TestGeneratedCodeIsCurrent checks that amdahl_durabletask.pb.go is what the
// pinned generators produce from amdahl_durabletask.proto.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	protogen.CheckCurrent(t, ".", "amdahl_durabletask.proto")
}

// TestNoRegistryCollision: our full names are qualified, so they cannot
// collide with an unqualified durabletask copy linked into the same binary.
func TestNoRegistryCollision(t *testing.T) {
	if got := (&OrchestratorResponse{}).ProtoReflect().Descriptor().FullName(); got != "amdahl.durabletask.v1.OrchestratorResponse" {
		t.Errorf("full name %q, want amdahl.durabletask.v1.OrchestratorResponse", got)
	}
	if got := File_amdahl_durabletask_proto.Path(); got != "amdahl_durabletask.proto" {
		t.Errorf("file path %q", got)
	}
	if MethodCompleteOrchestratorTask != "/TaskHubSidecarService/CompleteOrchestratorTask" ||
		MethodGetWorkItems != "/TaskHubSidecarService/GetWorkItems" ||
		MethodAbandonTaskOrchestratorWorkItem != "/TaskHubSidecarService/AbandonTaskOrchestratorWorkItem" {
		t.Errorf("method paths changed: %s %s %s", MethodCompleteOrchestratorTask, MethodGetWorkItems, MethodAbandonTaskOrchestratorWorkItem)
	}
}

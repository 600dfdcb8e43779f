package dtpb

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeIsCurrent regenerates amdahl_durabletask.pb.go into a
// temporary directory and compares it with the committed file. Without
// protoc or protoc-gen-go on PATH it skips, except under CI=true, where it
// fails.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	for _, tool := range []string{"protoc", "protoc-gen-go"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not on PATH: CI must check generated code (install protoc 3.21.12 and protoc-gen-go v1.36.12)", tool)
			}
			t.Skipf("%s not on PATH: cannot check that amdahl_durabletask.pb.go is current (set CI=true to make this fail)", tool)
		}
	}
	dir := t.TempDir()
	cmd := exec.Command("protoc", "--proto_path=.", "--go_out="+dir, "--go_opt=paths=source_relative", "amdahl_durabletask.proto")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, "amdahl_durabletask.pb.go"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("amdahl_durabletask.pb.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("amdahl_durabletask.pb.go is stale: run go generate ./chunking/dtpb (regenerated %d bytes, committed %d)", len(got), len(want))
	}
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

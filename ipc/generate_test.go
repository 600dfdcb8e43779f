package ipc

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGenerated regenerates ipcpb/ipc.pb.go into a temporary directory and
// compares it with the committed file.
func TestGenerated(t *testing.T) {
	for _, tool := range []string{"protoc", "protoc-gen-go"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not on PATH with CI=true: install protoc 3.21.12 and protoc-gen-go v1.36.12 (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12)", tool)
			}
			t.Skipf("%s not on PATH: cannot check that ipcpb/ipc.pb.go is current (install protoc 3.21.12 and protoc-gen-go v1.36.12)", tool)
		}
	}
	dir := t.TempDir()
	cmd := exec.Command("protoc", "--go_out="+dir, "--go_opt=paths=source_relative", "ipc.proto")
	cmd.Dir = "ipcpb"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, "ipc.pb.go"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("ipcpb", "ipc.pb.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("ipcpb/ipc.pb.go is stale or was generated with other versions: run go generate ./ipc/ipcpb with protoc 3.21.12 and protoc-gen-go v1.36.12")
	}
}

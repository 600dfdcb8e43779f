// Package protogen checks, from a test, that protobuf code committed beside
// its .proto is what protoc and protoc-gen-go (the pinned versions) generate
// now.
package protogen

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Versions are the generator versions the committed code is made with;
// .ci/run installs them.
const Versions = "protoc 3.21.12 and protoc-gen-go v1.36.12"

// CheckCurrent regenerates dir/proto into a temporary directory and fails t
// if the result differs from the committed dir/<name>.pb.go. Without protoc
// or protoc-gen-go on PATH it skips, except under CI=true, where it fails.
func CheckCurrent(t *testing.T, dir, proto string) {
	t.Helper()
	for _, tool := range []string{"protoc", "protoc-gen-go"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not on PATH with CI=true: generated code must be checked (install %s)", tool, Versions)
			}
			t.Skipf("%s not on PATH: cannot check that the code generated from %s is current (install %s)", tool, proto, Versions)
		}
	}
	out := t.TempDir()
	cmd := exec.Command("protoc", "--proto_path=.", "--go_out="+out, "--go_opt=paths=source_relative", proto)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, b)
	}
	gen := strings.TrimSuffix(proto, ".proto") + ".pb.go"
	got, err := os.ReadFile(filepath.Join(out, gen))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(dir, gen))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale or was generated with other versions: run go generate in %s with %s (regenerated %d bytes, committed %d)",
			filepath.Join(dir, gen), dir, Versions, len(got), len(want))
	}
}

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
)

// TestExample builds the task host of ../ and runs the program on it, as
// its README does.
func TestExample(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "PYROSCOPE_SERVER_ADDRESS", "AMDAHL_METRICS_ADDR", "AMDAHL_TRACE_FILE", "AMDAHL_PROFILE_DIR"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(goruntime.GOROOT(), "bin", "go")
	}
	host := filepath.Join(t.TempDir(), "wordcount-host")
	build := exec.Command(gobin, "build", "-o", host, "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build the host: %v\n%s", err, out)
	}
	var out, errb bytes.Buffer
	if code := realMain(context.Background(), []string{"-host", host}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"document 0: 15 words", "document 1: 9 words", "document 2: 3 words", "document 3: 11 words",
		"4 units on", "execute", "dispatch", "total"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestHostRequired(t *testing.T) {
	var errb bytes.Buffer
	if code := realMain(context.Background(), nil, &bytes.Buffer{}, &errb); code != 2 || !strings.Contains(errb.String(), "-host is required") {
		t.Errorf("no -host: exit %d, %q; want 2 and a message", code, errb.String())
	}
}

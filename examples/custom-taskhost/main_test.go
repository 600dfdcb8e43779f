package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// The test binary is both parent and task host, like the program.
func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(realMain(context.Background(), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestExample(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "PYROSCOPE_SERVER_ADDRESS", "AMDAHL_METRICS_ADDR", "AMDAHL_TRACE_FILE", "AMDAHL_PROFILE_DIR"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	var out, errb bytes.Buffer
	if code := realMain(context.Background(), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"document 0: 15 words", "document 1: 9 words", "document 2: 3 words", "document 3: 11 words",
		"4 units on", "execute", "dispatch", "total"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

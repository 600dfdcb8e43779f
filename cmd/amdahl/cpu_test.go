package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunProcessesCPU: the run's processes' CPU from summary.json; none
// for a directory without one; an error naming the file for one over its
// bound or not a summary, rather than a silent zero.
func TestRunProcessesCPU(t *testing.T) {
	dir := t.TempDir()
	if d, err := runProcessesCPU(dir); d != 0 || err != nil {
		t.Fatalf("no summary.json: %v, %v; want 0, nil", d, err)
	}
	write := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "summary.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write([]byte(`{"attribution":{"cpu":{"processes_ns":1500000000}}}`))
	if d, err := runProcessesCPU(dir); d != 1500*time.Millisecond || err != nil {
		t.Fatalf("a summary: %v, %v; want 1.5s", d, err)
	}
	write([]byte(`{"attribution":{}}`))
	if d, err := runProcessesCPU(dir); d != 0 || err != nil {
		t.Fatalf("a summary without cpu: %v, %v; want 0, nil", d, err)
	}
	for name, b := range map[string][]byte{
		"over the bound": []byte(`{"pad":"` + strings.Repeat("x", maxSummaryFile) + `"}`),
		"not JSON":       []byte(`{"attribution":`),
		"negative":       []byte(`{"attribution":{"cpu":{"processes_ns":-1}}}`),
	} {
		write(b)
		d, err := runProcessesCPU(dir)
		if err == nil || !strings.Contains(err.Error(), "summary.json") {
			t.Errorf("%s: %v, %v; want an error naming summary.json", name, d, err)
		}
		if name == "over the bound" && (err == nil || !strings.Contains(err.Error(), "16 MiB")) {
			t.Errorf("%s: %v; want the bound named", name, err)
		}
	}
}

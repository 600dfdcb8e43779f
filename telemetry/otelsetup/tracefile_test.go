package otelsetup

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// TestTraceFileLossless ends spans from several goroutines as fast as they
// can, far faster than any exporter writes them, and checks that the trace
// file holds every one: the file's batch processor must block span ends on a
// full queue, never drop.
func TestTraceFileLossless(t *testing.T) {
	const goroutines, perGoroutine = 4, 12_500
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	ctx := context.Background()
	tel, err := Setup(ctx, WithLookupEnv(noEnv), WithTraceFile(path))
	if err != nil {
		t.Fatal(err)
	}
	tr := tel.TracerProvider().Tracer("lossless")
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range perGoroutine {
				_, s := tr.Start(ctx, "s")
				s.End()
			}
		})
	}
	wg.Wait()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ids := make(map[attribution.SpanID]bool, goroutines*perGoroutine)
	if err := attribution.ReadOTLPJSON(f, path, attribution.Limits{}, nil, func(s attribution.Span) error {
		ids[s.SpanID] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, want := len(ids), goroutines*perGoroutine; got != want {
		t.Fatalf("trace file holds %d distinct spans, want %d (%d lost)", got, want, want-got)
	}
}

package runtime

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
)

// endCounter counts the spans that ended (a span processor beside the
// trace file's).
type endCounter struct{ n atomic.Int64 }

func (c *endCounter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c *endCounter) OnEnd(sdktrace.ReadOnlySpan)                     { c.n.Add(1) }
func (c *endCounter) Shutdown(context.Context) error                  { return nil }
func (c *endCounter) ForceFlush(context.Context) error                { return nil }

// TestTraceFileHoldsEveryUnit: the trace file (amdahl run --out) of a run
// of 10,000 units holds every span that ended, and its attribution
// (amdahl report) is the live run's table exactly: the same units, rows,
// spans, means, p99s, q and naive shares. The trace file's batcher blocks
// rather than drop a span when its queue is full; with the SDK's default
// (dropping) a run that outpaces the file loses spans and the counts
// differ (TestTraceFileLossless in otelsetup forces that case). -short
// runs 1,000 units, -race 2,000 (10,000 take about a minute under it).
func TestTraceFileHoldsEveryUnit(t *testing.T) {
	units := 10_000
	switch {
	case testing.Short():
		units = 1_000
	case raceEnabled:
		units = 2_000
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	var ended endCounter
	tel, err := otelsetup.Setup(ctx, otelsetup.WithLookupEnv(noEnv), otelsetup.WithTraceFile(path), otelsetup.WithSpanProcessor(&ended))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := scenario.Parse("small.yaml", []byte("name: small\ncount: 1\nworkloads:\n  - kind: taskhost\n    task: {config_mean: 2KB, config_min: 256B, config_cap: 16KB, environment: 1KB, execute_passes: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	sc.Count = units
	cfg := testConfig(t, testSettings(t), nil)
	cfg.UseTelemetry(tel)
	sum, err := Run(ctx, cfg, sc)
	if err != nil {
		t.Fatal(err)
	}
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatalf("telemetry shutdown (writes the rest of the trace file): %v", err)
	}
	if sum.Submitted != units || sum.OK != units || sum.Attribution.Works != units {
		t.Fatalf("got %d submitted, %d ok, %d attributed; want %d of each (%v)", sum.Submitted, sum.OK, sum.Attribution.Works, units, sum.Examples)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inFile := 0
	if err := attribution.ReadOTLPJSON(f, path, attribution.Limits{}, nil, func(attribution.Span) error { inFile++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n := ended.n.Load(); int64(inFile) != n || n < int64(10*units) {
		t.Fatalf("the trace file holds %d spans, %d ended (want equal, and at least 10 per unit)", inFile, n)
	}

	var acc attribution.Accumulator
	diag, err := attribution.ReadFile(path, attribution.Limits{}, nil, acc.Add)
	if err != nil {
		t.Fatal(err)
	}
	acc.AddDiagnostics(diag)
	fromFile, live := acc.Report(false), sum.Attribution
	// The file holds spans outside every unit too (the in-process
	// sidecar's work-item stream, which ends at Close), which the live
	// accounting never sees: they are its only difference.
	fd, ld := fromFile.Diagnostics, live.Diagnostics
	if fd.Spans != ld.Spans+fd.Unrooted || ld.Unrooted != 0 {
		t.Errorf("the trace file's attribution read %d spans, %d outside any unit; the live one %d (%d outside); want the same spans besides those outside", fd.Spans, fd.Unrooted, ld.Spans, ld.Unrooted)
	}
	fromFile.Diagnostics.Spans, fromFile.Diagnostics.Unrooted = ld.Spans, ld.Unrooted
	if !reflect.DeepEqual(fromFile, live) {
		t.Errorf("the report of the trace file differs from the live table:\nfile: %+v\nlive: %+v", fromFile, live)
	}
}

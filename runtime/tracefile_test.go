package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
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
//
// It runs twice: with the SDK's spans (a span processor of the program's
// beside the file, which counts the spans) and with the runtime's own
// tracer handing the file's writer its spans (the file alone, amdahl run
// --out; a wrapper around the writer counts them).
func TestTraceFileHoldsEveryUnit(t *testing.T) {
	units := 10_000
	switch {
	case testing.Short():
		units = 1_000
	case raceEnabled:
		units = 2_000
	}
	for _, own := range []bool{false, true} {
		t.Run(map[bool]string{false: "sdk", true: "own tracer"}[own], func(t *testing.T) { testTraceFileHoldsEveryUnit(t, units, own) })
	}
}

// countingExport counts the spans handed to the trace file's writer.
type countingExport struct {
	spans.Exporter
	n *endCounter
}

func (c countingExport) Export(r spans.Record) { c.n.n.Add(1); c.Exporter.Export(r) }

func testTraceFileHoldsEveryUnit(t *testing.T, units int, own bool) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	var ended endCounter
	opts := []otelsetup.Option{otelsetup.WithLookupEnv(noEnv), otelsetup.WithTraceFile(path)}
	if !own {
		opts = append(opts, otelsetup.WithSpanProcessor(&ended))
	}
	tel, err := otelsetup.Setup(ctx, opts...)
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
	if own != (cfg.Telemetry.Export != nil) || own != (cfg.Telemetry.TracerProvider == nil) {
		t.Fatalf("UseTelemetry: SpanExport set %v, own tracer %v; want both %v", cfg.Telemetry.Export != nil, cfg.Telemetry.TracerProvider == nil, own)
	}
	if own {
		cfg.Telemetry.Export = countingExport{cfg.Telemetry.Export, &ended}
	}
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
	if err := spans.ReadOTLPJSON(f, path, spans.Limits{}, nil, nil, func(spans.Span) error { inFile++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n := ended.n.Load(); int64(inFile) != n || n < int64(10*units) {
		t.Fatalf("the trace file holds %d spans, %d ended (want equal, and at least 10 per unit)", inFile, n)
	}

	var acc attribution.Accumulator
	diag, err := attribution.ReadFile(path, spans.Limits{}, nil, acc.Add)
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

// TestAccountRemoteDirectly: with Config.Telemetry.AccountRemoteDirectly the task
// host's phases make no SDK span, yet the attribution has the same rows,
// each with a span per unit, and every unit's critical path still adds up
// to its e2e time. UseTelemetry sets it exactly when the telemetry wants
// no remote span.
func TestAccountRemoteDirectly(t *testing.T) {
	const units = 40
	sc, err := scenario.Builtin("taskhost")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[bool]map[string]int{}
	for _, direct := range []bool{false, true} {
		rec := otelsetup.NewRecorder()
		cfg := testConfig(t, testSettings(t, fmt.Sprintf("scenario.count=%d", units)), rec)
		cfg.Telemetry.AccountRemoteDirectly = direct
		var mu sync.Mutex
		var works []attribution.Work
		cfg.OnWork = func(w attribution.Work) {
			mu.Lock()
			works = append(works, w)
			mu.Unlock()
		}
		sum, err := Run(context.Background(), cfg, sc)
		if err != nil {
			t.Fatal(err)
		}
		if sum.OK != units || sum.Attribution.Works != units {
			t.Fatalf("direct=%v: %d ok, %d attributed, want %d (%v)", direct, sum.OK, sum.Attribution.Works, units, sum.Examples)
		}
		remote := 0
		for _, s := range rec.Spans() {
			if v, ok := attrOf(s, telemetry.AttrRemote); ok && v.AsBool() {
				remote++
			}
		}
		if want := map[bool]bool{false: true, true: false}[direct]; (remote > 0) != want {
			t.Errorf("direct=%v: the SDK made %d remote spans", direct, remote)
		}
		if d := sum.Attribution.Diagnostics; d.Orphans+d.Duplicates+d.Unplaced != 0 {
			t.Errorf("direct=%v: diagnostics %+v, want no orphan, duplicate or unplaced span", direct, d)
		}
		rows[direct] = map[string]int{}
		for _, r := range sum.Attribution.Rows {
			rows[direct][r.Name] = r.Spans
		}
		for _, w := range works {
			var crit time.Duration
			for _, s := range w.Stats {
				crit += s.Critical
			}
			if e2e := w.Root.Duration(); crit != e2e {
				t.Errorf("direct=%v: unit %x: critical path %v, e2e %v", direct, w.Root.TraceID, crit, e2e)
			}
		}
	}
	if !reflect.DeepEqual(rows[false], rows[true]) {
		t.Errorf("rows (spans) with SDK spans %v, accounted directly %v", rows[false], rows[true])
	}
	if rows[true]["taskhost.execute"] != units {
		t.Errorf("accounted directly: %d taskhost.execute spans, want %d", rows[true]["taskhost.execute"], units)
	}

	ctx := context.Background()
	for _, tc := range []struct {
		opts []otelsetup.Option
		want bool
	}{{nil, true}, {[]otelsetup.Option{otelsetup.WithRecorder()}, false}} {
		tel, err := otelsetup.Setup(ctx, append([]otelsetup.Option{otelsetup.WithLookupEnv(noEnv)}, tc.opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		var cfg Config
		cfg.UseTelemetry(tel)
		if cfg.Telemetry.AccountRemoteDirectly != tc.want {
			t.Errorf("UseTelemetry with %d options: AccountRemoteDirectly %v, want %v", len(tc.opts), cfg.Telemetry.AccountRemoteDirectly, tc.want)
		}
		_ = tel.Shutdown(ctx)
	}
}

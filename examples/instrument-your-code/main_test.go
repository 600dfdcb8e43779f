package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestExample runs the program and reads its trace file the way
// `amdahl report` does: the rows the README shows are there, every unit
// succeeded, and the overlap of serialize and send is visible.
func TestExample(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED",
		"PYROSCOPE_SERVER_ADDRESS", "AMDAHL_METRICS_ADDR", "AMDAHL_TRACE_FILE", "AMDAHL_PROFILE_DIR"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	const units = 12
	path := filepath.Join(t.TempDir(), "out", "trace.jsonl") // a directory the program makes
	var out, errb bytes.Buffer
	if code := realMain(context.Background(), []string{"--trace", path, "--units", "12"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"12 units of work", "traced to " + path, "go run ./cmd/amdahl report " + path} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	var acc attribution.Accumulator
	diag, err := attribution.ReadFile(path, spans.Limits{}, nil, acc.Add)
	if err != nil {
		t.Fatal(err)
	}
	acc.AddDiagnostics(diag)
	rep := acc.Report(false)
	if rep.Works != units || rep.Failed != 0 {
		t.Fatalf("got %d units (%d failed), want %d (0 failed)", rep.Works, rep.Failed, units)
	}
	rows := map[string]attribution.Row{}
	for _, r := range rep.Rows {
		rows[r.Name] = r
	}
	// The README's rows, with the spans each unit makes: 8 parts.
	for _, want := range []struct {
		row   string
		spans int
	}{
		{"pipeline.serialize/request", 8 * units},
		{"pipeline.send/request", 8 * units},
		{"pipeline.execute", units},
	} {
		r, ok := rows[want.row]
		if !ok {
			t.Errorf("report has no row %s; rows: %v", want.row, rep.Rows)
			continue
		}
		if r.Spans != want.spans {
			t.Errorf("%s: got %d spans, want %d", want.row, r.Spans, want.spans)
		}
	}

	// Serialize and send overlap: part i is on the link while part i+1 is
	// encoded, so their spans add up to more than the time they hold on
	// the critical path. Were the stages run one after the other, the two
	// would be equal.
	ser, snd := rows["pipeline.serialize/request"], rows["pipeline.send/request"]
	if crit, naive := ser.Q+snd.Q, ser.Naive+snd.Naive; !(crit < naive) {
		t.Errorf("serialize+send: got critical share %.4f, naive share %.4f; want critical < naive (the stages overlap)", crit, naive)
	}
	// Execute starts after the last part arrived: nothing overlaps it.
	if ex := rows["pipeline.execute"]; ex.Q != ex.Naive {
		t.Errorf("execute: got q %.4f, naive %.4f; want them equal (nothing overlaps execute)", ex.Q, ex.Naive)
	}
	var sum float64
	for _, r := range rep.Rows {
		sum += r.Q
	}
	if sum < 0.999 || sum > 1.001 {
		t.Errorf("Σ q = %.4f, want 1", sum)
	}
}

// TestDisabled: the pipeline runs the same with a nil component.
func TestDisabled(t *testing.T) {
	p := pipeline{tel: (*telemetry.Component)(nil), parts: 3, ordersPerPart: 10, rate: 1 << 30}
	got, err := p.process(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	// Orders 0..29: quantity 1+id%5, price (100+id)/100.
	var want float64
	for id := range 30 {
		want += float64(1+id%5) * float64(100+id) / 100
	}
	if got != want {
		t.Errorf("got total %v, want %v", got, want)
	}
}

func TestBadUnits(t *testing.T) {
	for _, arg := range []string{"0", "10001", "x"} {
		t.Run(arg, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := realMain(context.Background(), []string{"--units", arg}, &out, &errb); code != 2 {
				t.Errorf("--units %s: got exit %d, want 2 (%s)", arg, code, errb.String())
			}
		})
	}
}

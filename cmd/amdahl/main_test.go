package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
)

func writeTrace(t *testing.T, phases []telemetry.Phase) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	ctx := context.Background()
	tel, err := otelsetup.Setup(ctx, otelsetup.WithLookupEnv(func(string) (string, bool) { return "", false }),
		otelsetup.WithTraceFile(path))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := tel.Component("ipc")
	for i := 0; i < 3; i++ {
		wctx, w := c.StartWork(ctx)
		for _, p := range phases {
			_, ph := c.Start(wctx, p, telemetry.Request)
			ph.End()
		}
		w.End(telemetry.OK, nil)
	}
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReportCommand(t *testing.T) {
	base := writeTrace(t, []telemetry.Phase{telemetry.Serialize, telemetry.Send})
	cand := writeTrace(t, []telemetry.Phase{telemetry.Serialize, telemetry.Send})
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	badScenario := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(badScenario, []byte("name: x\ncount: -1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"resourceSpans\":[]}\n{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"traceId\":\"zz\"}]}]}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		stdout   []string
		stderrIn string
	}{
		{"table", []string{"report", base}, exitOK, []string{"work items 3", "serialize/request", "send/request", "naive share"}, ""},
		{"json", []string{"report", "--json", base}, exitOK, []string{`"works": 3`, fmt.Sprintf(`"schema_version": %d`, runtime.SchemaVersion)}, ""},
		{"by phase", []string{"report", "--by", "phase", base}, exitOK, []string{"serialize/request", "send/request"}, ""},
		{"ab", []string{"report", "--baseline", base, "--target", "ipc.send", cand}, exitOK, []string{"predicted e2e gain", "critical-path replay", "measured e2e gain", "* ipc.send/request", "intervals: bootstrap over units"}, ""},
		{"ab runs", []string{"report", "--baseline", base + "," + cand, "--target", "send/request", cand, base}, exitOK, []string{"bootstrap over runs"}, ""},
		{"ab json", []string{"report", "--json", "--baseline", base, cand}, exitOK, []string{`"comparison"`, `"measured"`}, ""},
		{"ab unknown target", []string{"report", "--baseline", base, "--target", "nope", cand}, exitUsage, nil, "matches no row"},
		{"target without baseline", []string{"report", "--target", "ipc", cand}, exitUsage, nil, "--target needs --baseline"},
		{"bad by", []string{"report", "--by", "x", base}, exitUsage, nil, "want component or phase"},
		{"whatif", []string{"report", "--whatif", "ipc.send=2x", base}, exitOK, []string{"what if ipc.send/request 2× as fast", "critical-path replay of 3 units"}, ""},
		{"whatif bad", []string{"report", "--whatif", "ipc.send=fast", base}, exitUsage, nil, "want ROWS=Nx"},
		{"whatif and baseline", []string{"report", "--whatif", "ipc.send=2x", "--baseline", base, cand}, exitUsage, nil, "without --baseline"},
		{"no file", []string{"report"}, exitUsage, nil, "one trace file"},
		{"missing file", []string{"report", filepath.Join(t.TempDir(), "nope")}, exitFail, nil, "no such file"},
		{"no work spans", []string{"report", empty}, exitFail, nil, "no units of work (neither amdahl.work spans nor trace roots)"},
		{"malformed", []string{"report", bad}, exitFail, nil, "bad.jsonl:2:"},
		{"too many spans", []string{"report", "--max-spans", "2", base}, exitFail, nil, "more than 2 spans"},
		{"bad flag", []string{"report", "--frobnicate", base}, exitUsage, nil, "unknown flag"},
		{"version", []string{"version"}, exitOK, []string{"amdahl " + telemetry.Version}, ""},
		{"--version", []string{"--version"}, exitOK, []string{"amdahl " + telemetry.Version, "go1."}, ""},
		{"unknown command", []string{"frobnicate"}, exitUsage, nil, "unknown command"},
		{"bad otlp protocol", []string{"run", "--otlp-protocol", "carrier-pigeon"}, exitUsage, nil, "--otlp-protocol \"carrier-pigeon\": want grpc or http/protobuf"},
		{"sidecar port taken", []string{"sidecar", "--listen", taken.Addr().String()}, exitFail, nil, "address already in use"},
		{"sidecar bad address", []string{"sidecar", "--listen", "nowhere"}, exitUsage, nil, "--listen nowhere"},
		{"sidecar bad size", []string{"sidecar", "--max-token-bytes", "lots"}, exitUsage, nil, `invalid size "lots"`},
		{"sidecar zero bound", []string{"sidecar", "--max-token-chunks", "0"}, exitUsage, nil, "--max-token-chunks 0: want ≥ 1"},
		{"scenarios validate", []string{"scenarios", "validate", "../../runtime/scenario/builtin/fanout.yaml", "../../docs/scenarios/tiny20k.yaml"}, exitOK, []string{"fanout.yaml: ok: scenario fanout, 48 units", "tiny20k.yaml: ok"}, ""},
		{"scenarios validate bad", []string{"scenarios", "validate", badScenario}, exitUsage, []string{"bad.yaml: invalid: ", "bad.yaml:2:1: count"}, "1 of 1 scenario files invalid"},
		{"scenarios validate none", []string{"scenarios", "validate"}, exitUsage, nil, "one scenario file or more"},
		{"dashboards", []string{"dashboards", "--out", t.TempDir()}, exitOK, []string{"amdahl-attribution.json", "amdahl-phases.json", "compose.yaml", "datasources"}, ""},
		{"dashboards extra arg", []string{"dashboards", "x"}, exitUsage, nil, "takes no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), tc.args, &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, errb.String())
			}
			for _, want := range tc.stdout {
				if !strings.Contains(out.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, out.String())
				}
			}
			if tc.stderrIn != "" && !strings.Contains(errb.String(), tc.stderrIn) {
				t.Errorf("stderr %q lacks %q", errb.String(), tc.stderrIn)
			}
			if tc.code != exitOK && strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 {
				t.Errorf("want a one-line reason, got %q", errb.String())
			}
			if strings.Contains(tc.name, "json") {
				var v map[string]any
				if err := json.Unmarshal(out.Bytes(), &v); err != nil {
					t.Errorf("not JSON: %v", err)
				}
			}
		})
	}
}

// TestReportP99: a plain report reads each unit's tree into the rows'
// duration sketches, so p99 is there (it was 0 when the tree was dropped
// before the accumulator saw it).
func TestReportP99(t *testing.T) {
	base := writeTrace(t, []telemetry.Phase{telemetry.Serialize, telemetry.Send})
	for _, args := range [][]string{{"report", "--json", base}, {"report", "--json", "--baseline", base, base}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != exitOK {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		var doc struct {
			Report, Baseline, Candidate *attribution.Report
		}
		if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, rep := range []*attribution.Report{doc.Report, doc.Baseline, doc.Candidate} {
			if rep == nil {
				continue
			}
			for _, r := range rep.Rows {
				if strings.HasPrefix(r.Name, "ipc.") {
					n++
					if r.P99 <= 0 {
						t.Errorf("%v: row %s has p99 %v, want > 0", args, r.Name, r.P99)
					}
				}
			}
		}
		if n == 0 {
			t.Fatalf("%v: no ipc row:\n%s", args, out.String())
		}
	}
}

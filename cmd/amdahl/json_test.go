package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/runtime/ab"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

var updateGolden = flag.Bool("update", false, "rewrite the JSON shape golden files under testdata/json")

// dataKeyed are the keys whose object holds data keys (setting names,
// failure classes, kinds of unit), not schema keys: their keys are
// neither checked nor part of a shape (written {*}).
var dataKeyed = map[string]bool{
	"settings": true, "baseline_settings": true, "candidate_settings": true,
	"failures": true, "failure_examples": true, "kinds": true, "e2e_by_kind": true,
}

// shapeOf returns the structure of a JSON document, one "path type" line
// per key, sorted: objects and arrays are walked (array elements merged,
// data-keyed objects as {*}), leaves give their type. Values do not
// appear, so times and counts may vary; a key renamed, added or removed
// changes the shape.
func shapeOf(doc []byte) (string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	types := map[string]string{}
	var walk func(path, key string, v any)
	walk = func(path, key string, v any) {
		set := func(t string) {
			if old, ok := types[path]; ok && old != t {
				switch {
				case old == "null":
				case t == "null":
					return
				default:
					t = old + "|" + t
				}
			}
			types[path] = t
		}
		switch x := v.(type) {
		case map[string]any:
			if dataKeyed[key] {
				set("map")
				for _, e := range x {
					walk(path+"{*}", "", e)
				}
				return
			}
			set("object")
			for k, e := range x {
				walk(path+"."+k, k, e)
			}
		case []any:
			set("array")
			for _, e := range x {
				walk(path+"[]", "", e)
			}
		case string:
			set("string")
		case bool:
			set("bool")
		case json.Number:
			set("number")
		case nil:
			// An interval's bounds are numbers, null where undefined.
			if key == "value" || key == "lo" || key == "hi" {
				set("number")
			} else {
				set("null")
			}
		}
	}
	walk("", "", v)
	lines := make([]string, 0, len(types))
	for p, t := range types {
		if p == "" {
			p = "."
		}
		lines = append(lines, p+" "+t)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n", nil
}

// checkGolden compares the shape of doc with testdata/json/NAME.golden
// (rewritten with -update), and checks its keys with jsonKeyProblems.
func checkGolden(t *testing.T, name string, doc []byte) {
	t.Helper()
	for _, p := range jsonKeyProblems(doc) {
		t.Errorf("%s: %s", name, p)
	}
	got, err := shapeOf(doc)
	if err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", name, err, doc)
	}
	path := filepath.Join("testdata", "json", name+".golden")
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./cmd/amdahl -run TestJSON -update writes it)", err)
	}
	if got == string(want) {
		return
	}
	g, w := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	var diff []string
	for _, l := range w {
		if l != "" && !slices.Contains(g, l) {
			diff = append(diff, "- "+l)
		}
	}
	for _, l := range g {
		if l != "" && !slices.Contains(w, l) {
			diff = append(diff, "+ "+l)
		}
	}
	t.Errorf("%s: the JSON's shape differs from %s (- golden, + got; docs/json.md documents the schema: change both, bump runtime.SchemaVersion if a key changed, and run with -update):\n%s",
		name, path, strings.Join(diff, "\n"))
}

var (
	snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	// A word that makes a numeric key a duration, wherever it stands.
	durationWord = regexp.MustCompile(`(^|_)(mean|p[0-9]+|elapsed|wall|duration|latency|e2e|time|critical|own|added|ttl|timeout|delay|wait|age)(_|$)`)
	// Numbers that hold such a word and are not durations: ratios, sizes.
	dimensionless = regexp.MustCompile(`_(gain|share|fraction|bytes)$`)
)

// nullable are the keys that may be null: an interval's bounds where
// undefined, and report's whatif without --whatif.
var nullable = map[string]bool{"value": true, "lo": true, "hi": true, "whatif": true}

// jsonKeyProblems lists every key of doc that breaks the schema's naming
// rules: a key not in snake_case, a numeric duration-like key whose name
// does not end in _s or _ns, a null where the schema has none, a top level
// without schema_version.
func jsonKeyProblems(doc []byte) []string {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return []string{"not JSON: " + err.Error()}
	}
	var out []string
	top, ok := v.(map[string]any)
	if !ok {
		return []string{"the top level is not an object"}
	}
	if sv, ok := top["schema_version"].(float64); !ok || int(sv) != runtime.SchemaVersion {
		out = append(out, fmt.Sprintf("schema_version %v, want %d", top["schema_version"], runtime.SchemaVersion))
	}
	var walk func(path string, v any, data bool)
	walk = func(path string, v any, data bool) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				p := path + "." + k
				if !data {
					if !snakeCase.MatchString(k) {
						out = append(out, p+": key not in snake_case")
					}
					if e == nil && !nullable[k] {
						out = append(out, p+": null (an empty list is [], an absent object is left out)")
					}
					switch e.(type) {
					case float64, nil:
						if durationWord.MatchString(k) && !dimensionless.MatchString(k) &&
							!strings.HasSuffix(k, "_s") && !strings.HasSuffix(k, "_ns") {
							out = append(out, p+": a duration without its unit (_s or _ns)")
						}
					}
				}
				walk(p, e, !data && dataKeyed[k])
			}
		case []any:
			for _, e := range x {
				walk(path+"[]", e, false)
			}
		}
	}
	walk("", v, false)
	sort.Strings(out)
	return out
}

// TestJSONKeyRules: the checker itself catches what it is for.
func TestJSONKeyRules(t *testing.T) {
	v := runtime.SchemaVersion
	for _, tc := range []struct {
		doc  string
		want []string
	}{
		{fmt.Sprintf(`{"schema_version":%d,"rows":[{"mean_ns":1,"p99_ns":2,"q":0.5,"critical_share":0.1,"wall_time_gain":{"value":null}}],"settings":{"ipc.buffer":"1MiB"}}`, v), nil},
		{fmt.Sprintf(`{"schema_version":%d,"rows":[{"meanNs":1}]}`, v), []string{".rows[].meanNs: key not in snake_case"}},
		{fmt.Sprintf(`{"schema_version":%d,"elapsed":3,"added_ns_per_work":2.5,"e2e_mean_ms":1}`, v), []string{
			".added_ns_per_work: a duration without its unit (_s or _ns)", ".e2e_mean_ms: a duration without its unit (_s or _ns)",
			".elapsed: a duration without its unit (_s or _ns)"}},
		{fmt.Sprintf(`{"schema_version":%d,"kinds":{"fan-out":{"Works":1}}}`, v), []string{".kinds.fan-out.Works: key not in snake_case"}},
		{`{"scenario":"x"}`, []string{fmt.Sprintf("schema_version <nil>, want %d", v)}},
		{fmt.Sprintf(`{"schema_version":%d,"rows":null,"whatif":null}`, v), []string{".rows: null (an empty list is [], an absent object is left out)"}},
	} {
		if got := jsonKeyProblems([]byte(tc.doc)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.doc, got, tc.want)
		}
	}
}

// TestJSONFullyPopulated checks the keys of every output type with every
// field set, omitempty ones too (the goldens hold only what a short run
// prints).
func TestJSONFullyPopulated(t *testing.T) {
	iv := attribution.Interval{Value: 0.1, Lo: 0, Hi: 0.2}
	rep := attribution.Report{Works: 1, Rows: []attribution.Row{{Name: "ipc.send/request", Mean: time.Millisecond}},
		Gaps: []attribution.Row{{Name: "gap start → end", Gap: &attribution.GapEnds{From: "start", To: "end"}}}}
	cmp := attribution.Comparison{Rows: []attribution.CompareRow{{Name: "ipc.send/request", Q: iv, R: iv, QR: iv, Shift: iv}},
		Target: []string{"ipc"}, FirstOrder: iv, Replay: iv, Measured: iv, Verdict: []string{"consistent"}}
	wi := attribution.WhatIf{Rows: []string{"ipc.send/request"}, Factors: []float64{0.5}, Gain: iv}
	sv := runtime.SchemaVersion
	for name, v := range map[string]any{
		"summary": runtime.Summary{SchemaVersion: sv, Settings: map[string]string{"ipc.buffer": "1MiB"},
			Failures: map[string]int{"oversized action": 1}, Examples: map[string]string{"oversized action": "…"},
			Attribution: rep, Kinds: map[string]attribution.Report{"taskhost": rep}, Sampler: "AlwaysOnSampler"},
		"ab": abResult{SchemaVersion: sv, Baseline: map[string]string{"a.b": "c"}, Candidate: map[string]string{"a.b": "d"}, Differ: []string{"a.b"},
			Runs: []ab.Run{{Side: "baseline"}}, Comparison: cmp, WallGain: iv, ThroughputUp: iv,
			Causal: []attribution.Causal{{Row: "taskhost.execute", Weight: iv, Added: 100}}},
		"report":  reportJSON{SchemaVersion: sv, Report: rep, WhatIf: &wi},
		"compare": compareJSON{SchemaVersion: sv, Baseline: rep, Candidate: rep, Comparison: cmp},
		"validate": validateJSON{SchemaVersion: sv, Files: []validateFileJSON{{File: "f", Error: "e", Scenario: &scenarioJSON{
			Workloads: []workloadJSON{{Task: &taskJSON{}, Fanout: &fanoutJSON{Shapes: []shapeJSON{{}}}}}}}}},
		"version":    versionInfo(),
		"dashboards": dashboardsJSON{SchemaVersion: sv, Files: []string{"a.json"}},
		"sidecar":    sidecarJSON{SchemaVersion: sv},
	} {
		b, err := marshalJSON(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range jsonKeyProblems(b) {
			t.Errorf("%s: %s", name, p)
		}
	}
}

// TestJSONDurationTags: every time.Duration reachable from an output type
// is written under a key ending in _ns (a Duration marshals as integer
// nanoseconds).
func TestJSONDurationTags(t *testing.T) {
	durType := reflect.TypeFor[time.Duration]()
	seen := map[reflect.Type]bool{}
	var walk func(ty reflect.Type, path string)
	walk = func(ty reflect.Type, path string) {
		switch ty.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			walk(ty.Elem(), path+"[]")
			return
		case reflect.Struct:
		default:
			return
		}
		if seen[ty] {
			return
		}
		seen[ty] = true
		for f := range ty.Fields() {
			if !f.IsExported() {
				continue
			}
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if tag == "-" {
				continue
			}
			if f.Type == durType && !strings.HasSuffix(tag, "_ns") {
				t.Errorf("%s%s.%s: a time.Duration under %q, want a key ending in _ns", ty, path, f.Name, tag)
			}
			walk(f.Type, path+"."+tag)
		}
	}
	for _, v := range []any{runtime.Summary{}, abResult{}, reportJSON{}, compareJSON{}, validateJSON{}, scenariosJSON{},
		versionJSON{}, dashboardsJSON{}, sidecarJSON{}} {
		walk(reflect.TypeOf(v), "")
	}
}

// TestEveryCommandHasJSON: every command that runs something has --json
// (the help topic and the hidden task host mode aside).
func TestEveryCommandHasJSON(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && !c.Hidden && c.HasParent() && c.Flags().Lookup("json") == nil {
			t.Errorf("%s has no --json (docs/json.md)", c.CommandPath())
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot(&bytes.Buffer{}, &bytes.Buffer{}))
}

// TestJSONGolden runs each command with --json and checks its output's
// shape against testdata/json/*.golden.
func TestJSONGolden(t *testing.T) {
	base := writeTrace(t, []telemetry.Phase{telemetry.Serialize, telemetry.Send})
	cand := writeTrace(t, []telemetry.Phase{telemetry.Serialize, telemetry.Send})
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: x\ncount: -1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"report", []string{"report", "--json", base}, exitOK},
		{"report-whatif", []string{"report", "--json", "--whatif", "ipc.send=2x", base}, exitOK},
		{"report-compare", []string{"report", "--json", "--baseline", base, "--target", "ipc.send", cand}, exitOK},
		{"scenarios", []string{"scenarios", "--json"}, exitOK},
		{"scenarios-validate", []string{"scenarios", "validate", "--json", filepath.Join("testdata", "json", "scenario.yaml"), bad}, exitUsage},
		{"version", []string{"version", "--json"}, exitOK},
		{"dashboards", []string{"dashboards", "--json", "--out", t.TempDir()}, exitOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, errs)
			}
			checkGolden(t, tc.name, []byte(out))
		})
	}
}

// TestJSONGoldenRun: run --json, and the summary.json of --out is the same
// document.
func TestJSONGoldenRun(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runCLI(t, "run", "--scenario-file", filepath.Join("testdata", "json", "scenario.yaml"), "--set", "runtime.nodes=2",
		"--json", "--out", dir, "--progress", "never")
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q", code, errs)
	}
	checkGolden(t, "run", []byte(out))
	sameJSON(t, []byte(out), filepath.Join(dir, "summary.json"))
	// amdahl profile --json of the same --out.
	code, out, errs = runCLI(t, "profile", "--json", dir)
	if code != exitOK {
		t.Fatalf("profile: exit %d; stderr %q", code, errs)
	}
	checkGolden(t, "profile", []byte(out))
}

// TestJSONGoldenAB: ab --json with a perturbation (so that it has causal
// weights), and the ab.json of --out is the same document.
func TestJSONGoldenAB(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runCLI(t, "ab", "--scenario", "taskhost", "--set", "scenario.count=20", "--runs", "2",
		"--candidate", "perturb.taskhost.execute=100us", "--json", "--out", dir, "--progress", "never")
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q", code, errs)
	}
	checkGolden(t, "ab", []byte(out))
	sameJSON(t, []byte(out), filepath.Join(dir, "ab.json"))
	// Each run's summary.json is run's (its shape: run.golden).
	for _, f := range []string{"baseline-1", "candidate-2"} {
		b, err := os.ReadFile(filepath.Join(dir, f, "summary.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range jsonKeyProblems(b) {
			t.Errorf("%s/summary.json: %s", f, p)
		}
	}
}

func sameJSON(t *testing.T, doc []byte, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var a, f any
	if err := json.Unmarshal(doc, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, f) {
		t.Errorf("%s differs from the --json output", file)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestJSONGoldenSidecar: sidecar --json prints its account once stopped.
func TestJSONGoldenSidecar(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"sidecar", "--listen", "127.0.0.1:0", "--json"}, &out, &errb) }()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(errb.String(), "listening on") {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("sidecar did not listen within 20 s; stderr %q", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d; stderr %q", code, errb.String())
	}
	checkGolden(t, "sidecar", []byte(out.String()))
	var s sidecarJSON
	if err := json.Unmarshal([]byte(out.String()), &s); err != nil || !strings.HasPrefix(s.Address, "127.0.0.1:") || s.Address == "127.0.0.1:0" {
		t.Errorf("sidecar --json: %v, address %q, want the port it listened on", err, s.Address)
	}
}

// TestJSONNoNulls: what is empty is [] (or left out), not null — with
// telemetry off (no rows), without a target, for an A/A run.
func TestJSONNoNulls(t *testing.T) {
	base := writeTrace(t, []telemetry.Phase{telemetry.Serialize, telemetry.Send})
	for _, tc := range []struct {
		env  map[string]string
		args []string
	}{
		{map[string]string{"OTEL_SDK_DISABLED": "true"}, []string{"run", "--scenario", "taskhost", "--set", "scenario.count=10", "--json", "--progress", "never"}},
		{nil, []string{"report", "--json", "--baseline", base, base}},
	} {
		code, out, errs := runCLIEnv(t, tc.env, tc.args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d; stderr %q", tc.args, code, errs)
		}
		for _, p := range jsonKeyProblems([]byte(out)) {
			t.Errorf("%v: %s", tc.args, p)
		}
	}
	same := map[string]string{"a": "1"}
	b, err := marshalJSON(abResult{SchemaVersion: runtime.SchemaVersion, Baseline: same, Candidate: same, Differ: ab.SettingsThatDiffer(same, same),
		Runs: []ab.Run{}, Comparison: attribution.Comparison{Rows: []attribution.CompareRow{}, Target: []string{}, Verdict: []string{}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range jsonKeyProblems(b) {
		t.Errorf("ab, A/A: %s", p)
	}
}

package scenario

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestParseFileErrors has one bad file per class of error; each
// error must name the file, the exact line and the field.
func TestParseFileErrors(t *testing.T) {
	for _, tc := range []struct {
		file  string
		line  int
		field string
		msg   string // the whole message, after "file:line:col: "
	}{
		{"unknown_top_key.yaml", 4, "colour",
			"colour: unknown key (valid: name, description, seed, count, workloads)"},
		{"unknown_nested_key.yaml", 7, "workloads[0].task.config_size",
			"workloads[0].task.config_size: unknown key (valid: config_mean, config_sigma, config_cap, config_min, environment, parameters, execute_passes)"},
		{"bad_size.yaml", 12, "workloads[1].task.config_mean",
			`workloads[1].task.config_mean: invalid size "46QB" (want a whole number of bytes, or a number with unit B, KB, MB, GB, KiB, MiB, GiB)`},
		{"negative_count.yaml", 3, "count",
			"count: -5 is out of range (valid: 1..10000000)"},
		{"kind_mismatch.yaml", 5, "workloads[0].fanout",
			"workloads[0].fanout: not allowed for kind taskhost (use task)"},
		{"duplicate_shape.yaml", 13, "workloads[0].fanout.shapes[2].name",
			`workloads[0].fanout.shapes[2].name: duplicate shape name "same" (first at shapes[0])`},
		{"list_instead_of_map.yaml", 6, "workloads[0].task",
			"workloads[0].task: want a mapping, got a list"},
		{"malformed.yaml", 7, "",
			"invalid YAML: did not find expected key"},
		{"bad.json", 10, "workloads[0].fanout.shapes[1].actions",
			"workloads[0].fanout.shapes[1].actions: 0 is out of range (valid: 1..100000)"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file)
			s, err := Load(path)
			if err == nil {
				t.Fatalf("got %+v, want an error", s)
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("got %T %v, want an *Error", err, err)
			}
			if se.File != path || se.Line != tc.line || se.Field != tc.field {
				t.Errorf("got file %q line %d field %q, want %q line %d field %q",
					se.File, se.Line, se.Field, path, tc.line, tc.field)
			}
			prefix := path + ":" + strconv.Itoa(tc.line) + ":"
			if got := err.Error(); !strings.HasPrefix(got, prefix) || !strings.HasSuffix(got, ": "+tc.msg) {
				t.Errorf("got %q, want %q…: %s", got, prefix, tc.msg)
			}
		})
	}
}

// TestParseErrors covers the remaining errors, with the position
// each one is reported at.
func TestParseErrors(t *testing.T) {
	const head = "name: x\ncount: 1\nworkloads:\n"
	for _, tc := range []struct {
		name string
		data string
		want string
	}{
		{"empty", "", "in.yaml: empty scenario"},
		{"only comments", "# nothing\n", "in.yaml: empty scenario"},
		{"two documents", head + "  - kind: taskhost\n---\nname: y\n", "in.yaml:5:1: more than one YAML document (want one scenario per file)"},
		{"top-level list", "- 1\n", "in.yaml:1:1: want a mapping, got a list"},
		{"top-level scalar", "hello\n", `in.yaml:1:1: want a mapping, got string "hello"`},
		{"duplicate key", "name: x\nname: y\n", "in.yaml:2:1: name: duplicate key (first at line 1)"},
		{"map key", "{a: 1}: 2\n", "in.yaml:1:1: want a key, got a mapping"},
		{"no workloads", "name: x\ncount: 1\n", "in.yaml:1:1: workloads: at least one workload is required"},
		{"null workloads", "name: x\ncount: 1\nworkloads:\n", "in.yaml:3:1: workloads: at least one workload is required"},
		{"workloads map", "name: x\ncount: 1\nworkloads: {a: 1}\n", "in.yaml:3:12: workloads: want a list, got a mapping"},
		{"no count", "name: x\nworkloads: [{kind: taskhost}]\n", "in.yaml:1:1: count: 0 is out of range (valid: 1..10000000)"},
		{"count string", "name: x\ncount: \"5\"\n", `in.yaml:2:1: count: want a whole number, got string "5"`},
		{"count float", "name: x\ncount: 5.5\n", "in.yaml:2:1: count: want a whole number, got number 5.5"},
		{"count null", "name: x\ncount:\n", "in.yaml:2:1: count: want a whole number, got null"},
		{"count huge", "name: x\ncount: 99999999999999999999\n", "in.yaml:2:1: count: want a whole number, got number 99999999999999999999"},
		{"seed negative", "name: x\nseed: -1\n", "in.yaml:2:1: seed: want a whole number 0..18446744073709551615, got integer -1"},
		{"name list", "name: [a]\n", "in.yaml:1:1: name: want a string, got a list"},
		{"name empty", "name: \"\"\ncount: 1\nworkloads: [{kind: taskhost}]\n", "in.yaml:1:1: name: required"},
		{"no kind", head + "  - weight: 2\n", "in.yaml:4:5: workloads[0].kind: required (valid: taskhost, fanout)"},
		{"bad kind", head + "  - kind: tasks\n", `in.yaml:4:5: workloads[0].kind: invalid kind "tasks" (valid: taskhost, fanout)`},
		{"zero weight", head + "  - kind: taskhost\n    weight: 0\n", "in.yaml:5:5: workloads[0].weight: 0 is out of range (valid: a finite number > 0)"},
		{"inf weight", head + "  - kind: taskhost\n    weight: .inf\n", "in.yaml:5:5: workloads[0].weight: +Inf is out of range (valid: a finite number > 0)"},
		{"weight string", head + "  - kind: taskhost\n    weight: heavy\n", `in.yaml:5:5: workloads[0].weight: want a number, got string "heavy"`},
		{"orchestration string", head + "  - kind: taskhost\n    orchestration: yes please\n", `in.yaml:5:5: workloads[0].orchestration: want true or false, got string "yes please"`},
		{"orchestration null", head + "  - kind: taskhost\n    orchestration:\n", "in.yaml:5:5: workloads[0].orchestration: want true or false, got null"},
		{"fanout without orchestration", head + "  - orchestration: false\n    kind: fanout\n    fanout:\n      shapes: [{actions: 1, action_bytes: 1}]\n",
			"in.yaml:4:5: workloads[0].orchestration: false is not allowed for kind fanout (valid: true, or leave it out): a fanout unit is an orchestration completion"},
		{"task for fanout", head + "  - kind: fanout\n    task: {}\n", "in.yaml:5:5: workloads[0].task: not allowed for kind fanout (use fanout)"},
		{"no fanout", head + "  - kind: fanout\n", "in.yaml:4:5: workloads[0].fanout: required for kind fanout"},
		{"no shapes", head + "  - kind: fanout\n    fanout: {}\n", "in.yaml:5:5: workloads[0].fanout.shapes: at least one shape is required"},
		{"sigma", head + "  - kind: taskhost\n    task:\n      config_sigma: 3.5\n", "in.yaml:6:7: workloads[0].task.config_sigma: 3.5 is out of range (valid: 0 < σ ≤ 3)"},
		{"sigma nan", head + "  - kind: taskhost\n    task:\n      config_sigma: .nan\n", "in.yaml:6:7: workloads[0].task.config_sigma: NaN is out of range (valid: 0 < σ ≤ 3)"},
		{"mean above cap", head + "  - kind: taskhost\n    task:\n      config_mean: 2MB\n", "in.yaml:6:7: workloads[0].task.config_mean: 2MB is out of range (valid: config_min (256B)..config_cap (1.5MB))"},
		{"mean below min", head + "  - kind: taskhost\n    task:\n      config_mean: 100\n", "in.yaml:6:7: workloads[0].task.config_mean: 100B is out of range (valid: config_min (256B)..config_cap (1.5MB))"},
		{"cap too large", head + "  - kind: taskhost\n    task:\n      config_cap: 65MiB\n", "in.yaml:6:7: workloads[0].task.config_cap: 65MiB is out of range (valid: 1B..64MiB)"},
		{"min zero", head + "  - kind: taskhost\n    task:\n      config_min: 0\n", "in.yaml:6:7: workloads[0].task.config_min: 0B is out of range (valid: 1B..config_mean)"},
		{"negative environment", head + "  - kind: taskhost\n    task:\n      environment: -1\n", `in.yaml:6:7: workloads[0].task.environment: invalid size "-1" (negative)`},
		{"parameters zero", head + "  - kind: taskhost\n    task:\n      parameters: 0\n", "in.yaml:6:7: workloads[0].task.parameters: 0 is out of range (valid: 1..10000)"},
		{"passes negative", head + "  - kind: taskhost\n    task:\n      execute_passes: -1\n", "in.yaml:6:7: workloads[0].task.execute_passes: -1 is out of range (valid: 0..1000)"},
		{"shapes map", head + "  - kind: fanout\n    fanout:\n      shapes: {a: 1}\n", "in.yaml:6:15: workloads[0].fanout.shapes: want a list, got a mapping"},
		{"shape unknown key", head + "  - kind: fanout\n    fanout:\n      shapes:\n        - {actions: 1, bytes: 2}\n", "in.yaml:7:24: workloads[0].fanout.shapes[0].bytes: unknown key (valid: name, weight, actions, action_bytes, first_action_bytes)"},
		{"no action bytes", head + "  - kind: fanout\n    fanout:\n      shapes:\n        - actions: 3\n", "in.yaml:7:11: workloads[0].fanout.shapes[0].action_bytes: 0B is out of range (valid: 1B..8MiB)"},
		{"action bytes too large", head + "  - kind: fanout\n    fanout:\n      shapes:\n        - actions: 3\n          action_bytes: 9MiB\n", "in.yaml:8:11: workloads[0].fanout.shapes[0].action_bytes: 9MiB is out of range (valid: 1B..8MiB)"},
		{"too many actions", head + "  - kind: fanout\n    fanout:\n      shapes:\n        - actions: 100001\n          action_bytes: 1\n", "in.yaml:7:11: workloads[0].fanout.shapes[0].actions: 100001 is out of range (valid: 1..100000)"},
		{"first action too large", head + "  - kind: fanout\n    fanout:\n      shapes:\n        - actions: 3\n          action_bytes: 1\n          first_action_bytes: 8.5MiB\n", "in.yaml:9:11: workloads[0].fanout.shapes[0].first_action_bytes: 8.5MiB is out of range (valid: 0B..8MiB; 0 = same as action_bytes)"},
		{"duplicate default name", head + "  - kind: fanout\n    fanout:\n      shapes:\n        - {actions: 3, action_bytes: 1KiB}\n        - {actions: 3, action_bytes: 1024}\n", `in.yaml:8:11: workloads[0].fanout.shapes[1].name: duplicate shape name "3x1KiB" (first at shapes[0])`},
		{"merge key", head + "  - <<: {kind: taskhost}\n", "in.yaml:4:5: workloads[0].<<: unknown key (valid: kind, weight, orchestration, task, fanout)"},
		{"undefined alias", head + "  - *nope\n", "in.yaml:4:5: invalid YAML: unknown anchor 'nope' referenced"},
		{"json error", "{\"name\": \"x\",\n \"count\": [1]}\n", "in.yaml:2:2: count: want a whole number, got a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("in.yaml", []byte(tc.data))
			if err == nil {
				t.Fatalf("got %+v, want error %q", s, tc.want)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Errorf("got %T, want an *Error", err)
			}
		})
	}
}

func TestParseDefaultsAndAliases(t *testing.T) {
	data := `
seed: 3
count: 5
workloads:
  - kind: taskhost
    task: &t
      config_mean: 10KB
      execute_passes: 0
  - kind: taskhost
    orchestration: true
    task: *t
  - kind: fanout
    orchestration: true
    weight: 0.5
    fanout:
      shapes:
        - {actions: 16, action_bytes: 64KiB}
`
	dir := t.TempDir()
	path := filepath.Join(dir, "from-file.yml")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	task := DefaultTaskSpec()
	task.ConfigMeanBytes = 10_000
	task.ExecutePasses = 0
	want := &Scenario{Name: "from-file", Seed: 3, Count: 5, Workloads: []Workload{
		{Kind: KindTask, Weight: 1, Task: &task},
		{Kind: KindTask, Weight: 1, Orchestration: true, Task: &task},
		{Kind: KindFanout, Weight: 0.5, Orchestration: true, Fanout: &FanoutSpec{Shapes: []FanoutShape{
			{Name: "16x64KiB", Weight: 1, Actions: 16, ActionBytes: 64 << 10},
		}}},
	}}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("got %+v, want %+v", s, want)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v, want an error wrapping os.ErrNotExist", err)
	}
}

func TestLoadJSON(t *testing.T) {
	s, err := Load(filepath.Join("testdata", "good.json"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	task := TaskSpec{
		ConfigMeanBytes:  10_000,
		ConfigSigma:      1,
		ConfigCapBytes:   100_000,
		ConfigMinBytes:   256,
		EnvironmentBytes: 1024,
		Parameters:       4,
		ExecutePasses:    0,
	}
	want := &Scenario{
		Name:        "good-json",
		Description: "a JSON scenario, tab-indented",
		Seed:        42,
		Count:       100,
		Workloads: []Workload{
			{Kind: KindTask, Weight: 3, Task: &task},
			{Kind: KindFanout, Weight: 1, Fanout: &FanoutSpec{Shapes: []FanoutShape{
				{Name: "16x64KiB", Weight: 1, Actions: 16, ActionBytes: 64 << 10},
				{Name: "big-first", Weight: 0.5, Actions: 3, ActionBytes: 1024, FirstActionBytes: 5_000_000},
			}}},
		},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("got %+v, want %+v", s, want)
	}
}

// FuzzParse seeds from the built-ins and the test files; its corpus is in
// testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"builtin", "testdata"} {
		files, err := os.ReadDir(dir)
		if err != nil {
			f.Fatal(err)
		}
		for _, e := range files {
			if e.IsDir() {
				continue // testdata/fuzz
			}
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("fuzz.yaml", data)
		if err != nil {
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("got %T %v, want an *Error", err, err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse returned a scenario that fails Validate: %v", err)
		}
	})
}

// TestParseSyntaxErrorPosition: every YAML syntax error carries the line
// and the column of the problem, though yaml.v3 reports no column and for
// some errors no line or the line where the enclosing construct began.
func TestParseSyntaxErrorPosition(t *testing.T) {
	for _, tc := range []struct{ data, want string }{
		{"name: x\ncount: 1\nworkloads:\n  - kind: taskhost\n    task:\n      config_mean: 46KB\n     config_cap: 1MB\n",
			"in.yaml:7:6: invalid YAML: did not find expected key"},
		{"name: x\nworkloads: [1, 2\n", "in.yaml:2:13: invalid YAML: did not find expected ',' or ']'"},
		{"name: 'unclosed\ncount: 1\n", "in.yaml:1:7: invalid YAML: found unexpected end of stream"},
		{"name: x\n\tcount: 1\n", "in.yaml:2:1: invalid YAML: found a tab character that violates indentation"},
		{"name: x\ncount: 1\nworkloads:\n  - *nope\n", "in.yaml:4:5: invalid YAML: unknown anchor 'nope' referenced"},
		{"name: x\ncount: [1, 2]]\n", "in.yaml:2:14: invalid YAML: did not find expected key"},
		{"name: x\n  count: 1\n", "in.yaml:2:8: invalid YAML: mapping values are not allowed in this context"},
		{"name: \"a\\q\"\n", "in.yaml:1:9: invalid YAML: found unknown escape character"},
	} {
		_, err := Parse("in.yaml", []byte(tc.data))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\ngot  %v\nwant %s", tc.data, err, tc.want)
		}
	}
}

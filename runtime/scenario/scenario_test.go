package scenario

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseKind(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Kind
		wantErr string
	}{
		{"taskhost", KindTask, ""},
		{"fanout", KindFanout, ""},
		{"task", 0, `invalid kind "task" (valid: taskhost, fanout)`},
		{"", 0, `invalid kind "" (valid: taskhost, fanout)`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseKind(tc.in)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("ParseKind(%q): got error %v, want %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseKind(%q): got %v, %v, want %v", tc.in, got, err, tc.want)
			}
			if s := got.String(); s != tc.in {
				t.Errorf("String: got %q, want %q", s, tc.in)
			}
		})
	}
	if got, want := Kind(9).String(), "kind(9)"; got != want {
		t.Errorf("Kind(9).String(): got %q, want %q", got, want)
	}
}

func TestBuiltins(t *testing.T) {
	all := Builtins()
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
	}
	if want := []string{"taskhost", "fanout", "mixed"}; !slices.Equal(names, want) {
		t.Fatalf("names: got %v, want %v", names, want)
	}
	task := DefaultTaskSpec()
	fanout := FanoutSpec{Shapes: []FanoutShape{
		{Name: "64x128KiB", Weight: 2, Actions: 64, ActionBytes: 128 << 10},
		{Name: "32x2MiB", Weight: 1, Actions: 32, ActionBytes: 2 << 20},
		{Name: "100x1KiB", Weight: 2, Actions: 100, ActionBytes: 1 << 10},
		{Name: "oversized-first", Weight: 1, Actions: 8, ActionBytes: 64 << 10, FirstActionBytes: 4_500_000},
	}}
	want := map[string]*Scenario{
		"taskhost": {Name: "taskhost", Seed: 1, Count: 2000, Workloads: []Workload{
			{Kind: KindTask, Weight: 1, Task: &task},
		}},
		"fanout": {Name: "fanout", Seed: 1, Count: 48, Workloads: []Workload{
			{Kind: KindFanout, Weight: 1, Fanout: &fanout},
		}},
		"mixed": {Name: "mixed", Seed: 1, Count: 1000, Workloads: []Workload{
			{Kind: KindTask, Weight: 0.95, Task: &task},
			{Kind: KindFanout, Weight: 0.05, Fanout: &fanout},
		}},
	}
	for _, s := range all {
		t.Run(s.Name, func(t *testing.T) {
			if err := s.Validate(); err != nil {
				t.Fatalf("Validate: got %v, want nil", err)
			}
			if s.Description == "" {
				t.Errorf("Description: got empty, want a description")
			}
			got := *s
			got.Description = ""
			if !reflect.DeepEqual(&got, want[s.Name]) {
				t.Errorf("got %+v, want %+v", &got, want[s.Name])
			}
			byName, err := Builtin(s.Name)
			if err != nil {
				t.Fatalf("Builtin(%q): %v", s.Name, err)
			}
			if !reflect.DeepEqual(byName, s) {
				t.Errorf("Builtin(%q): got %+v, want %+v", s.Name, byName, s)
			}
		})
	}
	if first := all[1].Workloads[0].Fanout.Shapes[3].FirstActionBytes; first <= 4_089_446 {
		t.Errorf("oversized-first: got first action %d bytes, want more than the 4,089,446-byte chunk limit", first)
	}

	// Each call returns fresh copies.
	all[0].Count = 1
	all[0].Workloads[0].Task.Parameters = 99
	again, err := Builtin("taskhost")
	if err != nil {
		t.Fatal(err)
	}
	if again.Count != 2000 || again.Workloads[0].Task.Parameters != 8 {
		t.Errorf("after modifying a returned copy: got count %d, parameters %d, want 2000, 8",
			again.Count, again.Workloads[0].Task.Parameters)
	}
}

func TestBuiltinUnknown(t *testing.T) {
	_, err := Builtin("nope")
	want := `unknown scenario "nope" (valid: taskhost, fanout, mixed)`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
}

func TestErrorString(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{File: "a.yaml", Line: 12, Column: 5, Field: "count", Msg: "bad"}, "a.yaml:12:5: count: bad"},
		{Error{File: "a.yaml", Line: 12, Msg: "bad"}, "a.yaml:12: bad"},
		{Error{File: "a.yaml", Field: "count", Msg: "bad"}, "a.yaml: count: bad"},
		{Error{Field: "count", Msg: "bad"}, "count: bad"},
		{Error{Line: 3, Column: 1, Msg: "bad"}, "3:1: bad"},
		{Error{Msg: "bad"}, "bad"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

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
			"count: -5 is out of range (valid: ≥ 1)"},
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
				t.Fatalf("got %T %v, want a *Error", err, err)
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
		{"no count", "name: x\nworkloads: [{kind: taskhost}]\n", "in.yaml:1:1: count: 0 is out of range (valid: ≥ 1)"},
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
		{"merge key", head + "  - <<: {kind: taskhost}\n", "in.yaml:4:5: workloads[0].<<: unknown key (valid: kind, weight, task, fanout)"},
		{"undefined alias", head + "  - *nope\n", "in.yaml:4: invalid YAML: unknown anchor 'nope' referenced"},
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
				t.Errorf("got %T, want a *Error", err)
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
    task: *t
  - kind: fanout
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
		{Kind: KindTask, Weight: 1, Task: &task},
		{Kind: KindFanout, Weight: 0.5, Fanout: &FanoutSpec{Shapes: []FanoutShape{
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

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Scenario
		want string // "" for valid
	}{
		{"zero values are defaults", Scenario{Name: "x", Count: 1, Workloads: []Workload{
			{Kind: KindTask},
			{Kind: KindTask, Task: &TaskSpec{}},
			{Kind: KindFanout, Fanout: &FanoutSpec{Shapes: []FanoutShape{{Actions: 1, ActionBytes: 1}}}},
		}}, ""},
		{"no name", Scenario{Count: 1, Workloads: []Workload{{Kind: KindTask}}}, "name: required"},
		{"no count", Scenario{Name: "x", Workloads: []Workload{{Kind: KindTask}}}, "count: 0 is out of range (valid: ≥ 1)"},
		{"no workloads", Scenario{Name: "x", Count: 1}, "workloads: at least one workload is required"},
		{"no kind", Scenario{Name: "x", Count: 1, Workloads: []Workload{{}}}, "workloads[0].kind: required (valid: taskhost, fanout)"},
		{"bad kind", Scenario{Name: "x", Count: 1, Workloads: []Workload{{Kind: 7}}}, "workloads[0].kind: invalid kind 7 (valid: taskhost, fanout)"},
		{"negative weight", Scenario{Name: "x", Count: 1, Workloads: []Workload{{Kind: KindTask, Weight: -1}}}, "workloads[0].weight: -1 is out of range (valid: a finite number > 0)"},
		{"both specs", Scenario{Name: "x", Count: 1, Workloads: []Workload{{Kind: KindTask}, {Kind: KindTask, Fanout: &FanoutSpec{}}}}, "workloads[1].fanout: not allowed for kind taskhost (use task)"},
		{"weights overflow", Scenario{Name: "x", Count: 1, Workloads: []Workload{{Kind: KindTask, Weight: math.MaxFloat64}, {Kind: KindTask, Weight: math.MaxFloat64}}}, "workloads: the weights add up to more than 1.7976931348623157e+308"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.s.clone()
			err := tc.s.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v, want nil", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if !reflect.DeepEqual(before, &tc.s) {
				t.Errorf("Validate modified the scenario: got %+v, want %+v", &tc.s, before)
			}
		})
	}
}

func mustBuiltin(t testing.TB, name string) *Scenario {
	t.Helper()
	s, err := Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGeneratorDeterministic(t *testing.T) {
	s := mustBuiltin(t, "mixed")
	a, b := s.NewGenerator(), s.NewGenerator()
	kinds := map[Kind]int{}
	var first []Item
	for i := range 400 {
		x, y := a.Next(), b.Next()
		if x.Seq != i {
			t.Fatalf("Seq: got %d, want %d", x.Seq, i)
		}
		if !reflect.DeepEqual(x, y) {
			t.Fatalf("item %d: got %+v and %+v from two generators of one scenario, want equal", i, x, y)
		}
		kinds[x.Kind]++
		first = append(first, x)
	}
	if kinds[KindTask] == 0 || kinds[KindFanout] == 0 {
		t.Fatalf("kinds: got %v, want both taskhost and fanout in 400 items of mixed", kinds)
	}

	// A change of seed changes the sequence.
	s.Seed = 2
	c := s.NewGenerator()
	same := 0
	for i := range 400 {
		x := c.Next()
		if reflect.DeepEqual(x, first[i]) {
			same++
		}
	}
	if same > 10 {
		t.Errorf("seed 2: got %d of 400 items equal to seed 1's, want nearly none", same)
	}
	if a.Text(64, 5) == c.Text(64, 5) {
		t.Errorf("Text: got the same text for seeds 1 and 2, want different")
	}
}

func TestGeneratorCopiesScenario(t *testing.T) {
	s := mustBuiltin(t, "taskhost")
	g := s.NewGenerator()
	s.Workloads[0].Task.ExecutePasses = 77
	if got := g.Next().Task.ExecutePasses; got != 2 {
		t.Errorf("after modifying the scenario: got %d passes, want 2", got)
	}
}

func TestGeneratorPanicsOnInvalid(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("NewGenerator of an invalid scenario: got no panic, want one")
		}
	}()
	(&Scenario{Name: "x"}).NewGenerator()
}

func TestGeneratorTask(t *testing.T) {
	s := mustBuiltin(t, "taskhost")
	g := s.NewGenerator()
	const n = 20_000
	var sum float64
	var env map[string]string
	for i := range n {
		it := g.Next()
		if it.Kind != KindTask || it.Task == nil || it.Fanout != nil || it.Shape != "" || it.Workload != 0 {
			t.Fatalf("item %d: got %+v, want a task of workload 0", i, it)
		}
		task := it.Task
		if task.ConfigBytes < 256 || task.ConfigBytes > 1_500_000 {
			t.Fatalf("item %d: got ConfigBytes %d, want 256..1500000", i, task.ConfigBytes)
		}
		sum += float64(task.ConfigBytes)
		if len(task.Parameters) != 8 {
			t.Fatalf("item %d: got %d parameters, want 8", i, len(task.Parameters))
		}
		total := 0
		for j := range 8 {
			v, ok := task.Parameters["p"+strconv.Itoa(j)]
			if !ok {
				t.Fatalf("item %d: parameter p%d missing from %d parameters", i, j, len(task.Parameters))
			}
			total += len(v)
		}
		if total != task.ConfigBytes {
			t.Fatalf("item %d: parameter values add up to %d bytes, want ConfigBytes %d", i, total, task.ConfigBytes)
		}
		if task.ExecutePasses != 2 {
			t.Fatalf("item %d: got ExecutePasses %d, want 2", i, task.ExecutePasses)
		}
		if i == 0 {
			env = task.Environment
		} else if reflect.ValueOf(task.Environment).UnsafePointer() != reflect.ValueOf(env).UnsafePointer() {
			t.Fatalf("item %d: got a different Environment map, want the same instance on every item", i)
		}
	}
	mean := sum / n
	if math.Abs(mean-46_000)/46_000 > 0.10 {
		t.Errorf("mean ConfigBytes over %d samples: got %.0f, want within 10%% of 46000", n, mean)
	}
	envBytes := 0
	for k, v := range env {
		if !strings.HasPrefix(k, "VAR_") {
			t.Errorf("environment key %q: want prefix VAR_", k)
		}
		envBytes += len(k) + len(v)
	}
	if envBytes < 6000-16 || envBytes > 6000 {
		t.Errorf("environment: got %d bytes in %d entries, want ≈ 6000 (5984..6000)", envBytes, len(env))
	}
}

// TestGeneratorTaskClamp uses a narrow window so that both bounds are hit.
func TestGeneratorTaskClamp(t *testing.T) {
	s := &Scenario{Name: "clamp", Count: 1, Workloads: []Workload{{Kind: KindTask, Task: &TaskSpec{
		ConfigMeanBytes: 46_000, ConfigSigma: 1, ConfigMinBytes: 40_000, ConfigCapBytes: 50_000, Parameters: 3,
	}}}}
	g := s.NewGenerator()
	atMin, atCap := 0, 0
	for range 2000 {
		it := g.Next()
		switch b := it.Task.ConfigBytes; {
		case b < 40_000 || b > 50_000:
			t.Fatalf("got ConfigBytes %d, want 40000..50000", b)
		case b == 40_000:
			atMin++
		case b == 50_000:
			atCap++
		}
		if len(it.Task.Environment) != 0 {
			t.Fatalf("got %d environment entries, want none (EnvironmentBytes 0)", len(it.Task.Environment))
		}
	}
	if atMin == 0 || atCap == 0 {
		t.Errorf("got %d samples at the floor and %d at the cap, want some of each", atMin, atCap)
	}
}

func TestGeneratorFanout(t *testing.T) {
	s := mustBuiltin(t, "fanout")
	shapes := s.Workloads[0].Fanout.Shapes
	g := s.NewGenerator()
	const n = 12_000
	count := map[string]int{}
	for i := range n {
		it := g.Next()
		if it.Kind != KindFanout || it.Fanout == nil || it.Task != nil {
			t.Fatalf("item %d: got %+v, want a fanout", i, it)
		}
		count[it.Shape]++
		j := slices.IndexFunc(shapes, func(sh FanoutShape) bool { return sh.Name == it.Shape })
		if j < 0 {
			t.Fatalf("item %d: got shape %q, want one of the spec's", i, it.Shape)
		}
		sh := shapes[j]
		a := it.Fanout.ActionBytes
		if len(a) != sh.Actions {
			t.Fatalf("item %d (%s): got %d actions, want %d", i, sh.Name, len(a), sh.Actions)
		}
		wantFirst := sh.ActionBytes
		if sh.FirstActionBytes > 0 {
			wantFirst = sh.FirstActionBytes
		}
		if a[0] != wantFirst {
			t.Fatalf("item %d (%s): got first action %d bytes, want %d", i, sh.Name, a[0], wantFirst)
		}
		for k, b := range a[1:] {
			if b != sh.ActionBytes {
				t.Fatalf("item %d (%s): got action %d of %d bytes, want %d", i, sh.Name, k+1, b, sh.ActionBytes)
			}
		}
	}
	if a := count["oversized-first"]; a == 0 {
		t.Fatalf("got no oversized-first items in %d", n)
	}
	for _, sh := range shapes {
		want := sh.Weight / 6 // the weights are 2, 1, 2, 1
		got := float64(count[sh.Name]) / n
		if math.Abs(got-want) > 0.02 {
			t.Errorf("shape %s: got frequency %.3f, want %.3f ± 0.02", sh.Name, got, want)
		}
	}
}

func TestGeneratorWorkloadWeights(t *testing.T) {
	s := mustBuiltin(t, "mixed")
	g := s.NewGenerator()
	const n = 20_000
	fanouts := 0
	for range n {
		if it := g.Next(); it.Kind == KindFanout {
			if it.Workload != 1 {
				t.Fatalf("got fanout from workload %d, want 1", it.Workload)
			}
			fanouts++
		}
	}
	if got := float64(fanouts) / n; math.Abs(got-0.05) > 0.01 {
		t.Errorf("fanout frequency: got %.3f, want 0.05 ± 0.01", got)
	}
}

func TestGeneratorText(t *testing.T) {
	g := mustBuiltin(t, "fanout").NewGenerator()
	big := g.Text(4_500_000, 1)
	if len(big) != 4_500_000 {
		t.Fatalf("Text(4500000): got length %d", len(big))
	}
	if i := strings.IndexFunc(big, func(r rune) bool { return !strings.ContainsRune(textAlphabet, r) }); i >= 0 {
		t.Fatalf("Text: got byte %q at %d, want only %q", big[i], i, textAlphabet)
	}
	if got := g.Text(8<<20, 12345); len(got) != 8<<20 {
		t.Fatalf("Text(8 MiB): got length %d, want %d", len(got), 8<<20)
	}
	if g.Text(100, 7) != g.Text(100, 7) {
		t.Errorf("Text(100, 7): got two different strings, want the same")
	}
	if g.Text(100, 7) == g.Text(100, 8) {
		t.Errorf("Text(100, 7) and Text(100, 8): got the same string, want different")
	}
	if g.Text(0, 3) != "" {
		t.Errorf("Text(0, 3): got %q, want empty", g.Text(0, 3))
	}
	var sink string
	if allocs := testing.AllocsPerRun(100, func() { sink = g.Text(1000, 99) }); allocs != 0 {
		t.Errorf("Text: got %v allocations per call, want 0", allocs)
	}
	_ = sink
	for _, n := range []int{len(g.text) + 1, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Text(%d): got no panic, want one", n)
				}
			}()
			g.Text(n, 0)
		}()
	}
}

// TestGeneratorLargeParameters checks that the text grows to fit a task
// whose single parameter is larger than 8 MiB.
func TestGeneratorLargeParameters(t *testing.T) {
	s := &Scenario{Name: "big", Count: 1, Workloads: []Workload{{Kind: KindTask, Task: &TaskSpec{
		ConfigMeanBytes: 12 << 20, ConfigSigma: 0.01, ConfigMinBytes: 10 << 20, ConfigCapBytes: 12 << 20, Parameters: 1,
	}}}}
	it := s.NewGenerator().Next()
	if got := len(it.Task.Parameters["p0"]); got != it.Task.ConfigBytes || got < 10<<20 {
		t.Errorf("got a %d-byte parameter for ConfigBytes %d, want equal and ≥ 10 MiB", got, it.Task.ConfigBytes)
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
				t.Fatalf("got %T %v, want a *Error", err, err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse returned a scenario that fails Validate: %v", err)
		}
	})
}

func TestFanoutPayload(t *testing.T) {
	sc, err := Builtin("fanout")
	if err != nil {
		t.Fatal(err)
	}
	a, b := sc.NewGenerator(), sc.NewGenerator()
	for range 20 {
		x, y := a.Next(), b.Next()
		for i, n := range x.Fanout.ActionBytes {
			p := x.Fanout.Payload(i)
			if len(p) != n {
				t.Fatalf("item %d action %d: payload of %d bytes, want %d", x.Seq, i, len(p), n)
			}
			if p != y.Fanout.Payload(i) {
				t.Fatalf("item %d action %d: payload differs between two generators of one seed", x.Seq, i)
			}
		}
	}
	hand := &FanoutItem{ActionBytes: []int{3, 1000}}
	if got := len(hand.Payload(1)); got != 1000 {
		t.Errorf("hand-built item: payload of %d bytes, want 1000", got)
	}
	if hand.Payload(0) != hand.Payload(0) {
		t.Error("hand-built item: payload not deterministic")
	}
}

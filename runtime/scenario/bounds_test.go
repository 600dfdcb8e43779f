package scenario

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
)

// padded returns a valid scenario padded with a comment to exactly n bytes.
func padded(n int) []byte {
	const s = "name: x\ncount: 1\nworkloads: [{kind: taskhost}]\n#"
	return []byte(s + strings.Repeat("x", n-len(s)))
}

// wantError fails the test unless err is an *Error whose text is want.
func wantError(t *testing.T, err error, want string) {
	t.Helper()
	var se *Error
	switch {
	case err == nil:
		t.Fatalf("got no error, want %q", want)
	case !errors.As(err, &se):
		t.Fatalf("got %T %v, want an *Error", err, err)
	case err.Error() != want:
		t.Fatalf("got  %q\nwant %q", err.Error(), want)
	}
}

func TestParseFileSize(t *testing.T) {
	if _, err := Parse("in.yaml", padded(maxFileBytes)); err != nil {
		t.Fatalf("a file of exactly %d bytes: got %v, want no error", maxFileBytes, err)
	}
	_, err := Parse("in.yaml", padded(maxFileBytes+1))
	wantError(t, err, "in.yaml: too large: 1048577B (valid: at most 1MiB per scenario file)")
}

func TestLoadFileSize(t *testing.T) {
	dir := t.TempDir()
	t.Run("regular", func(t *testing.T) {
		// A sparse 1 GiB file: Load must refuse it from its size, before
		// reading it.
		path := filepath.Join(dir, "huge.yaml")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(1 << 30); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		_, err = Load(path)
		wantError(t, err, path+": too large: 1GiB (valid: at most 1MiB per scenario file)")
	})
	t.Run("exact", func(t *testing.T) {
		path := filepath.Join(dir, "exact.yaml")
		if err := os.WriteFile(path, padded(maxFileBytes), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err != nil {
			t.Fatalf("got %v, want no error", err)
		}
	})
	t.Run("endless", func(t *testing.T) {
		// A file whose size Stat does not tell: Load must stop reading
		// at the bound.
		if goruntime.GOOS != "linux" {
			t.Skip("needs /dev/zero")
		}
		_, err := Load("/dev/zero")
		wantError(t, err, "/dev/zero: too large: more than 1MiB (valid: at most 1MiB per scenario file)")
	})
}

// aliasBomb returns a scenario of workloads workloads, all but the first an
// alias of the first, whose shapes list has shapes shapes, all but the first
// an alias of the first: without a budget, the decoder walks
// workloads×shapes shapes.
func aliasBomb(workloads, shapes int) []byte {
	var b strings.Builder
	b.WriteString("name: bomb\ncount: 1\nworkloads:\n")
	b.WriteString("  - &w {kind: fanout, fanout: {shapes: [&s {actions: 1, action_bytes: 1}")
	b.WriteString(strings.Repeat(", *s", shapes-1))
	b.WriteString("]}}\n")
	b.WriteString(strings.Repeat("  - *w\n", workloads-1))
	return []byte(b.String())
}

// TestParseAliasBudget: aliases are expanded against a budget of nodes, so
// that the walk is linear in the budget however the aliases nest. The
// error is placed at the outermost alias whose expansion crossed the
// budget (the *w of workloads[19]; the *s of shapes[1997]), and names the
// field being read: 7 nodes before the workloads, 7 per workload before
// its shapes and 5 per shape cross 10,000 at a key of shapes[70] of
// workloads[19] in the first case.
func TestParseAliasBudget(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"bomb within the count limits", aliasBomb(100, 100),
			"in.yaml:23:5: workloads[19].fanout.shapes[70]: more than 10000 YAML nodes with aliases expanded (valid: at most 10000 per scenario file)"},
		// 22 KB; before the budget this took 41 s and 2.2 GB. Its list
		// of workloads is refused by its length before any is walked.
		{"bomb", aliasBomb(2000, 2000), "in.yaml:4:3: workloads: too many: 2000 (valid: at most 100)"},
		{"bomb of shapes", aliasBomb(100, 2000), "in.yaml:4:40: workloads[0].fanout.shapes: too many: 2000 (valid: at most 100)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("in.yaml", tc.data)
			wantError(t, err, tc.want)
		})
	}
}

// TestParseValueLength: a scalar longer than 4 KiB is refused before it is
// resolved or parsed, wherever it is.
func TestParseValueLength(t *testing.T) {
	long := strings.Repeat("x", maxValueBytes+1)
	for _, tc := range []struct {
		name string
		data string
		want string
	}{
		{"name", "name: " + long + "\n", "in.yaml:1:1: name: too long: 4097 bytes (valid: at most 4096 bytes)"},
		{"description", "description: '" + long + "'\n", "in.yaml:1:1: description: too long: 4097 bytes (valid: at most 4096 bytes)"},
		{"key", "name: x\n? " + long + "\n: 1\n", "in.yaml:2:3: too long: 4097 bytes (valid: at most 4096 bytes)"},
		{"for a mapping", "name: x\ncount: 1\nworkloads: [" + long + "]\n", "in.yaml:3:13: workloads[0]: too long: 4097 bytes (valid: at most 4096 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("in.yaml", []byte(tc.data))
			wantError(t, err, tc.want)
		})
	}
	if _, err := Parse("in.yaml", []byte("name: x\ndescription: "+long[1:]+"\ncount: 1\nworkloads: [{kind: taskhost}]\n")); err != nil {
		t.Errorf("a description of exactly %d bytes: got %v, want no error", maxValueBytes, err)
	}
}

// BenchmarkParse compares an alias bomb, refused by the node budget, with a
// built-in scenario: per byte (MB/s), the bomb costs a small multiple of it.
func BenchmarkParse(b *testing.B) {
	mixed, err := os.ReadFile(filepath.Join("builtin", "mixed.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		data []byte
	}{
		{"builtin=mixed", mixed},
		{"alias-bomb=2000x2000", aliasBomb(2000, 2000)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.data)))
			for b.Loop() {
				Parse("in.yaml", bc.data)
			}
		})
	}
}

// TestParseCounts: a list longer than its limit is refused at the list,
// before any of its items is decoded.
func TestParseCounts(t *testing.T) {
	shapes := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("{actions: 1, action_bytes: " + strconv.Itoa(i+1) + "}")
		}
		return "name: x\ncount: 1\nworkloads:\n  - kind: fanout\n    fanout: {shapes: [" + b.String() + "]}\n"
	}
	for _, tc := range []struct {
		name string
		data string
		want string // "" for valid
	}{
		{"workloads at the limit", "name: x\ncount: 1\nworkloads: [" + strings.Repeat("{kind: taskhost}, ", maxWorkloads) + "]\n", ""},
		{"too many workloads", "name: x\ncount: 1\nworkloads: [" + strings.Repeat("{kind: taskhost}, ", maxWorkloads+1) + "]\n",
			"in.yaml:3:12: workloads: too many: 101 (valid: at most 100)"},
		{"too many workloads, block style", "name: x\ncount: 1\nworkloads:\n" + strings.Repeat("  - kind: taskhost\n", maxWorkloads+1),
			"in.yaml:4:3: workloads: too many: 101 (valid: at most 100)"},
		{"too many workloads, invalid ones", "name: x\ncount: 1\nworkloads: [" + strings.Repeat("1, ", 1_000) + "]\n",
			"in.yaml:3:12: workloads: too many: 1000 (valid: at most 100)"},
		{"shapes at the limit", shapes(maxShapes), ""},
		{"too many shapes", shapes(maxShapes + 1),
			"in.yaml:5:22: workloads[0].fanout.shapes: too many: 101 (valid: at most 100)"},
		{"count at the limit", "name: x\ncount: 10000000\nworkloads: [{kind: taskhost}]\n", ""},
		{"count too large", "name: x\ncount: 10000001\nworkloads: [{kind: taskhost}]\n",
			"in.yaml:2:1: count: 10000001 is out of range (valid: 1..10000000)"},
		{"name too long", "name: " + strings.Repeat("n", maxNameBytes+1) + "\ncount: 1\nworkloads: [{kind: taskhost}]\n",
			"in.yaml:1:1: name: too long: 129 bytes (valid: at most 128 bytes)"},
		{"shape name too long", "name: x\ncount: 1\nworkloads: [{kind: fanout, fanout: {shapes: [{name: " + strings.Repeat("n", maxNameBytes+1) + ", actions: 1, action_bytes: 1}]}}]\n",
			"in.yaml:3:47: workloads[0].fanout.shapes[0].name: too long: 129 bytes (valid: at most 128 bytes)"},
		{"actions in total", "name: x\ncount: 1\nworkloads:\n" + strings.Repeat("  - {kind: fanout, fanout: {shapes: [{actions: 100000, action_bytes: 1}]}}\n", 11),
			"in.yaml:14:39: workloads[10].fanout.shapes[0].actions: the actions of all shapes add up to 1100000 (valid: at most 1000000 over all workloads)"},
		{"environment in total", "name: x\ncount: 1\nworkloads:\n" + strings.Repeat("  - {kind: taskhost, task: {environment: 32MiB}}\n", 2) + "  - {kind: taskhost, task: {environment: 1}}\n",
			"in.yaml:6:29: workloads[2].task.environment: the environments of all task workloads add up to 67108865B (valid: at most 64MiB over all workloads)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("in.yaml", []byte(tc.data))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				if err := s.Validate(); err != nil {
					t.Fatalf("Validate: got %v, want no error", err)
				}
				return
			}
			wantError(t, err, tc.want)
		})
	}
}

// TestValidateBounds: the same limits hold for a Scenario built in Go.
func TestValidateBounds(t *testing.T) {
	task := func(n int, env int) []Workload {
		w := make([]Workload, n)
		for i := range w {
			w[i] = Workload{Kind: KindTask, Task: &TaskSpec{EnvironmentBytes: env}}
		}
		return w
	}
	fanout := func(workloads, shapes, actions int) []Workload {
		w := make([]Workload, workloads)
		for i := range w {
			f := &FanoutSpec{}
			for j := range shapes {
				f.Shapes = append(f.Shapes, FanoutShape{Actions: actions, ActionBytes: j + 1})
			}
			w[i] = Workload{Kind: KindFanout, Fanout: f}
		}
		return w
	}
	for _, tc := range []struct {
		name string
		s    Scenario
		want string
	}{
		{"workloads", Scenario{Name: "x", Count: 1, Workloads: task(1_000_000, 0)}, "workloads: too many: 1000000 (valid: at most 100)"},
		{"shapes", Scenario{Name: "x", Count: 1, Workloads: fanout(1, 101, 1)}, "workloads[0].fanout.shapes: too many: 101 (valid: at most 100)"},
		{"count", Scenario{Name: "x", Count: math.MaxInt, Workloads: task(1, 0)}, "count: 9223372036854775807 is out of range (valid: 1..10000000)"},
		{"name", Scenario{Name: strings.Repeat("n", 129), Count: 1, Workloads: task(1, 0)}, "name: too long: 129 bytes (valid: at most 128 bytes)"},
		{"description", Scenario{Name: "x", Description: strings.Repeat("d", 4097), Count: 1, Workloads: task(1, 0)}, "description: too long: 4097 bytes (valid: at most 4096 bytes)"},
		{"actions in total", Scenario{Name: "x", Count: 1, Workloads: fanout(100, 100, 100_000)},
			"workloads[0].fanout.shapes[10].actions: the actions of all shapes add up to 1100000 (valid: at most 1000000 over all workloads)"},
		{"environment in total", Scenario{Name: "x", Count: 1, Workloads: task(100, 64<<20)},
			"workloads[1].task.environment: the environments of all task workloads add up to 128MiB (valid: at most 64MiB over all workloads)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got  %v\nwant %q", err, tc.want)
			}
		})
	}
}

// allocated returns the bytes allocated while f runs.
func allocated(f func()) uint64 {
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	f()
	goruntime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestNewGeneratorMemory: NewGenerator allocates nothing per unit of work,
// and at most a fixed amount for the largest valid scenario: the shared
// text (64 MiB, built in a buffer and copied: 128 MiB), the environments
// (64 MiB of entries whose values share the text: about 94 MiB measured
// for one) and the action sizes (1,000,000 ints: 8 MB), 230 MiB in all,
// 269 MiB under the race detector. Without the limits on the totals, each
// task workload could add its own 94 MiB.
func TestNewGeneratorMemory(t *testing.T) {
	s := mustBuiltin(t, "mixed")
	s.Count = 1
	one := allocated(func() { s.NewGenerator() })
	s.Count = maxCount
	most := allocated(func() { s.NewGenerator() })
	if most > one+1<<20 {
		t.Errorf("count %d: got %d bytes allocated, want about %d as for count 1", maxCount, most, one)
	}

	if testing.Short() {
		t.Skip("the largest scenario allocates about 230 MiB")
	}
	largest := &Scenario{Name: "largest", Count: maxCount}
	largest.Workloads = append(largest.Workloads, Workload{Kind: KindTask, Task: &TaskSpec{
		ConfigMeanBytes: maxConfigBytes, ConfigCapBytes: maxConfigBytes, Parameters: 1, EnvironmentBytes: maxTotalEnvironmentBytes}})
	for len(largest.Workloads) < maxWorkloads {
		w := Workload{Kind: KindTask, Task: &TaskSpec{Parameters: maxParameters, EnvironmentBytes: 0}}
		if len(largest.Workloads) < 11 {
			f := &FanoutSpec{}
			for j := range maxShapes {
				f.Shapes = append(f.Shapes, FanoutShape{Actions: maxTotalActions / 10 / maxShapes, ActionBytes: j + 1})
			}
			w = Workload{Kind: KindFanout, Fanout: f}
		}
		largest.Workloads = append(largest.Workloads, w)
	}
	if err := largest.Validate(); err != nil {
		t.Fatalf("the largest scenario: %v", err)
	}
	const budget = 320 << 20
	got := allocated(func() { largest.NewGenerator() })
	t.Logf("the largest scenario: %d MiB allocated", got>>20)
	if got > budget {
		t.Errorf("the largest scenario: got %d MiB allocated, want at most %d MiB", got>>20, budget>>20)
	}
}

// TestParseNestingAndJSON: nesting is bounded by the node budget (every
// level is a node) and by the YAML parser (10,000 levels), and within
// them refused by the decoder at the first level that is not a
// scenario's; JSON, parsed as YAML, has the same bounds.
func TestParseNestingAndJSON(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	var block strings.Builder // 1,000 levels of block mappings, nearly 1 MiB of indentation
	block.WriteString("name: x\ncount: 1\nworkloads:\n")
	for i := range 1000 {
		block.WriteString(strings.Repeat("  ", i+1) + "a:\n")
	}
	for _, tc := range []struct {
		name string
		data string
		want string
	}{
		{"json nested 9,990 deep", `{"name": "d", "count": 1, "workloads": ` + nest(9_990) + "}",
			"in.json:1:41: workloads[0]: want a mapping, got a list"},
		// Each level a node: the node budget refuses them on the bytes,
		// before the parser's depth limit (10,000).
		{"json nested 10,000 deep", `{"name": "d", "count": 1, "workloads": ` + nest(10_000) + "}",
			"in.json:1:10035: more than 10000 YAML nodes (valid: at most 10000 per scenario file)"},
		{"flow nested 200,000 deep, unclosed", strings.Repeat("[", 200_000),
			"in.json:1:10002: more than 10000 YAML nodes (valid: at most 10000 per scenario file)"},
		{"block nested 1,000 deep", block.String(),
			"in.json:4:3: workloads: want a list, got a mapping"},
		{"json too many workloads", `{"name": "j", "count": 1, "workloads": [` + strings.Repeat(`{"kind": "taskhost"}, `, 100) + `{"kind": "taskhost"}]}`,
			"in.json:1:40: workloads: too many: 101 (valid: at most 100)"},
		{"json escaped string too long", `{"description": "` + strings.Repeat(`\u0041`, maxValueBytes+1) + `"}`,
			"in.json:1:2: description: too long: 4097 bytes (valid: at most 4096 bytes)"},
		{"json duplicate key", `{"name": "a", "name": "b"}`,
			`in.json:1:15: name: duplicate key (first at line 1)`},
		{"json count too large", `{"name": "j", "count": 10000001, "workloads": [{"kind": "taskhost"}]}`,
			"in.json:1:15: count: 10000001 is out of range (valid: 1..10000000)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("in.json", []byte(tc.data))
			wantError(t, err, tc.want)
		})
	}
}

// TestParseSyntaxErrorLine: finding the line of a syntax error re-parses
// prefixes of the file, a search bounded by the bytes it re-parses. A
// 10 KB file of 999 lines nested 9,990 deep with an error on its last
// line took 4.3 s before the bound; now the search gives up and the error
// keeps the line the parser reported. Small files still get their exact
// line (TestParseFileErrors: malformed.yaml).
func TestParseSyntaxErrorLine(t *testing.T) {
	data := strings.Repeat(strings.Repeat("[", 10)+"\n", 999) + "]]]:}\n"
	_, err := Parse("in.yaml", []byte(data))
	wantError(t, err, "in.yaml:998: invalid YAML: did not find expected ',' or ']'")
}

// TestFuzzCorpus keeps the hand-written seeds of FuzzParse meaningful: the
// alias seed parses, and each hostile one is refused by its bound.
func TestFuzzCorpus(t *testing.T) {
	for _, tc := range []struct {
		seed string
		want string // a substring of the error; "" for valid
	}{
		{"alias", ""},
		{"minimal", ""},
		{"json", ""},
		{"alias-bomb", "more than 10000 YAML nodes with aliases expanded"},
		{"alias-bomb-wide", "workloads: too many: 150 (valid: at most 100)"},
		{"deep", "exceeded max depth of 10000"},
		{"deep-json", "more than 10000 YAML nodes (valid: at most 10000 per scenario file)"},
		{"many-workloads", "workloads: too many: 101 (valid: at most 100)"},
		{"long-value", "description: too long: 4097 bytes (valid: at most 4096 bytes)"},
		{"total-actions", "the actions of all shapes add up to 1100000"},
		{"total-environment", "the environments of all task workloads add up to"},
		{"count-too-large", "count: 10000001 is out of range"},
	} {
		t.Run(tc.seed, func(t *testing.T) {
			f, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzParse", tc.seed))
			if err != nil {
				t.Fatal(err)
			}
			head, arg, _ := strings.Cut(string(f), "\n")
			arg = strings.TrimSpace(arg)
			if head != "go test fuzz v1" || !strings.HasPrefix(arg, "[]byte(") || !strings.HasSuffix(arg, ")") {
				t.Fatalf("got %q, want a seed file of one []byte", f)
			}
			data, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(arg, "[]byte("), ")"))
			if err != nil {
				t.Fatal(err)
			}
			s, err := Parse(tc.seed, []byte(data))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			case tc.seed == "alias" && len(s.Workloads) != 2:
				t.Fatalf("got %d workloads, want 2 (one an alias of the other)", len(s.Workloads))
			}
		})
	}
}

package scenario

import (
	"errors"
	"os"
	"path/filepath"
	goruntime "runtime"
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
		// 22 KB; before the budget this took 41 s and 2.2 GB.
		{"bomb", aliasBomb(2000, 2000),
			"in.yaml:4:8059: workloads[0].fanout.shapes[1997]: more than 10000 YAML nodes with aliases expanded (valid: at most 10000 per scenario file)"},
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

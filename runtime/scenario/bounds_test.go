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

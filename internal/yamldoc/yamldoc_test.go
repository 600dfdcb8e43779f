package yamldoc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParse: one document gives its root; nothing (or only comments) gives
// none; a second document and syntax errors are *Errors at their line and
// column, found where yaml.v3 gives no line or the enclosing construct's.
func TestParse(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a: 1\n", ""},
		{"", "empty"},
		{"# only a comment\n", "empty"},
		{"a: 1\n---\nb: 2\n", "2:1: more than one YAML document"},
		{"a: [1, 2\n", "1:5: invalid YAML: did not find expected ',' or ']'"},
		{"a: x\n\tb: 1\n", "2:1: invalid YAML: found a tab character that violates indentation"},
		{"a: 1\nb: *nope\n", "2:4: invalid YAML: unknown anchor 'nope' referenced"},
		{"a: 'open\nb: 1\n", "1:4: invalid YAML: found unexpected end of stream"},
	} {
		root, err := Parse([]byte(tc.in))
		got := ""
		switch {
		case err != nil:
			got = err.Error()
			if errors.Is(err, ErrMoreDocuments) != strings.Contains(got, "more than one") {
				t.Errorf("%q: %v, ErrMoreDocuments %v", tc.in, err, errors.Is(err, ErrMoreDocuments))
			}
		case root == nil:
			got = "empty"
		}
		if got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestReadFile: a file within the bound is read whole; one over it is a
// *TooLargeError with its size, found before reading it.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.yaml")
	if err := os.WriteFile(path, []byte(strings.Repeat("#", 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(path, 10); err != nil || len(data) != 10 {
		t.Errorf("a file at the bound: %d bytes, %v", len(data), err)
	}
	var tl *TooLargeError
	if _, err := ReadFile(path, 9); !errors.As(err, &tl) || tl.Size != 10 {
		t.Errorf("a file over the bound: %v, want a *TooLargeError of 10 bytes", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "none"), 9); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

package yamldoc

import (
	"errors"
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

package scenario

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// treeNodes counts the nodes of the parsed documents of data (documents
// not counted, aliases not expanded), as the parser allocates them.
func treeNodes(t testing.TB, data []byte) (int, bool) {
	var docs []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		doc := new(yaml.Node)
		if err := dec.Decode(doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return 0, false
		}
		docs = append(docs, doc)
	}
	n := 0
	var walk func(*yaml.Node)
	walk = func(x *yaml.Node) {
		if x.Kind != yaml.DocumentNode {
			n++
		}
		for _, c := range x.Content {
			walk(c)
		}
	}
	for _, d := range docs {
		walk(d)
	}
	return n, true
}

// checkPrescan asserts prescan's contract on data the parser accepts: its
// count is at most the parser's nodes (no file within the budget is
// refused), and at least a fraction of them (a file it lets through builds
// a bounded tree).
func checkPrescan(t testing.TB, data []byte) {
	t.Helper()
	nodes, ok := treeNodes(t, data)
	if !ok {
		return
	}
	got, _, _ := prescan(data, math.MaxInt-1)
	if got > nodes {
		t.Fatalf("prescan counted %d nodes, the parser built %d: it must never count more\n%q", got, nodes, data)
	}
	if nodes > 4*got+8 {
		t.Fatalf("prescan counted %d nodes, the parser built %d: more than 4×+8 left uncounted\n%q", got, nodes, data)
	}
}

// tricky is YAML built to mislead a lexer: indicators inside scalars,
// continuation lines, block scalars, comments, quotes with escapes.
var tricky = []string{
	"description: this is\n  - not a list, [nor] {this}\n  *neither* &that\nname: x\n",
	"- a\n  - b\n- c: d\n  e: |\n    - x: [1, 2]\n    y: {a: b}\n",
	"k: 'it''s: [a, b]'\nj: \"q \\\" [x, y]\"\n",
	"k: >-\n  a: b\n  - c\n\nl: 1\n",
	"a: b # c: [d, e]\nf: [g # h,\n  ]\n",
	"? a\n: b\n? - c\n: - d\n",
	"[a, b: c, {d, e}, *x]\n",
	"&x a: *x\n",
	"{? a, ? b : c}\n",
	"x: [1,1,1,1]\ny: -1\nz: a:b\n",
	"--- a\n--- [b]\n...\n%YAML 1.2\n---\nc: d\n",
	"a:\n  b:\n    c:\n      - - - d\n",
	"[a\n b, c\n d]\n",
	"- \"a\n  b\"\n- 'c\n\n  d'\n",
}

// TestPrescanCounts checks the count on every scenario this repository
// has and on YAML built to mislead a lexer.
func TestPrescanCounts(t *testing.T) {
	var files []string
	for _, glob := range []string{"builtin/*.yaml", "testdata/*.yaml", "testdata/*.json", "testdata/fuzz/FuzzParse/*"} {
		m, _ := filepath.Glob(glob)
		files = append(files, m...)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(f, "fuzz") {
			data = fuzzSeed(t, data)
		}
		t.Run(f, func(t *testing.T) { checkPrescan(t, data) })
	}
	for _, data := range tricky {
		checkPrescan(t, []byte(data))
	}
}

// fuzzSeed decodes a seed file of the go test fuzz v1 format holding one
// []byte.
func fuzzSeed(t *testing.T, file []byte) []byte {
	t.Helper()
	_, body, ok := strings.Cut(string(file), "\n")
	body = strings.TrimSpace(body)
	if !ok || !strings.HasPrefix(body, "[]byte(") {
		t.Fatalf("not a fuzz seed: %.40q", file)
	}
	body = strings.TrimSuffix(strings.TrimPrefix(body, "[]byte("), ")")
	s, err := strconv.Unquote(body)
	if err != nil {
		t.Fatalf("seed %.40q: %v", body, err)
	}
	return []byte(s)
}

func FuzzPrescan(f *testing.F) {
	for _, glob := range []string{"builtin/*.yaml", "testdata/*.yaml", "testdata/*.json"} {
		m, _ := filepath.Glob(glob)
		for _, file := range m {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	for _, data := range tricky {
		f.Add([]byte(data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		checkPrescan(t, data)
	})
}

// fill returns head, then unit repeated, then tail, at most max bytes in all.
func fill(head, unit, tail string, max int) []byte {
	n := (max - len(head) - len(tail)) / len(unit)
	return []byte(head + strings.Repeat(unit, n) + tail)
}

// TestParseNodeBudgetMemory: files of 1 MiB (the file bound) made of as
// many nodes as YAML allows are refused by the node budget before the
// parser builds their tree, having allocated a few MB at most. yaml.v3
// builds every node of a file (about 160 bytes each) before the decoder
// can walk it: without the count on the bytes, these files allocated
// 58 to 134 MiB each (117 MiB the first).
func TestParseNodeBudgetMemory(t *testing.T) {
	const budget = 8 << 20
	want := "more than 10000 YAML nodes (valid: at most 10000 per scenario file)"
	for _, tc := range []struct {
		name, at string
		data     []byte
	}{
		{"flow list", "in.yaml:1:20001:", fill("x: [", "1,", "1]\n", maxFileBytes)},
		{"flow mappings", "in.yaml:1:23333:", fill("x: [", "{a: 1},", "{}]\n", maxFileBytes)},
		{"block list", "in.yaml:10001:1:", fill("x:\n", "- 1\n", "", maxFileBytes)},
		{"block mapping", "in.yaml:5001:1:", fill("", "k: 1\n", "", maxFileBytes)},
		{"nested lists", "in.yaml:1:10003:", fill("x: ", "[", "", maxFileBytes)},
		{"aliases", "in.yaml:1:39999:", fill("x: [&a 1, ", "*a, ", "*a]\n", maxFileBytes)},
		{"explicit keys", "in.yaml:1:30002:", fill("{", "? ,", "}\n", maxFileBytes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			got := allocated(func() { _, err = Parse("in.yaml", tc.data) })
			t.Logf("%d bytes: %v; %d KiB allocated", len(tc.data), err, got>>10)
			if got > budget {
				t.Errorf("got %d MiB allocated, want at most %d MiB", got>>20, budget>>20)
			}
			var se *Error
			if !errors.As(err, &se) || !strings.HasPrefix(err.Error(), tc.at) || !strings.HasSuffix(err.Error(), want) {
				t.Errorf("got %v, want %s…: %s", err, tc.at, want)
			}
		})
	}
}

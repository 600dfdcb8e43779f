package architecture

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Sizes to be read (docs/architecture.md, "Sizes"): no production file over
// maxFileLines lines and no function over maxFuncLines lines unless a
// comment beside it says why. It reads production code: generated files and
// _test.go files are left out.
const (
	maxFileLines = 700
	maxFuncLines = 100
)

// sizeExempt are the files other work is rewriting now (path relative to
// the module root; a trailing "/" is a folder): the size rules do not hold
// them until it lands. Each entry says which work, and one that holds no
// file over a bound fails the test: it is to be removed.
var sizeExempt = []string{}

// reasonBeside is what a comment beside a long function says: why it is
// long ("… is long because …").
var reasonBeside = regexp.MustCompile(`(?i)\blong because\b`)

var generatedFile = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// TestSizes: no non-generated production file over 700 lines, no function
// in one over 100 lines without a reason in its doc comment (or a comment
// right above it) that says it is long because of something.
func TestSizes(t *testing.T) {
	root := moduleRoot(t)
	needed := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if generatedFile.Match(src) {
			return nil
		}
		var over []string
		if n := bytes.Count(src, []byte("\n")); n > maxFileLines {
			over = append(over, fmt.Sprintf("%s: %d lines, over %d: split it by job", rel, n, maxFileLines))
		}
		for _, f := range longFuncs(t, rel, src) {
			over = append(over, fmt.Sprintf("%s: %s is %d lines, over %d, and no comment beside it says why (\"… is long because …\"): shorten it or say why", rel, f.name, f.lines, maxFuncLines))
		}
		if i := slices.IndexFunc(sizeExempt, func(e string) bool { return rel == e || strings.HasSuffix(e, "/") && strings.HasPrefix(rel, e) }); i >= 0 {
			needed[sizeExempt[i]] = needed[sizeExempt[i]] || len(over) > 0
			return nil
		}
		for _, o := range over {
			t.Error(o)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range sizeExempt {
		if !needed[e] {
			t.Errorf("sizeExempt holds %s, but it has no file over a bound (or none at all): remove it", e)
		}
	}
}

type longFunc struct {
	name  string
	lines int
}

// longFuncs returns the functions of a Go file (declared, or literals
// outside any declared function) over maxFuncLines lines with no reason
// beside them: in the doc comment, in a comment that ends on the line
// above, or in one on the function's first line.
func longFuncs(t *testing.T, rel string, src []byte) []longFunc {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments)
	if err != nil {
		t.Fatalf("parse %s: %v", rel, err)
	}
	reasoned := func(n ast.Node, doc *ast.CommentGroup) bool {
		if doc != nil && reasonBeside.MatchString(doc.Text()) {
			return true
		}
		line := fset.Position(n.Pos()).Line
		for _, cg := range f.Comments {
			if end := fset.Position(cg.End()).Line; (end == line-1 || end == line) && reasonBeside.MatchString(cg.Text()) {
				return true
			}
		}
		return false
	}
	var long []longFunc
	ast.Inspect(f, func(n ast.Node) bool {
		var name string
		var doc *ast.CommentGroup
		switch x := n.(type) {
		case *ast.FuncDecl:
			if x.Body == nil {
				return false
			}
			name, doc = x.Name.Name, x.Doc
			if x.Recv != nil && len(x.Recv.List) > 0 {
				name = "(" + receiver(x.Recv.List[0].Type) + ")." + name
			}
		case *ast.FuncLit:
			name = fmt.Sprintf("the function literal at line %d", fset.Position(x.Pos()).Line)
		default:
			return true
		}
		lines := fset.Position(n.End()).Line - fset.Position(n.Pos()).Line + 1
		if lines > maxFuncLines && !reasoned(n, doc) {
			long = append(long, longFunc{name, lines})
		}
		return false // a literal inside a function counts with it
	})
	return long
}

// receiver names a method's receiver type: T, *T, T[K].
func receiver(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return "*" + receiver(x.X)
	case *ast.Ident:
		return x.Name
	case *ast.IndexExpr:
		return receiver(x.X) + "[…]"
	case *ast.IndexListExpr:
		return receiver(x.X) + "[…]"
	}
	return "?"
}

// TestLongFuncsReason: a long function is named unless a comment beside it
// says why; a short one never.
func TestLongFuncsReason(t *testing.T) {
	body := strings.Repeat("\tx++\n", maxFuncLines)
	for _, tc := range []struct {
		name, src string
		want      int
	}{
		{"no reason", "package p\n\n// f adds.\nfunc f(x int) {\n" + body + "}\n", 1},
		{"doc reason", "package p\n\n// f adds. It is long because it is a table.\n//\n// More.\nfunc f(x int) {\n" + body + "}\n", 0},
		{"line above", "package p\n\n// f adds.\n// Long because the steps share state.\nfunc f(x int) {\n" + body + "}\n", 0},
		{"reason elsewhere", "package p\n\n// long because\n\n// f adds.\nfunc f(x int) {\n" + body + "}\n", 1},
		{"literal", "package p\n\nvar f = func(x int) {\n" + body + "}\n", 1},
		{"short", "package p\n\nfunc f(x int) {\n" + strings.Repeat("\tx++\n", maxFuncLines-2) + "}\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := longFuncs(t, "p.go", []byte(tc.src)); len(got) != tc.want {
				t.Errorf("got %d long functions %v, want %d", len(got), got, tc.want)
			}
		})
	}
}

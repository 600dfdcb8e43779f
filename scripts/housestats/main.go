// Command housestats prints the structure figures the architecture note
// quotes, for the checkout it runs in: lines of Go per package, production
// and tests apart (generated files left out), the largest file and the
// largest functions, and
// how many non-standard packages `go list -deps` pulls in for the
// libraries. Run it from the module root:
//
//	go run ./scripts/housestats
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

type fn struct {
	name  string
	lines int
}

func main() {
	if _, err := os.Stat("go.mod"); err != nil {
		fmt.Fprintln(os.Stderr, "housestats: run it from the module root (no go.mod here)")
		os.Exit(2)
	}
	pkgLines, testLines := map[string]int{}, map[string]int{}
	var files []fn
	var funcs []fn
	total := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if generated(src) {
			return nil
		}
		n := bytes.Count(src, []byte("\n"))
		if strings.HasSuffix(path, "_test.go") {
			testLines[filepath.Dir(path)] += n
			return nil
		}
		pkgLines[filepath.Dir(path)] += n
		total += n
		files = append(files, fn{path, n})
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Body != nil {
				name := fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) > 0 {
					name = "(" + exprString(fd.Recv.List[0].Type) + ")." + name
				}
				lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				funcs = append(funcs, fn{path + ": " + name, lines})
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "housestats:", err)
		os.Exit(1)
	}
	tests := 0
	for _, n := range testLines {
		tests += n
	}
	fmt.Printf("lines of Go, generated files apart: %d production, %d tests\n", total, tests)
	fmt.Printf("  %-32s %6s %6s  %5s\n", "package", "prod", "test", "prod%")
	pkgs := slices.Concat(slices.Collect(maps.Keys(pkgLines)), slices.Collect(maps.Keys(testLines)))
	slices.Sort(pkgs)
	for _, p := range slices.Compact(pkgs) {
		fmt.Printf("  %-32s %6d %6d  %4.1f%%\n", p, pkgLines[p], testLines[p], 100*float64(pkgLines[p])/float64(total))
	}
	top := func(title string, xs []fn, k int) {
		sort.Slice(xs, func(i, j int) bool { return xs[i].lines > xs[j].lines })
		fmt.Println(title)
		for _, x := range xs[:min(k, len(xs))] {
			fmt.Printf("  %5d  %s\n", x.lines, x.name)
		}
	}
	top("largest files:", files, 3)
	top("largest functions:", funcs, 3)
	for _, lib := range []string{"./ipc", "./chunking", "./telemetry"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", lib).Output()
		if err != nil {
			fmt.Printf("go list -deps %s: %v\n", lib, err)
			continue
		}
		n, sdk := 0, 0
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if line := sc.Text(); line != "" {
				n++
				if strings.Contains(line, "otel/sdk") || strings.Contains(line, "pyroscope") || strings.Contains(line, "prometheus") {
					sdk++
				}
			}
		}
		fmt.Printf("go list -deps %-12s %3d non-standard packages, %2d of them SDK, Prometheus or Pyroscope\n", lib, n, sdk)
	}
}

// generated reports whether src has the line the Go convention marks
// generated files with (go help generate).
func generated(src []byte) bool {
	return generatedLine.Match(src)
}

var generatedLine = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

func exprString(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return "*" + exprString(x.X)
	case *ast.Ident:
		return x.Name
	case *ast.IndexExpr:
		return exprString(x.X)
	}
	return "?"
}

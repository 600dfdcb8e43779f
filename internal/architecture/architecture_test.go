package architecture

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/amdahl-rt/amdahl/"

// allowed lists, for each package of the module (path relative to the
// module), the module packages it may import. Standard library and
// third-party imports are not listed; the dependency rules below cover the
// ones that matter. docs/architecture.md draws the same table.
var allowed = map[string][]string{
	// The foundation: no module imports.
	"internal/features":  nil,
	"internal/bytesize":  nil,
	"internal/outfile":   nil,
	"internal/grpctrace": nil,
	"internal/proccpu":   nil,
	"internal/testcert":  nil,
	"internal/protogen":  nil,
	"ipc/ipcpb":          nil,
	"chunking/dtpb":      nil,
	"telemetry":          nil,

	// Libraries: the OpenTelemetry API through telemetry, never the runtime.
	"ipc":           {"ipc/ipcpb", "telemetry", "internal/bytesize"},
	"ipc/taskproto": {"ipc", "ipc/ipcpb", "telemetry"},
	"chunking":      {"chunking/dtpb", "telemetry", "internal/grpctrace"},

	// Telemetry beside the libraries: the SDK wiring, and attribution.
	"telemetry/otelsetup":    {"telemetry", "internal/outfile"},
	"telemetry/attribution":  {"telemetry"},
	"internal/profiles":      {"telemetry"},
	"internal/telemetrytest": {"telemetry"},

	// The report page: renders attribution's results.
	"internal/htmlreport": {"telemetry", "telemetry/attribution", "internal/outfile"},

	// The host that ties it together.
	"runtime/scenario": {"internal/bytesize"},
	"runtime": {"chunking", "chunking/dtpb", "internal/bytesize", "internal/features", "internal/grpctrace", "internal/proccpu", "ipc", "ipc/ipcpb", "ipc/taskproto",
		"runtime/scenario", "telemetry", "telemetry/attribution", "telemetry/otelsetup"},

	// Programs: anything below them, nothing imports them.
	"cmd/amdahl":                    {"*"},
	"examples/chunked-completions":  {"*"},
	"examples/custom-taskhost":      {"*"},
	"examples/instrument-your-code": {"*"},
	"examples/pipe-buffer":          {"*"},
	"scripts/report1m":              {"*"},
	"scripts/housestats":            {"*"},
	"dashboards":                    {"telemetry", "chunking"},
	"internal/architecture":         nil,
}

// libraries must be embeddable in another program's service: the OTel API
// only, no SDK, exporter, Prometheus client or profiler in their
// dependencies.
var (
	libraries    = []string{"ipc", "ipc/taskproto", "chunking", "telemetry"}
	notInLibrary = regexp.MustCompile(`^(go\.opentelemetry\.io/otel/(sdk|exporters)|github\.com/grafana/pyroscope-go|github\.com/grafana/otel-profiling-go|github\.com/prometheus/)`)
)

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	gobin := filepath.Join(goroot(t), "bin", "go")
	cmd := exec.Command(gobin, append([]string{"list", "-e", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}\t{{join .Deps \" \"}}"}, args...)...)
	cmd.Dir = moduleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	var pkgs []pkg
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		pkgs = append(pkgs, pkg{ImportPath: f[0], Imports: strings.Fields(f[1]), Deps: strings.Fields(f[2])})
	}
	return pkgs
}

func goroot(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("the go command is not on PATH (%v): the import rules need go list", err)
	}
	return strings.TrimSpace(string(out))
}

func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// TestImportRules: every package is in the table, and imports only what
// the table allows it.
func TestImportRules(t *testing.T) {
	for _, p := range goList(t, "./...") {
		rel, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok {
			continue
		}
		may, known := allowed[rel]
		if !known {
			t.Errorf("package %s is in no room: add it to docs/architecture.md and to this test's table", rel)
			continue
		}
		if slices.Contains(may, "*") {
			continue
		}
		for _, imp := range p.Imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if !slices.Contains(may, dep) {
				t.Errorf("%s imports %s, which its room may not (allowed: %v); see docs/architecture.md", rel, dep, may)
			}
		}
	}
}

// TestNothingImportsPrograms: commands, examples and scripts are leaves.
func TestNothingImportsPrograms(t *testing.T) {
	for _, p := range goList(t, "./...") {
		for _, imp := range p.Imports {
			rel, ok := strings.CutPrefix(imp, module)
			if ok && (strings.HasPrefix(rel, "cmd/") || strings.HasPrefix(rel, "examples/") || strings.HasPrefix(rel, "scripts/")) {
				t.Errorf("%s imports the program %s", p.ImportPath, rel)
			}
		}
	}
}

// TestLibrariesPullNoSDK: `go list -deps ./ipc ./chunking ./telemetry`
// lists no OpenTelemetry SDK or exporter, Prometheus client or profiler.
func TestLibrariesPullNoSDK(t *testing.T) {
	var args []string
	for _, l := range libraries {
		if _, err := os.Stat(filepath.Join(moduleRoot(t), l)); err == nil {
			args = append(args, "./"+l)
		}
	}
	for _, p := range goList(t, args...) {
		var bad []string
		for _, d := range p.Deps {
			if notInLibrary.MatchString(d) {
				bad = append(bad, d)
			}
		}
		if len(bad) > 0 {
			sort.Strings(bad)
			t.Errorf("library %s depends on %d SDK/exporter/profiler packages, first %s: a program embedding it must get the OTel API only",
				p.ImportPath, len(bad), bad[0])
		}
	}
}

// TestDocumentNamesEveryPackage: docs/architecture.md names each package of
// the table that exists, so the document and the code cannot drift apart.
func TestDocumentNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(moduleRoot(t), "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range goList(t, "./...") {
		rel, ok := strings.CutPrefix(p.ImportPath, module)
		if ok && !bytes.Contains(doc, []byte("`"+rel+"`")) {
			t.Errorf("docs/architecture.md does not name `%s`", rel)
		}
	}
}

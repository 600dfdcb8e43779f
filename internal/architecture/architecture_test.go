package architecture

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/architecture.md's generated import table from this test's rules")

const module = "github.com/amdahl-rt/amdahl/"

// rooms are the module's rooms, bottom to top: a package imports only
// from its own room or the rooms below it (and, within that, only what
// allowed grants it). docs/architecture.md's room table is this list,
// rendered.
var rooms = []room{
	{"foundation", "what every room may use, importing nothing of the module: `internal/<name>`, and the generated protobuf",
		[]string{"internal/bytesize", "internal/outfile", "internal/yamldoc", "internal/features", "internal/grpctrace", "internal/proccpu", "internal/testcert", "internal/protogen", "ipc/ipcpb", "chunking/dtpb"},
		"one size grammar (`1.5MiB`, `128KiB`, `4089446`); output files created without following a link at their name; one YAML document for a decoder that walks its nodes, its syntax errors at their line and column; feature waves; the W3C trace context across gRPC calls where nothing reads otelgrpc's spans or metrics; the process's CPU time; a self-signed loopback certificate for tests; the protobuf generator's pins; generated protobuf of the wire and of Durable Task"},
	{"telemetry API", "",
		[]string{"telemetry", "telemetry/spans"},
		"phase and direction names, attribute keys, metric names, pprof labels, `Component` on given providers (the otel globals by default), `RecordSpan` for a phase measured elsewhere; the one span model (`spans.Span`, and `spans.Record` for export), its tracer (`spans.TracerProvider`), the per-unit collector (`spans.Collector`) and its OTLP JSON codec (the trace file's reader and writer), with no SDK"},
	{"libraries", "",
		[]string{"ipc", "ipc/taskproto", "chunking"},
		"the wire to a child process (transports, handshake, frames, `Conn`); the task-host protocol over it, and a task host as a small library; chunked Durable Task completions and the reassembling sidecar"},
	{"telemetry beside", "",
		[]string{"telemetry/otelsetup", "telemetry/attribution", "internal/telemetrytest"},
		"the process's SDK wiring (exporters, trace file, `/metrics`, profiles); critical path, q, r, q·r, A/B statistics, the rules that give spans read their rows (`spans.Rules`); in-memory telemetry for tests"},
	{"host", "",
		[]string{"runtime/scenario", "runtime", "runtime/ab"},
		"declarative seeded workloads; task hosts as child processes, scheduling, leasing, settings and feature waves, accounting; A/B experiments in interleaved pairs (`amdahl ab`'s engine)"},
	{"dashboards", "",
		[]string{"dashboards"},
		"Grafana dashboards as Go code and their provisioning"},
	{"report page", "internal/report/: what only the CLI's reports use; imported by programs only",
		[]string{"internal/report/profiles", "internal/report/htmlreport"},
		"the top functions per phase of a run's pprof files and the CPU per row (CPU by the phase label, allocations by the phase entry function on the stack); report.html, one self-contained page (inline CSS, JS, SVG) of an attribution, an A/B comparison, the e2e distribution, the critical-path flame graph and the top functions per phase"},
	{"programs", "nothing imports them",
		[]string{"cmd/amdahl", "examples/chunked-completions", "examples/custom-taskhost", "examples/custom-taskhost/parent", "examples/instrument-your-code", "examples/pipe-buffer", "examples/trace-any-service", "scripts/report1m", "scripts/housestats", "scripts/ratiostats", "internal/architecture"},
		"the CLI; runnable examples; measurement scripts (`ratiostats`: the scripts' statistics, through `telemetry/attribution`); this page's test"},
}

type room struct {
	name     string
	where    string // the room's folder and its rule, when it has one
	packages []string
	owns     string
}

// roomOf returns the index of the room that holds the package rel, or -1.
func roomOf(rel string) int {
	for i, r := range rooms {
		if slices.Contains(r.packages, rel) {
			return i
		}
	}
	return -1
}

// allowed lists, for each package of the module (path relative to the
// module), the module packages it may import. Standard library and
// third-party imports are not listed; the dependency rules below cover the
// ones that matter. docs/architecture.md draws the same table.
var allowed = map[string][]string{
	// The foundation and the telemetry API: no module imports.
	"internal/features":  nil,
	"internal/bytesize":  nil,
	"internal/outfile":   nil,
	"internal/yamldoc":   nil,
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
	// The one span model and its OTLP JSON codec, on the API alone.
	"telemetry/spans": {"telemetry", "internal/outfile"},

	// Telemetry beside the libraries: the SDK wiring, and attribution.
	"telemetry/otelsetup":    {"telemetry", "telemetry/spans", "internal/outfile", "internal/proccpu"},
	"telemetry/attribution":  {"telemetry", "telemetry/spans", "internal/yamldoc"},
	"internal/telemetrytest": {"telemetry"},

	// The report page: the run's profiles, and report.html of attribution's
	// results.
	"internal/report/profiles":   {"telemetry", "internal/proccpu"},
	"internal/report/htmlreport": {"telemetry", "telemetry/attribution", "telemetry/spans", "internal/outfile"},

	// The host that ties it together.
	"runtime/scenario": {"internal/bytesize", "internal/yamldoc"},
	// A/B experiments on the runtime (amdahl ab's engine).
	"runtime/ab": {"runtime", "runtime/scenario", "telemetry/attribution", "telemetry/otelsetup", "internal/outfile"},
	"runtime": {"chunking", "chunking/dtpb", "internal/bytesize", "internal/features", "internal/grpctrace", "internal/proccpu", "ipc", "ipc/ipcpb", "ipc/taskproto",
		"runtime/scenario", "telemetry", "telemetry/attribution", "telemetry/otelsetup", "telemetry/spans"},

	// Programs: anything below them, nothing imports them.
	"cmd/amdahl":                      {"*"},
	"examples/chunked-completions":    {"*"},
	"examples/custom-taskhost":        {"*"},
	"examples/custom-taskhost/parent": {"*"},
	"examples/instrument-your-code":   {"*"},
	"examples/trace-any-service":      {"*"},
	"examples/pipe-buffer":            {"*"},
	"scripts/report1m":                {"*"},
	"scripts/housestats":              {"*"},
	"scripts/ratiostats":              {"*"},
	"internal/architecture":           nil,

	// Dashboards as code: imported by cmd/amdahl (amdahl dashboards) only.
	"dashboards": {"telemetry", "chunking"},
}

// testCompanions may be imported by any package's tests: in-memory
// telemetry, a loopback certificate, the process's CPU time and the
// protobuf generator's pins.
var testCompanions = []string{"internal/telemetrytest", "internal/testcert", "internal/proccpu", "internal/protogen"}

// testAllowed lists what a package's tests may import beyond its own
// rules and the companions, each with its reason: a test that drives the
// package from a room above it, as a user of both would.
var testAllowed = map[string][]string{
	// ipc's tests run a task host over the wire with the task protocol.
	"ipc": {"ipc/taskproto"},
	// The A/B engine's tests run real task hosts over ipc.
	"runtime/ab": {"ipc"},
	// attribution's tests read trace files the SDK wiring writes, and the
	// wiring's tests attribute what they wrote.
	"telemetry/attribution": {"telemetry/otelsetup"},
	"telemetry/otelsetup":   {"telemetry/attribution"},
	// The dashboards' queries are checked against a real run's metrics.
	"dashboards": {"runtime", "runtime/scenario", "telemetry/otelsetup"},
}

// libraries must be embeddable in another program's service: the OTel API
// only, no SDK, exporter, Prometheus client or profiler in their
// dependencies.
var (
	// leanPrograms are programs held to the libraries' rule: a task host of
	// one's own links no SDK unless it asks for export.
	leanPrograms = []string{"examples/custom-taskhost"}
	libraries    = []string{"ipc", "ipc/taskproto", "chunking", "telemetry", "telemetry/spans"}
	notInLibrary = regexp.MustCompile(`^(go\.opentelemetry\.io/otel/(sdk|exporters)|github\.com/grafana/pyroscope-go|github\.com/grafana/otel-profiling-go|github\.com/prometheus/)`)
)

type pkg struct {
	ImportPath  string
	Imports     []string
	Deps        []string
	TestImports []string // the package's _test.go files', in and out of the package
}

func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	gobin := filepath.Join(goroot(t), "bin", "go")
	cmd := exec.Command(gobin, append([]string{"list", "-e", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}\t{{join .Deps \" \"}}\t{{join .TestImports \" \"}} {{join .XTestImports \" \"}}"}, args...)...)
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
		if len(f) != 4 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		pkgs = append(pkgs, pkg{ImportPath: f[0], Imports: strings.Fields(f[1]), Deps: strings.Fields(f[2]), TestImports: strings.Fields(f[3])})
	}
	return pkgs
}

// goroot finds the toolchain that runs this test: the go command on PATH,
// else the one this test binary was built with. Without one the test
// fails: the rules are checked with go list, and a skip would pass them.
func goroot(t *testing.T) string {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(goruntime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(gobin, "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("no go command (on PATH or at %s): %v; the import rules are checked with go list", gobin, err)
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
// the table allows it; its tests, only that, itself, the test companions
// and what testAllowed grants it.
func TestImportRules(t *testing.T) {
	for _, p := range goList(t, "./...") {
		rel, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok {
			continue
		}
		may, known := allowed[rel]
		if !known {
			t.Errorf("package %s is in no room: add it to this test's table, then go test ./internal/architecture -update", rel)
			continue
		}
		if slices.Contains(may, "*") {
			continue
		}
		for _, dep := range moduleImports(p.Imports) {
			if !slices.Contains(may, dep) {
				t.Errorf("%s imports %s, which its room may not (allowed: %v); see docs/architecture.md", rel, dep, may)
			}
		}
		for _, dep := range moduleImports(p.TestImports) {
			if dep != rel && !slices.Contains(may, dep) && !slices.Contains(testCompanions, dep) && !slices.Contains(testAllowed[rel], dep) {
				t.Errorf("%s's tests import %s, which neither its room, the test companions %v nor testAllowed grant it", rel, dep, testCompanions)
			}
		}
	}
}

// TestRooms: every package of the table is in exactly one room, and every
// package under internal/ is a foundation, a test companion or in the
// report page's folder (internal/report/); a package and its tests import
// only from their own room or the rooms below it (tests also the test
// companions).
func TestRooms(t *testing.T) {
	seen := map[string]string{}
	for _, r := range rooms {
		for _, p := range r.packages {
			if prev, dup := seen[p]; dup {
				t.Errorf("%s is in two rooms, %s and %s", p, prev, r.name)
			}
			seen[p] = r.name
			if _, ok := allowed[p]; !ok {
				t.Errorf("%s is in the room %s but not in the import table", p, r.name)
			}
		}
	}
	for p := range allowed {
		if _, ok := seen[p]; !ok {
			t.Errorf("%s is in the import table but in no room", p)
		}
	}
	foundation, report := rooms[0], rooms[len(rooms)-2]
	for _, p := range foundation.packages {
		if len(allowed[p]) > 0 {
			t.Errorf("%s is a foundation, which imports nothing of the module, but the table grants it %v", p, allowed[p])
		}
	}
	for p := range allowed {
		inReport := slices.Contains(report.packages, p)
		if strings.HasPrefix(p, "internal/report/") != inReport {
			t.Errorf("%s: the report page's room is the folder internal/report/, and only it", p)
		}
		if strings.HasPrefix(p, "internal/") && !strings.HasPrefix(p, "internal/report/") && !slices.Contains(foundation.packages, p) &&
			!slices.Contains(testCompanions, p) && p != "internal/architecture" {
			t.Errorf("%s is under internal/ but neither a foundation, a test companion nor in internal/report/", p)
		}
	}
	for _, p := range goList(t, "./...") {
		rel, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok || roomOf(rel) < 0 {
			continue // TestImportRules names it
		}
		for _, dep := range moduleImports(p.Imports) {
			if roomOf(dep) > roomOf(rel) {
				t.Errorf("%s (room %s) imports %s from the room %s above it", rel, rooms[roomOf(rel)].name, dep, rooms[roomOf(dep)].name)
			}
		}
		for _, dep := range moduleImports(p.TestImports) {
			if roomOf(dep) > roomOf(rel) && !slices.Contains(testCompanions, dep) {
				t.Errorf("%s's tests (room %s) import %s from the room %s above it", rel, rooms[roomOf(rel)].name, dep, rooms[roomOf(dep)].name)
			}
		}
	}
}

// moduleImports returns the module packages among imports, relative to the
// module.
func moduleImports(imports []string) []string {
	var rel []string
	for _, imp := range imports {
		if dep, ok := strings.CutPrefix(imp, module); ok {
			rel = append(rel, dep)
		}
	}
	return rel
}

// The generated parts of docs/architecture.md, each between its two
// markers: the rooms, and this test's rules package by package.
type section struct {
	what, begin, end string
	render           func() string
}

var sections = []section{
	{"room table", "<!-- rooms: generated by go test ./internal/architecture -update; do not edit -->", "<!-- end of rooms -->", roomsTable},
	{"import table", "<!-- import rules: generated by go test ./internal/architecture -update; do not edit -->", "<!-- end of import rules -->", rulesTable},
}

// roomsTable renders rooms as a Markdown table, bottom room first.
func roomsTable() string {
	var b strings.Builder
	b.WriteString("| room | packages | owns |\n|---|---|---|\n")
	for _, r := range rooms {
		q := make([]string, len(r.packages))
		for i, p := range r.packages {
			q[i] = "`" + p + "`"
		}
		name := r.name
		if r.where != "" {
			name += " (" + r.where + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, strings.Join(q, ", "), r.owns)
	}
	return b.String()
}

// rulesTable renders allowed and testAllowed as a Markdown table.
func rulesTable() string {
	var b strings.Builder
	b.WriteString("| package | may import (module packages) | its tests also |\n|---|---|---|\n")
	names := make([]string, 0, len(allowed))
	for n := range allowed {
		names = append(names, n)
	}
	sort.Strings(names)
	code := func(list []string) string {
		switch {
		case len(list) == 0:
			return "nothing"
		case slices.Contains(list, "*"):
			return "anything"
		}
		q := make([]string, len(list))
		for i, l := range list {
			q[i] = "`" + l + "`"
		}
		return strings.Join(q, ", ")
	}
	for _, n := range names {
		also := "–"
		if extra := testAllowed[n]; len(extra) > 0 {
			also = code(extra)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", n, code(allowed[n]), also)
	}
	return b.String()
}

// TestDocumentTableIsTheRules: docs/architecture.md's room and import
// tables are this test's, rendered; -update rewrites them.
func TestDocumentTableIsTheRules(t *testing.T) {
	path := filepath.Join(moduleRoot(t), "docs", "architecture.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	changed := false
	for _, sec := range sections {
		i, j := bytes.Index(doc, []byte(sec.begin)), bytes.Index(doc, []byte(sec.end))
		if i < 0 || j < i {
			t.Errorf("docs/architecture.md has no generated %s (between %q and %q)", sec.what, sec.begin, sec.end)
			continue
		}
		want := sec.begin + "\n\n" + sec.render() + "\n"
		if string(doc[i:j]) == want {
			continue
		}
		if !*update {
			t.Errorf("docs/architecture.md's %s differs from this test's: run go test ./internal/architecture -update", sec.what)
			continue
		}
		doc = append(append(append([]byte{}, doc[:i]...), want...), doc[j:]...)
		changed = true
	}
	if changed {
		if err := os.WriteFile(path, doc, 0o644); err != nil {
			t.Fatal(err)
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
// (and of the lean programs: a task host of one's own) lists no
// OpenTelemetry SDK or exporter, Prometheus client or profiler.
// sdkAsSink are packages that may link the SDK through otelsetup but name
// no SDK type themselves: the SDK is one source and sink of spans among
// others (telemetry/otelsetup adapts it), not a path through the unit.
var sdkAsSink = []string{"runtime", "telemetry/attribution"}

// TestSDKIsOneSink: the runtime and the attribution import no package of
// the OTel SDK or its exporters directly.
func TestSDKIsOneSink(t *testing.T) {
	var args []string
	for _, l := range sdkAsSink {
		args = append(args, "./"+l)
	}
	for _, p := range goList(t, args...) {
		for _, imp := range p.Imports {
			if notInLibrary.MatchString(imp) {
				t.Errorf("%s imports %s: take spans through telemetry/spans (Source, Exporter, Sampler) and let otelsetup adapt the SDK", p.ImportPath, imp)
			}
		}
	}
}

func TestLibrariesPullNoSDK(t *testing.T) {
	var args []string
	for _, l := range append(slices.Clone(libraries), leanPrograms...) {
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

// TestNestedModulesTidy: every nested module (the Collector's) builds
// against this module through a replace directive, so a dependency the
// root module takes can leave the nested go.mod behind ("updates to
// go.mod needed"), which only the nested module's own tests would show.
// go mod tidy -diff in each says so here, with the diff.
func TestNestedModulesTidy(t *testing.T) {
	root := moduleRoot(t)
	gobin := filepath.Join(goroot(t), "bin", "go")
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" || filepath.Dir(path) == root {
			return nil
		}
		cmd := exec.Command(gobin, "mod", "tidy", "-diff")
		cmd.Dir = filepath.Dir(path)
		if out, err := cmd.CombinedOutput(); err != nil {
			rel, _ := filepath.Rel(root, cmd.Dir)
			t.Errorf("the nested module %s is not tidy (cd %s && go mod tidy): %v\n%s", rel, rel, err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

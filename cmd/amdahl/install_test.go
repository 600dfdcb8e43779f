package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/amdahl-rt/amdahl/telemetry"
)

const modulePath = "github.com/amdahl-rt/amdahl"

// TestGoModInstallable: `go install github.com/amdahl-rt/amdahl/cmd/amdahl@latest`
// refuses a module whose go.mod has replace or exclude directives, and
// needs the module path to be the one the command is installed by.
func TestGoModInstallable(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sawModule := false
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "module":
			sawModule = true
			if len(fields) != 2 || fields[1] != modulePath {
				t.Errorf("go.mod:%d: %q, want module %s", n, sc.Text(), modulePath)
			}
		case "replace", "exclude":
			t.Errorf("go.mod:%d: a %s directive: go install %s/cmd/amdahl@latest refuses it", n, fields[0], modulePath)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !sawModule {
		t.Error("go.mod has no module line")
	}
}

// TestBuiltVersion builds the command as go install does (module mode,
// no test binary) and checks that version reads the build information.
func TestBuiltVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no go tool: %v", err)
		}
		t.Skip("no go tool on PATH")
	}
	bin := filepath.Join(t.TempDir(), "amdahl")
	build := func(flags ...string) ([]byte, error) {
		c := exec.Command(goTool, append(append([]string{"build"}, flags...), "-o", bin, ".")...)
		c.Env = append(os.Environ(), "GO111MODULE=on")
		return c.CombinedOutput()
	}
	if out, err := build(); err != nil {
		// A checkout git will not read (another owner) fails VCS
		// stamping; the build information is still there without it.
		if !strings.Contains(string(out), "error obtaining VCS status") {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		t.Logf("go build: no VCS stamp (%s); building with -buildvcs=false", strings.TrimSpace(string(out)))
		if out, err := build("-buildvcs=false"); err != nil {
			t.Fatalf("go build -buildvcs=false: %v\n%s", err, out)
		}
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("version --json: %v", err)
	}
	var v versionJSON
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("version --json: %v\n%s", err, out)
	}
	if v.ModulePath != modulePath || v.Version != telemetry.Version || v.GoVersion != goruntime.Version() || v.ModuleVersion == "" {
		t.Errorf("version --json: %+v, want module %s, version %s, %s and a module version", v, modulePath, telemetry.Version, goruntime.Version())
	}
	text, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	flag, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(text) != string(flag) || !strings.HasPrefix(string(text), "amdahl "+telemetry.Version) || !strings.Contains(string(text), v.GoVersion) {
		t.Errorf("version %q, --version %q: want the same line, with %s and %s", text, flag, telemetry.Version, v.GoVersion)
	}
	// Built in a git clone (not with -buildvcs=false), the revision is
	// there and in the line.
	if v.VCSRevision != "" && !strings.Contains(string(text), v.VCSRevision[:12]) {
		t.Errorf("version %q lacks the revision %.12s", text, v.VCSRevision)
	}
	t.Logf("built: %s", strings.TrimSpace(string(text)))
}

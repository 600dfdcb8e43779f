// Package collector_test checks the layout of the nested collector module.
package collector_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRootModuleHasNoCollector: the root module's packages do not depend
// on the Collector; it lives in this nested module only.
func TestRootModuleHasNoCollector(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./... in the root module: %v", err)
	}
	if !strings.Contains(string(out), "github.com/amdahl-rt/amdahl/telemetry/attribution\n") {
		t.Fatalf("go list -deps ./... does not list the root module's packages:\n%s", out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "go.opentelemetry.io/collector") || strings.HasPrefix(p, "github.com/open-telemetry/opentelemetry-collector-contrib") {
			t.Errorf("the root module depends on %s", p)
		}
	}
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// manifest is the part of an OCB manifest the test reads.
type manifest struct {
	Receivers  []module `yaml:"receivers"`
	Processors []module `yaml:"processors"`
	Exporters  []module `yaml:"exporters"`
	Connectors []module `yaml:"connectors"`
	Extensions []module `yaml:"extensions"`
	Providers  []module `yaml:"providers"`
}

type module struct {
	GoMod string `yaml:"gomod"`
}

// listed is what `amdahl-collector components` prints.
type listed struct {
	Receivers  []listedComponent `yaml:"receivers"`
	Processors []listedComponent `yaml:"processors"`
	Exporters  []listedComponent `yaml:"exporters"`
	Connectors []listedComponent `yaml:"connectors"`
	Extensions []listedComponent `yaml:"extensions"`
	Providers  []listedComponent `yaml:"providers"`
}

type listedComponent struct {
	Name   string `yaml:"name"`
	Module string `yaml:"module"`
	Scheme string `yaml:"scheme"`
}

// run runs the distribution's command in process with args and returns
// what it printed.
func run(t *testing.T, args ...string) string {
	t.Helper()
	cmd := newCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("amdahl-collector %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// TestComponentsMatchManifest: `amdahl-collector components` lists
// exactly the modules of builder-config.yaml, kind by kind, at the same
// versions.
func TestComponentsMatchManifest(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "builder-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	var l listed
	out := run(t, "components")
	if err := yaml.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("components output: %v\n%s", err, out)
	}
	kinds := []struct {
		name string
		want []module
		got  []listedComponent
	}{
		{"receivers", m.Receivers, l.Receivers},
		{"processors", m.Processors, l.Processors},
		{"exporters", m.Exporters, l.Exporters},
		{"connectors", m.Connectors, l.Connectors},
		{"extensions", m.Extensions, l.Extensions},
		{"providers", m.Providers, l.Providers},
	}
	for _, k := range kinds {
		var want, got []string
		for _, w := range k.want {
			want = append(want, w.GoMod)
		}
		for _, g := range k.got {
			if !slices.Contains(got, g.Module) {
				got = append(got, g.Module)
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: the distribution lists %q, the manifest %q", k.name, got, want)
		}
	}
	// The versions the manifest names are the ones this module builds with.
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info")
	}
	built := map[string]string{}
	for _, d := range bi.Deps {
		built[d.Path] = d.Version
	}
	for _, k := range kinds {
		for _, w := range k.want {
			path, version, _ := strings.Cut(w.GoMod, " ")
			if path == "github.com/amdahl-rt/amdahl/collector" {
				continue // this module
			}
			if built[path] != version {
				t.Errorf("%s: the manifest names %s, go.mod gives %q", k.name, w.GoMod, built[path])
			}
		}
	}
	if len(l.Connectors) != 1 || l.Connectors[0].Name != "amdahl" {
		t.Errorf("connectors %+v, want amdahl", l.Connectors)
	}
}

// TestDefaultConfigValid: the embedded default configuration validates
// with the distribution's factories, and is what runs without --config.
func TestDefaultConfigValid(t *testing.T) {
	run(t, "validate")
	for _, want := range []string{"127.0.0.1:4317", "127.0.0.1:4318", "127.0.0.1:8889", "amdahl:"} {
		if !strings.Contains(defaultConfig, want) {
			t.Errorf("default config lacks %q", want)
		}
	}
}

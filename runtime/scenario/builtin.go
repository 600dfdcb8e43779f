package scenario

import (
	"embed"
	"fmt"
	"slices"
	"strings"
)

//go:embed builtin/*.yaml
var builtinFiles embed.FS

// builtinNames lists the built-ins in listing order; each is
// builtin/<name>.yaml.
var builtinNames = []string{"taskhost", "fanout", "mixed", "orchestrated"}

// Builtins returns the built-in scenarios (taskhost, fanout, mixed,
// orchestrated), freshly parsed on every call, so callers may modify them.
func Builtins() []*Scenario {
	out := make([]*Scenario, 0, len(builtinNames))
	for _, name := range builtinNames {
		s, err := Builtin(name)
		if err != nil {
			panic(err) // the embedded files are tested; this is a build defect
		}
		out = append(out, s)
	}
	return out
}

// Builtin returns a fresh copy of the named built-in scenario. An
// unknown name is an error listing the valid names.
func Builtin(name string) (*Scenario, error) {
	if !slices.Contains(builtinNames, name) {
		return nil, fmt.Errorf("unknown scenario %q (valid: %s)", name, strings.Join(builtinNames, ", "))
	}
	file := "builtin/" + name + ".yaml"
	data, err := builtinFiles.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("built-in scenario %s: %w", name, err)
	}
	return Parse(file, data)
}

package main

import (
	"encoding/json"
	"io"
	"runtime/debug"

	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// The JSON of every command follows one schema (docs/json.md): one object
// with schema_version (runtime.SchemaVersion) at the top, snake_case keys,
// durations in nanoseconds under keys ending in _ns (or seconds, _s),
// sizes in bytes under keys ending in _bytes.

// writeJSON writes v as indented JSON and a newline: the one encoding of
// every --json output, summary.json and ab.json.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// marshalJSON is writeJSON's encoding as bytes, for the files of --out.
func marshalJSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// versionJSON is amdahl version --json.
type versionJSON struct {
	SchemaVersion int    `json:"schema_version"`
	Version       string `json:"version"`
	ModulePath    string `json:"module_path"`
	ModuleVersion string `json:"module_version"`
	VCS           string `json:"vcs"`
	VCSRevision   string `json:"vcs_revision"`
	VCSTime       string `json:"vcs_time"`
	VCSModified   bool   `json:"vcs_modified"`
	GoVersion     string `json:"go_version"`
}

// versionInfo reads the version of amdahl and what the build recorded
// about the module and its VCS revision ("go run" and test binaries record
// no revision; -buildvcs=false neither).
func versionInfo() versionJSON {
	v := versionJSON{SchemaVersion: runtime.SchemaVersion, Version: telemetry.Version}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.ModulePath, v.ModuleVersion, v.GoVersion = bi.Main.Path, bi.Main.Version, bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs":
			v.VCS = s.Value
		case "vcs.revision":
			v.VCSRevision = s.Value
		case "vcs.time":
			v.VCSTime = s.Value
		case "vcs.modified":
			v.VCSModified = s.Value == "true"
		}
	}
	return v
}

// scenariosJSON is amdahl scenarios --json.
type scenariosJSON struct {
	SchemaVersion int            `json:"schema_version"`
	Scenarios     []scenarioJSON `json:"scenarios"`
}

// validateJSON is amdahl scenarios validate --json.
type validateJSON struct {
	SchemaVersion int                `json:"schema_version"`
	Files         []validateFileJSON `json:"files"`
}

type validateFileJSON struct {
	File     string        `json:"file"`
	Valid    bool          `json:"valid"`
	Error    string        `json:"error,omitempty"`
	Scenario *scenarioJSON `json:"scenario,omitempty"`
}

// scenarioJSON is a scenario with every default filled in: the names of
// the scenario file format, sizes in bytes under _bytes.
type scenarioJSON struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Seed        uint64         `json:"seed"`
	Count       int            `json:"count"`
	Workloads   []workloadJSON `json:"workloads"`
}

type workloadJSON struct {
	Kind   string      `json:"kind"`
	Weight float64     `json:"weight"`
	Task   *taskJSON   `json:"task,omitempty"`
	Fanout *fanoutJSON `json:"fanout,omitempty"`
}

// taskJSON and shapeJSON are scenario.TaskSpec and FanoutShape with JSON names.
type taskJSON struct {
	ConfigMeanBytes  int     `json:"config_mean_bytes"`
	ConfigSigma      float64 `json:"config_sigma"`
	ConfigCapBytes   int     `json:"config_cap_bytes"`
	ConfigMinBytes   int     `json:"config_min_bytes"`
	EnvironmentBytes int     `json:"environment_bytes"`
	Parameters       int     `json:"parameters"`
	ExecutePasses    int     `json:"execute_passes"`
}

type fanoutJSON struct {
	Shapes []shapeJSON `json:"shapes"`
}

type shapeJSON struct {
	Name             string  `json:"name"`
	Weight           float64 `json:"weight"`
	Actions          int     `json:"actions"`
	ActionBytes      int     `json:"action_bytes"`
	FirstActionBytes int     `json:"first_action_bytes"`
}

func scenarioView(s *scenario.Scenario) scenarioJSON {
	v := scenarioJSON{Name: s.Name, Description: s.Description, Seed: s.Seed, Count: s.Count, Workloads: []workloadJSON{}}
	for _, w := range s.Workloads {
		wj := workloadJSON{Kind: w.Kind.String(), Weight: w.Weight}
		switch w.Kind {
		case scenario.KindTask:
			t := scenario.DefaultTaskSpec()
			if w.Task != nil {
				t = *w.Task
			}
			tj := taskJSON(t)
			wj.Task = &tj
		case scenario.KindFanout:
			wj.Fanout = &fanoutJSON{Shapes: []shapeJSON{}}
			if w.Fanout != nil {
				for _, sh := range w.Fanout.Shapes {
					wj.Fanout.Shapes = append(wj.Fanout.Shapes, shapeJSON(sh))
				}
			}
		}
		v.Workloads = append(v.Workloads, wj)
	}
	return v
}

// dashboardsJSON is amdahl dashboards --json.
type dashboardsJSON struct {
	SchemaVersion int      `json:"schema_version"`
	Files         []string `json:"files"`
}

// sidecarJSON is what amdahl sidecar --json prints once it has stopped.
type sidecarJSON struct {
	SchemaVersion      int    `json:"schema_version"`
	Address            string `json:"address"`
	CompletionsApplied int64  `json:"completions_applied"`
}

// Package scenario defines amdahl's workloads: declarative, seeded
// scenarios of units of work, and the Generator that draws those units.
//
// A scenario is read from YAML or JSON with Parse or Load, or taken from the
// built-ins with Builtin and Builtins (taskhost, fanout, mixed,
// orchestrated; their files, in builtin/, double as commented examples).
// A file names its workloads, each a kind with a weight and the shape of
// its units:
//
//	name: tiny                # default: the file's base name
//	description: …
//	seed: 7                   # default 0
//	count: 100                # units of work in a run (1..10,000,000)
//	workloads:
//	  - kind: taskhost        # taskhost | fanout
//	    weight: 3             # default 1
//	    orchestration: false  # task units: run inside a Durable Task orchestration (default false)
//	    task:                 # every key optional; see TaskSpec
//	      config_mean: 46KB
//	      config_sigma: 1.0
//	      config_cap: 1.5MB
//	      config_min: 256B
//	      environment: 6KB
//	      parameters: 8
//	      execute_passes: 2
//	  - kind: fanout
//	    fanout:
//	      shapes:             # see FanoutShape
//	        - {name: big-first, weight: 0.5, actions: 3, action_bytes: 1KiB, first_action_bytes: 4.5MB}
//
// Sizes are whole numbers of bytes or numbers with a unit (B, KB, MB, GB,
// KiB, MiB, GiB: 46KB, 1.5MiB), the grammar of every size in amdahl
// (package internal/bytesize). Every error is an *Error naming the file,
// line, column and field path ("workloads[1].task.config_mean"); unknown
// and duplicate keys are errors too.
//
// Every bound is checked before what it bounds is allocated, so a hostile
// file costs a bounded parse; the error names the field and the limit.
// JSON is parsed as YAML and has the same bounds. The limits are fixed:
//
//	file size                         1 MiB, checked before parsing (Load reads at most 1 MiB + 1 byte)
//	YAML nodes                        10,000 in the file, counted on its bytes before the parser builds them;
//	                                  10,000 aliases expanded (anchors and aliases are followed, each use counted)
//	nesting                           10,000 levels (the YAML parser's); the decoder walks only a scenario's 6
//	a value (scalar)                  4 KiB: a string, number, size or key
//	name, a shape's name              128 bytes (they label every unit's telemetry)
//	count                             1..10,000,000 (as the scenario.count setting)
//	workloads                         1..100
//	shapes of a fanout workload       1..100
//	actions of a shape                1..100,000; 1,000,000 over all shapes of all workloads
//	action_bytes, first_action_bytes  8 MiB
//	parameters                        1..10,000
//	config_cap                        64 MiB
//	environment                       64 MiB over all task workloads
//	execute_passes                    0..1,000
//
// Validate enforces the same limits on a Scenario built in Go, so the
// memory a Generator takes up front is bounded too (see NewGenerator).
//
// The same scenario, seed included, always yields the same Items, parameter
// values and payloads included. Package runtime runs them (runtime.Run,
// Runtime.Submit); this package does not depend on it.
package scenario

import "fmt"

// Kind is the kind of a unit of work.
type Kind uint8

const (
	// KindTask is a task dispatched to an out-of-process task host (ipc),
	// whose result is completed to the sidecar.
	KindTask Kind = iota + 1
	// KindFanout is an orchestration completion of many actions, chunked to
	// the sidecar.
	KindFanout
)

// String returns "taskhost" or "fanout", the names ParseKind accepts.
func (k Kind) String() string {
	switch k {
	case KindTask:
		return "taskhost"
	case KindFanout:
		return "fanout"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind parses a kind name as written in scenario files. The error
// lists the valid names.
func ParseKind(s string) (Kind, error) {
	switch s {
	case "taskhost":
		return KindTask, nil
	case "fanout":
		return KindFanout, nil
	}
	return 0, fmt.Errorf("invalid kind %q (valid: taskhost, fanout)", s)
}

// Scenario is a declarative, seeded workload: Count units of work, each drawn
// from one of Workloads by weight. The same Scenario (Seed included) always
// generates the same units of work; see NewGenerator.
//
// Scenarios are usually loaded with Load, Parse or Builtin, which fill in
// every default and validate. A Scenario built in Go may leave fields zero
// where the field's doc says so; Validate and NewGenerator treat those as
// the defaults.
type Scenario struct {
	Name        string // at most 128 bytes
	Description string // at most 4 KiB
	Seed        uint64
	Count       int        // units of work in a run (1..10,000,000); generated one at a time
	Workloads   []Workload // 1..100; chosen per unit by weight
}

// Workload is one kind of unit of work within a Scenario.
type Workload struct {
	Kind   Kind
	Weight float64 // > 0; 0 means the default, 1
	// Orchestration, for task workloads, runs each task inside a Durable
	// Task orchestration: the runtime starts an instance on the sidecar,
	// leases its work item, and completes it with the task's outputs
	// (three gRPC calls around the task). False (the default) sends the
	// task straight to a host, as MSBuild's TaskHost pattern does: no
	// sidecar on the unit's path. Fanout units are orchestration
	// completions whatever this says; a scenario file may write only true
	// for them.
	Orchestration bool
	Task          *TaskSpec   // set iff Kind == KindTask; nil with KindTask means DefaultTaskSpec
	Fanout        *FanoutSpec // set iff Kind == KindFanout
}

// TaskSpec is the seed-001 (MSBuild TaskHost) shape: configuration packets
// of log-normal size, an environment repeated on every packet, and real CPU
// work in the host.
//
// A zero ConfigMeanBytes, ConfigSigma, ConfigCapBytes, ConfigMinBytes or
// Parameters means that field's default. EnvironmentBytes and ExecutePasses
// are taken as given, since 0 is a valid value for both; start from
// DefaultTaskSpec to get their defaults.
type TaskSpec struct {
	ConfigMeanBytes  int     // mean of the log-normal configuration size (default 46 KB = 46000)
	ConfigSigma      float64 // σ of the underlying normal (default 1.0; 0 < σ ≤ 3)
	ConfigCapBytes   int     // samples are capped here (default 1.5 MB = 1500000; ≤ 64 MiB)
	ConfigMinBytes   int     // samples are floored here (default 256)
	EnvironmentBytes int     // size of the environment map sent with every packet (default 6 KB = 6000; ≤ 64 MiB over all task workloads); the same map contents on every item
	Parameters       int     // number of parameters the configuration is split across (default 8; 1..10000)
	ExecutePasses    int     // CPU work in the host: passes of SHA-256 over the parameter bytes (default 2; 0..1000)
}

// Task defaults, from seed 001 (see builtin/taskhost.yaml).
const (
	defaultConfigMeanBytes  = 46_000
	defaultConfigSigma      = 1.0
	defaultConfigCapBytes   = 1_500_000
	defaultConfigMinBytes   = 256
	defaultEnvironmentBytes = 6_000
	defaultParameters       = 8
	defaultExecutePasses    = 2
)

// maxFileBytes is the largest scenario file Parse and Load accept. A
// scenario is a few hundred bytes; the limit keeps a hostile file from
// costing more than a bounded parse.
const maxFileBytes = 1 << 20

// Limits of the decoder, beyond those of Validate. maxNodes bounds the
// nodes of the file (prescan, on its bytes) and the walk over the YAML
// tree, aliases expanded: a scenario has tens of nodes.
// maxValueBytes bounds every scalar (a description is the longest).
const (
	maxNodes      = 10_000
	maxValueBytes = 4 << 10
)

// Limits enforced by Validate. They keep a scenario file from asking for more
// memory or CPU than a benchmark run can sensibly give it.
const (
	maxConfigBytes      = 64 << 20
	maxSigma            = 3.0
	maxEnvironmentBytes = 64 << 20
	maxParameters       = 10_000
	maxExecutePasses    = 1_000
	maxActions          = 100_000
	maxActionBytes      = 8 << 20

	maxCount                 = 10_000_000
	maxWorkloads             = 100
	maxShapes                = 100
	maxNameBytes             = 128
	maxTotalActions          = 1_000_000
	maxTotalEnvironmentBytes = 64 << 20
)

// DefaultTaskSpec returns a TaskSpec with every field set to its default.
func DefaultTaskSpec() TaskSpec {
	return TaskSpec{
		ConfigMeanBytes:  defaultConfigMeanBytes,
		ConfigSigma:      defaultConfigSigma,
		ConfigCapBytes:   defaultConfigCapBytes,
		ConfigMinBytes:   defaultConfigMinBytes,
		EnvironmentBytes: defaultEnvironmentBytes,
		Parameters:       defaultParameters,
		ExecutePasses:    defaultExecutePasses,
	}
}

// FanoutSpec is the seed-000 (Durable Task chunking) shape: each unit of work
// is one of Shapes, chosen by weight.
type FanoutSpec struct{ Shapes []FanoutShape } // 1..100 shapes

// FanoutShape is one orchestration completion: Actions actions of
// ActionBytes each.
type FanoutShape struct {
	Name             string  // unique within the spec, at most 128 bytes, e.g. "64x128KiB"; "" means "<Actions>x<bytesize.Format(ActionBytes)>"
	Weight           float64 // > 0; 0 means the default, 1
	Actions          int     // 1..100000; at most 1,000,000 over all shapes of all workloads
	ActionBytes      int     // payload bytes of each action (1..8 MiB)
	FirstActionBytes int     // if > 0, the first action's payload size instead (the first-action-oversized case); 0 = same as the others (≤ 8 MiB)
}

package runtime

import (
	"time"

	"github.com/amdahl-rt/amdahl/internal/proccpu"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// SchemaVersion is the version of amdahl's JSON schema, shared by
// summary.json, ab.json and every command's --json output (docs/json.md).
// 2: Causal's added_ns_per_work became added_per_work_ns, and every
// output carries it.
const SchemaVersion = 2

// Summary is the account of a run.
type Summary struct {
	// SchemaVersion of this JSON (summary.json, amdahl run --json).
	SchemaVersion int               `json:"schema_version"`
	Scenario      string            `json:"scenario"`
	Variant       string            `json:"variant"`
	Settings      map[string]string `json:"settings"`
	// Submitted counts the units that ended: OK + Failed + Cancelled. Once
	// Wait or Close has returned it equals the units Submit accepted.
	Submitted int `json:"submitted"`
	OK        int `json:"ok"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	// Failures counts failed and cancelled units by reason class;
	// Examples holds the first full reason of each class.
	Failures map[string]int    `json:"failures,omitempty"`
	Examples map[string]string `json:"failure_examples,omitempty"`
	Elapsed  time.Duration     `json:"elapsed_ns"`
	// Elapsed runs from New to the end of the last unit; Throughput is
	// units of work ended per second of it.
	Throughput float64 `json:"throughput_per_s"`
	// E2EMean, E2EP50 and E2EP99 are of every ended unit's end-to-end
	// time (Result.E2E), measured by the runtime itself: they are there
	// with telemetry off (OTEL_SDK_DISABLED=true) too, unlike
	// Attribution's, which cover the sampled units. P50 and P99 within
	// 0.05 % (attribution.FineSketch).
	E2EMean time.Duration `json:"e2e_mean_ns"`
	E2EP50  time.Duration `json:"e2e_p50_ns"`
	E2EP99  time.Duration `json:"e2e_p99_ns"`
	// HostsSpawned and HostsReplaced count task host processes started,
	// and discarded because they died, hung or were killed.
	HostsSpawned  int64 `json:"hosts_spawned"`
	HostsReplaced int64 `json:"hosts_replaced"`
	// SidecarApplied counts completions the in-process sidecar applied
	// (-1 with an external sidecar).
	SidecarApplied int64 `json:"sidecar_applied"`
	// ProcessCPU is the CPU time (user and system) this process used from
	// New to the summary: the runtime's own cost (its workers, ipc,
	// accounting and telemetry, and whatever else the process runs), the
	// task hosts' not included. Over Submitted it is the runtime's CPU per
	// unit, which telemetry-tax.sh compares with telemetry on and off.
	ProcessCPU time.Duration `json:"process_cpu_ns"`
	// Attribution: e2e quantiles and, per phase and direction, mean, p99,
	// critical-path share q and naive share, over the units whose traces
	// were sampled.
	Attribution attribution.Report `json:"attribution"`
	// Sampler describes the sampler that chose those units
	// (Config.Telemetry.Sampler: OTEL_TRACES_SAMPLER, whether the runtime's own
	// tracer or the SDK's applied it), "" when Config.Telemetry.Sampler was nil
	// (every unit's trace sampled, or a caller's TracerProvider decided).
	Sampler string `json:"sampler,omitempty"`
	// SidecarUntraced: units completed to the sidecar, and their calls
	// carried no trace context (Config.Telemetry.Propagator: OTEL_PROPAGATORS
	// without tracecontext), so the sidecar's phases are in no unit's
	// trace: the in-process sidecar's rows (chunking.deserialize,
	// chunking.execute) are not in Attribution.
	SidecarUntraced bool `json:"sidecar_untraced,omitempty"`
	// Kinds is the same attribution per kind of unit ("taskhost",
	// "fanout"), when the run had more than one.
	Kinds map[string]attribution.Report `json:"kinds,omitempty"`
	// E2EByKind is E2EMean, E2EP50 and E2EP99 per kind of unit, measured
	// by the runtime as they are (with telemetry off too), when the run
	// had more than one kind: in a mixed run the task units' median and
	// the fanout units' apart.
	E2EByKind map[string]KindE2E `json:"e2e_by_kind,omitempty"`
}

// KindE2E is the end-to-end times of one kind of unit in a Summary.
type KindE2E struct {
	Units   int           `json:"units"` // ended units of the kind
	E2EMean time.Duration `json:"e2e_mean_ns"`
	E2EP50  time.Duration `json:"e2e_p50_ns"`
	E2EP99  time.Duration `json:"e2e_p99_ns"`
}

// Summary returns the account of the units ended so far; their
// attribution is complete once Wait or Close has returned (units are
// accounted on a goroutine of the runtime's, soon after they end).
func (r *Runtime) Summary() Summary {
	r.mu.Lock()
	lastEnd := r.lastEnd
	byKind := map[scenario.Kind]*attribution.Accumulator{}
	for k, a := range r.byKind {
		byKind[k] = a
	}
	s := Summary{
		SchemaVersion: SchemaVersion,
		Scenario:      r.cfg.Scenario, Variant: r.set.Variant, Settings: r.set.Map(),
		OK: r.counts[telemetry.OK], Failed: r.counts[telemetry.Failed], Cancelled: r.counts[telemetry.Cancelled],
		Failures: map[string]int{}, Examples: map[string]string{},
	}
	if r.cfg.Telemetry.Sampler != nil {
		s.Sampler = r.cfg.Telemetry.Sampler.Description()
	}
	for k, v := range r.classes {
		s.Failures[k] = v
	}
	for k, v := range r.examples {
		s.Examples[k] = v
	}
	s.E2EMean, s.E2EP50, s.E2EP99 = r.e2e.mean(), r.e2e.sketch.Quantile(0.50), r.e2e.sketch.Quantile(0.99)
	if len(r.e2eByKind) > 1 {
		s.E2EByKind = map[string]KindE2E{}
		for k, e := range r.e2eByKind {
			s.E2EByKind[k.String()] = KindE2E{Units: e.n, E2EMean: e.mean(), E2EP50: e.sketch.Quantile(0.50), E2EP99: e.sketch.Quantile(0.99)}
		}
	}
	r.mu.Unlock()
	s.Submitted = s.OK + s.Failed + s.Cancelled
	s.Elapsed = time.Since(r.start)
	if s.Submitted > 0 && !lastEnd.IsZero() {
		s.Elapsed = lastEnd.Sub(r.start)
	}
	if s.Elapsed > 0 {
		s.Throughput = float64(s.Submitted) / s.Elapsed.Seconds()
	}
	s.HostsSpawned, s.HostsReplaced = r.pool.spawned.Load(), r.pool.replaced.Load()
	if cpu := proccpu.Used(); cpu > r.startCPU {
		s.ProcessCPU = cpu - r.startCPU
	}
	s.SidecarUntraced = r.untraced && r.completed.Load()
	s.SidecarApplied = -1
	if r.side != nil {
		s.SidecarApplied = r.side.Applied() - r.appliedBase
	}
	var all attribution.Accumulator
	all.Merge(&r.acc)
	for _, a := range byKind {
		all.Merge(a)
	}
	s.Attribution = all.Report(r.cfg.ByPhase)
	if len(byKind) > 1 {
		s.Kinds = map[string]attribution.Report{}
		for k, a := range byKind {
			s.Kinds[k.String()] = a.Report(r.cfg.ByPhase)
		}
	}
	return s
}

// e2eStats sums the end-to-end times the runtime measures itself (with or
// without telemetry) in bounded memory. Guarded by Runtime.mu.
type e2eStats struct {
	n      int
	total  time.Duration
	sketch attribution.FineSketch
}

func (s *e2eStats) add(d time.Duration) {
	s.n++
	s.total += d
	s.sketch.Add(d)
}

func (s *e2eStats) mean() time.Duration {
	if s.n == 0 {
		return 0
	}
	return s.total / time.Duration(s.n)
}

// Package runtime is the host that ties amdahl together: a node pool of
// out-of-process task hosts reached over ipc, a bounded submission queue
// and workers, Durable Task leasing and chunked completions to a sidecar,
// runs of declarative scenarios (package runtime/scenario), one registry of
// settings, and the accounting that turns every unit of work into an
// attribution (critical path, q, naive share).
//
// # Units of work
//
// A unit of work is one scenario.Item: a task (scenario.KindTask) or an
// orchestration completion of many actions (scenario.KindFanout). Submit
// starts its root span amdahl.work and its dispatch span at once, so queue
// wait counts. Then:
//
//   - lease (fanout units, and task units whose workload asks for an
//     orchestration: scenario.Workload.Orchestration, as the orchestrated
//     scenario's does; the taskhost and mixed scenarios' go straight to a
//     host, as MSBuild dispatches, with no sidecar call on their path):
//     StartInstance on the sidecar, then wait for the instance's
//     work item on the GetWorkItems stream (its completion token; bounded
//     by Config.Sidecar.LeaseTimeout). Instance ids start with a random run id;
//     a work item of another run sharing the sidecar is abandoned back to
//     it, and one of this run that no unit waits for any more is
//     completed as failed;
//   - task units: acquire a task host (spawning one if fewer than
//     runtime.nodes exist); dispatch ends here. The round trip runs under
//     the span runtime.host: ipc.serialize and ipc.send of the request,
//     the host's receive, deserialize, execute, reply serialize and
//     reply send (synthesised from the timings the host returns in its
//     reply, the send's stamped into the reply as it is written, as
//     taskhost.<phase> spans with amdahl.remote=true; the task-host
//     protocol, package ipc/taskproto, encodes the timings in the host
//     and decodes and places them in the parent), and ipc.receive and
//     ipc.deserialize of the reply (a host that exports records its
//     phases itself: see "Task host telemetry"). An orchestrated task's
//     orchestration is then completed with the task's outputs (a
//     CompleteOrchestration action);
//   - every sidecar call (StartInstance, each chunk, an abandon) has the
//     retry budget sidecar.retry.* (Config.Sidecar.Retry's fields, when set, beat
//     them). The sidecar connection has a circuit breaker
//     (sidecar.breaker.*): once the sidecar has answered nothing but
//     Unavailable for open_after, every unit that needs it fails at once,
//     class ClassSidecarUnavailable ("sidecar unavailable"), calls
//     waiting out a backoff stop, and a probe every probe_interval closes
//     it when the sidecar answers again (the work-item stream then
//     reconnects at once), so a run outlives its sidecar instead of each
//     unit spending the retry budget;
//   - fanout units: dispatch ends at the lease; the actions are completed
//     through the chunking sender (chunking.serialize, chunking.send with
//     one chunking.send.chunk per chunk) and, with the in-process
//     sidecar, reassembled and applied there (chunking.deserialize,
//     chunking.execute) in the same trace.
//
// The in-process sidecar is a real gRPC server on a loopback TCP port:
// every lease and completion, chunked fanouts included, goes through
// gRPC's framing, flow control and the chunk-size limits as it would to
// an external sidecar (seed 000 is about that path), not a function call.
//
// Every submitted unit ends in exactly one Result: ok, failed (with a
// reason and a short class: "task host died", "task timed out", "task
// failed", "oversized action", "sidecar", "completion", "task host
// start") or cancelled. An orchestrated task whose host died or timed out
// still completes its orchestration as failed, so the sidecar's lease is
// not left behind. Summary reconciles submitted = ok + failed + cancelled.
//
// # Accounting
//
// The runtime keeps the spans of units in flight as compact spans.Spans,
// in a spans.Collector. When nothing but the attribution reads the spans
// (no exporter, trace file, recorder, span processor, sampler of the
// program's or Pyroscope: Config.Telemetry.TracerProvider nil, which
// UseTelemetry leaves so when otelsetup's SpansOnlyForAttribution says
// so), the runtime traces with spans.TracerProvider, which samples each
// unit's root with OTEL_TRACES_SAMPLER's sampler (Config.Telemetry.Sampler; every
// unit without one) and whose spans are those compact records from
// the start, with real W3C span contexts, and go to the accounting when
// they end: no SDK span is made, and the phase API hands it its phases
// whole (telemetry.PhaseTracer: no span options, and no span at all for a
// leaf such as ipc's serialize and send), and the gRPC calls to the
// sidecar make no spans of their own (otelgrpc gets a no-op tracer, which
// still propagates the caller's trace context; a gRPC span, no phase,
// only passed its time to the phase around it). When the trace file is the one
// other reader (amdahl run --out: Config.Telemetry.Export, which UseTelemetry
// sets from otelsetup's TraceFileOnly), the same tracer also keeps what
// the SDK would export of each span and hands the file's writer the span
// whole at its end, still without SDK spans. With that tracer and no
// exporter, every unit sampled and no metric or phase delay of the
// runtime's own Component (amdahl run's default), a task unit sent
// straight to a host keeps its spans as times in the unit itself
// (record.go, a spans.Holder the tracer hands the spans under it): its
// root, dispatch, queue and host span written there by the runtime,
// ipc's four leaves and the host's phases in fixed slots, anything else
// whole beside them; it is handed off once, and its spans are made by
// the accounting, in the same shape every time. With an SDK
// TracerProvider the collector takes the same compact copy of each span
// from Config.Telemetry.Spans (otelsetup.SDKSource). When a unit's root ends it is handed to the runtime's
// accounting goroutine (through a bounded queue: a unit is never dropped;
// the goroutine, woken by the first unit after it idled, lets units
// gather for 50 ms, or until 512 wait, and takes them all at once; Wait
// and Close return once every ended unit is accounted), which computes
// the unit's critical path (package attribution: the
// last-finishing-child walk, with the host's spans placed causally
// within the round trip that contains them) and records
// amdahl.phase.critical per row (amdahl.component is the row's component:
// ipc, taskhost, chunking, runtime), beside amdahl.work.duration, when a
// metric reader reads them (otelsetup records metrics only then). The
// Summary's attribution comes from bounded accumulators (per-row sums and
// log-bucket quantile sketches, within 1 % for a row's p99 and 0.05 % for
// the end-to-end p50 and p99): nothing is
// kept per unit once it has ended. Units whose root span was not sampled
// are counted but not attributed.
//
// # Task hosts
//
// A task host is a child process: by default this executable with the
// argument "taskhost" (amdahl's hidden command), or any program that calls
// taskproto.ServeHost (Config.Hosts.Argv), so users can host task functions
// of their own; ServeHost here is the same with amdahl's own telemetry. Hosts are spawned lazily, reused, handed out least recently used
// first, one task at a time each. A host whose process exits or whose
// connection breaks fails its running task with ErrHostDied (the message
// names how the process ended) and is replaced on the next acquisition; a
// task outliving runtime.task_timeout fails with ErrTaskTimeout and its
// host is killed and replaced. Children get SIGKILL if the parent dies
// (Pdeathsig). Their stdout and stderr go through pipes of the runtime's
// own, drained line by line into the log, never inherited. Close stops
// every host gracefully: a Shutdown packet, a wait, SIGTERM, a wait,
// SIGKILL.
//
// # Task host telemetry
//
// A host's environment is the parent's, less what names the parent
// itself, plus the host settings and Config.Hosts.Env (which come last and
// win): OTEL_SERVICE_NAME, PYROSCOPE_APPLICATION_NAME, AMDAHL_TRACE_FILE,
// AMDAHL_METRICS_ADDR, AMDAHL_PROFILE_DIR and the metric exporter
// variables are not passed, and OTEL_METRICS_EXPORTER=none is (the parent
// records the hosts' phase durations from their reply timings, so hosts
// export no metrics), and GOMAXPROCS and GOGC are runtime.host_procs's
// and runtime.host_gogc's (set last, they beat the parent's and
// Config.Hosts.Env's; host_gogc=inherit sets none). Everything else, in particular the OTLP endpoint,
// protocol, headers and TLS variables, OTEL_TRACES_EXPORTER,
// OTEL_TRACES_SAMPLER, OTEL_RESOURCE_ATTRIBUTES and
// PYROSCOPE_SERVER_ADDRESS, is inherited; amdahl run adds its
// --otlp-endpoint, --otlp-protocol and --pyroscope to Config.Hosts.Env.
//
// ServeHost sets up telemetry (package telemetry/otelsetup) from that
// environment, as service.name amdahl-taskhost (HostServiceName) unless
// OTEL_SERVICE_NAME is set for hosts (Config.Hosts.Env). When it has
// something to export (a trace exporter, Pyroscope, or
// AMDAHL_HOST_PROFILE_DIR) the host records its own spans
// taskhost.receive, .deserialize, .execute, .serialize and .send, children
// of the parent's runtime.host span through the W3C trace context every
// task configuration carries, and profiles its CPU with the phase labels,
// so the execute phase appears in the flame graphs. With nothing to
// export it records nothing. AMDAHL_HOST_PROFILE_DIR
// (Config.Hosts.ProfileDir, amdahl run --out) beats PYROSCOPE_SERVER_ADDRESS
// in a host: one CPU profiler.
//
// The parent still synthesises the host's phases from the reply timings
// (attribution needs them in its own process), but a backend gets each
// span once: otelsetup's OTLP exporter leaves out spans with
// amdahl.remote=true (otelsetup.WithRemoteSpans turns them back on, for
// hosts that do not call ServeHost). The in-memory recorder, the trace
// file and attribution keep them. When nothing but attribution would get
// them (no trace file, recorder or span processor, remote spans not
// exported: Config.Telemetry.AccountRemoteDirectly, which UseTelemetry sets), the
// parent makes no SDK span of them at all: it hands the phases to the
// attribution directly, and still records their amdahl.phase.duration.
// A host that is killed (task timeout, SIGKILL after the grace) loses the
// spans it had not exported yet.
//
// # Shutdown and cancellation
//
// Close stops accepting work, reports queued units as cancelled, gives
// running units Config.DrainTimeout to finish and cancels them after it,
// then stops hosts, the work-item stream, the sidecar connection, the
// in-process sidecar and telemetry. Run does the same when its context
// ends (Ctrl-C in amdahl run) and returns the Summary of what ran.
//
// # An external sidecar
//
// With Config.Sidecar.Addr, New checks that the sidecar answers before it
// starts anything: one cheap call (abandoning the empty completion token)
// on a connection of its own, waiting for the connection up to
// Config.Sidecar.ConnectTimeout (default 5 s). An unreachable address, a
// TLS handshake that fails or a refused token fails New with an error
// naming the address (and the bound), rather than every unit later.
// Config.Sidecar.Credentials secure the connection (nil: plaintext);
// Config.Sidecar.Token is sent as "authorization: Bearer <token>" on every
// call, over TLS, or over plaintext only to a loopback address (a loopback
// IP literal or "localhost"): New refuses to send it in clear elsewhere.
// chunking/doc.go, "Sidecar security", describes the server's side.
//
// # Settings
//
// One name per knob, as `--set name=value` or the environment variable
// AMDAHL_<NAME> (dots and name upper-cased); precedence --set > environment
// > default (the feature-wave default for ipc.buffer and
// chunking.algorithm). An unknown name or an invalid value is a
// *SettingError listing the valid names or values.
//
// The feature waves come from AMDAHL_DISABLE_FEATURES_FROM_VERSION,
// resolved once per process (DefaultSettings, ResolveSettings). A value
// that is not a version is an error naming the variable and the valid
// waves (amdahl run and amdahl ab exit 2); a version outside the known
// waves is clamped to the nearest and the clamping logged as a warning.
//
//	ipc.buffer               AMDAHL_IPC_BUFFER              size, 1B..1GiB (default 1MiB; 128KiB with wave 0.1 off)
//	ipc.send                 AMDAHL_IPC_SEND                sync | async
//	ipc.transport            AMDAHL_IPC_TRANSPORT           socketpair | pipe
//	ipc.delta                AMDAHL_IPC_DELTA               on | off
//	chunking.algorithm       AMDAHL_CHUNKING_ALGORITHM      cached | legacy (legacy with wave 0.1 off)
//	chunking.accounting      AMDAHL_CHUNKING_ACCOUNTING     wire | payload
//	chunking.max_chunk_bytes AMDAHL_CHUNKING_MAX_CHUNK_BYTES size, 1048576..4089446 (default 4089446)
//	chunking.large_payloads  AMDAHL_CHUNKING_LARGE_PAYLOADS off | on
//	runtime.nodes            AMDAHL_RUNTIME_NODES           task hosts at most (default: CPUs, 2..8)
//	runtime.concurrency      AMDAHL_RUNTIME_CONCURRENCY     units in flight (default 2 × nodes)
//	runtime.queue            AMDAHL_RUNTIME_QUEUE           queued units before Submit blocks (default 2 × nodes)
//	runtime.task_timeout     AMDAHL_RUNTIME_TASK_TIMEOUT    Go duration, 0 = none (default 2m)
//	runtime.completion_bytes AMDAHL_RUNTIME_COMPLETION_BYTES payload bytes of fanout completions in flight (default 64MiB)
//	runtime.host_procs       AMDAHL_RUNTIME_HOST_PROCS      GOMAXPROCS of each task host: auto (the parent's over nodes, ≥ 1) | 1..1024
//	runtime.host_gogc        AMDAHL_RUNTIME_HOST_GOGC       GOGC of each task host: 10..10000 (default 400) | inherit
//	scenario.count           AMDAHL_SCENARIO_COUNT          units in a run (default: the scenario's)
//	scenario.seed            AMDAHL_SCENARIO_SEED           generator seed (default: the scenario's)
//	variant                  AMDAHL_VARIANT                 label on every span and metric (default baseline)
//	perturb.ipc.serialize    AMDAHL_PERTURB_IPC_SERIALIZE   causal experiment: sleep this much longer in every phase (0 = off)
//	perturb.ipc.send         AMDAHL_PERTURB_IPC_SEND        (same, for ipc.send)
//	perturb.taskhost.execute AMDAHL_PERTURB_TASKHOST_EXECUTE (same, in the task host's execute)
//	sidecar.retry.attempts   AMDAHL_SIDECAR_RETRY_ATTEMPTS  attempts of each sidecar call, 1..100 (default 10)
//	sidecar.retry.base_delay AMDAHL_SIDECAR_RETRY_BASE_DELAY first backoff, doubling (default 200ms)
//	sidecar.retry.max_delay  AMDAHL_SIDECAR_RETRY_MAX_DELAY longest backoff (default 15s)
//	sidecar.breaker.open_after AMDAHL_SIDECAR_BREAKER_OPEN_AFTER circuit breaker: unreachable this long opens it (default 3s; 0 = off)
//	sidecar.breaker.probe_interval AMDAHL_SIDECAR_BREAKER_PROBE_INTERVAL probes while open (default 500ms)
//
// A size, in settings as in scenario files, is a whole number of bytes or a
// number with unit B, KB, MB, GB (powers of 1000), KiB, MiB or GiB (powers
// of 1024): 262144, 46KB, 1.5MiB (package internal/bytesize).
//
// The ipc settings and perturb.taskhost.execute are passed, resolved, to
// each task host in its environment (taskproto.EnvBuffer, EnvSend,
// EnvDelta, EnvExecuteDelay) and read back there by taskproto.ServeHost,
// so both ends of a connection agree; package ipc itself reads no
// environment and takes them as options.
//
// Run's Config.MaxInFlight makes a closed loop: a unit is submitted only
// while fewer than that many are in flight, so none waits in the queue
// (amdahl ab runs this way, with runtime.nodes units in flight). SettingsHelp prints the same table with
// descriptions.
//
// # Scenarios
//
// Scenarios live in package runtime/scenario: declarative and seeded, from
// YAML or JSON (scenario.Parse, scenario.Load; errors name the file, line,
// column and field) or built in (scenario.Builtins: taskhost, fanout, mixed,
// orchestrated; their YAML is in runtime/scenario/builtin and doubles as an
// example). A scenario.Generator yields the same Items for the same seed;
// Run submits a scenario's Count of them.
package runtime

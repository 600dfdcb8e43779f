// Package telemetry sets up amdahl's traces, metrics and profiles and owns the
// phase API every component instruments itself with. This comment is the
// telemetry contract: dashboards, attribution and users build on the names
// below, and tests assert them.
//
// # Setup
//
// Setup(ctx, opts...) builds the providers: defaults, then the environment,
// then options (an option beats its variable), then validation. An invalid
// setting is a *ConfigError naming the setting; nothing is left running.
// Shutdown(ctx) is idempotent and flushes everything (pyroscope: Flush(true)
// before Stop).
//
// Environment variables (all optional):
//
//	OTEL_SERVICE_NAME                 service.name (default "amdahl"; WithServiceName wins)
//	OTEL_RESOURCE_ATTRIBUTES          extra resource attributes (SDK)
//	OTEL_EXPORTER_OTLP_ENDPOINT       OTLP endpoint URL, e.g. http://127.0.0.1:4317; unset = no OTLP
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT  overrides the above for traces
//	OTEL_EXPORTER_OTLP_PROTOCOL       grpc (default) | http/protobuf
//	OTEL_EXPORTER_OTLP_TRACES_PROTOCOL  overrides the above for traces
//	OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION, _CERTIFICATE, …  read by the OTel exporter itself
//	OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG, OTEL_BSP_*  read by the SDK itself
//	AMDAHL_TRACE_FILE                 write spans as OTLP JSON lines to this file (WithTraceFile)
//	AMDAHL_METRICS_ADDR               serve Prometheus /metrics on host:port (WithMetricsAddr)
//	AMDAHL_PROFILE_DIR                write cpu.pprof and heap.pprof here (WithProfileDir)
//	AMDAHL_PHASE_LABELS               true (default) | false: pprof phase labels
//	PYROSCOPE_SERVER_ADDRESS          push profiles to Pyroscope at this URL (WithPyroscope)
//	PYROSCOPE_APPLICATION_NAME        pyroscope application (default: service.name)
//
// AMDAHL_PROFILE_DIR and PYROSCOPE_SERVER_ADDRESS are exclusive: the process
// has one CPU profiler. Trace processing: OTLP and the trace file use the
// batch span processor; WithRecorder keeps spans in memory (the embedded
// default of amdahl run); WithSpanProcessor adds any other.
//
// # Spans
//
//	amdahl.work            root of one unit of work, submission to result delivered
//	<component>.<phase>    one phase: ipc.send, chunking.serialize, taskhost.execute, runtime.dispatch, …
//	runtime.dispatch       phase dispatch: orchestration lease, task host acquisition (spawn included), and the queue wait below
//	runtime.queue          phase queue, child of runtime.dispatch: the unit's wait for a worker (Submit blocked on a full queue, then queued)
//	runtime.host           not a phase: a task's round trip on its host (amdahl.host.id, amdahl.host.pid)
//	taskhost.<phase>       the host's receive, deserialize, execute and serialize (reply), synthesised by
//	                       the parent from the timings in the host's reply (amdahl.remote=true)
//	chunking.send.chunk    not a phase: one CompleteOrchestratorTask call (with its retries)
//
// A span that is not a phase (gRPC client and server spans, runtime.host,
// chunking.send.chunk) counts toward the critical path of its nearest phase
// ancestor, or "other" when it has none.
//
// All spans are SpanKindInternal. Span attributes:
//
//	amdahl.component   component name (phase spans)
//	amdahl.phase       queue | dispatch | serialize | send | receive | deserialize | execute
//	amdahl.direction   request | reply (absent for dispatch and execute)
//	amdahl.transport   ipc | chunking
//	amdahl.scenario    scenario name
//	amdahl.variant     baseline | candidate (A/B), canary | stable (AMDAHL_VARIANT)
//	amdahl.outcome     ok | failed | cancelled (amdahl.work)
//	amdahl.work.id     id of the unit of work (spans only, never metrics)
//	amdahl.bytes       payload size in bytes (spans only)
//	amdahl.remote      true on spans the parent synthesised from a child's reply timings
//	amdahl.work.kind   taskhost | fanout (amdahl.work; spans only)
//	amdahl.work.shape  fanout shape name (amdahl.work; spans only)
//	amdahl.reason      failure class of a failed or cancelled unit (amdahl.work; spans only)
//
// A failed phase or unit of work has status Error with the error's message
// and an exception event. Payload bytes never go into telemetry: sizes only.
// Trace context crosses processes as W3C traceparent/tracestate (+ baggage).
//
// # Metrics
//
// Explicit-bucket histograms with DurationBuckets (10 µs … 60 s), scope
// ScopeName:
//
//	amdahl.work.duration   s  component attributes + amdahl.outcome        → amdahl_work_duration_seconds_*
//	amdahl.phase.duration  s  amdahl.component, .phase, .direction + component attributes → amdahl_phase_duration_seconds_*
//	amdahl.phase.critical  s  same as amdahl.phase.duration                → amdahl_phase_critical_seconds_*
//	                          (amdahl.component is the row's: a unit's critical path crosses ipc, taskhost, chunking, runtime)
//
// "Component attributes" are the low-cardinality ones a Component is built
// with (transport, scenario, variant). Component metrics, defined as
// constants in ipc/metrics.go and chunking/metrics.go (units and attributes
// there):
//
//	amdahl.ipc.bytes, amdahl.ipc.packets          counters by amdahl.ipc.op (send|receive), direction, transport
//	amdahl.ipc.send.blocked                       s histogram: time a sender was blocked writing
//	amdahl.ipc.queue.depth, amdahl.ipc.queue.bytes  async send queue (up-down counters)
//	amdahl.ipc.buffer.requested, .effective       By gauges: SO_SNDBUF / pipe size asked for and got
//	amdahl.ipc.handshakes                         counter by outcome and amdahl.ipc.field
//	amdahl.ipc.protocol.errors, amdahl.ipc.stalls counters by amdahl.ipc.kind
//	amdahl.chunking.sizing.computations           counter by kind (action|response): the seed's "outer sizing calls"
//	amdahl.chunking.bytes, amdahl.chunking.chunks planned bytes; chunks per completion
//	amdahl.chunking.retries, .rejections          counters by gRPC code / reason
//	amdahl.sidecar.partial_buffers, .duplicates, .protocol_errors  the reassembling side
//
// The Prometheus exporter runs on a private registry; resource attributes
// appear on target_info only.
//
// # Profiles
//
// Each phase body runs under the pprof label phase=<phase name> (CPU samples
// only carry labels). With pyroscope on, root spans also carry span_id,
// span_name and trace_id labels (otel-profiling-go) and the attribute
// pyroscope.profile.id. Default profile types: cpu, alloc_objects,
// alloc_space, inuse_objects, inuse_space; mutex and block when their rates
// are set in PyroscopeConfig.
//
// # Cost
//
// A nil *Component is disabled: StartPhase/End read no clock and allocate
// nothing. Enabled, the phase API adds no allocation to what the SDK itself
// does for one span and one histogram record with the same attributes
// (BenchmarkPhase).
package telemetry

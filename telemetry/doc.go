// Package telemetry is the phase API every component instruments itself
// with: phase and direction names, attribute keys, metric names, pprof
// labels, and the Component that records them through a
// trace.TracerProvider and a metric.MeterProvider (the otel globals when none
// is given). It uses the OpenTelemetry API only, so a program embedding ipc
// or chunking gets no SDK, exporter or profiler; the process's own wiring
// (exporters, the Prometheus endpoint, the trace file, profiles) is in
// package telemetry/otelsetup. This comment is the telemetry contract:
// dashboards, attribution and users build on the names below, and tests
// assert them.
//
// # Phases
//
// A component measures each phase with one verb and its options:
//
//	ctx, ph := comp.Start(ctx, telemetry.Send, telemetry.Request)
//	err := send(ctx, msg)
//	ph.End(telemetry.WithError(err))
//
// A leaf, under which no span starts, is made whole when it ends; a phase
// that ends on another goroutine is Detached; StartedAt and EndedAt take
// instants the caller already read from the clock:
//
//	_, ph := comp.Start(ctx, telemetry.Serialize, telemetry.Request, telemetry.Leaf())
//	frame := encode(msg)
//	ph.End(telemetry.WithAttributes(telemetry.AttrBytes.Int(len(frame))))
//
// # Spans
//
//	amdahl.work            root of one unit of work, submission to result delivered
//	<component>.<phase>    one phase: ipc.send, chunking.serialize, taskhost.execute, runtime.dispatch, …
//	runtime.dispatch       phase dispatch: orchestration lease, task host acquisition (spawn included), and the queue wait below
//	runtime.queue          phase queue, child of runtime.dispatch: the unit's wait for a worker (Submit blocked on a full queue, then queued)
//	runtime.host           not a phase: a task's round trip on its host (amdahl.host.id, amdahl.host.pid)
//	taskhost.<phase>       the host's receive, deserialize, execute, serialize and send (reply; send in the
//	                       replies to sampled requests): synthesised by the parent from the timings in the
//	                       host's reply (amdahl.remote=true), and, when the host exports, recorded by the
//	                       host itself (service.name amdahl-taskhost, the same times), as children of the
//	                       parent's runtime.host span, inside which they end
//	chunking.send.chunk    not a phase: one CompleteOrchestratorTask call (with its retries)
//
// Each span reaches a backend once: OTLP export (package otelsetup) leaves
// out the parent's amdahl.remote=true copies, since the task hosts export
// their own (runtime/doc.go, "Task host telemetry"); the trace file, the
// in-memory recorder and attribution keep them.
//
// A span that is not a phase (gRPC client and server spans, runtime.host,
// chunking.send.chunk) counts toward the critical path of its nearest phase
// ancestor, or "other" when it has none.
//
// All spans are SpanKindInternal. A phase span carries amdahl.component,
// amdahl.phase and amdahl.direction; the component's attributes (transport,
// scenario, variant), constant for a unit, are on its root span amdahl.work
// and on every metric, not repeated on each phase span (each attribute
// adds to every span's cost, BenchmarkPhase). Span attributes:
//
//	amdahl.component   component name (phase spans)
//	amdahl.phase       queue | dispatch | serialize | send | receive | deserialize | execute
//	amdahl.direction   request | reply (absent for dispatch and execute)
//	amdahl.transport   ipc | chunking (amdahl.work)
//	amdahl.scenario    scenario name (amdahl.work)
//	amdahl.variant     baseline | candidate (A/B), canary | stable (AMDAHL_VARIANT) (amdahl.work)
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
//	                          (+ amdahl.sampled=false for a unit whose trace was not sampled)
//	amdahl.phase.duration  s  amdahl.component, .phase, .direction + component attributes → amdahl_phase_duration_seconds_*
//	amdahl.phase.critical  s  same as amdahl.phase.duration                → amdahl_phase_critical_seconds_*
//	                          (amdahl.component is the row's: a unit's critical path crosses ipc, taskhost, chunking, runtime)
//	                          a gap (critical time no span covers): amdahl.phase="gap", amdahl.gap.from and
//	                          amdahl.gap.to the rows at its ends ("start"/"end" at the unit's edges), no
//	                          amdahl.component; past 256 distinct gaps both ends are "(more)"
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
//	amdahl.sidecar.rejections                     counter by reason: a bound refused a call or a connection (chunking/doc.go lists the bounds), or a call without the sidecar's bearer token (unauthenticated)
//
// The component metrics carry the amdahl.scenario and amdahl.variant of
// the Component their library was given (Component.RunAttributes), so
// dashboards filter them like the phase metrics; counters of rare events
// (retries, rejections, duplicates, protocol errors) start at zero.
//
// otelsetup's Prometheus exporter runs on a private registry; resource
// attributes appear on target_info only (service_name: dashboards join it
// on job and instance). /metrics answers in OpenMetrics when the scraper
// asks for it, as Prometheus does, and only then carries exemplars: per
// histogram bucket, one measurement sampled among those made inside a
// sampled span, with labels trace_id and span_id (the SDK's default
// exemplar filter, trace_based; OTEL_METRICS_EXEMPLAR_FILTER=always_off
// turns them off). A phase records in the context it started in, so its
// exemplar names the unit's trace and the phase's parent span.
// Prometheus stores exemplars with --enable-feature=exemplar-storage.
//
// # Sampling
//
// The sampler is OTEL_TRACES_SAMPLER's, with OTEL_TRACES_SAMPLER_ARG
// (otelsetup reads them; default parentbased_always_on, so every unit is
// sampled): the SDK's when it records the spans, and the runtime's own
// tracer's when only the attribution (and the trace file) read them
// (otelsetup.Telemetry.Sampler, runtime.Config.Sampler), which decides a
// unit's root with it and makes every span under an unsampled one that
// root's own non-recording span. A unit whose root amdahl.work is not
// sampled is not recorded either: the built-in samplers either record and
// sample or drop, its phase spans inherit the decision (parentbased_*) or
// get the same one from the trace ID (traceidratio), and no span of its
// trace reaches a span processor, the trace file, OTLP or the in-memory
// recorder. Under such a root a Component's phase that records nothing
// else (no metrics, labels or delay) is skipped whole, its tracer not
// called and no clock read: Start (with or without Leaf) and RecordSpan alike;
// Component.Records tells a caller that would prepare phases to hand it
// (the runtime builds no host phases from the reply of a unit sampled
// out). The runtime's attribution (a spans.Collector) therefore
// never sees such a unit: Submit tracks only a sampled root's trace. What
// that leaves:
//
//	amdahl.work.duration, amdahl.phase.duration   every unit, sampled or not (recorded by the phase API, not from spans)
//	amdahl.phase.critical                         sampled units only (computed from the unit's spans): the
//	                                              dashboards' q divides it by the amdahl.work.duration of the
//	                                              units not marked amdahl.sampled=false, so q is over the
//	                                              sampled units, as the terminal's and the HTML's are
//	Summary counts (submitted, ok, failed, …)     every unit
//	Summary attribution (e2e quantiles, q, r)     sampled units only: a ratio sampler thins the sample, an
//	                                              always_off one leaves units but no phase rows
//
// What attribution needs is recording, not sampling: a custom sampler that
// returns RecordOnly gives the collector the unit's spans (span processors
// see recording spans; the batch processors behind the trace file and OTLP
// skip unsampled ones), and the unit is attributed when its root ends,
// before finish drops what is left of it.
//
// # Profiles
//
// Each phase body runs under the pprof labels phase=<phase name>,
// component=<component name> and, for a phase with a direction,
// direction=request|reply (CPU samples only carry labels;
// ComponentConfig.PhaseLabels): a sample names its row of the run's
// table. A goroutine that does a phase's work outside a phase body takes
// the same labels from Component.LabelContext: ipc's reader
// (receive, deserialize around each decode) and writer (send); the
// sidecar's gRPC goroutines (the connection's reader: receive; a
// completion's call from before gRPC decodes it: deserialize; the
// connection's writer: send/reply). Inside a phase body a
// component may mark steps, step=<name> next to the phase label
// (Component.Steps, PhaseSpan.Step; chunking's serialize: size, validate,
// pack, encode): set per region, built once, nothing when labels are off.
// With pyroscope on in
// otelsetup, the first span of a trace in each process (amdahl.work in the
// parent, taskhost.execute in a task host) carries the attribute
// pyroscope.profile.id, and the CPU samples
// under it the labels span_id (that span's id), span_name and trace_id
// (otel-profiling-go); a phase started under it keeps them beside phase.
// Task hosts profile themselves the same way, as service amdahl-taskhost,
// when PYROSCOPE_SERVER_ADDRESS reaches them; amdahl sidecar as
// amdahl-sidecar.
//
// Heap profiles carry no labels (the Go runtime records none on allocation
// samples). `amdahl profile DIR [--alloc]` (package internal/report/profiles)
// reads the pprof files of a run --out DIR, parent and hosts merged, and
// prints the top functions per phase: CPU samples by their phase label,
// else (and allocations always) by the innermost function on their stack
// that opens or does a phase (the table profiles.Entries), else in a
// named bucket (Go runtime, workload generator, accounting, process).
// Default profile types: cpu, alloc_objects,
// alloc_space, inuse_objects, inuse_space; mutex and block when their rates
// are set in PyroscopeConfig.
//
// # Cost
//
// A nil *Component is disabled: Start/End read no clock and allocate
// nothing. Start's and End's options (Leaf, Detached, StartedAt;
// WithError, WithAttributes, EndedAt) are plain values, not the OTel API's
// interfaces: passing them allocates nothing (BenchmarkPhase/options). Enabled, the phase API adds no allocation to what the SDK itself
// does for one span and one histogram record with the same attributes
// (BenchmarkPhase). With a no-op MeterProvider (otelsetup's when nothing
// reads the metrics) it makes no record at all.
//
// A TracerProvider that implements PhaseTracer takes the phases whole:
// component, phase and direction as values, times as times, without the
// OTel API's span options. The runtime's tracer (spans.TracerProvider),
// which feeds its attribution when nothing exports the spans, is one: through it a phase
// is a compact record, not an SDK span. A phase under which no span
// starts can say so (Start with Leaf; attributes at End, WithAttributes):
// its span is made whole when it ends, the same span
// through the SDK, and through a PhaseTracer no span object or context at
// all. ipc's serialize and send, the runtime's queue wait, chunking's
// serialize and the sidecar's deserialize and execute are leaves.
//
// On the OTel API's no-op TracerProvider (trace/noop: otelsetup's with
// OTEL_SDK_DISABLED=true) a Component makes no span and allocates nothing
// for a phase (PhaseTracerOf; TestOffTracer): it returns what the no-op
// tracer would, the caller's context and span where that span does not
// record, so an incoming trace context still passes through. With a
// no-op MeterProvider too, and no labels or delay, the Component records
// nothing at all and is off: its phases read no clock and their End
// returns 0, as a disabled Component's, and Enabled reports false, so a
// caller skips what it would only hand over (ipc's past phases, the
// runtime's host phases). With labels or a delay it reads the clock as
// ever. BenchmarkPhase/noop-providers measures the off Component.
package telemetry

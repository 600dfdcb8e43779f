// Package otelsetup wires the OpenTelemetry SDK for an amdahl process: tracer
// and meter providers, OTLP and trace-file exporters, the in-memory span
// recorder, the Prometheus /metrics endpoint, and CPU/heap profiles or
// continuous profiling with Pyroscope. Libraries never import it: they take
// providers (package telemetry). The amdahl command and runtime.ServeHost
// call Setup once per process.
//
// Setup(ctx, opts...) builds the providers: defaults, then the environment,
// then options (an option beats its variable), then validation. An invalid
// setting is a *ConfigError naming the setting; nothing is left running.
// Shutdown(ctx) is idempotent and flushes everything (pyroscope: Flush(true)
// before Stop).
//
// Environment variables (all optional):
//
//	OTEL_SDK_DISABLED                 true | false (default): true makes every provider a no-op (WithSDKDisabled wins)
//	OTEL_SERVICE_NAME                 service.name (default "amdahl"; WithServiceName wins)
//	OTEL_RESOURCE_ATTRIBUTES          extra resource attributes (SDK)
//	OTEL_TRACES_EXPORTER              otlp | console | none; unset: otlp when OTEL_EXPORTER_OTLP_ENDPOINT or
//	                                  _TRACES_ENDPOINT is set, else none (WithOTLP wins: OTLP to its endpoint)
//	OTEL_METRICS_EXPORTER             otlp | prometheus | console | none, besides /metrics; unset: otlp when
//	                                  OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is set, else none (the generic endpoint
//	                                  alone keeps meaning traces only: trace-only backends refuse metrics).
//	                                  prometheus is amdahl's own private registry, served at AMDAHL_METRICS_ADDR
//	                                  (required then); OTEL_EXPORTER_PROMETHEUS_HOST and _PORT are not read
//	OTEL_EXPORTER_OTLP_ENDPOINT       OTLP endpoint URL, e.g. http://127.0.0.1:4317 (http:// means no TLS)
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, _METRICS_ENDPOINT  override the above per signal
//	OTEL_EXPORTER_OTLP_PROTOCOL       grpc (amdahl's default) | http/protobuf
//	OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, _METRICS_PROTOCOL  override the above per signal
//	OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION, _CERTIFICATE, _INSECURE, … (and their _TRACES_ and
//	                                  _METRICS_ forms)  read by the OTLP exporters themselves
//	OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE, _DEFAULT_HISTOGRAM_AGGREGATION  read by the OTLP metric
//	                                  exporter (default cumulative, explicit buckets: the instruments' own)
//	OTEL_METRIC_EXPORT_INTERVAL, _TIMEOUT  the periodic OTLP/console metric reader (SDK; default 60 s, 30 s)
//	OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG  the sampler (Sampler): always_on, always_off, traceidratio
//	                                  and their parentbased_ forms; a bad name or ratio is a ConfigError
//	OTEL_PROPAGATORS                  tracecontext,baggage (default) | a list of those two | none: what
//	                                  carries a unit's context across a process boundary (Propagator). An
//	                                  amdahl runtime carries the W3C trace context on its gRPC calls to the
//	                                  sidecar only when tracecontext is named; none carries none. The task
//	                                  hosts' pipe carries it in its own message field regardless. b3, jaeger
//	                                  and the specification's other names are a ConfigError (not linked)
//	OTEL_BSP_*                        read by the SDK itself (for OTLP only: the trace file has its own
//	                                  batcher, lines of 1024 spans, 4 queued)
//	AMDAHL_TRACE_FILE                 write spans as OTLP JSON lines to this file (WithTraceFile)
//	AMDAHL_METRICS_ADDR               serve Prometheus /metrics on host:port (WithMetricsAddr)
//	AMDAHL_PROFILE_DIR                write cpu.pprof, heap.pprof and cpu-window.json here (WithProfileDir)
//	AMDAHL_PHASE_LABELS               auto (default: on when a profile is taken) | true | false: pprof phase labels
//	PYROSCOPE_SERVER_ADDRESS          push profiles to Pyroscope at this URL (WithPyroscope)
//	PYROSCOPE_APPLICATION_NAME        pyroscope application (default: service.name)
//
// Exporters: Setup selects them (the two _EXPORTER variables, whether an
// endpoint is set, WithOTLP) and validates what it read: an unknown
// exporter, a protocol other than grpc or http/protobuf, an endpoint that is
// not an http(s) URL, or prometheus without AMDAHL_METRICS_ADDR is a
// *ConfigError naming the variable (the OTLP exporters would replace a
// malformed endpoint by their default). Values are case-sensitive and name
// one exporter (no comma lists), as autoexport reads them. Building is
// left to the contrib package go.opentelemetry.io/contrib/exporters/autoexport
// and the exporters, which read the OTEL_EXPORTER_OTLP_* values from the
// process environment, with two exceptions: WithOTLP(endpoint, protocol)
// (amdahl run --otlp-endpoint, --otlp-protocol) builds OTLP exporters for
// its endpoint and protocol whatever the variables say; and an otlp
// exporter with no protocol variable set is built for grpc by Setup,
// since autoexport's default, http/protobuf, would send an existing
// http://…:4317 endpoint the wrong protocol. autoexport's prometheus
// reader, which serves its own registry on localhost:9464, is never used.
// WithLookupEnv changes what Setup reads, not what the exporters and
// autoexport read: a lookup that hides every variable (the task host's)
// selects no exporter, and one whose OTEL_*_EXPORTER contradicts the
// process environment's is a *ConfigError.
//
// An OTLP or console metric exporter is a periodic reader beside the
// Prometheus one: the same instruments, with the same explicit buckets, go
// to both; Shutdown and ForceFlush export what was recorded since the last
// export, and return the exporter's error when that fails.
//
// AMDAHL_PROFILE_DIR and PYROSCOPE_SERVER_ADDRESS are exclusive: the process
// has one CPU profiler.
//
// Trace processing: OTLP uses the SDK's batch span processor; the trace
// file its own batcher, which encodes each span where it ends into the
// line being filled and hands full lines (1,024 spans) to one writer
// goroutine, a partial one every 5 s. The trace file is lossless: when
// four full lines wait for the writer, ending a span waits for room, so a program that ends spans
// faster than they are written is slowed down rather than losing spans
// (attribution reads the file back). OTLP never makes the program wait for a
// remote backend: its queue drops spans when full, and OTLPSpanCounts counts
// them (for whichever exporter OTEL_TRACES_EXPORTER or WithOTLP selected) (the SDK itself reports drops only as an experimental metric, under
// OTEL_GO_X_OBSERVABILITY, on the global meter provider, which Setup does
// not set); amdahl run logs a warning after a run that dropped any.
// WithRecorder keeps spans in memory (the embedded default of amdahl run);
// WithSpanProcessor adds any other. The OTLP (or console) exporter leaves
// out spans with amdahl.remote=true, which a parent synthesised from a
// child's reply timings: amdahl's task hosts export their own
// (runtime.ServeHost); WithRemoteSpans(true) exports them too. The
// recorder, the trace file and other span processors get every span.
//
// What nobody reads is not recorded. Metrics are recorded only when
// something reads them: /metrics served (AMDAHL_METRICS_ADDR,
// WithMetricsAddr, or by the program through MetricsHandler with
// WithMetricsHandler), an OTLP or console metrics exporter, or a reader
// given to Setup; otherwise MeterProvider is a no-op, and a
// telemetry.Component built on it skips its records. When no exporter,
// trace file, recorder, span processor, sampler of the program's
// (WithSampler) or Pyroscope would see a span, SpansOnlyForAttribution is
// true: a runtime
// then traces with its own tracer straight into its attribution
// (runtime.Config.UseTelemetry), and the SDK's tracer provider goes
// unused. When the trace file is the only other reader, TraceFileOnly
// returns the file's writer: the runtime's own tracer then hands it its
// spans as well, still without SDK spans, as spans.Records (spans.Exporter),
// a phase span's amdahl.component, amdahl.phase and amdahl.direction as
// spans.SharedAttributes made and encoded once per phase (Record.Leading).
//
// OTEL_SDK_DISABLED=true (the OpenTelemetry specification's variable; only
// true and false are accepted, any other value is a *ConfigError, where the
// specification would read it as false) turns the SDK off for all signals:
// the other settings are still validated, but TracerProvider and
// MeterProvider are no-ops (go.opentelemetry.io/otel/trace/noop,
// metric/noop), nothing is exported, the trace file is not created, /metrics
// is not served, no profile is taken, and RegisterSpanProcessor and
// UnregisterSpanProcessor do nothing. Attribution sees no spans then: a
// runtime registers its attribution processor through RegisterSpanProcessor,
// so with the SDK disabled its summary has units but no phase rows. That is
// expected: it is how to measure the program without telemetry. A
// telemetry.Component on these providers makes no span and no record and
// allocates nothing for a phase (telemetry.PhaseTracerOf), so such a run
// pays for telemetry only the clock reads of the durations it measures.
// WithSpanProcessor's processors and WithMetricReader's readers are not used
// but are shut down by Shutdown, as the providers would have.
//
// (*Telemetry).Component builds a telemetry.Component on these providers,
// with the phase-label setting applied.
package otelsetup

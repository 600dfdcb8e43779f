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
//	OTEL_EXPORTER_OTLP_ENDPOINT       OTLP endpoint URL, e.g. http://127.0.0.1:4317; unset = no OTLP
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT  overrides the above for traces
//	OTEL_EXPORTER_OTLP_PROTOCOL       grpc (default) | http/protobuf
//	OTEL_EXPORTER_OTLP_TRACES_PROTOCOL  overrides the above for traces
//	OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION, _CERTIFICATE, …  read by the OTel exporter itself
//	OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG, OTEL_BSP_*  read by the SDK itself (the trace
//	                                  file's OTEL_BSP_MAX_QUEUE_SIZE and _MAX_EXPORT_BATCH_SIZE are fixed: 8192, 1024)
//	AMDAHL_TRACE_FILE                 write spans as OTLP JSON lines to this file (WithTraceFile)
//	AMDAHL_METRICS_ADDR               serve Prometheus /metrics on host:port (WithMetricsAddr)
//	AMDAHL_PROFILE_DIR                write cpu.pprof and heap.pprof here (WithProfileDir)
//	AMDAHL_PHASE_LABELS               true (default) | false: pprof phase labels
//	PYROSCOPE_SERVER_ADDRESS          push profiles to Pyroscope at this URL (WithPyroscope)
//	PYROSCOPE_APPLICATION_NAME        pyroscope application (default: service.name)
//
// AMDAHL_PROFILE_DIR and PYROSCOPE_SERVER_ADDRESS are exclusive: the process
// has one CPU profiler.
//
// Trace processing: OTLP and the trace file use the SDK's batch span
// processor. The trace file is lossless: when its queue is full, ending a
// span waits until the exporter has made room, so a program that ends spans
// faster than they are written is slowed down rather than losing spans
// (attribution reads the file back). OTLP never makes the program wait for a
// remote backend: its queue drops spans when full, and OTLPSpanCounts counts
// them (the SDK itself reports drops only as an experimental metric, under
// OTEL_GO_X_OBSERVABILITY, on the global meter provider, which Setup does
// not set); amdahl run logs a warning after a run that dropped any.
// WithRecorder keeps spans in memory (the embedded default of amdahl run);
// WithSpanProcessor adds any other.
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
// expected: it is how to measure the program without telemetry.
// WithSpanProcessor's processors and WithMetricReader's readers are not used
// but are shut down by Shutdown, as the providers would have.
//
// (*Telemetry).Component builds a telemetry.Component on these providers,
// with the phase-label setting applied.
package otelsetup

// Package spans is amdahl's one span model, its tracer, its per-unit
// collector and its OTLP JSON codec: the trace file's reader and writer.
//
// Span is what every reader of spans in amdahl knows of one: the live
// accounting of a run, `amdahl report` over a trace file, the
// OpenTelemetry Collector connector and the attribution built on them.
// It is compact (ids as arrays, times as Unix nanoseconds, the row as
// amdahl.component, amdahl.phase and amdahl.direction, strings shared
// through an Interner), so that a million spans fit in little memory.
// SetAttribute applies the attributes a Span keeps (ReadsAttribute names
// them); the rest of a span's attributes are an exporter's business.
//
// ReadOTLPJSON streams OTLP/JSON trace data (amdahl's trace file, the
// Collector's file exporter's) into Spans within Limits, with errors that
// name the input, line and column. Rules, when given, read the attributes
// a Span does not keep (the semantic conventions', a rules file's) and
// give each span its row; the attribution's rule sets implement them.
//
// TracerProvider is the one tracer: a trace.TracerProvider (and a
// telemetry.PhaseTracer) whose spans are Spans from their start, with
// real W3C span contexts, sampled by a Sampler. An ended span goes to its
// unit in a Collector and, when an Exporter is set, to it whole as a
// Record. A Collector keeps the spans of the units it tracks (Track: a
// unit's root), by unit, and hands each unit's spans to a func on an
// accounting goroutine of its own when its root ends; spans from
// elsewhere (a Source's) reach it through Ended. A Holder is a span that
// keeps its unit's spans itself and hands them off whole (HandOff).
//
// Record is a span whole, as an exporter writes it (attributes, events,
// links, status, resource and scope, as values). An Exporter takes
// Records; FileSink is the trace file's: it encodes each Record where it
// ends into a Line and hands full lines to a FileWriter, which writes
// them as OTLP/JSON ExportTraceServiceRequests, one per line, byte for
// byte what MarshalTraceLine writes. The OTel SDK is one source and sink
// among others: otelsetup converts its read-only spans to Records
// (RecordOf, ExporterProcessor) and Records to read-only spans
// (ProcessorExporter).
//
// MarshalTraceLine, UnmarshalTraceLine and ReadTraceFile are the slow
// reference codec, through protojson and encoding/json, for tests and
// tools that hold OTLP protobufs.
//
// The package depends on the OpenTelemetry API only: a program that
// embeds it links no SDK.
package spans

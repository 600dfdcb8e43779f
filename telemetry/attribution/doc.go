// Package attribution tells where the time of units of work went: for each
// phase (and direction) its share q of end-to-end time on the critical path,
// its naive share (sum of span durations / e2e, which counts overlap twice),
// and, for an A/B pair of runs, each phase's improvement r and the predicted
// end-to-end gain q·r set against the measured gain.
//
// Input is spans from any source: the in-process telemetry.Recorder
// (FromSDK), an OTLP JSON trace file written by amdahl or by the
// OpenTelemetry Collector's file exporter (telemetry.ReadTraceFile, then
// FromOTLP). A unit of work is an amdahl.work root span and its descendants.
//
// The critical path is the last-finishing-child walk used by Jaeger's UI and
// Uber's CRISP: walking back from the end of a span, the child that finished
// last is on the path, the gap after it is the parent's own time, and the walk
// continues from that child's start. Children are clipped to their parent.
// Exclusive critical times of a unit of work add up to its duration exactly;
// time no phase span covers is reported as "other".
//
// Σ q·r is a first-order prediction: it assumes the other phases do not change
// and the same path stays critical. The measured gain beside it shows where
// that assumption breaks.
package attribution

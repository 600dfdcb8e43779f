package chunking

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc/codes"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// Metric names of the chunking and sidecar components (DESIGN.md,
// "Metrics"). Attributes are low-cardinality: no ids.
const (
	MetricSizingComputations = "amdahl.chunking.sizing.computations" // {call}, by amdahl.sizing.kind
	MetricBytes              = "amdahl.chunking.bytes"               // By, planned chunk bytes
	MetricChunks             = "amdahl.chunking.chunks"              // {chunk} per completion (histogram)
	MetricRetries            = "amdahl.chunking.retries"             // {retry}, by amdahl.rpc.code
	MetricRejections         = "amdahl.chunking.rejections"          // {completion}, by amdahl.reason
	MetricPartialBuffers     = "amdahl.sidecar.partial_buffers"      // {buffer}, up-down
	MetricDuplicates         = "amdahl.sidecar.duplicates"           // {chunk}
	MetricProtocolErrors     = "amdahl.sidecar.protocol_errors"      // {error}, by amdahl.reason
	MetricSidecarRejections  = "amdahl.sidecar.rejections"           // {call}, by amdahl.reason: the bound reached
)

// Attribute keys of chunking spans and metrics.
const (
	AttrSizingKind      = "amdahl.sizing.kind" // action | response
	AttrCode            = "amdahl.rpc.code"    // gRPC code name
	AttrReason          = "amdahl.reason"
	AttrActions         = "amdahl.chunking.actions"
	AttrChunks          = "amdahl.chunking.chunks"
	AttrChunkIndex      = "amdahl.chunking.chunk_index"
	AttrActionSizings   = "amdahl.chunking.sizing.actions"
	AttrResponseSizings = "amdahl.chunking.sizing.responses"
	AttrAlgorithm       = "amdahl.chunking.algorithm"
	AttrOversized       = "amdahl.chunking.oversized"
	AttrAttempt         = "amdahl.chunking.attempt"
)

// Rejection and protocol-error reasons.
const (
	ReasonOversizedAction = "oversized_action"
	ReasonUnknownToken    = "unknown_token"
	ReasonMissingIndex    = "missing_index"
	ReasonGap             = "gap"
	ReasonNoBuffer        = "no_buffer"
	ReasonOverCap         = "over_cap"
	ReasonMissingToken    = "missing_token"
	ReasonCompleted       = "already_completed"
	// ReasonConflict: a chunk sent again with the index of an accepted one
	// but other content.
	ReasonConflict = "conflicting_resend"
)

// Reasons of amdahl.sidecar.rejections: the sidecar bound a call reached,
// or the credentials it lacked.
const (
	// ReasonTotalBufferedBytes: a partial chunk would take the sidecar's
	// buffers over SidecarConfig.MaxTotalBufferedBytes.
	ReasonTotalBufferedBytes = "total_buffered_bytes"
	// ReasonPendingInstances: StartInstance over
	// SidecarConfig.MaxPendingInstances.
	ReasonPendingInstances = "pending_instances"
	// ReasonInstanceIDBytes: StartInstance with an instance id longer than
	// SidecarConfig.MaxInstanceIDBytes.
	ReasonInstanceIDBytes = "instance_id_bytes"
	// ReasonUnauthenticated: a call without the bearer token
	// SidecarConfig.Token requires, or with another one.
	ReasonUnauthenticated = "unauthenticated"
	// ReasonConnections: a connection over SidecarConfig.MaxConnections,
	// closed as soon as it was accepted.
	ReasonConnections = "connections"
	// ReasonCalls: a call over SidecarConfig.MaxCalls open at once.
	ReasonCalls = "calls"
)

type metrics struct {
	sizing     metric.Int64Counter
	bytes      metric.Int64Counter
	chunks     metric.Int64Histogram
	retries    metric.Int64Counter
	rejections metric.Int64Counter
	kindAction metric.AddOption
	kindResp   metric.AddOption
	oversized  metric.AddOption
	plain      metric.MeasurementOption
	run        []attribute.KeyValue // the component's scenario and variant
}

// withRun is the attribute set of the component's scenario and variant
// (run) and kv.
func withRun(run []attribute.KeyValue, kv ...attribute.KeyValue) attribute.Set {
	all := make([]attribute.KeyValue, 0, len(run)+len(kv))
	return attribute.NewSet(append(append(all, run...), kv...)...)
}

func meter(mp metric.MeterProvider) metric.Meter {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	return telemetry.Meter(mp)
}

// newMetrics creates the chunking instruments; comp (may be nil)
// contributes its scenario and variant to every attribute set.
func newMetrics(mp metric.MeterProvider, comp *telemetry.Component) (*metrics, error) {
	m := meter(mp)
	var err error
	x := &metrics{run: comp.RunAttributes()}
	if x.sizing, err = m.Int64Counter(MetricSizingComputations, metric.WithUnit("{call}"),
		metric.WithDescription("Outer protobuf sizing calls made while planning completions, by kind.")); err != nil {
		return nil, fmt.Errorf("chunking: create %s: %w", MetricSizingComputations, err)
	}
	if x.bytes, err = m.Int64Counter(MetricBytes, metric.WithUnit("By"),
		metric.WithDescription("Serialized bytes of planned completion chunks.")); err != nil {
		return nil, fmt.Errorf("chunking: create %s: %w", MetricBytes, err)
	}
	if x.chunks, err = m.Int64Histogram(MetricChunks, metric.WithUnit("{chunk}"),
		metric.WithExplicitBucketBoundaries(1, 2, 3, 4, 8, 16, 32, 64, 128),
		metric.WithDescription("Chunks per completion.")); err != nil {
		return nil, fmt.Errorf("chunking: create %s: %w", MetricChunks, err)
	}
	if x.retries, err = m.Int64Counter(MetricRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("Retried completion calls, by gRPC code.")); err != nil {
		return nil, fmt.Errorf("chunking: create %s: %w", MetricRetries, err)
	}
	if x.rejections, err = m.Int64Counter(MetricRejections, metric.WithUnit("{completion}"),
		metric.WithDescription("Completions replaced by a failure completion, by reason.")); err != nil {
		return nil, fmt.Errorf("chunking: create %s: %w", MetricRejections, err)
	}
	x.kindAction = metric.WithAttributeSet(withRun(x.run, attribute.String(AttrSizingKind, "action")))
	x.kindResp = metric.WithAttributeSet(withRun(x.run, attribute.String(AttrSizingKind, "response")))
	x.oversized = metric.WithAttributeSet(withRun(x.run, attribute.String(AttrReason, ReasonOversizedAction)))
	x.plain = metric.WithAttributeSet(withRun(x.run))
	// Counters of rare events start at zero, so that a dashboard's rate
	// shows 0 instead of no data until the first one.
	ctx := context.Background()
	x.rejections.Add(ctx, 0, x.oversized)
	return x, nil
}

func (m *metrics) planned(ctx context.Context, pl *Plan, bytes int) {
	if pl.ActionSizings > 0 {
		m.sizing.Add(ctx, int64(pl.ActionSizings), m.kindAction)
	}
	if pl.ResponseSizings > 0 {
		m.sizing.Add(ctx, int64(pl.ResponseSizings), m.kindResp)
	}
	if bytes > 0 {
		m.bytes.Add(ctx, int64(bytes), m.plain)
	}
	m.chunks.Record(ctx, int64(len(pl.Chunks)), m.plain)
	if pl.Oversized != nil {
		m.rejections.Add(ctx, 1, m.oversized)
	}
}

func (m *metrics) retried(ctx context.Context, c codes.Code) {
	m.retries.Add(ctx, 1, metric.WithAttributeSet(withRun(m.run, attribute.String(AttrCode, c.String()))))
}

// zeroRetries starts amdahl.chunking.retries at zero for each retryable
// code (the sender's; the planner records no retries).
func (m *metrics) zeroRetries() {
	for _, c := range retryableCodes {
		m.retries.Add(context.Background(), 0, metric.WithAttributeSet(withRun(m.run, attribute.String(AttrCode, c.String()))))
	}
}

type sidecarMetrics struct {
	partial   metric.Int64UpDownCounter
	dups      metric.Int64Counter
	protoErrs metric.Int64Counter
	refusals  metric.Int64Counter
	run       []attribute.KeyValue // the component's scenario and variant
	plain     metric.AddOption     // run only: partial buffers, duplicates
}

// sidecarProtocolReasons and sidecarRefusalReasons are the reasons the
// sidecar counts, started at zero.
var (
	sidecarProtocolReasons = []string{ReasonUnknownToken, ReasonMissingIndex, ReasonGap, ReasonNoBuffer, ReasonOverCap,
		ReasonMissingToken, ReasonCompleted, ReasonConflict}
	sidecarRefusalReasons = []string{ReasonTotalBufferedBytes, ReasonPendingInstances, ReasonInstanceIDBytes, ReasonUnauthenticated, ReasonConnections, ReasonCalls}
)

// newSidecarMetrics creates the sidecar's instruments; comp (may be nil)
// contributes its scenario and variant to every attribute set.
func newSidecarMetrics(mp metric.MeterProvider, comp *telemetry.Component) (*sidecarMetrics, error) {
	m := meter(mp)
	var err error
	x := &sidecarMetrics{run: comp.RunAttributes()}
	x.plain = metric.WithAttributeSet(withRun(x.run))
	if x.partial, err = m.Int64UpDownCounter(MetricPartialBuffers, metric.WithUnit("{buffer}"),
		metric.WithDescription("Chunked completions currently buffered by the sidecar.")); err != nil {
		return nil, fmt.Errorf("chunking: create %s: %w", MetricPartialBuffers, err)
	}
	if x.dups, err = m.Int64Counter(MetricDuplicates, metric.WithUnit("{chunk}"),
		metric.WithDescription("Chunks received again and acknowledged without appending.")); err != nil {
		return nil, fmt.Errorf("chunking: create %s: %w", MetricDuplicates, err)
	}
	if x.protoErrs, err = m.Int64Counter(MetricProtocolErrors, metric.WithUnit("{error}"),
		metric.WithDescription("Completion calls rejected as protocol violations, by reason.")); err != nil {
		return nil, fmt.Errorf("chunking: create %s: %w", MetricProtocolErrors, err)
	}
	if x.refusals, err = m.Int64Counter(MetricSidecarRejections, metric.WithUnit("{call}"),
		metric.WithDescription("Calls refused because a sidecar bound was reached, by the bound (reason).")); err != nil {
		return nil, fmt.Errorf("chunking: create %s: %w", MetricSidecarRejections, err)
	}
	// Rare events start at zero, so that a dashboard's rate shows 0
	// instead of no data until the first one.
	ctx := context.Background()
	x.partial.Add(ctx, 0, x.plain)
	x.dups.Add(ctx, 0, x.plain)
	for _, r := range sidecarProtocolReasons {
		x.protoErrs.Add(ctx, 0, metric.WithAttributeSet(withRun(x.run, attribute.String(AttrReason, r))))
	}
	for _, r := range sidecarRefusalReasons {
		x.refusals.Add(ctx, 0, metric.WithAttributeSet(withRun(x.run, attribute.String(AttrReason, r))))
	}
	return x, nil
}

func (m *sidecarMetrics) protocolError(ctx context.Context, reason string) {
	m.protoErrs.Add(ctx, 1, metric.WithAttributeSet(withRun(m.run, attribute.String(AttrReason, reason))))
}

// refused counts a call refused by the bound named by reason.
func (m *sidecarMetrics) refused(ctx context.Context, reason string) {
	m.refusals.Add(ctx, 1, metric.WithAttributeSet(withRun(m.run, attribute.String(AttrReason, reason))))
}

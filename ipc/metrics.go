package ipc

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// Component metric names (amdahl.ipc.*) and their attribute keys.
const (
	MetricBytes           = "amdahl.ipc.bytes"            // By, counter: op, direction, transport
	MetricPackets         = "amdahl.ipc.packets"          // {packet}, counter: op, direction, transport
	MetricSendBlocked     = "amdahl.ipc.send.blocked"     // s, histogram: direction, transport
	MetricQueueDepth      = "amdahl.ipc.queue.depth"      // {packet}, up-down counter: transport
	MetricQueueBytes      = "amdahl.ipc.queue.bytes"      // By, up-down counter: transport
	MetricBufferRequested = "amdahl.ipc.buffer.requested" // By, gauge: transport
	MetricBufferEffective = "amdahl.ipc.buffer.effective" // By, gauge: transport
	MetricHandshakes      = "amdahl.ipc.handshakes"       // counter: outcome, field, transport
	MetricProtocolErrors  = "amdahl.ipc.protocol.errors"  // counter: kind, transport
	MetricStalls          = "amdahl.ipc.stalls"           // counter: kind (write, reply), transport

	// AttrOp is send or receive on amdahl.ipc.bytes and amdahl.ipc.packets.
	AttrOp attribute.Key = "amdahl.ipc.op"
	// AttrField is the handshake field that mismatched ("" on success).
	AttrField attribute.Key = "amdahl.ipc.field"
	// AttrKind is the kind of a protocol error.
	AttrKind attribute.Key = "amdahl.ipc.kind"
)

type metrics struct {
	bytes, packets        metric.Int64Counter
	blocked               metric.Float64Histogram
	queueDepth, queueSize metric.Int64UpDownCounter
	bufReq, bufEff        metric.Int64Gauge
	handshakes, protoErrs metric.Int64Counter
	stalls                metric.Int64Counter
	transport             attribute.KeyValue
	// live: the provider records (not nil, not the no-op one), so the
	// span in a measurement's context may be read (exemplars).
	live bool
	// run holds the component's scenario and variant (telemetry.Component.RunAttributes).
	run []attribute.KeyValue
	// [op][direction]
	ioOpt      [2][telemetry.NumDirections]metric.AddOption
	blockedOpt [telemetry.NumDirections]metric.RecordOption
	plainAdd   metric.AddOption
	plainRec   metric.RecordOption
}

const (
	opSend = iota
	opReceive
)

// newMetrics creates the instruments; comp (may be nil) contributes its
// scenario and variant to every attribute set.
func newMetrics(mp metric.MeterProvider, transport string, comp *telemetry.Component) (*metrics, error) {
	_, isNoop := mp.(noop.MeterProvider)
	live := mp != nil && !isNoop
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := telemetry.Meter(mp)
	x := &metrics{transport: telemetry.AttrTransport.String(transport), run: comp.RunAttributes(), live: live}
	var errs []error
	check := func(name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("ipc: create %s: %w", name, err))
		}
	}
	var err error
	x.bytes, err = m.Int64Counter(MetricBytes, metric.WithUnit("By"), metric.WithDescription("Frame bytes (header and body) sent or received."))
	check(MetricBytes, err)
	x.packets, err = m.Int64Counter(MetricPackets, metric.WithUnit("{packet}"), metric.WithDescription("Packets sent or received."))
	check(MetricPackets, err)
	x.blocked, err = m.Float64Histogram(MetricSendBlocked, metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(telemetry.DurationBuckets...),
		metric.WithDescription("Time the writer was blocked writing one packet to the socket."))
	check(MetricSendBlocked, err)
	x.queueDepth, err = m.Int64UpDownCounter(MetricQueueDepth, metric.WithUnit("{packet}"), metric.WithDescription("Packets queued for the writer."))
	check(MetricQueueDepth, err)
	x.queueSize, err = m.Int64UpDownCounter(MetricQueueBytes, metric.WithUnit("By"), metric.WithDescription("Bytes queued for the writer."))
	check(MetricQueueBytes, err)
	x.bufReq, err = m.Int64Gauge(MetricBufferRequested, metric.WithUnit("By"), metric.WithDescription("Requested SO_SNDBUF (ipc.buffer)."))
	check(MetricBufferRequested, err)
	x.bufEff, err = m.Int64Gauge(MetricBufferEffective, metric.WithUnit("By"), metric.WithDescription("SO_SNDBUF read back from the socket (doubled and clamped by the kernel)."))
	check(MetricBufferEffective, err)
	x.handshakes, err = m.Int64Counter(MetricHandshakes, metric.WithUnit("{handshake}"), metric.WithDescription("Handshakes by outcome and mismatching field."))
	check(MetricHandshakes, err)
	x.protoErrs, err = m.Int64Counter(MetricProtocolErrors, metric.WithUnit("{error}"), metric.WithDescription("Protocol errors by kind."))
	check(MetricProtocolErrors, err)
	x.stalls, err = m.Int64Counter(MetricStalls, metric.WithUnit("{stall}"), metric.WithDescription("Writes blocked, or replies a codec awaits, longer than the stall threshold."))
	check(MetricStalls, err)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for op, name := range []string{"send", "receive"} {
		for d := telemetry.Request; d <= telemetry.Reply; d++ {
			x.ioOpt[op][d] = metric.WithAttributeSet(x.set(AttrOp.String(name), telemetry.AttrDirection.String(d.String())))
		}
	}
	for d := telemetry.Request; d <= telemetry.Reply; d++ {
		x.blockedOpt[d] = metric.WithAttributeSet(x.set(telemetry.AttrDirection.String(d.String())))
	}
	set := metric.WithAttributeSet(x.set())
	x.plainAdd, x.plainRec = set, set
	return x, nil
}

// set is the attribute set of transport, scenario, variant and kv.
func (m *metrics) set(kv ...attribute.KeyValue) attribute.Set {
	all := make([]attribute.KeyValue, 0, 1+len(m.run)+len(kv))
	all = append(append(append(all, m.transport), m.run...), kv...)
	return attribute.NewSet(all...)
}

func (m *metrics) packet(ctx context.Context, op int, d telemetry.Direction, n int) {
	m.bytes.Add(ctx, int64(n), m.ioOpt[op][d])
	m.packets.Add(ctx, 1, m.ioOpt[op][d])
}

func (m *metrics) handshake(ctx context.Context, err error) {
	outcome, field := "ok", ""
	if err != nil {
		outcome = "failed"
		var he *HandshakeError
		if errors.As(err, &he) {
			field = he.Field
		}
	}
	m.handshakes.Add(ctx, 1, metric.WithAttributeSet(m.set(telemetry.AttrOutcome.String(outcome), AttrField.String(field))))
}

func (m *metrics) protocolError(ctx context.Context, kind string) {
	m.protoErrs.Add(ctx, 1, metric.WithAttributeSet(m.set(AttrKind.String(kind))))
}

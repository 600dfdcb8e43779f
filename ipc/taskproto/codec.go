package taskproto

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
)

// KindDelta is the amdahl.ipc.kind of the protocol error a map marked
// identical before any full copy causes.
const KindDelta = "delta"

// timingsField is TaskResult.timings' field number, read from the schema:
// the reply's own serialize timing is appended to the encoded result as
// one more element of this repeated field.
var timingsField = protowire.Number((&ipcpb.TaskResult{}).ProtoReflect().Descriptor().Fields().ByName("timings").Number())

// The reply's send stamp (ipc.SendStamper) is TaskResult.reply_send, a
// ReplySend of two fixed64 fields, encoded after the rest of the result;
// their field numbers, read from the schema.
var (
	replySendField = protowire.Number((&ipcpb.TaskResult{}).ProtoReflect().Descriptor().Fields().ByName("reply_send").Number())
	sendStartField = protowire.Number((&ipcpb.ReplySend{}).ProtoReflect().Descriptor().Fields().ByName("start_unix_nano").Number())
	sendEndField   = protowire.Number((&ipcpb.ReplySend{}).ProtoReflect().Descriptor().Fields().ByName("end_unix_nano").Number())
	// stampSize is the size of the encoded reply_send field.
	stampSize = len(appendStamp(nil, 0, 0))
)

// appendStamp appends the reply_send field with start and end (Unix ns),
// always stampSize bytes: the fields are fixed-width.
func appendStamp(dst []byte, start, end int64) []byte {
	n := protowire.SizeTag(sendStartField) + protowire.SizeFixed64() + protowire.SizeTag(sendEndField) + protowire.SizeFixed64()
	dst = protowire.AppendTag(dst, replySendField, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(n))
	dst = protowire.AppendTag(dst, sendStartField, protowire.Fixed64Type)
	dst = protowire.AppendFixed64(dst, uint64(start))
	dst = protowire.AppendTag(dst, sendEndField, protowire.Fixed64Type)
	return protowire.AppendFixed64(dst, uint64(end))
}

var errNoBaseline = errors.New("no delta baseline")

// Option configures one end's task-host codec.
type Option func(*codec)

// WithDelta turns delta encoding of environments and global properties on
// or off for the packets this end sends (setting ipc.delta; default on).
// The receiving end restores either.
func WithDelta(on bool) Option { return func(c *codec) { c.delta = on } }

// WithCodec returns the ipc option that makes a connection speak the
// task-host protocol; both ends must install it. Each connection gets a
// codec of its own: the delta baselines are per connection and direction.
func WithCodec(opts ...Option) ipc.Option {
	return ipc.WithCodec(func() ipc.Codec {
		c := &codec{delta: true}
		for _, o := range opts {
			o(c)
		}
		return c
	})
}

// codec is the task-host protocol's ipc.Codec for one connection.
type codec struct {
	delta bool
	sent  baseline // AppendBody only: under the Conn's send lock
	recv  baseline // Decode only: on the Conn's reader goroutine

	mu sync.Mutex
	// anchors holds, for each result Reply is sending, when the host
	// started receiving the request it answers (monotonic): the anchor of
	// the reply's serialize timing, which AppendBody measures; and
	// whether its send is stamped.
	anchors map[*ipcpb.TaskResult]anchor
	// awaited holds, by id, each configuration sent whose result has
	// not arrived (Received takes it).
	awaited map[uint64]request
}

// request is a configuration awaiting its result: the span it was sent
// under and the Send's context, which carries it. The result's receive
// and deserialize spans are recorded in that context, under the span
// itself, which a tracer can recognise as its own (the runtime's files it
// by its unit without looking its trace up), with no context made.
type request struct {
	span trace.Span
	ctx  context.Context
}

// ReplyPhaseRecorder is implemented by a span whose owner records the
// receive and deserialize phases of the results of configurations sent
// under it, from the result's ipc.Incoming (PhasesLeft), on the goroutine
// that takes the result, when RecordsReplyPhases reports true. amdahl's
// runtime does: a unit's spans are kept by its worker, which the Conn's
// reader goroutine would otherwise write from another core.
type ReplyPhaseRecorder interface {
	RecordsReplyPhases() bool
}

// Traces implements ipc.PhasePolicy: configurations and results.
func (c *codec) Traces(t ipc.Type) bool {
	return t == ipc.TypeTaskConfiguration || t == ipc.TypeTaskResult
}

// Received implements ipc.PhasePolicy: it pairs a result with the
// configuration it answers (see the package doc).
func (c *codec) Received(in *ipc.Incoming) (context.Context, bool) {
	res, ok := in.Msg.(*ipcpb.TaskResult)
	if !ok {
		return nil, false
	}
	c.mu.Lock()
	req, ok := c.awaited[res.GetId()]
	delete(c.awaited, res.GetId())
	c.mu.Unlock()
	if sc := in.SpanContext(); !ok || !sameSpan(req.span.SpanContext(), sc) {
		return nil, false
	}
	if r, ok := req.span.(ReplyPhaseRecorder); ok && r.RecordsReplyPhases() {
		return nil, true
	}
	return req.ctx, false
}

// Awaiting implements ipc.PhasePolicy: the ids of the configurations
// sent whose results have not arrived.
func (c *codec) Awaiting(f func(id uint64)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.awaited {
		f(id)
	}
}

// Unsent implements ipc.PhasePolicy: a configuration that was not sent
// awaits no result.
func (c *codec) Unsent(m proto.Message) {
	if p, ok := m.(*ipcpb.TaskConfiguration); ok {
		c.mu.Lock()
		delete(c.awaited, p.GetId())
		c.mu.Unlock()
	}
}

// sameSpan reports whether a and b name the same span of the same trace.
func sameSpan(a, b trace.SpanContext) bool {
	return a.IsValid() && a.TraceID() == b.TraceID() && a.SpanID() == b.SpanID()
}

// anchor is what Reply tells the codec of a result it sends.
type anchor struct {
	at    time.Time
	stamp bool // the request's trace is sampled: the parent reads the send
}

// setTraceContext sets a packet's trace_parent to sc in binary
// (ipc.AppendTraceParent) and its trace_context to sc's tracestate alone,
// or clears both for an invalid sc. The map is made only for a
// tracestate: most spans have none.
func setTraceContext(parent *[]byte, carrier *map[string]string, sc trace.SpanContext) {
	*parent = ipc.AppendTraceParent((*parent)[:0], sc)
	clear(*carrier)
	if ts := sc.TraceState().String(); ts != "" && sc.IsValid() {
		if *carrier == nil {
			*carrier = make(map[string]string, 1)
		}
		(*carrier)["tracestate"] = ts
	}
}

// baseline holds, for one direction, the last maps sent or received in
// full.
type baseline struct {
	confEnv, confProps, resEnv map[string]string
}

// AppendBody encodes m: a configuration gets the W3C trace context of
// ctx's span (TraceContext is left set) and its environment and global
// properties delta-marked, and awaits its result (Received); a result its
// environment delta-marked and, when Reply sends it, the reply's
// serialize timing appended. Every other packet is plain protobuf. m's
// maps and modes are restored before it returns.
func (c *codec) AppendBody(ctx context.Context, dst []byte, t ipc.Type, m proto.Message) ([]byte, error) {
	switch p := m.(type) {
	case *ipcpb.TaskConfiguration:
		return c.appendConfiguration(ctx, dst, p)
	case *ipcpb.TaskResult:
		out, _, err := c.appendResult(dst, p, false)
		return out, err
	}
	return marshalAppend(dst, t, m)
}

// AppendStampedBody is AppendBody (ipc.SendStamper), with, at the end of
// a result that Reply sends for a sampled request, room for the reply's
// send stamp (TaskResult.reply_send), which StampSend fills in.
func (c *codec) AppendStampedBody(ctx context.Context, dst []byte, t ipc.Type, m proto.Message) ([]byte, int, error) {
	if p, ok := m.(*ipcpb.TaskResult); ok {
		return c.appendResult(dst, p, true)
	}
	out, err := c.AppendBody(ctx, dst, t, m)
	return out, 0, err
}

// StampSend fills in a result's reply_send with the send's start in this
// host's wall clock and its end as the start plus the monotonic time
// between them (ipc.SendStamper), so that a step of the wall clock during
// the write cannot change the send's length.
func (c *codec) StampSend(stamp []byte, start, end time.Time) {
	if len(stamp) == stampSize {
		appendStamp(stamp[:0], start.UnixNano(), start.UnixNano()+int64(max(end.Sub(start), 0)))
	}
}

func (c *codec) appendConfiguration(ctx context.Context, dst []byte, p *ipcpb.TaskConfiguration) ([]byte, error) {
	span := trace.SpanFromContext(ctx)
	setTraceContext(&p.TraceParent, &p.TraceContext, span.SpanContext())
	env, envMode := p.Environment, p.EnvironmentMode
	props, propsMode := p.GlobalProperties, p.GlobalPropertiesMode
	p.EnvironmentMode, p.GlobalPropertiesMode = ipcpb.DeltaMode_DELTA_MODE_FULL, ipcpb.DeltaMode_DELTA_MODE_FULL
	if sendIdentical(c.delta, env, &c.sent.confEnv) {
		p.Environment, p.EnvironmentMode = nil, ipcpb.DeltaMode_DELTA_MODE_IDENTICAL
	}
	if sendIdentical(c.delta, props, &c.sent.confProps) {
		p.GlobalProperties, p.GlobalPropertiesMode = nil, ipcpb.DeltaMode_DELTA_MODE_IDENTICAL
	}
	dst, err := marshalAppend(dst, ipc.TypeTaskConfiguration, p)
	p.Environment, p.EnvironmentMode = env, envMode
	p.GlobalProperties, p.GlobalPropertiesMode = props, propsMode
	if err == nil {
		// Awaited before it is queued: once queued, the writer may send
		// it and the reader read its result before Send returns.
		c.mu.Lock()
		if c.awaited == nil {
			c.awaited = make(map[uint64]request, 1)
		}
		c.awaited[p.GetId()] = request{span, ctx}
		c.mu.Unlock()
	}
	return dst, err
}

// appendResult encodes a result and, when Reply sends it, the reply's
// serialize timing after it, then, when stamps and the request is
// sampled, room for the send's stamp (its size is returned).
func (c *codec) appendResult(dst []byte, p *ipcpb.TaskResult, stamps bool) ([]byte, int, error) {
	a, reply := c.takeAnchor(p)
	env, envMode := p.Environment, p.EnvironmentMode
	p.EnvironmentMode = ipcpb.DeltaMode_DELTA_MODE_FULL
	if sendIdentical(c.delta, env, &c.sent.resEnv) {
		p.Environment, p.EnvironmentMode = nil, ipcpb.DeltaMode_DELTA_MODE_IDENTICAL
	}
	start := time.Now()
	dst, err := marshalAppend(dst, ipc.TypeTaskResult, p)
	p.Environment, p.EnvironmentMode = env, envMode
	if err != nil || !reply {
		return dst, 0, err
	}
	// The reply's serialize time is part of the reply: encode it as one
	// more element of the repeated timings field, after the fact.
	pt := &ipcpb.PhaseTiming{Phase: ipcpb.Phase_PHASE_REPLY_SERIALIZE, StartOffsetNs: int64(start.Sub(a.at)), DurationNs: int64(time.Since(start))}
	dst = protowire.AppendTag(dst, timingsField, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(proto.Size(pt)))
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(dst, pt)
	if err != nil {
		return dst, 0, fmt.Errorf("taskproto: encode reply timing: %w", err)
	}
	if !stamps || !a.stamp {
		return out, 0, nil
	}
	// The send's stamp comes last: the Conn fills it in (StampSend)
	// before it writes it, with the rest of the frame or after it.
	return appendStamp(out, 0, 0), stampSize, nil
}

func (c *codec) setAnchor(p *ipcpb.TaskResult, a anchor) {
	c.mu.Lock()
	if c.anchors == nil {
		c.anchors = make(map[*ipcpb.TaskResult]anchor, 1)
	}
	c.anchors[p] = a
	c.mu.Unlock()
}

// takeAnchor returns and forgets p's anchor; ok is false for a result not
// sent by Reply.
func (c *codec) takeAnchor(p *ipcpb.TaskResult) (a anchor, ok bool) {
	c.mu.Lock()
	a, ok = c.anchors[p]
	if ok {
		delete(c.anchors, p)
	}
	c.mu.Unlock()
	return a, ok
}

func marshalAppend(dst []byte, t ipc.Type, m proto.Message) ([]byte, error) {
	out, err := proto.MarshalOptions{}.MarshalAppend(dst, m)
	if err != nil {
		return dst, fmt.Errorf("taskproto: encode %s packet: %w", t, err)
	}
	return out, nil
}

// sendIdentical reports whether cur can go as identical to *base, and
// records cur as the new baseline when it goes in full.
func sendIdentical(on bool, cur map[string]string, base *map[string]string) bool {
	if on && *base != nil && maps.Equal(cur, *base) {
		return true
	}
	*base = cloneMap(cur)
	return false
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(m)
}

// Decode decodes a packet and, for a configuration or a result, restores
// the maps marked identical from the receive-side baseline and records
// full ones as the new baseline. An identical map before any full one is
// an *ipc.ProtocolError of kind KindDelta.
func (c *codec) Decode(t ipc.Type, body []byte) (proto.Message, error) {
	m, err := ipc.Unmarshal(t, body)
	if err != nil {
		return nil, err
	}
	switch p := m.(type) {
	case *ipcpb.TaskConfiguration:
		err = restore("environment", p.EnvironmentMode, &p.Environment, &c.recv.confEnv)
		if err == nil {
			err = restore("global properties", p.GlobalPropertiesMode, &p.GlobalProperties, &c.recv.confProps)
		}
	case *ipcpb.TaskResult:
		err = restore("environment", p.EnvironmentMode, &p.Environment, &c.recv.resEnv)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

func restore(field string, mode ipcpb.DeltaMode, cur *map[string]string, base *map[string]string) error {
	if mode == ipcpb.DeltaMode_DELTA_MODE_IDENTICAL {
		if *base == nil {
			return &ipc.ProtocolError{Kind: KindDelta, Err: fmt.Errorf("taskproto: %s marked identical before any full %s: %w", field, field, errNoBaseline)}
		}
		*cur = maps.Clone(*base)
		return nil
	}
	*base = cloneMap(*cur)
	return nil
}

package taskproto

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
)

// ErrNoCodec is returned by Reply on a connection opened without WithCodec.
var ErrNoCodec = errors.New("taskproto: the connection does not speak the task-host protocol (open it with taskproto.WithCodec)")

// Reply is the task host's answer: it sends res on conn as the result of
// in, a task configuration received on conn, with what the parent needs
// to place the host's phases. It sets res.Timings to the receive and
// deserialize phases of in and the execute phase (execStart, execDur), as
// offsets from in.ReceiveStart; res.ReceiveStartUnixNano to that anchor in
// this host's wall clock; and res.TraceParent (and res.TraceContext, for
// a tracestate) to the request's trace context. The reply's own serialize phase is measured while the codec
// encodes it and appended to the encoded packet as a fourth timing (it is
// not added to res.Timings); when in's trace context is sampled, the
// reply's send is stamped into the packet's reply_send before the write
// carrying them is issued (see the package doc; res.ReplySend is left unset). The reply's serialize and send spans, when
// conn records them, are children of the request's span (in.Context; ctx
// itself when it carries that span already, as in.Context's result does);
// when conn reads no span (ipc.Conn.UsesSpans), ctx is sent as it is.
//
// conn must have been opened with WithCodec (else ErrNoCodec). Reply
// blocks as conn.Send does, and, as with Send, res must not be used
// concurrently.
func Reply(ctx context.Context, conn *ipc.Conn, in *ipc.Incoming, res *ipcpb.TaskResult, execStart time.Time, execDur time.Duration) error {
	c, ok := conn.Codec().(*codec)
	if !ok {
		return ErrNoCodec
	}
	base := in.ReceiveStart
	res.ReceiveStartUnixNano = base.UnixNano()
	setTraceContext(&res.TraceParent, &res.TraceContext, in.SpanContext())
	res.Timings = append(res.Timings[:0],
		&ipcpb.PhaseTiming{Phase: ipcpb.Phase_PHASE_RECEIVE, StartOffsetNs: 0, DurationNs: int64(in.ReceiveDuration)},
		&ipcpb.PhaseTiming{Phase: ipcpb.Phase_PHASE_DESERIALIZE, StartOffsetNs: int64(in.ReceiveDuration), DurationNs: int64(in.DeserializeDuration)},
		&ipcpb.PhaseTiming{Phase: ipcpb.Phase_PHASE_EXECUTE, StartOffsetNs: int64(execStart.Sub(base)), DurationNs: int64(execDur)},
	)
	// The send is stamped when the parent reads the host's phases: its
	// trace of the request is sampled.
	c.setAnchor(res, anchor{at: base, stamp: in.SpanContext().IsSampled()})
	// The reply's own serialize and send spans join the request's trace,
	// under ctx as it is when it carries the request's span already (a
	// task host derives one context for the task and its reply).
	sctx := ctx
	if conn.UsesSpans() && !trace.SpanContextFromContext(ctx).Equal(in.SpanContext()) {
		sctx = in.Context(ctx)
	}
	err := conn.Send(sctx, res)
	c.takeAnchor(res) // when Send failed before encoding
	return err
}

package ipc

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
)

// Codec is the message-specific half of a Conn: how a packet becomes a
// frame body and back. The Conn owns the rest (framing, size limits,
// buffers, queue, goroutines, phase spans and metrics), and calls its Codec
// one call at a time per direction, in wire order, so a Codec may keep
// per-connection state for each direction (a delta baseline) without
// locking:
//
//   - AppendBody runs in Send's goroutine inside the ipc.serialize phase,
//     with the Conn's send lock held, in the order packets go on the wire.
//     It appends the body of m, a packet of type t, to dst and returns the
//     extended slice. It must not retain dst or m. It may change m's fields
//     while it runs (Send's caller does not use m concurrently); fields it
//     leaves changed are part of its documented protocol.
//   - Decode runs on the Conn's reader goroutine inside the
//     ipc.deserialize phase, in the order packets arrive. body is valid
//     only during the call; the message returned is owned by the receiver.
//     A body that is not a valid encoding is a *DecodeError (Unmarshal
//     returns one); a packet that decodes but breaks the codec's protocol
//     is a *ProtocolError. Either error fails the connection.
//
// The size limit (WithMaxPacketSize) applies to what AppendBody produced.
// A packet AppendBody encoded that the Conn then does not queue (over that
// limit, or Send's ctx ended or the connection closed while the queue was
// full) is not sent; what the codec kept of it stays (a delta baseline),
// but a PhasePolicy is told (Unsent). Both ends of a connection must use
// codecs that agree.
type Codec interface {
	AppendBody(ctx context.Context, dst []byte, t Type, m proto.Message) ([]byte, error)
	Decode(t Type, body []byte) (proto.Message, error)
}

// SendStamper is implemented by a Codec some of whose packets end with a
// stamp of their own write: a few bytes, sized when the packet is
// encoded, that the Conn's writer fills in with the send's start and end
// (the ipc.send span's) before those bytes are written. The rule, which a
// peer in another language must keep too: the end a stamp names is no
// later than the moment the write(2) that carries the stamp's bytes is
// issued. The peer then cannot have read the frame whole before that end,
// so a phase the stamp reports ends before anything the peer does once it
// has the packet. The stamp cannot include the write that carries it,
// and that write is not in the send's duration; the span's
// amdahl.ipc.write.duration (AttrWriteDuration) holds it, when span
// attributes are read. How the writer writes a stamped frame depends on
// its size:
//
//   - a small frame, at most a quarter of the connection's send buffer
//     and at most 16 KiB, goes in one write(2): the writer reads the
//     clock, stamps the frame with that instant as the send's end, and
//     issues the write. The send ends when its write is issued; the
//     kernel's copy and the peer's wake-up fall in the time after it.
//     Such a write fits in the buffer, so it does not wait for the
//     reader, unless the reader has left the buffer mostly full; a wait
//     then falls after the send's end too, and is seen only in
//     amdahl.ipc.send.blocked and amdahl.ipc.write.duration;
//   - a larger frame, whose write can wait for the reader, goes in two:
//     all but the stamp, then, after a clock read, the stamp with that
//     instant as the send's end. The send then covers the first write's
//     wait for the reader, at the cost of a second write(2).
//
// Unstamped frames go in one write(2), which the send's end follows.
//
// Its methods:
//
//   - AppendStampedBody is AppendBody (same goroutine, lock, phase and
//     contract), for a Conn that stamps: stamp is the size of the stamp
//     that ends the returned body, 0 for a packet it does not stamp. A
//     Conn calls it instead of AppendBody.
//   - StampSend runs on the Conn's writer goroutine before the stamp is
//     written: before the frame's one write, or between its two. stamp is
//     the frame's last bytes, as AppendStampedBody sized them; start is
//     when the frame's write began and end the clock read just before
//     the stamp (one write: before the write is issued; two: after all of
//     the frame but the stamp had been written): the ipc.send span's
//     start and end. It must only write into stamp.
type SendStamper interface {
	AppendStampedBody(ctx context.Context, dst []byte, t Type, m proto.Message) (out []byte, stamp int, err error)
	StampSend(stamp []byte, start, end time.Time)
}

// PhasePolicy is implemented by a Codec whose protocol decides which
// packets get phase spans, and where a received packet's go, as a
// request/reply protocol pairs a reply with its request (taskproto's
// does). Without one, every packet is traced, a received one under the
// span its trace context names (Incoming.Context), and the stall
// watchdog watches writes only. The Conn calls:
//
//   - Traces once per packet type when it opens: whether packets of type
//     t get phase spans and amdahl.phase.duration, or are only counted.
//   - Received on the reader goroutine, for every packet once decoded,
//     whether or not phases are recorded: the context to record its
//     receive and deserialize spans in (nil: Incoming.Context's), or
//     left, when the receiver records them (Incoming.PhasesLeft). It
//     must not block.
//   - Awaiting on the watchdog goroutine, once per tick: f with the id
//     of each request awaiting its reply (one awaited longer than the
//     stall threshold is reported once). f must not call back.
//   - Unsent in Send, when m, given to the codec, is not queued after all
//     (it is not sent): a request it made await its reply awaits nothing.
type PhasePolicy interface {
	Traces(t Type) bool
	Received(in *Incoming) (ctx context.Context, left bool)
	Awaiting(f func(id uint64))
	Unsent(m proto.Message)
}

// WithCodec sets the constructor of the connection's Codec; the Conn calls
// it once, so per-connection state is never shared between connections.
// nil, the default, is the plain protobuf codec: AppendBody marshals m,
// Decode is Unmarshal. Package ipc/taskproto provides the task-host
// protocol's codec (delta encoding, reply timings).
func WithCodec(newCodec func() Codec) Option { return func(o *config) { o.newCodec = newCodec } }

// ProtocolError reports a packet that decoded but breaks the protocol its
// Codec speaks (for example, in package taskproto, a map marked identical
// before any full copy). Kind is the amdahl.ipc.kind under which
// amdahl.ipc.protocol.errors counts it ("delta").
type ProtocolError struct {
	Kind string
	Err  error
}

func (e *ProtocolError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *ProtocolError) Unwrap() error { return e.Err }

// protoCodec is the default Codec: plain protobuf, no state.
type protoCodec struct{}

func (protoCodec) AppendBody(_ context.Context, dst []byte, t Type, m proto.Message) ([]byte, error) {
	out, err := proto.MarshalOptions{}.MarshalAppend(dst, m)
	if err != nil {
		return dst, fmt.Errorf("ipc: encode %s packet: %w", t, err)
	}
	return out, nil
}

func (protoCodec) Decode(t Type, body []byte) (proto.Message, error) { return Unmarshal(t, body) }

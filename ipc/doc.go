// Package ipc is the wire between an amdahl parent and its out-of-process
// task hosts (the MSBuild TaskHost pattern, done for Linux): a transport, a
// handshake, length-prefixed frames of protobuf packets (package ipcpb),
// one reader and one writer goroutine per connection, sync and async send
// modes, and send-buffer sizing where Linux honours it.
//
// What the packets mean is not this package's business: a Codec, installed
// per connection with WithCodec, turns packets into frame bodies and back.
// The task-host protocol (task configurations answered by task results,
// delta encoding of repeated environments, trace context, the host's phase
// timings in each reply) is package ipc/taskproto, which provides one.
//
// # Transports
//
// The package spawns nothing: it works on connections and files it is
// given, with helpers for both ends.
//
//   - NewPair: socketpair(AF_UNIX, SOCK_STREAM) handed to the child at spawn
//     (the default: no path, no naming race). The child reads the
//     launch contract with LookupInherited and calls AcceptInherited.
//   - Listen / Dial: a named Unix socket in a private 0700 directory, for
//     connecting to an existing host; both ends check SO_PEERCRED (same uid).
//   - NewPipePair: two anonymous pipes sized with F_SETPIPE_SZ; EPERM above
//     /proc/sys/fs/pipe-max-size or past the per-user pipe budget is logged
//     as a warning and the pipe keeps its size.
//
// # Wire
//
// Handshake (ProtocolVersion 2). The token never crosses the connection:
// each end proves it holds it with an HMAC-SHA256 over both ends' fresh
// nonces, and the child (the end that accepts: on a named socket, the end
// any process of the same uid can reach) sends nothing derived from the
// token until the parent has proven it holds it.
//
//	parent                                   child
//	hello: "AMDAHLIP" version nonceP    ──▶  ◀──  hello: "AMDAHLIP" version nonceC
//	verdict on the peer's hello         ──▶  ◀──  verdict on the peer's hello
//	  (0 ok, 1 magic, 2 version; both ends at once, a non-zero one ends it)
//	proofP = HMAC(token, "AMDAHLIP parent\0" nonceP nonceC)  ──▶
//	                                         ◀──  verdict on proofP (0 ok, 3 token),
//	                                              then, only after 0, proofC =
//	                                              HMAC(token, "AMDAHLIP child\0" nonceP nonceC)
//	verdict on proofC (0 ok, 3 token)   ──▶
//
// The version is a big-endian uint16; nonces and proofs are 32 bytes. The
// nonces make each proof fresh and the role labels keep a child's proof
// from passing as a parent's. A mismatch is a *HandshakeError naming the
// field (Peer set when the other end rejected ours). The parent is the end
// that spawns or dials (Pair.Connect, PipePair.Connect, Connect, Dial), the
// child the end that is spawned or accepts (Accept, AcceptInherited,
// Listener.Accept). The token reaches the child in AMDAHL_IPC_TOKEN, never
// in argv.
//
// A Listener (a named socket any same-uid process can reach) handshakes
// each connection in a goroutine of its own under its own timeout
// (WithHandshakeTimeout), at most WithMaxPendingHandshakes (default 64) at
// once, beyond which connections wait in the socket's backlog: peers that
// connect and stay silent do not delay a parent that connects after them.
//
// Frames: one type byte (TypeTaskConfiguration … TypeShutdown), a
// little-endian uint32 body length, then the body: the packet's encoding
// by the connection's Codec (plain protobuf by default). Both ends enforce
// a maximum body size (WithMaxPacketSize, default 256 MiB). The reader
// always reads exactly the announced length with io.ReadFull and
// allocates as bytes arrive, never ahead of them. A frame is one
// write(2), or two when its Codec stamps it and it is large
// (SendStamper); either way the bytes on the wire are a frame like any
// other, so a reader needs to know nothing of stamps.
// Errors: io.EOF between frames (clean close, ErrPeerClosed from Recv),
// io.ErrUnexpectedEOF inside one, *UnknownTypeError, *PacketSizeError
// (matches ErrPacketTooLarge), *TrailingBytesError (DecodePacket),
// *DecodeError, and a Codec's *ProtocolError.
//
// # Codec
//
// A Codec has two methods. AppendBody runs inside the ipc.serialize phase,
// under the Conn's send lock, in wire order; Decode runs inside the
// ipc.deserialize phase, on the reader goroutine, in arrival order. So the
// phase spans cover the codec's whole work (marshal, unmarshal and
// whatever its protocol adds), and a codec may keep per-direction state
// without locking. Each Conn gets its own codec from the constructor given
// to WithCodec; Conn.Codec returns it. The Conn reads the W3C trace context
// a packet carries (its trace_parent field, a binary traceparent:
// AppendTraceParent, ParseTraceParent; its trace_context map holds a
// tracestate, or an older peer's text headers) to parent its receive-side
// spans; what a packet carries is the codec's protocol. A Codec that also
// implements PhasePolicy decides which packets are traced and where a
// received one's spans go (taskproto's pairs a result with its request).
// A Codec that also implements SendStamper can end a packet with a stamp
// of its own write, which the writer fills in before the stamp's bytes
// leave: the times of the ipc.send span, carried to the peer in the
// packet they measure (taskproto stamps a reply's send this way).
//
// # Settings
//
// Every setting is an Option, applied over a plain default; the package
// reads no environment variables and no feature waves. A program resolves
// its settings (amdahl's runtime: --set > AMDAHL_<NAME> > wave default) and
// passes them as options. An invalid value is an error naming the setting
// and the valid values.
//
//	WithBufferSize (ipc.buffer)  requested SO_SNDBUF of this end, in bytes
//	    (1 … MaxBufferSize; ParseBufferSize reads amdahl's size grammar:
//	    "262144", "256KiB", "1.5MiB"). Default DefaultBufferSize (1 MiB). On AF_UNIX only the
//	    sender's SO_SNDBUF limits in-flight bytes, so each end sets its own;
//	    the kernel doubles and clamps it to net.core.wmem_max. For pipes it
//	    is applied with F_SETPIPE_SZ to the pipe this end writes (rounded up
//	    to a power-of-two number of pages). The effective value is read
//	    back, logged and exported (Conn.BufferSize,
//	    amdahl.ipc.buffer.effective).
//	WithMode (ipc.send)          Sync (default) or Async (ParseMode).
//
// The setting ipc.delta belongs to the task-host protocol:
// taskproto.WithDelta.
//
// The launch contract is not a setting: a parent hands its child the
// connection and the token in AMDAHL_IPC_FD and AMDAHL_IPC_TOKEN
// (Pair.ChildEnv, PipePair.ChildEnv): one socket fd ("3") or a pipe read
// and write fd ("3,4"), and the hex token. The child reads them with
// LookupInherited(os.LookupEnv) — the package itself reads no environment —
// and unsets AMDAHL_IPC_TOKEN; a program started by hand without them gets
// ErrNotChild, whose message says so.
//
// # Telemetry
//
// Spans ipc.serialize and ipc.send on the sending side, ipc.receive and
// ipc.deserialize on the receiving side, each with amdahl.phase and
// amdahl.direction (request for packets the parent sends, reply for those
// the child sends). An ipc.send span covers the packet's write(2), from
// when the writer took the packet to when the write returned, except for
// a stamped frame, whose send ends when the write carrying its stamp is
// issued, so that the stamp can hold the end (SendStamper).
// When span attributes are read (telemetry.Component.SpanAttributes),
// ipc.serialize carries amdahl.bytes (the body's size), and ipc.send
//
//	amdahl.bytes                  the frame's size in bytes, header included
//	amdahl.ipc.buffer.effective   the send buffer (AttrBuffer)
//	amdahl.ipc.write.duration     stamped frames only: seconds the write
//	                              carrying the stamp took past the span's
//	                              end (AttrWriteDuration)
//
// Metrics (see the Metric* constants): bytes and packets
// per op and direction, send-blocked time (amdahl.ipc.send.blocked: the
// writer's time from taking a packet until its last write returned,
// stamped or not), queue depth and bytes,
// requested and effective buffer, handshakes by outcome and field,
// protocol errors by kind (truncated, unknown_type, too_large, decode,
// encode, or the Kind of a Codec's *ProtocolError, such as taskproto's
// delta), stalls by kind. Every one carries amdahl.transport (the
// connection's: socketpair, pipe, …) and the amdahl.scenario and
// amdahl.variant of the WithTelemetry component. Which packets get phase
// spans is the codec's PhasePolicy's (taskproto's: task configurations
// and results; log and shutdown packets are counted, not traced); without
// one, every packet gets them.
//
// A received packet's receive and deserialize spans are recorded by the
// reader goroutine, under the span its trace context names or in the
// context its codec's PhasePolicy gives, unless the policy leaves them to
// the receiver (Incoming.PhasesLeft; taskproto.ReplyPhaseRecorder), which
// records them from ReceiveStart, the durations and Size. A Conn whose phases and metrics
// record nothing (Conn.UsesSpans) makes no context per packet for the
// span in a Send's context; its codec may still put that span's trace
// context in the packet (taskproto's does).
//
// There is no data-phase timeout. A stall watchdog (WithStallThreshold,
// default 1 minute) logs and counts a write blocked, or a request whose
// reply its codec's PhasePolicy awaits (taskproto: a configuration without
// its result), for longer than the threshold, once each; it never cancels
// anything.
package ipc

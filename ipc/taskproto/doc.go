// Package taskproto is the task-host protocol spoken over an ipc.Conn: a
// parent sends a task configuration (*ipcpb.TaskConfiguration), the task
// host answers with a task result (*ipcpb.TaskResult) that carries, beside
// the outputs, the host's own phase timings. Package ipc moves packets and
// knows nothing of what they mean; this package is the one place where the
// protocol's parts are encoded and decoded:
//
//   - Delta encoding. An environment or global properties map unchanged
//     since the last full copy on the same connection and direction is
//     sent as DELTA_MODE_IDENTICAL with no entries, and the receiver
//     restores it from its own copy (WithDelta, setting ipc.delta;
//     default on). A map marked identical before any full copy is an
//     *ipc.ProtocolError of kind KindDelta, which fails the connection and
//     counts amdahl.ipc.protocol.errors{amdahl.ipc.kind=delta}.
//
//   - Trace context. A configuration carries the W3C trace context of the
//     span in the ctx it is sent with (TraceContext is left set on the
//     caller's message); a result carries the request's, so the host's
//     spans and the parent's receive spans join the request's trace.
//
//   - Phase policy (the codec is an ipc.PhasePolicy). Configurations and
//     results get phase spans, logs and shutdowns are only counted. A
//     configuration awaits its result by id (for the stall watchdog); a
//     result that names the span its configuration was sent under gets
//     its receive and deserialize spans in that Send's context, or none,
//     left to the receiver, when that span is a ReplyPhaseRecorder whose
//     RecordsReplyPhases reports true.
//
//   - Reply timings. Reply fills TaskResult.timings with the host's
//     receive, deserialize and execute phases as offsets from the moment it
//     began receiving the request (receive_start_unix_nano, its wall
//     clock), and the codec appends the reply's own serialize phase as one
//     more element of the repeated field once the result is marshalled, so
//     the measurement covers the marshalling. When the request's trace is
//     sampled (the parent records the host's phases), the reply's send is
//     stamped too: the codec ends the result with room for
//     TaskResult.reply_send (fixed-width, 20 bytes), which the Conn's
//     writer fills in with the send's start and end before those bytes
//     are written (ipc.SendStamper, which says how the Go Conn writes a
//     stamped frame: a small one, as the runtime's replies of a few
//     hundred bytes are, in one write(2) stamped just before it is
//     issued; a larger one in two). The protocol's rule, for a host in
//     any language: the end is no later than the moment the write(2)
//     that carries reply_send's bytes is issued, so that write is not in
//     the send, and the parent cannot have read the reply whole before
//     the send's end: the send ends inside the parent's span whichever
//     process reads its clock last, and so does the host's own
//     taskhost.send span (which has the same times). AppendTimings decodes them on the parent as Timing values (phase,
//     direction, start, end) placed in the parent's clock within the
//     round trip that contains them.
//
//     A peer that knows no reply_send (an older parent) skips it as an
//     unknown field; a host that sends none (an older one, or one not
//     calling Reply) gives the parent four timings.
//
// # Use
//
// Both ends install the codec when they open the connection:
//
//	conn, err := pair.Connect(ctx, taskproto.WithCodec(taskproto.WithDelta(on))) // parent
//	conn, err := ipc.AcceptInherited(ctx, inh, taskproto.WithCodec())            // task host
//
// The parent sends configurations with conn.Send, receives results with
// conn.Recv and places the host's phases with AppendTimings; the host
// receives configurations with conn.Recv and answers each with Reply.
// Everything the codec does (delta marking and restoring, the protobuf
// marshal and unmarshal, the appended timing) runs inside the Conn's
// ipc.serialize and ipc.deserialize phases, with the Conn's buffers: the
// protocol adds no copy of a packet.
//
// Log messages and shutdown packets go as plain protobuf.
//
// # A task host of one's own
//
// ServeHost is the whole child side, as go-plugin's Serve is a plugin's:
//
//	func main() {
//		err := taskproto.ServeHost(ctx, map[string]taskproto.TaskFunc{"my.task": myTask})
//		...
//	}
//
// It takes the connection an amdahl parent handed the process
// (ipc.LookupInherited), with the settings the parent passed in the
// environment (HostSettingsFromEnv: EnvBuffer, EnvSend, EnvDelta,
// EnvExecuteDelay), runs each configuration with the TaskFunc its task
// name names, and replies with the outputs and the host's phase timings.
// It sets up no telemetry and links no SDK: WithHostTelemetry records the
// host's phase spans with a Component on the program's own providers.
// (runtime.ServeHost is the same loop with amdahl's telemetry set up from
// the environment.)
package taskproto

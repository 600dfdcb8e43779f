package taskproto

import (
	"time"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// Timing is one phase the task host measured, placed in the parent's
// clock (its Direction Request, Reply, or None for execute), as
// telemetry.Component.RecordSpans takes it.
type Timing = telemetry.Timing

// NumTimings is the largest number of timings a reply sent with Reply
// carries: receive, deserialize, execute, the reply's serialize and, when
// the request's trace is sampled, the reply's send.
const NumTimings = 5

// AppendTimings decodes the host's phase timings carried by res and
// appends them to dst, placed in the parent's clock, and returns the
// extended slice (pass a [NumTimings]Timing array's [:0] to allocate
// nothing). sendStart is when the parent began sending the request,
// replyStart when the reply began to arrive (ipc.Incoming.ReceiveStart).
//
// The timings are offsets from res.ReceiveStartUnixNano, the host's wall
// clock when it began receiving the request. Wall clocks of two processes
// on one machine agree closely, but not exactly, so the host's window
// (anchor to its last phase's end) is moved, if needed, to lie within
// [sendStart, replyStart], the round trip that contains it: its start no
// earlier than sendStart, its end no later than replyStart unless the
// window is longer than the round trip, in which case it starts at
// sendStart. Phases this package does not know are skipped, and so is a
// phase the result repeats (a host measures each once: a repeat is a
// malformed or hostile host's), so at most NumTimings are appended. A
// result without timings appends nothing.
//
// The reply's send (res.reply_send, wall-clock times the host stamped
// into the packet before the write carrying them was issued:
// ipc.SendStamper) is appended last, moved with the window but not part
// of it: it ends before the reply could be read whole; a reply in one
// write is stamped before any of it is written, so its send ends before
// the parent's receive begins (once the header has arrived), but a reply
// large enough to go in two writes is stamped after the first, so its
// send can overlap that receive. A stamp that ends before it starts, or
// was never filled in, is skipped.
func AppendTimings(dst []Timing, res *ipcpb.TaskResult, sendStart, replyStart time.Time) []Timing {
	timings := res.GetTimings()
	if len(timings) == 0 {
		return dst
	}
	base := time.Unix(0, res.GetReceiveStartUnixNano())
	var last time.Duration
	for _, t := range timings {
		last = max(last, time.Duration(t.GetStartOffsetNs()+t.GetDurationNs()))
	}
	lo, hi := sendStart.Round(0), replyStart.Round(0)
	if base.Before(lo) {
		base = lo
	}
	if end := base.Add(last); end.After(hi) {
		base = hi.Add(-last)
		if base.Before(lo) {
			base = lo
		}
	}
	var seen uint8 // bit per ipcpb.Phase taken
	for _, t := range timings {
		ph := t.GetPhase()
		if ph < 0 || ph >= 8 || seen&(1<<ph) != 0 {
			continue
		}
		seen |= 1 << ph
		var p telemetry.Phase
		d := telemetry.Request
		switch ph {
		case ipcpb.Phase_PHASE_RECEIVE:
			p = telemetry.Receive
		case ipcpb.Phase_PHASE_DESERIALIZE:
			p = telemetry.Deserialize
		case ipcpb.Phase_PHASE_EXECUTE:
			p, d = telemetry.Execute, telemetry.None
		case ipcpb.Phase_PHASE_REPLY_SERIALIZE:
			p, d = telemetry.Serialize, telemetry.Reply
		default:
			continue
		}
		st := base.Add(time.Duration(t.GetStartOffsetNs()))
		dst = append(dst, Timing{Phase: p, Direction: d, Start: st, End: st.Add(time.Duration(t.GetDurationNs()))})
	}
	if rs := res.GetReplySend(); rs.GetStartUnixNano() > 0 && rs.GetEndUnixNano() >= rs.GetStartUnixNano() {
		st := base.Add(time.Duration(rs.GetStartUnixNano() - res.GetReceiveStartUnixNano()))
		dst = append(dst, Timing{Phase: telemetry.Send, Direction: telemetry.Reply, Start: st, End: st.Add(time.Duration(rs.GetEndUnixNano() - rs.GetStartUnixNano()))})
	}
	return dst
}

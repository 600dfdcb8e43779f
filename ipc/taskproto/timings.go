package taskproto

import (
	"time"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// Timing is one phase the task host measured, placed in the parent's
// clock.
type Timing struct {
	Phase     telemetry.Phase
	Direction telemetry.Direction // Request, Reply, or None (execute)
	Start     time.Time
	End       time.Time
}

// NumTimings is the number of timings a reply sent with Reply carries:
// receive, deserialize, execute and the reply's serialize.
const NumTimings = 4

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
// sendStart. Phases this package does not know are skipped. A result
// without timings appends nothing.
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
	for _, t := range timings {
		var p telemetry.Phase
		d := telemetry.Request
		switch t.GetPhase() {
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
	return dst
}

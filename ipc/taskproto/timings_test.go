package taskproto

import (
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// result returns a reply with the four timings of a host that received
// for 1ms, deserialized for 1ms, executed for 5ms and serialized for 1ms,
// its window (8ms) anchored at anchor, and a send stamp from 8.5ms to
// 10ms after anchor.
func result(anchor time.Time) *ipcpb.TaskResult {
	ms := int64(time.Millisecond)
	send := &ipcpb.ReplySend{StartUnixNano: anchor.UnixNano() + 17*ms/2, EndUnixNano: anchor.UnixNano() + 10*ms}
	return &ipcpb.TaskResult{ReceiveStartUnixNano: anchor.UnixNano(), ReplySend: send, Timings: []*ipcpb.PhaseTiming{
		{Phase: ipcpb.Phase_PHASE_RECEIVE, StartOffsetNs: 0, DurationNs: ms},
		{Phase: ipcpb.Phase_PHASE_DESERIALIZE, StartOffsetNs: ms, DurationNs: ms},
		{Phase: ipcpb.Phase_PHASE_EXECUTE, StartOffsetNs: 2 * ms, DurationNs: 5 * ms},
		{Phase: ipcpb.Phase_PHASE_REPLY_SERIALIZE, StartOffsetNs: 7 * ms, DurationNs: ms},
	}}
}

func TestAppendTimings(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ms := time.Millisecond
	tests := []struct {
		name                string
		anchor              time.Time
		sendStart, replyEnd time.Time
		wantStart           time.Time // where the receive phase lands
	}{
		{"inside the round trip", t0.Add(2 * ms), t0, t0.Add(20 * ms), t0.Add(2 * ms)},
		{"host clock behind: moved to the send", t0.Add(-3 * ms), t0, t0.Add(20 * ms), t0},
		{"host clock ahead: moved back to end at the reply", t0.Add(15 * ms), t0, t0.Add(20 * ms), t0.Add(12 * ms)},
		{"window longer than the round trip: starts at the send", t0.Add(ms), t0, t0.Add(5 * ms), t0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AppendTimings(nil, result(tt.anchor), tt.sendStart, tt.replyEnd)
			want := []Timing{
				{Phase: telemetry.Receive, Direction: telemetry.Request, Start: tt.wantStart, End: tt.wantStart.Add(ms)},
				{Phase: telemetry.Deserialize, Direction: telemetry.Request, Start: tt.wantStart.Add(ms), End: tt.wantStart.Add(2 * ms)},
				{Phase: telemetry.Execute, Direction: telemetry.None, Start: tt.wantStart.Add(2 * ms), End: tt.wantStart.Add(7 * ms)},
				{Phase: telemetry.Serialize, Direction: telemetry.Reply, Start: tt.wantStart.Add(7 * ms), End: tt.wantStart.Add(8 * ms)},
				// Moved with the window, not part of it.
				{Phase: telemetry.Send, Direction: telemetry.Reply, Start: tt.wantStart.Add(17 * ms / 2), End: tt.wantStart.Add(10 * ms)},
			}
			if len(got) != len(want) {
				t.Fatalf("got %d timings, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i].Phase != want[i].Phase || got[i].Direction != want[i].Direction || !got[i].Start.Equal(want[i].Start) || !got[i].End.Equal(want[i].End) {
					t.Errorf("timing %d = %v %v [%v, %v], want %v %v [%v, %v]", i,
						got[i].Phase, got[i].Direction, got[i].Start.Sub(t0), got[i].End.Sub(t0),
						want[i].Phase, want[i].Direction, want[i].Start.Sub(t0), want[i].End.Sub(t0))
				}
			}
		})
	}
}

func TestAppendTimingsSkipsUnknownAndEmpty(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	if got := AppendTimings(nil, &ipcpb.TaskResult{}, t0, t0.Add(time.Second)); len(got) != 0 {
		t.Fatalf("a result without timings gave %v, want none", got)
	}
	res := result(t0)
	res.Timings = append(res.Timings, &ipcpb.PhaseTiming{Phase: 99, DurationNs: 1})
	if got := AppendTimings(nil, res, t0, t0.Add(time.Second)); len(got) != NumTimings {
		t.Fatalf("got %d timings, want %d (the unknown phase skipped)", len(got), NumTimings)
	}
	// A send stamp never filled in (zero), or ending before it starts.
	for _, rs := range []*ipcpb.ReplySend{{}, {StartUnixNano: t0.UnixNano() + 2, EndUnixNano: t0.UnixNano() + 1}} {
		res.ReplySend = rs
		if got := AppendTimings(nil, res, t0, t0.Add(time.Second)); len(got) != NumTimings-1 {
			t.Fatalf("reply_send %v: got %d timings, want %d (the stamp skipped)", rs, len(got), NumTimings-1)
		}
	}
}

// A host that repeats its phases (a malformed or hostile one) gets each
// phase placed once: never more than NumTimings, which the parent's
// fixed-size buffers hold.
func TestAppendTimingsRepeatedPhases(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	res := result(t0)
	res.ReplySend = &ipcpb.ReplySend{StartUnixNano: t0.UnixNano() + 10, EndUnixNano: t0.UnixNano() + 20}
	for range 3 {
		res.Timings = append(res.Timings, res.Timings...)
	}
	got := AppendTimings(nil, res, t0, t0.Add(time.Second))
	if len(got) != NumTimings {
		t.Fatalf("%d timings (the result repeats each phase 8 times), want %d", len(got), NumTimings)
	}
	seen := map[[2]int]bool{}
	for _, tm := range got {
		k := [2]int{int(tm.Phase), int(tm.Direction)}
		if seen[k] {
			t.Fatalf("phase %v %v placed twice", tm.Phase, tm.Direction)
		}
		seen[k] = true
	}
}

func TestAppendTimingsAllocatesNothing(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	res := result(t0)
	var buf [NumTimings]Timing
	if n := testing.AllocsPerRun(100, func() { _ = AppendTimings(buf[:0], res, t0, t0.Add(time.Second)) }); n != 0 {
		t.Fatalf("AppendTimings into a [NumTimings]Timing allocates %v times, want 0", n)
	}
}

package taskproto_test

import (
	"fmt"
	"time"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/ipc/taskproto"
)

// The parent places a host's phases, returned in its reply, in its own
// clock: here the host's clock runs 3ms behind, so its window is moved to
// begin when the request was sent.
func ExampleAppendTimings() {
	sent := time.Unix(1_700_000_000, 0)        // the parent began sending the request
	replied := sent.Add(12 * time.Millisecond) // the reply began to arrive
	res := &ipcpb.TaskResult{
		ReceiveStartUnixNano: sent.Add(-3 * time.Millisecond).UnixNano(),
		Timings: []*ipcpb.PhaseTiming{
			{Phase: ipcpb.Phase_PHASE_RECEIVE, StartOffsetNs: 0, DurationNs: 1e6},
			{Phase: ipcpb.Phase_PHASE_DESERIALIZE, StartOffsetNs: 1e6, DurationNs: 2e6},
			{Phase: ipcpb.Phase_PHASE_EXECUTE, StartOffsetNs: 3e6, DurationNs: 5e6},
			{Phase: ipcpb.Phase_PHASE_REPLY_SERIALIZE, StartOffsetNs: 8e6, DurationNs: 1e6},
		},
	}
	var buf [taskproto.NumTimings]taskproto.Timing
	for _, t := range taskproto.AppendTimings(buf[:0], res, sent, replied) {
		fmt.Printf("%-11s %-7s %v → %v\n", t.Phase, t.Direction, t.Start.Sub(sent), t.End.Sub(sent))
	}
	// Output:
	// receive     request 0s → 1ms
	// deserialize request 1ms → 3ms
	// execute             3ms → 8ms
	// serialize   reply   8ms → 9ms
}

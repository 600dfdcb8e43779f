package profiles

import "github.com/amdahl-rt/amdahl/telemetry"

// Entry names a function that opens a phase (its span, and for CPU the
// pprof phase label): an allocation whose stack passes through Func
// happened in Phase, unless a frame nearer the allocation is another
// entry.
type Entry struct {
	Func  string // fully qualified, as pprof names it
	Phase telemetry.Phase
}

const mod = "github.com/amdahl-rt/amdahl/"

// Entries is the table that attributes allocation samples to phases. Heap
// profiles carry no pprof labels (the Go runtime records none on
// allocation samples), so a sample's phase is found from its stack: the
// innermost frame that is one of these functions. Each is the function that
// opens the phase span in the code of a `run --out` (parent, task hosts and
// the in-process sidecar), or, where the span is recorded after the fact
// (ipc receive and deserialize) or the work happens just before the span
// (the sidecar's gRPC decode of a completion), the function doing that
// phase's work.
// The queue phase is a wait and allocates nothing of its own.
//
// The table is checked against the heap profiles of a real run
// (cmd/amdahl TestProfileCommand): a function renamed or no longer on the
// path fails that test.
var Entries = []Entry{
	// runtime: Submit opens a unit's dispatch; a worker leases its
	// orchestration and acquires a host within it.
	{mod + "runtime.(*Runtime).Submit", telemetry.Dispatch},
	{mod + "runtime.(*leaser).lease", telemetry.Dispatch},
	{mod + "runtime.(*pool).acquire", telemetry.Dispatch},
	// runtime, in a task host: the task body.
	{mod + "ipc/taskproto.runTask", telemetry.Execute},

	// ipc, both ends: serialize (codec and frame) under the send lock, the
	// write, and the reader's body read and decode.
	{mod + "ipc.(*Conn).serialize", telemetry.Serialize},
	{mod + "ipc.(*Conn).write", telemetry.Send},
	{mod + "ipc.(*Reader).ReadBody", telemetry.Receive},
	{mod + "ipc/taskproto.(*codec).Decode", telemetry.Deserialize},

	// chunking: the sender's Complete opens serialize (plan and encode),
	// then send (one call per chunk); the sidecar's gRPC handler decodes a
	// completion, then CompleteOrchestratorTask reassembles it under its
	// deserialize span.
	{mod + "chunking.(*Sender).Complete", telemetry.Serialize},
	{mod + "chunking.(*Sender).sendChunk", telemetry.Send},
	{mod + "chunking/dtpb.completeHandler", telemetry.Deserialize},
	{mod + "chunking.(*sidecarService).CompleteOrchestratorTask", telemetry.Deserialize},
}

// entryPhase maps Entries by function name.
var entryPhase = func() map[string]string {
	m := make(map[string]string, len(Entries))
	for _, e := range Entries {
		m[e.Func] = e.Phase.String()
	}
	return m
}()

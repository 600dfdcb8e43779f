package profiles

import (
	"strings"

	"github.com/google/pprof/profile"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// Entry names a function that opens a phase (its span, and for CPU the
// pprof phase label) or does a phase's work: a sample without a phase
// label whose stack passes through Func is in Phase, unless a frame nearer
// the sample's innermost frame is another entry.
type Entry struct {
	Func  string // fully qualified, as pprof names it
	Phase telemetry.Phase
	// Component and Direction name the sample's row of the run's table in
	// the parent's profile. In a task host's, an ipc entry's row is the
	// taskhost component's with the other direction (the host receives
	// requests and sends replies).
	Component string
	Direction telemetry.Direction
}

const mod = "github.com/amdahl-rt/amdahl/"

const grpcTransport = "google.golang.org/grpc/internal/transport."

// Entries is the table that books samples without a phase label to
// phases: every allocation sample (heap profiles carry no labels, the Go
// runtime records none on allocation samples) and the CPU samples of
// goroutines no label reaches (gRPC's client transport, a phase's work
// before its label is set). A sample's phase is that of the innermost of
// its frames that is one of these functions. Each is the function that
// opens the phase span in the code of a `run --out` (parent, task hosts
// and the in-process sidecar), or, where the span is recorded after the
// fact (ipc receive and deserialize) or the work happens outside the span
// (the sidecar's gRPC decode of a completion, gRPC's transport goroutines),
// the function doing that phase's work. The queue phase is a wait and does
// nothing of its own.
//
// The table is checked against the profiles of a real run (cmd/amdahl
// TestProfileCommand): a function renamed or no longer on the path fails
// that test.
var Entries = []Entry{
	// runtime: Submit opens a unit's dispatch; a worker leases its
	// orchestration and acquires a host within it.
	{mod + "runtime.(*Runtime).Submit", telemetry.Dispatch, "runtime", telemetry.None},
	{mod + "runtime.(*leaser).lease", telemetry.Dispatch, "runtime", telemetry.None},
	{mod + "runtime.(*pool).acquire", telemetry.Dispatch, "runtime", telemetry.None},
	// The worker's own work for a task unit outside its other phases:
	// building the task's configuration (dispatch ends when it is built)
	// and releasing the host.
	{mod + "runtime.(*Runtime).runTask", telemetry.Dispatch, "runtime", telemetry.None},
	// A task host's task body.
	{mod + "ipc/taskproto.runTask", telemetry.Execute, "taskhost", telemetry.None},

	// ipc, both ends: serialize (codec and frame) under the send lock, the
	// write, and the reader's body read and decode.
	{mod + "ipc.(*Conn).serialize", telemetry.Serialize, "ipc", telemetry.Request},
	{mod + "ipc.(*Conn).Send", telemetry.Send, "ipc", telemetry.Request}, // the queue, the wait for the writer
	{mod + "ipc.(*Conn).write", telemetry.Send, "ipc", telemetry.Request},
	// The writer goroutine's own work between writes (taking the next
	// frame, handing back its buffer), which it does under the send
	// labels when they are on.
	{mod + "ipc.(*Conn).writeLoop", telemetry.Send, "ipc", telemetry.Request},
	{mod + "ipc.(*Reader).ReadBody", telemetry.Receive, "ipc", telemetry.Reply},
	{mod + "ipc/taskproto.(*codec).Decode", telemetry.Deserialize, "ipc", telemetry.Reply},

	// chunking: the sender's Complete opens serialize (plan and encode),
	// then send (one call per chunk); the sidecar's gRPC handler (amdahl's
	// sidecars lend payloads: borrowingComplete) decodes a completion,
	// then CompleteOrchestratorTask's work reassembles it under its
	// deserialize span.
	{mod + "chunking.(*Sender).Complete", telemetry.Serialize, "chunking", telemetry.Request},
	{mod + "chunking.(*Sender).sendChunk", telemetry.Send, "chunking", telemetry.Request},
	{mod + "chunking.(*Sidecar).borrowingComplete", telemetry.Deserialize, "chunking", telemetry.Request},
	{mod + "chunking.(*Sidecar).completeTask", telemetry.Deserialize, "chunking", telemetry.Request},

	// gRPC's transport goroutines, one reader and one writer per
	// connection: the client's (the sender's) write requests and read
	// replies, the server's (the sidecar's) the other way round
	// (transportSide tells which).
	{grpcTransport + "(*loopyWriter).run", telemetry.Send, "chunking", telemetry.Request},
	{grpcTransport + "(*http2Client).reader", telemetry.Receive, "chunking", telemetry.Reply},
	{grpcTransport + "(*http2Server).HandleStreams", telemetry.Receive, "chunking", telemetry.Request},
	// The sidecar's call goroutine before its handler (and its labels):
	// routing the call, reading its metadata.
	{"google.golang.org/grpc.(*Server).handleStream", telemetry.Receive, "chunking", telemetry.Request},
}

// entryByFunc maps Entries by function name.
var entryByFunc = func() map[string]Entry {
	m := make(map[string]Entry, len(Entries))
	for _, e := range Entries {
		m[e.Func] = e
	}
	return m
}()

// Buckets name what a sample in no phase was doing. Each is matched by
// the frames of its stack (bucketOf), in this order.
const (
	// BucketGenerator is the workload generator: building the units'
	// payloads (package runtime/scenario) and a fan-out unit's
	// orchestration response from them.
	BucketGenerator = "(workload generator)"
	// BucketAccounting is amdahl's own accounting: attributing units
	// (the runtime's collector, telemetry/attribution), recording and
	// exporting spans, metrics and profiles (the runtime's own tracer,
	// the OTel SDK and exporters, the trace file, runtime/pprof's
	// profile writer, the heap profile's GC, Pyroscope's uploads).
	BucketAccounting = "(accounting)"
	// BucketRuntime is the Go runtime's own work on no goroutine of the
	// program: the background GC, the scheduler, the system monitor.
	// (GC work a goroutine does while it allocates, assists, is that
	// goroutine's: it is in its phase.)
	BucketRuntime = "(go runtime)"
	// BucketRace is the race detector's runtime (a -race build only): its
	// C code runs where the profiler sees no goroutine, so no label.
	BucketRace = "(race detector)"
	// BucketProcess is everything else the process does outside the
	// units: start-up, flags, starting task hosts and the sidecar,
	// writing its outputs (profiles, trace file, report), the gRPC
	// connection's setup, idle workers.
	BucketProcess = "(process)"
)

// Buckets lists the buckets in the order they are matched.
var Buckets = []string{BucketGenerator, BucketAccounting, BucketRuntime, BucketRace, BucketProcess}

// Prefixes of the function names of each bucket.
var (
	generatorFuncs  = []string{mod + "runtime/scenario.", mod + "runtime.(*Runtime).runFanout"}
	accountingFuncs = []string{
		mod + "runtime.(*unitRecord).", mod + "runtime.(*e2eStats).", mod + "runtime.(*Runtime).account",
		mod + "runtime.(*Runtime).childSpans",
		mod + "telemetry/attribution.", mod + "telemetry/otelsetup.", mod + "telemetry/spans.", mod + "internal/outfile.",
		"go.opentelemetry.io/otel/sdk/", "go.opentelemetry.io/otel/exporters/",
		// The profiles' own writing: the CPU profile's writer goroutine,
		// Pyroscope's collection and uploads.
		"runtime/pprof.", "github.com/grafana/pyroscope-go",
	}
)

// raceFuncs are the race detector runtime's symbols (ThreadSanitizer's).
var raceFuncs = []string{"__tsan", "_ZN6__tsan", "__sanitizer", "_ZN11__sanitizer", "racecall", "racecallatomic"}

// Basis says how a sample was booked.
type Basis string

// The bases.
const (
	ByLabel  Basis = "label"
	ByStack  Basis = "stack"
	InBucket Basis = "bucket"
)

// Booking is where one sample is booked.
type Booking struct {
	// Phase is the phase's name, a bucket, or NoPhase.
	Phase string
	// Row is the row of the run's table (RowOf); empty for a bucket, and
	// for a labelled sample without the component label.
	Row   string
	Basis Basis
}

// RowOf is the name of a row of the run's table: component.phase, with
// /direction for a phase that has one ("ipc.send/request",
// "taskhost.execute").
func RowOf(component string, p telemetry.Phase, d telemetry.Direction) string {
	if d == telemetry.None {
		return component + "." + p.String()
	}
	return component + "." + p.String() + "/" + d.String()
}

// Book books one sample: by its labels (if labels: a heap profile's
// samples have none, and are booked by stack alone), by the innermost
// entry function on its stack, or to a bucket. host: the sample is a task
// host's.
func Book(s *profile.Sample, host, labels bool) Booking {
	if l := s.Label[telemetry.LabelPhase]; labels && len(l) > 0 {
		b := Booking{Phase: l[0], Basis: ByLabel}
		p, perr := telemetry.ParsePhase(l[0])
		if c := s.Label[telemetry.LabelComponent]; perr == nil && len(c) > 0 {
			d := telemetry.None
			if dl := s.Label[telemetry.LabelDirection]; len(dl) > 0 {
				d, _ = telemetry.ParseDirection(dl[0])
			}
			b.Row = RowOf(c[0], p, d)
		}
		return b
	}
	if len(s.Location) == 0 {
		return Booking{Phase: NoPhase}
	}
	for i, loc := range s.Location {
		for _, l := range loc.Line {
			if l.Function == nil {
				continue
			}
			e, ok := entryByFunc[l.Function.Name]
			if !ok {
				continue
			}
			comp, dir := e.Component, e.Direction
			if strings.HasPrefix(e.Func, grpcTransport) && e.Phase == telemetry.Send && transportSide(s.Location[i:]) == "server" {
				dir = telemetry.Reply
			}
			if host && comp == "ipc" {
				comp, dir = "taskhost", flip(dir)
			}
			return Booking{Phase: e.Phase.String(), Row: RowOf(comp, e.Phase, dir), Basis: ByStack}
		}
	}
	return Booking{Phase: bucketOf(s), Basis: InBucket}
}

func flip(d telemetry.Direction) telemetry.Direction {
	switch d {
	case telemetry.Request:
		return telemetry.Reply
	case telemetry.Reply:
		return telemetry.Request
	}
	return d
}

// transportSide tells whose gRPC writer a stack's outer frames are: the
// function literal that starts it is in NewHTTP2Client (client) or
// NewServerTransport (server).
func transportSide(outer []*profile.Location) string {
	for _, loc := range outer {
		for _, l := range loc.Line {
			if l.Function == nil {
				continue
			}
			switch {
			case strings.HasPrefix(l.Function.Name, grpcTransport+"NewServerTransport."):
				return "server"
			case strings.HasPrefix(l.Function.Name, grpcTransport+"NewHTTP2Client."):
				return "client"
			}
		}
	}
	return ""
}

// bucketOf names the bucket of a sample in no phase.
func bucketOf(s *profile.Sample) string {
	var gen, acct, race, user bool
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			if l.Function == nil {
				user = true // unsymbolised: not known to be the runtime's
				continue
			}
			name := l.Function.Name
			gen = gen || hasPrefix(name, generatorFuncs)
			acct = acct || hasPrefix(name, accountingFuncs)
			isRace := hasPrefix(name, raceFuncs)
			race = race || isRace
			user = user || !(runtimeFunc(name) || isRace)
		}
	}
	switch {
	case gen:
		return BucketGenerator
	case acct:
		return BucketAccounting
	case race && !user:
		return BucketRace
	case !user:
		return BucketRuntime
	}
	return BucketProcess
}

func hasPrefix(name string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// runtimeFunc reports whether name is the Go runtime's (package runtime,
// its internal packages, or the pseudo-frames the profiler adds for time
// outside Go code: runtime._GC, runtime._System, runtime._ExternalCode).
func runtimeFunc(name string) bool {
	return strings.HasPrefix(name, "runtime.") || strings.HasPrefix(name, "internal/runtime/") ||
		strings.HasPrefix(name, "internal/sync.") || strings.HasPrefix(name, "sync/atomic.") ||
		strings.HasPrefix(name, "gcWriteBarrier") || strings.HasPrefix(name, "aeshash")
}

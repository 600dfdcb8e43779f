package runtime

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"github.com/amdahl-rt/amdahl/ipc/taskproto"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// A task unit's record: the spans of a unit of the taskhost shape (a task
// sent straight to a host, no orchestration), kept as times in the unit
// itself rather than as span objects filed one by one with the
// collector. The shape is fixed: the root (amdahl.work), runtime.dispatch
// and its runtime.queue, runtime.host and under it ipc's serialize and
// send of the request and receive and deserialize of the reply, and the
// host's phases from its reply (receive, deserialize, execute, the
// reply's serialize and, when the host stamped it, the reply's send). The
// runtime writes its own phases straight into the record (Submit, the
// worker: no Component, no context); the root, dispatch and host spans
// are the record's own trace.Spans (recSpan, a spans.Holder), which the
// unit's contexts carry, so that the host span's context crosses the pipe
// and ipc's leaves, which reach the run's tracer as ever, find their
// slots (HoldLeaf). The other ten spans are slots of two times each. The
// unit is handed to the accounting once, at its root's end, and its spans
// are made there, in the accounting goroutine's scratch space
// (spans.Collector.HandOff, through spans.Appender), in the same order
// every time, as the tracer's spans of such a unit come in the order they
// end (attribution.Builder keeps the shapes of the orders it sees), with
// the root's, dispatch's and host span's random ids and fixed ones for
// the slots.
//
// Nothing of what a span says to the attribution is lost: a span the
// record has no slot for (a phase a program starts under the unit, a
// leaf with attributes, a second round trip) is kept whole beside the
// slots (extra, Hold), with its own id and parent, as the collector would
// have kept it. A span that ends after its unit's root reaches no unit,
// as with the collector. The record is used only where nothing but the
// attribution reads the spans (Runtime.records): the events, links,
// status and attributes it drops are an exporter's.

// Leaf slots of a record, in the order its spans are made.
const (
	slotQueue = iota
	slotSerialize
	slotSend
	slotReceive
	slotDeserialize
	slotHostReceive
	slotHostDeserialize
	slotHostExecute
	slotHostSerialize
	slotHostSend
	numSlots
)

// recordNames is the run's names for a record's spans: its Components'
// span names, made once.
type recordNames struct {
	tp           *spans.TracerProvider // the run's tracer, for a span the record has no place for
	col          *spans.Collector
	runtime, ipc string // component names
	dispatch     string
	// span is each slot's span but its trace, parent and times.
	span [numSlots]spans.Span
	// recorded counts the units handed off.
	recorded atomic.Uint64
}

func newRecordNames(tp *spans.TracerProvider, col *spans.Collector, rt, ipcComp, hostComp *telemetry.Component) *recordNames {
	n := &recordNames{tp: tp, col: col, runtime: rt.Name(), ipc: ipcComp.Name(), dispatch: rt.SpanName(telemetry.Dispatch, telemetry.None)}
	for s := range numSlots {
		comp := ipcComp
		switch {
		case s == slotQueue:
			comp = rt
		case s >= slotHostReceive:
			comp = hostComp
		}
		p, d := slotPhase(s)
		n.span[s] = spans.Span{SpanID: slotID(s), Name: comp.SpanName(p, d), Component: comp.Name(), Phase: p, Direction: d, Remote: s >= slotHostReceive}
	}
	return n
}

// slotPhases is each leaf slot's phase and direction.
var slotPhases = [numSlots]struct {
	p telemetry.Phase
	d telemetry.Direction
}{
	slotQueue:           {telemetry.Queue, telemetry.None},
	slotSerialize:       {telemetry.Serialize, telemetry.Request},
	slotSend:            {telemetry.Send, telemetry.Request},
	slotReceive:         {telemetry.Receive, telemetry.Reply},
	slotDeserialize:     {telemetry.Deserialize, telemetry.Reply},
	slotHostReceive:     {telemetry.Receive, telemetry.Request},
	slotHostDeserialize: {telemetry.Deserialize, telemetry.Request},
	slotHostExecute:     {telemetry.Execute, telemetry.None},
	slotHostSerialize:   {telemetry.Serialize, telemetry.Reply},
	slotHostSend:        {telemetry.Send, telemetry.Reply},
}

// slotPhase returns the phase and direction of leaf slot s.
func slotPhase(s int) (telemetry.Phase, telemetry.Direction) { return slotPhases[s].p, slotPhases[s].d }

// slotOf returns the slot in [lo, hi) of phase ph in direction d, or -1.
func slotOf(lo, hi int, ph telemetry.Phase, d telemetry.Direction) int {
	for s := lo; s < hi; s++ {
		if slotPhases[s].p == ph && slotPhases[s].d == d {
			return s
		}
	}
	return -1
}

// unitRecord is a task unit's record (above). Its fields are guarded by
// mu but for names and owner, set by begin, before the record is shared.
type unitRecord struct {
	names *recordNames
	owner any // the runtime's unit, handed to onWork

	mu               sync.Mutex
	root, disp, host recSpan
	slot             [numSlots][2]int64 // Unix ns; End 0: not recorded
	extra            []spans.Span
	handed           bool // the root ended: later spans reach no unit
	dropped          bool // not submitted: nothing is handed off
}

// recSpan is one of a record's root, dispatch and host spans.
type recSpan struct {
	embedded.Span
	rec     *unitRecord
	sc      trace.SpanContext
	sp      spans.Span // guarded by rec.mu
	started bool
	ended   bool
}

var _ spans.Holder = (*recSpan)(nil)

// begin starts the record of a unit (owner, the runtime's unit) at
// start: its root span, in a new trace, and its dispatch.
func (rec *unitRecord) begin(names *recordNames, owner any, start time.Time) {
	rec.names, rec.owner = names, owner
	at := start.UnixNano()
	root := spans.Span{TraceID: spans.NewTraceID(), SpanID: rootID, Name: telemetry.SpanWork, Start: at}
	rec.root.start(rec, root)
	rec.disp.start(rec, spans.Span{TraceID: root.TraceID, SpanID: dispatchID, ParentID: root.SpanID,
		Name: names.dispatch, Component: names.runtime, Phase: telemetry.Dispatch, Start: at})
}

// start starts s as sp.
func (s *recSpan) start(rec *unitRecord, sp spans.Span) {
	s.rec, s.sp, s.started = rec, sp, true
	s.sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID(sp.TraceID), SpanID: trace.SpanID(sp.SpanID), TraceFlags: trace.FlagsSampled})
}

// startHost starts the record's runtime.host span at start, under the
// root, and returns ctx carrying it. A second one (which a task unit
// never starts) is a span of the run's tracer, kept beside the slots.
func (rec *unitRecord) startHost(ctx context.Context, start time.Time) (context.Context, trace.Span) {
	rec.mu.Lock()
	if rec.host.started || rec.handed {
		rec.mu.Unlock()
		return rec.names.tp.StartPhaseSpan(trace.ContextWithSpan(ctx, &rec.root), SpanHost, "", 0, telemetry.None, start)
	}
	root := &rec.root.sp
	rec.host.start(rec, spans.Span{TraceID: root.TraceID, SpanID: spans.NewSpanID(), ParentID: root.SpanID,
		Name: SpanHost, Start: start.UnixNano()})
	rec.mu.Unlock()
	return trace.ContextWithSpan(ctx, &rec.host), &rec.host
}

// end ends the unit at now with outcome o, hands it off, and returns its
// end-to-end time from start.
func (rec *unitRecord) end(now, start time.Time, o telemetry.Outcome) time.Duration {
	rec.endSpan(&rec.root, now, o != telemetry.OK)
	return now.Sub(start)
}

// leafSlot returns the slot of a leaf of parent named name, or -1.
func (rec *unitRecord) leafSlot(parent *recSpan, name, component string, ph telemetry.Phase, d telemetry.Direction) int {
	n, s := rec.names, -1
	switch {
	case parent == &rec.host && component == n.ipc:
		s = slotOf(slotSerialize, slotHostReceive, ph, d) // ipc's
	case parent == &rec.disp && component == n.runtime && ph == telemetry.Queue && d == telemetry.None:
		s = slotQueue
	}
	if s < 0 || name != n.span[s].Name {
		return -1
	}
	return s
}

// setSlot records leaf slot s, once, unless the unit was handed off.
func (rec *unitRecord) setSlot(s int, start, end int64) bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.handed || rec.slot[s][1] != 0 {
		return false
	}
	rec.slot[s] = [2]int64{start, max(end, 1)}
	return true
}

// addExtra keeps a span the record has no slot for.
func (rec *unitRecord) addExtra(sp spans.Span) {
	rec.mu.Lock()
	if !rec.handed {
		rec.extra = append(rec.extra, sp)
	}
	rec.mu.Unlock()
}

// HoldLeaf implements spans.Holder: a leaf of s with no attribute, of a
// slot not yet recorded, goes to its slot.
func (s *recSpan) HoldLeaf(name, component string, ph telemetry.Phase, d telemetry.Direction, start, end time.Time, attrs []attribute.KeyValue) bool {
	if len(attrs) > 0 {
		return false
	}
	slot := s.rec.leafSlot(s, name, component, ph, d)
	return slot >= 0 && s.rec.setSlot(slot, start.UnixNano(), end.UnixNano())
}

// Hold implements spans.Holder: a span of the unit the record has no
// slot for is kept beside the slots.
func (s *recSpan) Hold(sp spans.Span) { s.rec.addExtra(sp) }

// hostPhases records a task host's phases from its reply (taskproto's
// timings placed in the parent's clock) under the record's host span,
// comp the host's Component.
func (rec *unitRecord) hostPhases(comp *telemetry.Component, timings []taskproto.Timing) {
	var extra [taskproto.NumTimings]int
	n := 0
	rec.mu.Lock()
	if rec.handed {
		rec.mu.Unlock()
		return
	}
	for i, tm := range timings {
		if !tm.Phase.Valid() || tm.Direction > telemetry.Reply {
			continue // as RecordSpan: what another process sent
		}
		if s := slotOf(slotHostReceive, numSlots, tm.Phase, tm.Direction); s >= 0 && rec.slot[s][1] == 0 {
			rec.slot[s] = [2]int64{tm.Start.UnixNano(), max(tm.End.UnixNano(), 1)}
		} else if n < len(extra) {
			extra[n] = i
			n++
		}
	}
	rec.mu.Unlock()
	for _, i := range extra[:n] {
		rec.addExtra(remoteSpan(comp, rec.host.sc, timings[i]))
	}
}

// remoteSpan is the span of a task host's phase t (from its reply, placed
// in the parent's clock) under the host span host, as comp's.
func remoteSpan(comp *telemetry.Component, host trace.SpanContext, t taskproto.Timing) spans.Span {
	return spans.Span{TraceID: spans.TraceID(host.TraceID()), SpanID: spans.NewSpanID(), ParentID: spans.SpanID(host.SpanID()),
		Name: comp.SpanName(t.Phase, t.Direction), Component: comp.Name(),
		Start: t.Start.UnixNano(), End: t.End.UnixNano(), Phase: t.Phase, Direction: t.Direction, Remote: true}
}

// drop keeps the unit from being handed off (it was never submitted).
func (rec *unitRecord) drop() {
	rec.mu.Lock()
	rec.dropped = true
	rec.mu.Unlock()
}

// slotID is the span id of leaf slot s, and rootID and dispatchID those
// of the root and its dispatch: their ids leave the process nowhere (the
// host span's, which crosses the pipe, is random), so they take fixed
// ids, distinct from one another and (with a probability of about 2⁻⁶⁴
// for each of the unit's random ids) from the unit's other spans.
func slotID(s int) spans.SpanID {
	return spans.SpanID{0xa4, 0xda, 0x41, 0x5e, 0xc0, 0xde, 0x5e, byte(1 + s)}
}

var (
	rootID     = spans.SpanID{0xa4, 0xda, 0x41, 0x5e, 0xc0, 0xde, 0x5e, 0x80}
	dispatchID = spans.SpanID{0xa4, 0xda, 0x41, 0x5e, 0xc0, 0xde, 0x5e, 0x81}
)

// AppendSpans implements spans.Appender: it appends the unit's spans to dst: dispatch, its queue, the ipc
// leaves, the host's phases, the host span, the extra spans and the root,
// each only if it ended.
func (rec *unitRecord) AppendSpans(dst []spans.Span) []spans.Span {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	n := rec.names
	if rec.disp.ended {
		dst = append(dst, rec.disp.sp)
	}
	for s := range numSlots {
		t := rec.slot[s]
		if t[1] == 0 {
			continue
		}
		dst = append(dst, n.span[s])
		sp := &dst[len(dst)-1]
		sp.TraceID, sp.ParentID, sp.Start, sp.End = rec.root.sp.TraceID, rec.host.sp.SpanID, t[0], t[1]
		if s == slotQueue {
			sp.ParentID = rec.disp.sp.SpanID
		}
	}
	if rec.host.ended {
		dst = append(dst, rec.host.sp)
	}
	dst = append(dst, rec.extra...)
	return append(dst, rec.root.sp)
}

// End ends the span now, or at the WithTimestamp given.
func (s *recSpan) End(opts ...trace.SpanEndOption) {
	var end time.Time
	if len(opts) > 0 {
		cfg := trace.NewSpanEndConfig(opts...)
		end = cfg.Timestamp()
	}
	if end.IsZero() {
		end = time.Now()
	}
	s.endAt(end)
}

// endAt ends the span at end, once; the root's end hands the unit off.
func (s *recSpan) endAt(end time.Time) { s.rec.endSpan(s, end, false) }

// endSpan ends s, one of the record's spans, at end, once (failed: the
// root's outcome was not ok); the root's end hands the unit off.
func (rec *unitRecord) endSpan(s *recSpan, end time.Time, failed bool) {
	rec.mu.Lock()
	if s.ended || rec.handed {
		rec.mu.Unlock()
		return
	}
	s.ended = true
	s.sp.End = end.UnixNano()
	s.sp.Failed = s.sp.Failed || failed
	if s != &rec.root {
		rec.mu.Unlock()
		return
	}
	rec.handed = true
	dropped := rec.dropped
	rec.mu.Unlock()
	if !dropped {
		rec.names.recorded.Add(1)
		rec.names.col.HandOff(rec.owner, rec)
	}
}

// IsRecording reports whether the span has not ended (nor its unit).
func (s *recSpan) IsRecording() bool {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	return !s.ended && !s.rec.handed
}

// SetAttributes keeps the attributes attribution reads (amdahl.outcome).
func (s *recSpan) SetAttributes(kv ...attribute.KeyValue) {
	s.rec.mu.Lock()
	if !s.ended && !s.rec.handed {
		for _, a := range kv {
			s.sp.SetAttribute(a)
		}
	}
	s.rec.mu.Unlock()
}

// SetName renames the span.
func (s *recSpan) SetName(name string) {
	s.rec.mu.Lock()
	if !s.ended {
		s.sp.Name = name
	}
	s.rec.mu.Unlock()
}

// SpanContext returns the span's W3C context.
func (s *recSpan) SpanContext() trace.SpanContext { return s.sc }

// RecordsReplyPhases implements taskproto.ReplyPhaseRecorder for the record's
// host span: the worker that takes the task's result records its
// receive and deserialize (replyPhases), so that ipc's reader goroutine
// does not write to the record from another core: a record written on
// the worker's core stays in that core's cache (perf of taskhost runs,
// docs/measurements/telemetry-cost.md).
func (s *recSpan) RecordsReplyPhases() bool { return s == &s.rec.host }

var _ taskproto.ReplyPhaseRecorder = (*recSpan)(nil)

// TracerProvider returns the tracer that made the span.
func (s *recSpan) TracerProvider() trace.TracerProvider { return s.rec.names.tp }

// Events, links, errors and status reach only exporters, which a record
// does not have (Runtime.records): they are dropped; a unit's failure
// reaches attribution as amdahl.outcome.

// AddEvent does nothing: see above.
func (s *recSpan) AddEvent(string, ...trace.EventOption) {}

// AddLink does nothing: see above.
func (s *recSpan) AddLink(trace.Link) {}

// RecordError does nothing: see above.
func (s *recSpan) RecordError(error, ...trace.EventOption) {}

// SetStatus does nothing: see above.
func (s *recSpan) SetStatus(codes.Code, string) {}

package runtime

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"github.com/amdahl-rt/amdahl/ipc/taskproto"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// A task unit's record: the spans of a unit of the taskhost shape (a task
// sent straight to a host, no orchestration), kept as times in the unit
// itself rather than as span objects filed one by one with the
// collector. The shape is fixed: the root (amdahl.work), runtime.dispatch
// and its runtime.queue, runtime.host and under it ipc's serialize and
// send of the request and receive and deserialize of the reply, and the
// host's four phases from its reply. The root, dispatch and host spans
// are the record's own trace.Spans (recSpan: the contexts carry them, and
// the host span's context crosses the pipe); the other nine are slots of
// two times each, written where the span would have ended. The unit is
// handed to the accounting once, at its root's end, and its spans are
// made there, in the accounting goroutine's scratch space, in a fixed
// order (so that the attribution's known-shape path takes them).
//
// Nothing of what a span says is lost: a span the record has no slot for
// (a phase a program adds under the unit, a leaf with attributes, a
// second round trip) is kept whole beside the slots (extra), with its
// own id and parent, as the collector would have kept it.
//
// The record is used only where nothing but the attribution reads the
// spans (the accountingTracer without export) and every unit is sampled
// (no Config.Sampler): see Runtime.records.

// recordKey is the context key under which Submit hands a unit's record
// to its root span's start.
type recordKey struct{}

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
	numSlots
)

// recordNames is the run's names for a record's spans: its Components'
// span names, made once.
type recordNames struct {
	runtime, ipc, host string // component names
	dispatch           string
	slot               [numSlots]string
}

func newRecordNames(rt, ipcComp, hostComp *telemetry.Component) *recordNames {
	n := &recordNames{runtime: rt.Name(), ipc: ipcComp.Name(), host: hostComp.Name(), dispatch: rt.SpanName(telemetry.Dispatch, telemetry.None)}
	for s := range numSlots {
		comp := ipcComp
		switch {
		case s == slotQueue:
			comp = rt
		case s >= slotHostReceive:
			comp = hostComp
		}
		p, d := slotPhase(s)
		n.slot[s] = comp.SpanName(p, d)
	}
	return n
}

// slotPhase returns the phase and direction of leaf slot s.
func slotPhase(s int) (telemetry.Phase, telemetry.Direction) {
	switch s {
	case slotQueue:
		return telemetry.Queue, telemetry.None
	case slotSerialize:
		return telemetry.Serialize, telemetry.Request
	case slotSend:
		return telemetry.Send, telemetry.Request
	case slotReceive:
		return telemetry.Receive, telemetry.Reply
	case slotDeserialize:
		return telemetry.Deserialize, telemetry.Reply
	case slotHostReceive:
		return telemetry.Receive, telemetry.Request
	case slotHostDeserialize:
		return telemetry.Deserialize, telemetry.Request
	case slotHostExecute:
		return telemetry.Execute, telemetry.None
	default:
		return telemetry.Serialize, telemetry.Reply
	}
}

// unitRecord is a task unit's record (above). Its fields are guarded by
// mu but for names, col and owner, set before the unit's root starts.
type unitRecord struct {
	names *recordNames
	col   *collector
	owner any // the runtime's unit, handed to onWork

	mu               sync.Mutex
	root, disp, host recSpan
	slot             [numSlots][2]int64 // Unix ns; End 0: not recorded
	extra            []attribution.Span
	handed           bool // the root ended: later spans reach no unit
	dropped          bool // not submitted: nothing is handed off
}

// recSpan is one of a record's root, dispatch and host spans.
type recSpan struct {
	embedded.Span
	rec     *unitRecord
	tracer  *accountingTracer
	sc      trace.SpanContext
	sp      attribution.Span // guarded by rec.mu
	started bool
	ended   bool
}

var _ trace.Span = (*recSpan)(nil)

// startRoot starts the record's root span at start, in a new trace.
func (rec *unitRecord) startRoot(t *accountingTracer, start time.Time) *recSpan {
	return rec.start(&rec.root, t, attribution.Span{TraceID: t.col.newTraceID(), SpanID: t.col.newSpanID(), Name: telemetry.SpanWork, Start: start.UnixNano()})
}

func (rec *unitRecord) start(s *recSpan, t *accountingTracer, sp attribution.Span) *recSpan {
	s.rec, s.tracer, s.sp, s.started = rec, t, sp, true
	s.sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID(sp.TraceID), SpanID: trace.SpanID(sp.SpanID), TraceFlags: trace.FlagsSampled})
	return s
}

// startChild starts the record's span for a phase span of parent (one of
// the record's spans) named name, or returns nil if the record has none
// for it (or has started it already): the dispatch under the root, the
// host span under it.
func (rec *unitRecord) startChild(t *accountingTracer, parent *recSpan, name, component string, ph telemetry.Phase, d telemetry.Direction, start time.Time) *recSpan {
	var s *recSpan
	switch {
	case parent != &rec.root:
		return nil
	case ph == telemetry.Dispatch && d == telemetry.None && name == rec.names.dispatch && component == rec.names.runtime:
		s = &rec.disp
	case ph == 0 && name == SpanHost && component == "":
		s = &rec.host
	default:
		return nil
	}
	if s.started {
		return nil // a second round trip: kept as an extra span
	}
	root := &rec.root.sp
	return rec.start(s, t, attribution.Span{TraceID: root.TraceID, SpanID: t.col.newSpanID(), ParentID: root.SpanID,
		Name: name, Component: component, Phase: ph, Direction: d, Start: start.UnixNano()})
}

// leafSlot returns the slot of a leaf of parent named name, or -1.
func (rec *unitRecord) leafSlot(parent *recSpan, name, component string, ph telemetry.Phase, d telemetry.Direction) int {
	n, s := rec.names, -1
	switch {
	case parent == &rec.host && component == n.ipc:
		s = ipcSlot(ph, d)
	case parent == &rec.disp && component == n.runtime && ph == telemetry.Queue && d == telemetry.None:
		s = slotQueue
	}
	if s < 0 || name != n.slot[s] {
		return -1
	}
	return s
}

// ipcSlot returns the slot of ipc's phase ph in direction d, or -1.
func ipcSlot(ph telemetry.Phase, d telemetry.Direction) int {
	switch {
	case ph == telemetry.Serialize && d == telemetry.Request:
		return slotSerialize
	case ph == telemetry.Send && d == telemetry.Request:
		return slotSend
	case ph == telemetry.Receive && d == telemetry.Reply:
		return slotReceive
	case ph == telemetry.Deserialize && d == telemetry.Reply:
		return slotDeserialize
	}
	return -1
}

// hostSlot returns the slot of the task host's phase ph in direction d,
// or -1.
func hostSlot(ph telemetry.Phase, d telemetry.Direction) int {
	switch {
	case ph == telemetry.Receive && d == telemetry.Request:
		return slotHostReceive
	case ph == telemetry.Deserialize && d == telemetry.Request:
		return slotHostDeserialize
	case ph == telemetry.Execute && d == telemetry.None:
		return slotHostExecute
	case ph == telemetry.Serialize && d == telemetry.Reply:
		return slotHostSerialize
	}
	return -1
}

// setSlot records leaf slot s, once, unless the unit was handed off.
func (rec *unitRecord) setSlot(s int, start, end int64) bool {
	rec.mu.Lock()
	ok := !rec.handed && rec.slot[s][1] == 0
	if ok {
		rec.slot[s] = [2]int64{start, max(end, 1)}
	}
	rec.mu.Unlock()
	return ok
}

// addExtra keeps a span the record has no slot for.
func (rec *unitRecord) addExtra(sp attribution.Span) {
	rec.mu.Lock()
	if !rec.handed {
		rec.extra = append(rec.extra, sp)
	}
	rec.mu.Unlock()
}

// recordLeaf records a leaf of parent, a span of the record: in its slot,
// or whole as an extra span (with an id of its own).
func (rec *unitRecord) recordLeaf(t *accountingTracer, parent *recSpan, name, component string, ph telemetry.Phase, d telemetry.Direction, start, end time.Time, attrs []attribute.KeyValue) {
	if len(attrs) == 0 {
		if s := rec.leafSlot(parent, name, component, ph, d); s >= 0 && rec.setSlot(s, start.UnixNano(), end.UnixNano()) {
			return
		}
	}
	sp := attribution.Span{TraceID: attribution.TraceID(parent.sc.TraceID()), SpanID: t.col.newSpanID(), ParentID: attribution.SpanID(parent.sc.SpanID()),
		Name: name, Component: component, Phase: ph, Direction: d, Start: start.UnixNano(), End: end.UnixNano()}
	for _, kv := range attrs {
		sp.SetAttribute(kv)
	}
	rec.addExtra(sp)
}

// hostPhases records a task host's phases from its reply (taskproto's
// timings placed in the parent's clock) under the record's host span,
// comp the host's Component.
func (rec *unitRecord) hostPhases(t *accountingTracer, comp *telemetry.Component, timings []taskproto.Timing) {
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
		if s := hostSlot(tm.Phase, tm.Direction); s >= 0 && rec.slot[s][1] == 0 {
			rec.slot[s] = [2]int64{tm.Start.UnixNano(), max(tm.End.UnixNano(), 1)}
		} else if n < len(extra) {
			extra[n] = i
			n++
		}
	}
	rec.mu.Unlock()
	h := rec.host.sc
	for _, i := range extra[:n] {
		tm := timings[i]
		rec.addExtra(attribution.Span{TraceID: attribution.TraceID(h.TraceID()), SpanID: t.col.newSpanID(), ParentID: attribution.SpanID(h.SpanID()),
			Name: comp.SpanName(tm.Phase, tm.Direction), Component: comp.Name(),
			Start: tm.Start.UnixNano(), End: tm.End.UnixNano(), Phase: tm.Phase, Direction: tm.Direction, Remote: true})
	}
}

// drop keeps the unit from being handed off (it was never submitted).
func (rec *unitRecord) drop() {
	rec.mu.Lock()
	rec.dropped = true
	rec.mu.Unlock()
}

// slotID is the span id of leaf slot s: the slots' spans have no
// children and their ids leave the process nowhere, so they take fixed
// ids, distinct from one another and (with a probability of about
// 2⁻⁶⁴ for each of the unit's random ids) from the unit's other spans.
func slotID(s int) attribution.SpanID {
	return attribution.SpanID{0xa4, 0xda, 0x41, 0x5e, 0xc0, 0xde, 0x5e, byte(1 + s)}
}

// spans appends the unit's spans to dst: dispatch, its queue, the ipc
// leaves, the host's phases, the host span, the extra spans and the root,
// each only if it ended.
func (rec *unitRecord) spans(dst []attribution.Span) []attribution.Span {
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
		parent, comp := rec.host.sp.SpanID, n.ipc
		switch {
		case s == slotQueue:
			parent, comp = rec.disp.sp.SpanID, n.runtime
		case s >= slotHostReceive:
			comp = n.host
		}
		p, d := slotPhase(s)
		dst = append(dst, attribution.Span{TraceID: rec.root.sp.TraceID, SpanID: slotID(s), ParentID: parent,
			Start: t[0], End: t[1], Name: n.slot[s], Component: comp, Phase: p, Direction: d, Remote: s >= slotHostReceive})
	}
	if rec.host.ended {
		dst = append(dst, rec.host.sp)
	}
	dst = append(dst, rec.extra...)
	return append(dst, rec.root.sp)
}

// End ends the span now, or at the WithTimestamp given.
func (s *recSpan) End(opts ...trace.SpanEndOption) {
	end := time.Now()
	if len(opts) > 0 {
		cfg := trace.NewSpanEndConfig(opts...)
		if ts := cfg.Timestamp(); !ts.IsZero() {
			end = ts
		}
	}
	s.endAt(end)
}

// endAt ends the span at end, once; the root's end hands the unit off.
func (s *recSpan) endAt(end time.Time) {
	rec := s.rec
	rec.mu.Lock()
	if s.ended || rec.handed {
		rec.mu.Unlock()
		return
	}
	s.ended = true
	s.sp.End = end.UnixNano()
	if s != &rec.root {
		rec.mu.Unlock()
		return
	}
	rec.handed = true
	dropped := rec.dropped
	rec.mu.Unlock()
	if !dropped {
		rec.col.handOff(handoff{rec: rec, owner: rec.owner})
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
	if !s.ended {
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

// TracerProvider returns the tracer that made the span.
func (s *recSpan) TracerProvider() trace.TracerProvider { return s.tracer.provider }

// Events, links, errors and status reach only exporters, and a record is
// kept only when there is none (as an accountingSpan without export).

// AddEvent does nothing.
func (s *recSpan) AddEvent(string, ...trace.EventOption) {}

// AddLink does nothing.
func (s *recSpan) AddLink(trace.Link) {}

// RecordError does nothing.
func (s *recSpan) RecordError(error, ...trace.EventOption) {}

// SetStatus does nothing.
func (s *recSpan) SetStatus(codes.Code, string) {}

// recordOf returns the record ctx hands a root span, if any.
func recordOf(ctx context.Context) *unitRecord {
	rec, _ := ctx.Value(recordKey{}).(*unitRecord)
	return rec
}

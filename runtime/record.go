package runtime

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/taskproto"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// A task unit's record: the spans of a unit of the taskhost shape (a task
// sent straight to a host, no orchestration), kept as times in the unit
// itself rather than as span objects filed one by one with the
// collector. The shape is fixed: the root (amdahl.work), runtime.dispatch
// and its runtime.queue, runtime.host and under it ipc's serialize and
// send of the request and receive and deserialize of the reply, and the
// host's phases from its reply (receive, deserialize, execute, the
// reply's serialize and, when the host stamped it, the reply's send). The runtime writes its own phases
// straight into the record (Submit, the worker: no Component, no
// context); the root, dispatch and host spans are the record's own
// trace.Spans (recSpan), which the unit's contexts carry, so that the
// host span's context crosses the pipe and ipc's leaves, which reach the
// run's tracer as ever, find their slots (RecordPhaseSpan under a
// recSpan). The other ten spans are slots of two times each. The unit is
// handed to the accounting once, at its root's end, and its spans are
// made there, in the accounting goroutine's scratch space, in a fixed
// order (so that the attribution's known-shape path takes them), with
// the root's, dispatch's and host span's random ids and fixed ones for
// the slots.
//
// Nothing of what a span says is lost: a span the record has no slot for
// (a phase a program starts under the unit, a leaf with attributes, a
// second round trip) is kept whole beside the slots (extra), with its
// own id and parent, as the collector would have kept it. A span that
// ends after its unit's root reaches no unit, as with the collector.
//
// The record is used where nothing but the attribution and, at most, the
// trace file read the spans, and the runtime's Component would do nothing
// else with the unit's root, dispatch and queue: see Runtime.records.
// With the trace file (the exporting tracer's spanExport) the record also
// keeps what the file reads of its spans (recordExport: the root's and
// host span's attributes, events and status, the leaves' attributes), and
// hands the file all of them at the root's end, as the exporting tracer
// would have one by one: the same names, attributes, kinds, scope and
// resource, each span with an id of its own (TestTraceFileMatchesSDK,
// taskhost). A span it keeps beside the slots goes to the file when it
// ends, as any of the tracer's.

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
	t            *accountingTracer // the run's own tracer (with t.export, the trace file's)
	runtime, ipc string            // component names
	ipcComp      *telemetry.Component
	dispatch     string
	// span is each slot's span but its trace, parent and times.
	span [numSlots]attribution.Span
	// rootAttrs are the attributes the runtime's Component starts a root
	// with (its transport, scenario and variant), for the export.
	rootAttrs []attribute.KeyValue
}

func newRecordNames(t *accountingTracer, rt, ipcComp, hostComp *telemetry.Component) *recordNames {
	n := &recordNames{t: t, runtime: rt.Name(), ipc: ipcComp.Name(), ipcComp: ipcComp, dispatch: rt.SpanName(telemetry.Dispatch, telemetry.None)}
	for s := range numSlots {
		comp := ipcComp
		switch {
		case s == slotQueue:
			comp = rt
		case s >= slotHostReceive:
			comp = hostComp
		}
		p, d := slotPhase(s)
		n.span[s] = attribution.Span{SpanID: slotID(s), Name: comp.SpanName(p, d), Component: comp.Name(), Phase: p, Direction: d, Remote: s >= slotHostReceive}
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
	extra            []attribution.Span
	handed           bool // the root ended: later spans reach no unit
	dropped          bool // not submitted: nothing is handed off
	// exp, when the run's spans are exported (names.t.export), is what
	// the export reads besides the times; set by begin.
	exp *recordExport
}

// recordExport is what the trace file reads of a record's spans besides
// their times: the root's, dispatch's and host span's span records
// (attributes, events, status, as the exporting tracer keeps them) and
// each slot's attributes (ipc's sizes; a host phase's amdahl.remote).
type recordExport struct {
	span [3]spanRecord // the root's, dispatch's and host span's
	// slotAttrs are the attributes of each slot's span, copied into kvs
	// (a leaf whose attributes do not fit is kept beside the slots).
	slotAttrs [numSlots][]attribute.KeyValue
	kvs       [slotKVs]attribute.KeyValue
	nkv       int
	rootKVs   [8]attribute.KeyValue // the root's attributes' first backing
}

// slotKVs is how many attributes a record keeps for its leaves: ipc's
// four leaves carry five (amdahl.bytes on each, the send's effective
// buffer).
const slotKVs = 6

// Indexes of recordExport.span.
const (
	expRoot = iota
	expDispatch
	expHost
)

// recSpan is one of a record's root, dispatch and host spans.
type recSpan struct {
	embedded.Span
	rec     *unitRecord
	sc      trace.SpanContext
	sp      attribution.Span // guarded by rec.mu
	exp     *spanRecord      // in rec.exp, when exported
	started bool
	ended   bool
}

var _ trace.Span = (*recSpan)(nil)

// begin starts the record of a unit (owner, the runtime's unit) at
// start: its root span, in a new trace, and its dispatch.
// With the export, the root and dispatch take random ids (they are
// written to the file, and a span kept beside the slots may name them as
// its parent), and the root begins with the runtime Component's
// attributes; work adds the unit's own (setWork).
func (rec *unitRecord) begin(names *recordNames, owner any, start time.Time) {
	rec.names, rec.owner = names, owner
	at := start.UnixNano()
	rootSID, dispSID := rootID, dispatchID
	if e := names.t.export; e != nil {
		x := new(recordExport)
		rec.exp = x
		rootSID, dispSID = names.t.col.newSpanID(), names.t.col.newSpanID()
		x.span[expRoot] = spanRecord{kind: trace.SpanKindInternal, attrs: x.rootKVs[:0]}
		x.span[expRoot].addAttrs(names.rootAttrs)
		x.span[expDispatch] = spanRecord{kind: trace.SpanKindInternal, lead: e.phaseLead(names.runtime, telemetry.Dispatch, telemetry.None)}
		x.span[expHost] = spanRecord{kind: trace.SpanKindInternal}
	}
	root := attribution.Span{TraceID: names.t.col.newTraceID(), SpanID: rootSID, Name: telemetry.SpanWork, Start: at}
	rec.root.start(rec, root, expRoot, trace.SpanContext{})
	rec.disp.start(rec, attribution.Span{TraceID: root.TraceID, SpanID: dispSID, ParentID: root.SpanID,
		Name: names.dispatch, Component: names.runtime, Phase: telemetry.Dispatch, Start: at}, expDispatch, rec.root.sc)
}

// setWork adds the unit's own attributes to the root (amdahl.work.id,
// kind and shape), as the runtime's Component starts a root with them;
// only the export reads them. Call it after begin, before the record is
// shared.
func (rec *unitRecord) setWork(attrs ...attribute.KeyValue) {
	if rec.exp != nil {
		rec.exp.span[expRoot].addAttrs(attrs)
	}
}

// start starts s as sp, its parent's context parent; i is its span
// record's index in rec.exp.
func (s *recSpan) start(rec *unitRecord, sp attribution.Span, i int, parent trace.SpanContext) {
	s.rec, s.sp, s.started = rec, sp, true
	s.sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID(sp.TraceID), SpanID: trace.SpanID(sp.SpanID), TraceFlags: trace.FlagsSampled})
	if rec.exp != nil {
		s.exp = &rec.exp.span[i]
		s.exp.parent = parent
	}
}

// startHost starts the record's runtime.host span at start, under the
// root, for the round trip on the host with id and pid (attributes only
// the export reads), and returns ctx carrying it. A second one (which a
// task unit never starts) is a span of the run's tracer, kept beside the
// slots.
func (rec *unitRecord) startHost(ctx context.Context, start time.Time, id, pid int) (context.Context, trace.Span) {
	rec.mu.Lock()
	if rec.host.started || rec.handed {
		rec.mu.Unlock()
		ctx, s := rec.names.t.startPhase(trace.ContextWithSpan(ctx, &rec.root), SpanHost, "", 0, telemetry.None, start)
		if rec.exp != nil {
			s.SetAttributes(AttrHostID.Int(id), AttrHostPID.Int(pid))
		}
		return ctx, s
	}
	root := &rec.root.sp
	rec.host.start(rec, attribution.Span{TraceID: root.TraceID, SpanID: rec.names.t.col.newSpanID(), ParentID: root.SpanID,
		Name: SpanHost, Start: start.UnixNano()}, expHost, rec.root.sc)
	if rec.exp != nil {
		rec.host.exp.addAttrs([]attribute.KeyValue{AttrHostID.Int(id), AttrHostPID.Int(pid)})
	}
	rec.mu.Unlock()
	return trace.ContextWithSpan(ctx, &rec.host), &rec.host
}

// end ends the unit at now with outcome o (class and err: why it did
// not succeed), hands it off, and returns its end-to-end time from start.
// The export's root gets what the runtime's Component would give it:
// amdahl.reason (with an error), amdahl.outcome, then the error's
// exception event and status.
func (rec *unitRecord) end(now, start time.Time, o telemetry.Outcome, class string, err error) time.Duration {
	if rec.exp != nil {
		rec.mu.Lock()
		if r := rec.root.exp; !rec.root.ended && !rec.handed {
			if err != nil {
				r.addAttrs([]attribute.KeyValue{AttrReason.String(class)})
			}
			r.addAttrs([]attribute.KeyValue{telemetry.AttrOutcome.String(o.String())})
			if err != nil {
				r.addEvent(eventException, exceptionEvent(err, nil))
				r.setStatus(codes.Error, err.Error())
			}
		}
		rec.mu.Unlock()
	}
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

// setSlot records leaf slot s, once, unless the unit was handed off;
// attrs are its span's attributes for the export (keepable).
func (rec *unitRecord) setSlot(s int, start, end int64, attrs []attribute.KeyValue) bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.handed || rec.slot[s][1] != 0 {
		return false
	}
	if len(attrs) > 0 {
		x := rec.exp
		if x == nil || x.nkv+len(attrs) > len(x.kvs) {
			return false // no room: the leaf is kept beside the slots
		}
		kv := x.kvs[x.nkv : x.nkv+len(attrs) : x.nkv+len(attrs)]
		copy(kv, attrs)
		x.nkv += len(attrs)
		x.slotAttrs[s] = kv
	}
	rec.slot[s] = [2]int64{start, max(end, 1)}
	return true
}

// keepable reports whether a leaf's attributes can be kept in its slot:
// none (without the export, the only case), or with the export a few,
// each valid, given once, and none that attribution reads (they would
// change the slot's span) or that the leaf's lead attributes hold.
// setSlot checks that they fit.
func (rec *unitRecord) keepable(attrs []attribute.KeyValue) bool {
	if len(attrs) == 0 {
		return true
	}
	if rec.exp == nil || len(attrs) > slotKVs || hasDupKey(attrs) {
		return false
	}
	for _, a := range attrs {
		if !a.Valid() || spans.ReadsAttribute(a.Key) {
			return false
		}
	}
	return true
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
// or whole as an extra span (with an id of its own; with the export, it
// goes to the file now).
func (rec *unitRecord) recordLeaf(parent *recSpan, name, component string, ph telemetry.Phase, d telemetry.Direction, start, end time.Time, attrs []attribute.KeyValue) {
	if rec.keepable(attrs) {
		if s := rec.leafSlot(parent, name, component, ph, d); s >= 0 && rec.setSlot(s, start.UnixNano(), end.UnixNano(), attrs) {
			return
		}
	}
	sp := attribution.Span{TraceID: attribution.TraceID(parent.sc.TraceID()), SpanID: rec.names.t.col.newSpanID(), ParentID: attribution.SpanID(parent.sc.SpanID()),
		Name: name, Component: component, Phase: ph, Direction: d, Start: start.UnixNano(), End: end.UnixNano()}
	for _, kv := range attrs {
		sp.SetAttribute(kv)
	}
	rec.addExtra(sp)
	rec.exportLeaf(parent.sc, &sp, attrs)
}

// exportLeaf hands the file a leaf kept beside the slots (sp, with attrs
// besides its phase's), under parent, if the record is exported: also
// after the root ended, when the attribution no longer takes it, as the
// exporting tracer exports every span that ends.
func (rec *unitRecord) exportLeaf(parent trace.SpanContext, sp *attribution.Span, attrs []attribute.KeyValue) {
	if rec.exp == nil {
		return
	}
	rec.writeLeaf(parent, sp, attrs, false)
}

// writeLeaf hands the file sp, a leaf of the record's unit under parent,
// with attrs after its phase's lead attributes: as they are if kept (a
// slot's, keepable), else checked and copied as the exporting tracer
// keeps a span's.
func (rec *unitRecord) writeLeaf(parent trace.SpanContext, sp *attribution.Span, attrs []attribute.KeyValue, kept bool) {
	t := rec.names.t
	r := spanRecord{parent: parent, kind: trace.SpanKindInternal, lead: t.export.phaseLead(sp.Component, sp.Phase, sp.Direction)}
	if kept {
		r.attrs = attrs
	} else {
		r.addAttrs(attrs)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID(sp.TraceID), SpanID: trace.SpanID(sp.SpanID), TraceFlags: trace.FlagsSampled})
	t.export.end(t, &r, sc, sp)
}

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
			if rec.exp != nil {
				rec.exp.slotAttrs[s] = remoteAttrs
			}
		} else if n < len(extra) {
			extra[n] = i
			n++
		}
	}
	rec.mu.Unlock()
	for _, i := range extra[:n] {
		sp := remoteSpan(comp, rec.host.sc, rec.names.t.col.newSpanID(), timings[i])
		rec.addExtra(sp)
		rec.exportLeaf(rec.host.sc, &sp, remoteAttrs)
	}
}

// remoteAttrs are the attributes of a task host's phase's span in the
// parent's trace (childSpans): amdahl.remote=true. Not written to.
var remoteAttrs = []attribute.KeyValue{telemetry.AttrRemote.Bool(true)}

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
func slotID(s int) attribution.SpanID {
	return attribution.SpanID{0xa4, 0xda, 0x41, 0x5e, 0xc0, 0xde, 0x5e, byte(1 + s)}
}

var (
	rootID     = attribution.SpanID{0xa4, 0xda, 0x41, 0x5e, 0xc0, 0xde, 0x5e, 0x80}
	dispatchID = attribution.SpanID{0xa4, 0xda, 0x41, 0x5e, 0xc0, 0xde, 0x5e, 0x81}
)

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
func (s *recSpan) End(opts ...trace.SpanEndOption) { s.endAt(endTime(opts)) }

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
	if rec.exp != nil {
		rec.export() // dropped too: the exporting tracer's spans of a unit not submitted reach the file
	}
	if !dropped {
		rec.names.t.col.handOff(handoff{rec: rec, owner: rec.owner})
	}
}

// export hands the file the record's spans that ended, once its root has
// (handed: nothing changes them any more), each as the exporting tracer
// would have: a slot's with a random id of its own, under the host span
// (the queue: under dispatch), its component's lead attributes and the
// attributes kept in its slot.
func (rec *unitRecord) export() {
	t, x, n := rec.names.t, rec.exp, rec.names
	if rec.disp.ended {
		t.export.end(t, rec.disp.exp, rec.disp.sc, &rec.disp.sp)
	}
	for s := range numSlots {
		tm := rec.slot[s]
		if tm[1] == 0 {
			continue
		}
		sp := n.span[s]
		parent := &rec.host
		if s == slotQueue {
			parent = &rec.disp
		}
		sp.TraceID, sp.SpanID, sp.ParentID, sp.Start, sp.End = rec.root.sp.TraceID, t.col.newSpanID(), parent.sp.SpanID, tm[0], tm[1]
		rec.writeLeaf(parent.sc, &sp, x.slotAttrs[s], true)
	}
	if rec.host.ended {
		t.export.end(t, rec.host.exp, rec.host.sc, &rec.host.sp)
	}
	t.export.end(t, rec.root.exp, rec.root.sc, &rec.root.sp)
}

// IsRecording reports whether the span has not ended (nor its unit).
func (s *recSpan) IsRecording() bool {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	return !s.ended && !s.rec.handed
}

// SetAttributes keeps the attributes attribution reads (amdahl.outcome),
// and with the export all of them.
func (s *recSpan) SetAttributes(kv ...attribute.KeyValue) {
	s.rec.mu.Lock()
	if !s.ended && !s.rec.handed {
		for _, a := range kv {
			s.sp.SetAttribute(a)
		}
		if s.exp != nil {
			s.exp.addAttrs(kv)
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

// RecordsReplyPhases implements ipc.ReplyPhaseRecorder for the record's
// host span: the worker that takes the task's result records its
// receive and deserialize (replyPhases), so that ipc's reader goroutine
// does not write to the record from another core: a record written on
// the worker's core stays in that core's cache (perf of taskhost runs,
// docs/measurements/telemetry-cost.md).
func (s *recSpan) RecordsReplyPhases() bool { return s == &s.rec.host }

var _ ipc.ReplyPhaseRecorder = (*recSpan)(nil)

// replyPhases records the receive and deserialize phases of the task's
// result in, which ipc left to the record's host span
// (in.ReplyPhasesLeft), as ipc records them: their spans (amdahl.bytes
// on them when the spans' attributes are read) and their durations in
// amdahl.phase.duration, in the context of the host span (ctx). (A run
// keeps units in records only while it records no metrics, so the
// durations go nowhere today; they are ipc's whatever the Component.)
func (rec *unitRecord) replyPhases(ctx context.Context, in *ipc.Incoming) {
	comp := rec.names.ipcComp
	var attrs []attribute.KeyValue
	if comp.SpanAttributes() {
		attrs = []attribute.KeyValue{telemetry.AttrBytes.Int(in.Size)}
	}
	recvEnd := in.ReceiveStart.Add(in.ReceiveDuration)
	for _, ph := range [...]struct {
		slot       int
		start, end time.Time
	}{
		{slotReceive, in.ReceiveStart, recvEnd},
		{slotDeserialize, recvEnd, recvEnd.Add(in.DeserializeDuration)},
	} {
		p, d := slotPhase(ph.slot)
		comp.RecordPhase(ctx, p, d, ph.end.Sub(ph.start))
		rec.recordLeaf(&rec.host, rec.names.span[ph.slot].Name, rec.names.ipc, p, d, ph.start, ph.end, attrs)
	}
}

// TracerProvider returns the tracer that made the span.
func (s *recSpan) TracerProvider() trace.TracerProvider { return s.rec.names.t.provider }

// Events, links, errors and status reach only exporters: without the
// export they are dropped (a unit's failure reaches attribution as
// amdahl.outcome), with it kept as the exporting tracer's spans keep them.

// AddEvent adds an event, as the SDK would.
func (s *recSpan) AddEvent(name string, opts ...trace.EventOption) {
	if s.exp != nil {
		cfg := trace.NewEventConfig(opts...)
		s.whileOpen(func(r *spanRecord) { r.addEvent(name, cfg) })
	}
}

// AddLink adds a link, as the SDK would.
func (s *recSpan) AddLink(l trace.Link) {
	s.whileOpen(func(r *spanRecord) { r.addLink(l) })
}

// RecordError adds err as an exception event, as the SDK would.
func (s *recSpan) RecordError(err error, opts ...trace.EventOption) {
	if err != nil && s.exp != nil {
		cfg := exceptionEvent(err, opts)
		s.whileOpen(func(r *spanRecord) { r.addEvent(eventException, cfg) })
	}
}

// SetStatus sets the status as the SDK does.
func (s *recSpan) SetStatus(code codes.Code, description string) {
	s.whileOpen(func(r *spanRecord) { r.setStatus(code, description) })
}

// whileOpen calls f with s's span record for the export, under the
// record's lock, unless s is not exported (exp is set before the span is
// shared) or it or its unit has ended.
func (s *recSpan) whileOpen(f func(*spanRecord)) {
	if s.exp == nil {
		return
	}
	s.rec.mu.Lock()
	if !s.ended && !s.rec.handed {
		f(s.exp)
	}
	s.rec.mu.Unlock()
}

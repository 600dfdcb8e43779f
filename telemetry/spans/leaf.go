package spans

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// A unit's leaves (phases recorded whole under one of its spans, such as
// ipc's serialize and send or a task host's phases) are kept compactly in
// the unit: a pointer to what the leaves of one phase of one component
// share (leafKind, interned by the provider), their times and ids. Their
// Spans are made when the unit is handed off, on the accounting
// goroutine (unit.appendLeaves), so the goroutine being measured files a
// leaf with one lock and no span object, and nothing of it that the
// attribution does not read is copied.

// leafKind is what the leaves of one phase of one component have in
// common: the Span fields a leaf takes from it, and with an Exporter the
// phase's lead attributes.
type leafKind struct {
	name, component string
	ph              telemetry.Phase
	d               telemetry.Direction
	remote          bool
	lead            *SharedAttributes // nil without an Exporter
}

// leaf is a leaf of a unit: its kind, times (Unix ns) and parent. Its
// span id is made at hand-off (leafID); an exported leaf's Record has a
// random one of its own, as ids matter only within what reads them.
type leaf struct {
	kind       *leafKind
	start, end int64
	parent     SpanID
}

// unitLeaves is how many leaves a unit keeps with itself: a task unit's
// queue, ipc's four and the task host's five.
const unitLeaves = 10

// leafKinds interns a provider's leafKinds: by phase, direction and
// remote, the first component and name seen with them, and the others in
// more. Bounded by the Components' names, phases and directions.
type leafKinds struct {
	first [telemetry.NumPhases + 1][telemetry.NumDirections][2]atomic.Pointer[leafKind]
	more  sync.Map // leafKey → *leafKind
}

// leafKey names a leafKind.
type leafKey struct {
	name, component string
	ph              telemetry.Phase
	d               telemetry.Direction
	remote          bool
}

// kind returns the leafKind of its arguments, nil for a phase or
// direction out of range (which a Component never passes). The names are
// compared as strings: a Component passes the same strings every time.
func (p *TracerProvider) leafKind(name, component string, ph telemetry.Phase, d telemetry.Direction, remote bool) *leafKind {
	if int(ph) > telemetry.NumPhases || int(d) >= telemetry.NumDirections {
		return nil
	}
	r := 0
	if remote {
		r = 1
	}
	slot := &p.leaves.first[ph][d][r]
	if k := slot.Load(); k != nil && k.name == name && k.component == component {
		return k
	}
	key := leafKey{name, component, ph, d, remote}
	if k, ok := p.leaves.more.Load(key); ok {
		return k.(*leafKind)
	}
	k := &leafKind{name: name, component: component, ph: ph, d: d, remote: remote}
	if p.export != nil {
		k.lead = p.export.phaseLead(component, ph, d)
	}
	v, _ := p.leaves.more.LoadOrStore(key, k)
	k = v.(*leafKind)
	slot.CompareAndSwap(nil, k)
	return k
}

// leafUnit returns the unit a leaf under p, with attrs, is kept in
// compactly, and its amdahl.remote: nil unless p is a span of a tracked
// unit, sampled and not a Holder's, and a Span would take nothing of
// attrs but amdahl.remote (SetAttribute).
func (p *under) leafUnit(attrs []attribute.KeyValue) (u *unit, remote bool) {
	if u = p.unit; u == nil || p.holder != nil || u.id == (TraceID{}) || !p.sc.IsSampled() {
		return nil, false
	}
	for _, kv := range attrs {
		switch {
		case kv.Key == telemetry.AttrRemote:
			remote = kv.Value.AsBool()
		case ReadsAttribute(kv.Key):
			return nil, false
		}
	}
	return u, remote
}

// fileLeaves keeps leaves, under parent, a span of the tracked unit u, in
// u, and exports each with attrs if the provider exports.
func (t *Tracer) fileLeaves(u *unit, parent trace.SpanContext, attrs []attribute.KeyValue, leaves ...leaf) {
	u.addLeaves(leaves...)
	if t.p.export == nil {
		return
	}
	for i := range leaves {
		l := &leaves[i]
		sp := Span{Name: l.kind.name, Start: l.start, End: l.end}
		t.exportPhase(parent, trace.TraceID(parent.TraceID()), NewSpanID(), l.kind.lead, &sp, attrs)
	}
}

// exportPhase exports the phase span sp (its name and times), of trace
// id and span id under parent, with lead and attrs.
func (t *Tracer) exportPhase(parent trace.SpanContext, tid trace.TraceID, id SpanID, lead *SharedAttributes, sp *Span, attrs []attribute.KeyValue) {
	r := exportRecord{parent: parent, kind: trace.SpanKindInternal, lead: lead}
	if r.canBorrow(attrs) {
		r.attrs = attrs // an Exporter keeps nothing of the record past Export
	} else {
		r.addAttrs(attrs)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID(id),
		TraceFlags: trace.FlagsSampled, TraceState: parent.TraceState()})
	t.p.export.exp.Export(r.record(t, sc, sp))
}

// addLeaves keeps leaves, unless the unit was handed off (they outlived
// it).
func (u *unit) addLeaves(leaves ...leaf) {
	u.mu.Lock()
	if !u.handed {
		if u.leaves == nil {
			u.leaves = u.leafBuf[:0]
		}
		u.leaves = append(u.leaves, leaves...)
	}
	u.mu.Unlock()
}

// RecordPhaseSpans records phases of c under the span in ctx, each with
// attrs, as RecordPhaseSpan records one (for Component.RecordSpans):
// under a span of a tracked unit, all of them under one lock.
func (p *TracerProvider) RecordPhaseSpans(ctx context.Context, c *telemetry.Component, phases telemetry.Timings, attrs []attribute.KeyValue) {
	t, under := p.phase, parentOf(ctx)
	u, remote := under.leafUnit(attrs)
	var buf [len(phases.T)]leaf
	n := 0
	for _, m := range phases.T[:min(max(phases.N, 0), len(phases.T))] {
		name, k := c.SpanName(m.Phase, m.Direction), (*leafKind)(nil)
		if u != nil {
			k = p.leafKind(name, c.Name(), m.Phase, m.Direction, remote)
		}
		if k == nil {
			t.recordPhase(ctx, name, c.Name(), m.Phase, m.Direction, m.Start, m.End, attrs)
			continue
		}
		buf[n] = leaf{kind: k, start: m.Start.UnixNano(), end: m.End.UnixNano(), parent: SpanID(under.sc.SpanID())}
		n++
	}
	if n > 0 {
		t.fileLeaves(u, under.sc, attrs, buf[:n]...)
	}
}

// appendSpans appends the Spans of unit u to dst, u handed off: its
// arena's spans filed, its leaves and its spans kept whole, the root
// last (it ended last).
func (u *unit) appendSpans(dst []Span, filed uint8, leaves []leaf, spans []Span) []Span {
	var root *Span
	for i := range unitSpans {
		if filed&(1<<i) == 0 {
			continue
		}
		if sp := &u.arena[i].sp; sp.SpanID != u.root {
			dst = append(dst, *sp)
		} else {
			root = sp
		}
	}
	dst = appendLeaves(dst, u.id, leaves)
	dst = append(dst, spans...)
	if root != nil {
		dst = append(dst, *root)
	}
	return dst
}

// appendLeaves appends the Spans of leaves, of the trace id, to dst.
func appendLeaves(dst []Span, id TraceID, leaves []leaf) []Span {
	for i := range leaves {
		l := &leaves[i]
		k := l.kind
		dst = append(dst, Span{TraceID: id, SpanID: leafID(i), ParentID: l.parent, Name: k.name, Component: k.component,
			Start: l.start, End: l.end, Phase: k.ph, Direction: k.d, Remote: k.remote})
	}
	return dst
}

// leafID is the id of a unit's leaf i when nothing exports it: leaf ids
// leave the process nowhere and only have to differ from the unit's
// other spans' (random: they meet one with a probability of about 2⁻⁶⁴).
func leafID(i int) SpanID {
	id := SpanID{0xa4, 0xda, 0x41, 0x5e}
	binary.BigEndian.PutUint32(id[4:], uint32(i)+1)
	return id
}

package attribution

import (
	"sort"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// Key identifies a phase and direction. The zero Key (phase 0) collects the
// time on the critical path that no phase span covers: the root's own time
// and spans that are not phases and have no phase among their ancestors.
type Key struct {
	Phase     telemetry.Phase
	Direction telemetry.Direction
}

// String returns "serialize/request", "execute", or "other" for the zero Key.
func (k Key) String() string {
	if !k.Phase.Valid() {
		return "other"
	}
	if k.Direction == telemetry.None {
		return k.Phase.String()
	}
	return k.Phase.String() + "/" + k.Direction.String()
}

// Work is the attribution of one unit of work.
type Work struct {
	Root Span
	// Critical is each key's exclusive time on the critical path; the values
	// add up to Root.Duration() exactly.
	Critical map[Key]time.Duration
	// Naive is the sum of phase span durations per key (overlap counted
	// twice); spans that are not phases are not counted.
	Naive map[Key]time.Duration
	// Count is the number of phase spans per key.
	Count map[Key]int
}

// Trees groups spans into units of work: every span named amdahl.work is a
// root, and every span reachable from it through parent ids belongs to it.
// Spans of other traces are ignored.
func Trees(spans []Span) []Work {
	children := map[string][]int{} // trace+parent id -> child indexes
	for i, s := range spans {
		if s.ParentID != "" {
			k := s.TraceID + "/" + s.ParentID
			children[k] = append(children[k], i)
		}
	}
	var out []Work
	for _, s := range spans {
		if s.Name != telemetry.SpanWork {
			continue
		}
		w := Work{Root: s, Critical: map[Key]time.Duration{}, Naive: map[Key]time.Duration{}, Count: map[Key]int{}}
		w.walk(spans, children, s, s.Start, s.End, Key{})
		for _, i := range children[s.TraceID+"/"+s.SpanID] {
			w.countSubtree(spans, children, spans[i])
		}
		out = append(out, w)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Root.Start.Before(out[j].Root.Start) })
	return out
}

func keyOf(s Span) Key {
	if !s.Phase.Valid() {
		return Key{}
	}
	return Key{Phase: s.Phase, Direction: s.Direction}
}

// walk attributes the window [from, to] of span s (already clipped to its
// parent) by the last-finishing-child walk (Jaeger UI, CRISP): from the end
// of the window, the child that finished last before the cursor is on the
// critical path; the gap between its end and the cursor is s's own time;
// recurse into it and move the cursor to its start; repeat. Children are
// clipped to the parent window, so children overflowing their parent count
// only inside it.
//
// A span that is not a phase (a gRPC client or server span, a per-chunk
// span) counts toward the phase that encloses it: inherit is the key of
// the nearest phase ancestor, or the zero Key ("other") when there is none.
func (w *Work) walk(spans []Span, children map[string][]int, s Span, from, to time.Time, inherit Key) {
	kids := children[s.TraceID+"/"+s.SpanID]
	type clipped struct {
		span       Span
		start, end time.Time
	}
	var cs []clipped
	for _, i := range kids {
		c := spans[i]
		st, en := c.Start, c.End
		if st.Before(from) {
			st = from
		}
		if en.After(to) {
			en = to
		}
		if en.After(st) {
			cs = append(cs, clipped{c, st, en})
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].end.After(cs[j].end) })
	own := keyOf(s)
	if !own.Phase.Valid() {
		own = inherit
	}
	cursor := to
	for _, c := range cs {
		if c.end.After(cursor) {
			continue // overlaps a child already on the path
		}
		w.Critical[own] += cursor.Sub(c.end)
		w.walk(spans, children, c.span, c.start, c.end, own)
		cursor = c.start
	}
	w.Critical[own] += cursor.Sub(from)
}

// countSubtree adds the phase spans among s and its descendants to the
// naive sums and counts, whether they are on the critical path or not.
func (w *Work) countSubtree(spans []Span, children map[string][]int, s Span) {
	if k := keyOf(s); k.Phase.Valid() {
		w.Naive[k] += s.Duration()
		w.Count[k]++
	}
	for _, i := range children[s.TraceID+"/"+s.SpanID] {
		w.countSubtree(spans, children, spans[i])
	}
}

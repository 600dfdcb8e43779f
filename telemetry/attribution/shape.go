package attribution

import (
	"slices"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// A shape is what a unit's attribution keeps of its structure: which span
// is whose parent, each span's row and side, the tree's children lists
// and the unit's rows in order. A program's units come in a few shapes
// (a taskhost unit's spans reach the collector in the same order, with
// the same names and parents, unit after unit), so the Builder keeps the
// shapes of its last units, and a unit of one of them is attributed from
// its times alone: no grouping by span id, no tree to build, no row to
// look up or sort.
//
// A unit has a known shape when its spans, in input order, have a shape's
// names, components, phases, directions, sides (Remote, Process) and
// parents (each span's ParentID is the SpanID of the span at its shape's
// parent position; the root's is none of the unit's). Shapes are learnt
// only from units that were one clean tree (no duplicate, orphan, cycle
// or unrooted span, one root), and a duplicate can only pass for a span
// whose fields it shares, so the span ids of such positions are compared
// too (twins): a unit matched to a shape is one the general path would
// have built as that tree.
//
// The general path lists a span's children in input order too, so the
// Work is the same either way (TestBuilderReuse, TestKnownShape).
type shape struct {
	spans  []shapeSpan // by input position
	root   int32       // input position of the root
	twins  [][2]int32  // positions with the same fields: their ids must differ
	order  []int32     // node k is the span at input position order[k]
	nodes  []Node      // the nodes without their times
	first  []int32     // the tree's children lists (tree.first, tree.kid)
	kid    []int32
	placed []int32  // nodes with far-side children, for place
	keys   []Key    // the unit's phase rows, in compareKeys order
	names  []string // their names (tree.name), which name the gaps
	count  []int    // each row's spans, the root's not counted
	nested int      // Diagnostics.Nested
}

// shapeSpan is what a shape checks of the span at one input position.
type shapeSpan struct {
	name, component string
	op              string
	phase           telemetry.Phase
	direction       telemetry.Direction
	remote          bool
	process         uint32
	parent          int32 // input position of the parent; -1 for the root
}

func shapeSpanOf(sp *spans.Span, parent int32) shapeSpan {
	return shapeSpan{name: sp.Name, component: sp.Component, op: sp.Op, phase: sp.Phase, direction: sp.Direction,
		remote: sp.Remote, process: sp.Process, parent: parent}
}

// sameFields reports whether sp has ss's fields (its parent aside).
func (ss *shapeSpan) sameFields(sp *spans.Span) bool {
	return sp.Phase == ss.phase && sp.Direction == ss.direction && sp.Remote == ss.remote &&
		sp.Process == ss.process && sp.Name == ss.name && sp.Component == ss.component && sp.Op == ss.op
}

// maxShapes bounds the shapes a Builder keeps, maxShapeSpans the spans of
// a unit whose shape is kept, maxTwins the pairs of look-alike spans a
// kept shape checks.
const (
	maxShapes     = 4
	maxShapeSpans = 256
	maxTwins      = 64
)

// matches reports whether spans (one trace) are a unit of shape s.
func (s *shape) matches(spans []spans.Span) bool {
	if len(spans) != len(s.spans) {
		return false
	}
	for i := range spans {
		sp, ss := &spans[i], &s.spans[i]
		if !ss.sameFields(sp) {
			return false
		}
		if ss.parent >= 0 && (sp.ParentID.IsZero() || sp.ParentID != spans[ss.parent].SpanID) {
			return false
		}
	}
	if rp := spans[s.root].ParentID; !rp.IsZero() {
		for i := range spans {
			if spans[i].SpanID == rp {
				return false // a loop through the root
			}
		}
	}
	for _, tw := range s.twins {
		if spans[tw[0]].SpanID == spans[tw[1]].SpanID {
			return false // a duplicate
		}
	}
	return true
}

// knownShape attributes spans (one trace) if they are a unit of a shape b
// keeps, and reports whether they were. The shape found moves to the
// front.
func (b *treeBuilder) knownShape(spans []spans.Span, fn func(Work), d *Diagnostics) bool {
	if len(b.shapes) == 0 {
		return false
	}
	for i := range spans {
		if badTime(&spans[i], b.bound) != timeOK {
			return false // the general path leaves it out and counts it
		}
	}
	for i, s := range b.shapes {
		if !s.matches(spans) {
			continue
		}
		copy(b.shapes[1:i+1], b.shapes[:i])
		b.shapes[0] = s
		b.known++
		fn(b.workOf(s, spans, d))
		return true
	}
	return false
}

// workOf attributes a unit of shape s.
func (b *treeBuilder) workOf(s *shape, spans []spans.Span, d *Diagnostics) Work {
	w := Work{Root: spans[s.root]}
	if b.reuse {
		w.Nodes = append(b.nodes[:0], s.nodes...)
		b.nodes = w.Nodes
	} else {
		w.Nodes = slices.Clone(s.nodes)
	}
	for k, i := range s.order {
		sp, nd := &spans[i], &w.Nodes[k]
		nd.Start, nd.End, nd.Dur = sp.Start, sp.End, sp.Duration()
	}
	t := &b.tree
	t.nodes = w.Nodes
	t.first = append(t.first[:0], s.first...)
	t.kid = append(t.kid[:0], s.kid...)
	for _, p := range s.placed {
		t.placeUnder(p, d)
	}
	t.clip(d)
	var stats []KeyStat
	if b.reuse {
		stats = t.stats[:0]
	} else {
		stats = make([]KeyStat, 0, len(s.keys)+1)
	}
	for r, k := range s.keys {
		stats = append(stats, KeyStat{Key: k, Count: s.count[r]})
	}
	for i := range w.Nodes {
		if r := w.Nodes[i].Row; r >= 0 {
			stats[r].Naive += w.Nodes[i].Dur
		}
	}
	w.Stats = t.walkRows(stats, s.names, func(owner int32) int32 { return w.Nodes[owner].Row })
	if b.reuse {
		t.stats = w.Stats
	}
	d.Nested += s.nested
	return w
}

// learnShape keeps the shape of the unit just built from spans (one
// trace) by the general path, if it was one clean tree; d is what
// building it counted. b's scratch space still holds the unit: b.sp and
// b.ord (its spans by id), b.parent, b.roots, b.nodeSpan and b.tree.
func (b *treeBuilder) learnShape(spans []spans.Span, d Diagnostics) {
	n := len(spans)
	if n > maxShapeSpans || len(b.roots) != 1 || len(b.sp) != n || len(b.tree.nodes) != n ||
		d.Duplicates+d.Orphans+d.Cycles+d.TooDeep+d.Unrooted+d.bad() > 0 {
		return
	}
	s := &shape{spans: make([]shapeSpan, n), root: b.ord[b.roots[0]].i}
	for k := range b.sp {
		parent := int32(-1)
		if p := b.parent[k]; p >= 0 {
			parent = b.ord[p].i
		}
		i := b.ord[k].i
		s.spans[i] = shapeSpanOf(&spans[i], parent)
	}
	for i := range s.spans {
		for j := range i {
			if s.spans[j].sameFields(&spans[i]) {
				if len(s.twins) == maxTwins {
					return // too many look-alikes to check: not kept
				}
				s.twins = append(s.twins, [2]int32{int32(j), int32(i)})
			}
		}
	}
	t := &b.tree
	for k := range t.nodes {
		if nd := &t.nodes[k]; nd.Key.Phase == telemetry.Send && nd.Key.Direction == telemetry.None {
			return // where its far side goes depends on the times (work)
		}
	}
	s.order = make([]int32, n)
	for k, spi := range b.nodeSpan {
		s.order[k] = b.ord[spi].i
	}
	s.first, s.kid = slices.Clone(t.first), slices.Clone(t.kid)
	s.nodes = make([]Node, n)
	for k, nd := range t.nodes {
		s.nodes[k] = Node{Key: nd.Key, Parent: nd.Parent, Far: nd.Far, Row: -1, via: nd.via}
		if k > 0 && nd.Far && !slices.Contains(s.placed, nd.Parent) {
			s.placed = append(s.placed, nd.Parent)
		}
		if k > 0 && spans[s.order[k]].Name == telemetry.SpanWork {
			s.nested++
		}
	}
	slices.Sort(s.placed) // place goes parent by parent in node order
	for _, nd := range s.nodes {
		if nd.Key.IsRow() && !slices.Contains(s.keys, nd.Key) {
			s.keys = append(s.keys, nd.Key)
		}
	}
	slices.SortFunc(s.keys, compareKeys)
	s.names = make([]string, len(s.keys))
	for r, k := range s.keys {
		s.names[r] = t.name(k)
	}
	s.count = make([]int, len(s.keys))
	for k := range s.nodes {
		nd := &s.nodes[k]
		if !nd.Key.IsRow() {
			continue
		}
		r, _ := slices.BinarySearchFunc(s.keys, nd.Key, compareKeys)
		nd.Row = int32(r)
		s.count[r]++
	}
	if len(b.shapes) < maxShapes {
		b.shapes = append(b.shapes, nil)
	}
	copy(b.shapes[1:], b.shapes)
	b.shapes[0] = s
}

// walkRows walks the critical path into stats, whose rows are those of
// the unit's row nodes: row(owner) is the row of row node owner. Time no
// row owns goes to the gaps it lies in, appended last in compareKeys
// order: a gap is named by the rows of the critical pieces before and
// after it ("start" and "end" at the unit's edges), consecutive pieces of
// no row being one gap. names, if not nil, holds the rows' names.
func (t *tree) walkRows(stats []KeyStat, names []string, row func(owner int32) int32) []KeyStat {
	segs := t.segs[:0]
	t.walk(0, -1, func(_, owner int32, d time.Duration) {
		r := int32(-1)
		if owner >= 0 {
			r = row(owner)
			stats[r].Critical += d
		}
		segs = append(segs, segment{r, d})
	})
	t.segs = segs
	rows := len(stats)
	// Each row's name, looked up once per unit at most.
	t.rnames = resize(t.rnames, rows)
	if len(names) == rows {
		copy(t.rnames, names)
	} else {
		clear(t.rnames)
	}
	name := func(r int32) string {
		if t.rnames[r] == "" {
			t.rnames[r] = t.name(stats[r].Key)
		}
		return t.rnames[r]
	}
	for i := 0; i < len(segs); {
		if segs[i].row >= 0 {
			i++
			continue
		}
		var sum time.Duration
		j := i
		for ; j < len(segs) && segs[j].row < 0; j++ {
			sum += segs[j].d
		}
		k := Key{Gap: true, Component: GapStart, Op: GapEnd}
		if j < len(segs) { // walked after: earlier in time
			k.Component = name(segs[j].row)
		}
		if i > 0 {
			k.Op = name(segs[i-1].row)
		}
		at := -1
		for g := rows; g < len(stats); g++ {
			if sameKey(&stats[g].Key, &k) {
				at = g
			}
		}
		if at < 0 {
			at = len(stats)
			stats = append(stats, KeyStat{Key: k})
		}
		stats[at].Critical += sum
		i = j
	}
	if gaps := stats[rows:]; len(gaps) > 1 {
		t.sortGaps(gaps)
	}
	return stats
}

// sortGaps puts a unit's gaps (distinct) in compareKeys order: by their
// ends, since a gap has no phase or direction. Units of one shape mostly
// have the same gaps, named by the same strings, so the last unit's order
// is kept: when this unit's gaps are the same set, each goes to its
// place, found by comparing ends (mostly as pointers), and nothing is
// sorted.
func (t *tree) sortGaps(gaps []KeyStat) {
	if len(gaps) == len(t.gapOrder) && len(gaps) <= maxInsertion {
		t.gapSlot = t.gapSlot[:0]
		for i := range gaps {
			k := &gaps[i].Key
			at := -1
			for j := range t.gapOrder {
				if o := &t.gapOrder[j]; o.Component == k.Component && o.Op == k.Op {
					at = j
					break
				}
			}
			if at < 0 {
				break
			}
			t.gapSlot = append(t.gapSlot, int32(at))
		}
		if len(t.gapSlot) == len(gaps) { // distinct, so one to one
			t.gapSpare = append(t.gapSpare[:0], gaps...)
			for i, j := range t.gapSlot {
				gaps[j] = t.gapSpare[i]
			}
			return
		}
	}
	less := func(a, b *Key) bool {
		if a.Component != b.Component {
			return a.Component < b.Component
		}
		return a.Op < b.Op
	}
	if len(gaps) <= maxInsertion {
		for a := 1; a < len(gaps); a++ {
			x, b := gaps[a], a
			for ; b > 0 && less(&x.Key, &gaps[b-1].Key); b-- {
				gaps[b] = gaps[b-1]
			}
			gaps[b] = x
		}
	} else {
		slices.SortFunc(gaps, func(a, b KeyStat) int { return compareKeys(a.Key, b.Key) })
	}
	t.gapOrder = t.gapOrder[:0]
	for _, g := range gaps {
		t.gapOrder = append(t.gapOrder, g.Key)
	}
}

// segment is one piece of a critical path: its row (-1: none) and time.
type segment struct {
	row int32
	d   time.Duration
}

// maxNames bounds the cache of row names that gaps are named by.
const maxNames = 4096

// name returns k.String(), kept: the same rows name the gaps of every unit.
func (t *tree) name(k Key) string {
	if s, ok := t.names[k]; ok {
		return s
	}
	if t.names == nil || len(t.names) >= maxNames {
		t.names = make(map[Key]string)
	}
	s := k.String()
	t.names[k] = s
	return s
}

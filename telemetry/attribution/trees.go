package attribution

import (
	"cmp"
	"slices"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// MaxTreeDepth bounds how deep a span may sit below its unit's root.
const MaxTreeDepth = 1000

// Trees groups spans into units of work and attributes each: a unit is an
// amdahl.work span with no amdahl.work above it, with every span reachable
// from it through parent ids. Spans are deduplicated by (trace id, span
// id); a span whose parent is missing is attached to its trace's unit when
// that is known. Units are returned in order of their root's start.
func Trees(spans []spans.Span) ([]Work, Diagnostics) {
	var out []Work
	d := EachTree(spans, func(w Work) { out = append(out, w) })
	slices.SortStableFunc(out, func(a, b Work) int { return cmp.Compare(a.Root.Start, b.Root.Start) })
	return out, d
}

// EachTree is Trees without holding the units: fn receives each unit as
// it is built (grouped by trace, not in time order) and may keep it or
// fold it into an Accumulator. spans is not modified.
func EachTree(spans []spans.Span, fn func(Work)) Diagnostics {
	var b Builder
	return b.EachTree(spans, fn)
}

// Builder is EachTree with scratch space kept from one call to the next:
// a caller that attributes units one or a few at a time (the runtime's
// accounting) allocates only what it is handed (each Work's Stats and
// Nodes), or, with Reuse, nothing. The zero value is ready to use; a
// Builder is not safe for concurrent use.
type Builder struct {
	// Reuse hands fn Works whose Stats and Nodes are the Builder's
	// scratch space too: valid only until fn returns, so fn must copy
	// what it keeps (slices.Clone).
	Reuse bool
	// Units says which spans are units (UnitsAuto: amdahl.work).
	Units UnitMode
	// MaxSpanDuration bounds a span's length (0: 24 h; at most
	// MaxMaxSpanDuration): longer spans are left out and counted.
	MaxSpanDuration time.Duration

	idx []int32
	b   treeBuilder
}

// EachTree is the package's EachTree, reusing b's scratch space.
func (bd *Builder) EachTree(spans []spans.Span, fn func(Work)) Diagnostics {
	var d Diagnostics
	d.Spans = len(spans)
	if len(spans) == 0 {
		return d
	}
	b := &bd.b
	b.reuse = bd.Reuse
	b.mode = bd.Units
	b.bound = int64(min(bd.MaxSpanDuration, MaxMaxSpanDuration))
	if b.bound <= 0 {
		b.bound = int64(DefaultMaxSpanDuration)
	}
	// A unit's spans, as the runtime hands them, are of one trace, and
	// most are of a shape seen before (shape.go).
	one := oneTrace(spans)
	if one && b.mode <= UnitsAmdahl && b.knownShape(spans, fn, &d) {
		return d
	}
	// Group by trace, keeping input order inside a trace so the first copy
	// of a duplicate wins.
	idx := resize(bd.idx, len(spans))
	bd.idx = idx
	for i := range idx {
		idx[i] = int32(i)
	}
	if one {
		var dt Diagnostics
		b.trace(spans, idx, fn, &dt)
		if b.mode <= UnitsAmdahl {
			b.learnShape(spans, dt)
		}
		d.Add(dt)
		return d
	}
	slices.SortFunc(idx, func(a, b int32) int {
		if c := spans[a].TraceID.Compare(spans[b].TraceID); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	for lo := 0; lo < len(idx); {
		hi := lo + 1
		for hi < len(idx) && spans[idx[hi]].TraceID == spans[idx[lo]].TraceID {
			hi++
		}
		b.trace(spans, idx[lo:hi], fn, &d)
		lo = hi
	}
	return d
}

// treeBuilder holds scratch space reused across traces.
type treeBuilder struct {
	ord    []idIndex    // the trace's spans by id, then input order
	inv    []int32      // each span's index in sp, by input order; -1 a duplicate
	ids    []uint64     // sp's span ids, for find
	sp     []spans.Span // the trace's spans, deduplicated, sorted by span id
	parent []int32      // index in sp; -1 root or no parent, -2 missing parent
	unit   []int32      // index in sp of the span's unit root; -1 none
	depth  []int32      // below the topmost ancestor in the trace
	state  []uint8
	kidAt  []int32 // span i's children are kid[kidAt[i]:kidAt[i+1]]
	kid    []int32
	fill   []int32
	stack  []int32
	roots  []int32
	frames []frame
	tree   tree // the unit's, rebuilt for each
	// nodeSpan is the last unit's nodes' spans (index in sp); shapes the
	// units' shapes kept, the last matched or learnt first.
	nodeSpan []int32
	shapes   []*shape
	known    int // units attributed by a known shape, for tests

	reuse bool   // Builder.Reuse: Works' Nodes and Stats are scratch space
	nodes []Node // with reuse, every Work's Nodes

	mode    UnitMode
	bound   int64   // MaxSpanDuration in ns
	bad     []uint8 // each span's badTime
	standIn int32   // the span standing in for the trace's missing root, or -1
}

// idIndex is a span's id (as a number) and its index in the input (its
// trace's group).
type idIndex struct {
	id uint64
	i  int32
}

// frame is a span to visit in treeBuilder.work and its parent node.
type frame struct{ span, node int32 }

const (
	noParent      = -1
	missingParent = -2
	noUnit        = -1
	cyclic        = -2
	tooDeep       = -3
)

// trace attributes the units of one trace: group holds the indexes in all
// of its spans, in input order.
func (b *treeBuilder) trace(all []spans.Span, group []int32, fn func(Work), d *Diagnostics) {
	b.dedup(all, group, d)
	b.link(d)
	b.units()
	if b.attachOrphans(d) {
		b.units()
	}
	b.children(d)
	for _, r := range b.roots {
		if b.bad[r] != timeOK {
			d.BadUnits++ // the unit is left out whole
			continue
		}
		w := b.work(r, d)
		w.StandIn = r == b.standIn
		fn(w)
	}
}

// dedup copies the trace's spans into b.sp by span id, the first copy of
// a duplicate only (counted), and sets b.ids, b.ord and b.inv.
func (b *treeBuilder) dedup(all []spans.Span, group []int32, d *Diagnostics) {
	// By span id, then input order, so the first copy of a duplicate
	// comes first; then the spans are copied once, in that order. Sorted
	// as (id, input index) pairs: a comparison reads 16 bytes, not two
	// spans.
	ord := b.ord[:0]
	for k, i := range group {
		ord = append(ord, idIndex{all[i].SpanID.Uint64(), int32(k)})
	}
	if len(ord) <= maxInsertion {
		// A unit's few spans: an insertion sort, without sort's calls.
		// It is stable and group is in input order, so equal ids stay in
		// input order without comparing indexes.
		for a := 1; a < len(ord); a++ {
			x, b := ord[a], a
			for ; b > 0 && ord[b-1].id > x.id; b-- {
				ord[b] = ord[b-1]
			}
			ord[b] = x
		}
	} else {
		slices.SortFunc(ord, func(x, y idIndex) int {
			if c := cmp.Compare(x.id, y.id); c != 0 {
				return c
			}
			return cmp.Compare(x.i, y.i)
		})
	}
	b.ord = ord
	b.sp, b.ids = slices.Grow(b.sp[:0], len(group)), b.ids[:0]
	b.inv = resize(b.inv, len(group))
	for k, o := range ord {
		if k > 0 && ord[k-1].id == o.id {
			d.Duplicates++
			b.inv[o.i] = -1
			continue
		}
		b.inv[o.i] = int32(len(b.sp))
		b.sp = append(b.sp, all[group[o.i]])
		b.ids = append(b.ids, o.id)
	}
}

// link sets each span's parent and time check, and the span standing in
// for a missing root (UnitsRoots).
func (b *treeBuilder) link(d *Diagnostics) {
	n := len(b.sp)
	b.parent = resize(b.parent, n)
	b.bad = resize(b.bad, n)
	hasRoot := false
	for i := range b.sp {
		b.parent[i] = b.find(b.sp[i].ParentID)
		hasRoot = hasRoot || b.parent[i] == noParent
		b.bad[i] = badTime(&b.sp[i], b.bound)
		d.countBad(b.bad[i])
	}
	b.standIn = -1
	if b.mode == UnitsRoots && !hasRoot {
		b.standIn = b.topmost()
		d.RootMissing++
	}
}

// attachOrphans sets b.roots, the units' roots, and attaches each span
// whose parent is missing to the trace's unit when there is one (the
// unit whose window holds the orphan's start, else the first); it
// reports whether it attached any (b.unit is then stale).
func (b *treeBuilder) attachOrphans(d *Diagnostics) bool {
	roots := b.roots[:0]
	for i := range b.sp {
		if b.unit[i] == int32(i) {
			roots = append(roots, int32(i))
		}
	}
	b.roots = roots
	// An orphan above a root (an upstream caller's span whose own parent
	// is not in the input) is not attached: that would make a loop.
	var above map[int32]bool // rare: most roots have no parent
	for _, r := range roots {
		for p, n := b.parent[r], 0; p >= 0 && n <= len(b.sp); p, n = b.parent[p], n+1 {
			if above == nil {
				above = map[int32]bool{}
			}
			above[p] = true
		}
	}
	attached := false
	for i := range b.sp {
		if b.parent[i] != missingParent || b.isUnit(int32(i)) || above[int32(i)] {
			continue
		}
		d.Orphans++
		if len(roots) == 0 {
			continue
		}
		r := roots[0]
		for _, c := range roots {
			if b.sp[c].Start <= b.sp[i].Start && b.sp[i].Start < b.sp[c].End {
				r = c
				break
			}
		}
		b.parent[i] = r
		d.Attached++
		attached = true
	}
	return attached
}

// children builds the children lists of the spans under a unit, in input
// order (so units of one shape list them alike: shape.go), all in one
// slice: span p's are kid[kidAt[p]:kidAt[p+1]]; it counts the spans under
// no unit, in a cycle or too deep.
func (b *treeBuilder) children(d *Diagnostics) {
	n := len(b.sp)
	b.kidAt = resize(b.kidAt, n+1)
	clear(b.kidAt)
	for i := range b.sp {
		switch u := b.unit[i]; u {
		case cyclic:
			d.Cycles++
			continue
		case tooDeep:
			d.TooDeep++
			continue
		case noUnit:
			d.Unrooted++
			continue
		}
		if p := b.parent[i]; p >= 0 {
			b.kidAt[p+1]++
			if b.isUnit(int32(i)) {
				d.Nested++
			}
		}
	}
	for i := 1; i <= n; i++ {
		b.kidAt[i] += b.kidAt[i-1]
	}
	b.kid = resize(b.kid, int(b.kidAt[n]))
	fill := resize(b.fill, n) // the next free slot of each parent
	copy(fill, b.kidAt[:n])
	for _, i := range b.inv {
		if i < 0 {
			continue // a duplicate
		}
		if p := b.parent[i]; p >= 0 && b.unit[i] >= 0 { // the spans counted above
			b.kid[fill[p]] = i
			fill[p]++
		}
	}
	b.fill = fill
}

// isUnit reports whether span i of the trace is a unit's root by b's
// mode (the topmost one among its ancestors is).
func (b *treeBuilder) isUnit(i int32) bool {
	switch b.mode {
	case UnitsRoots:
		return b.parent[i] == noParent || i == b.standIn
	case UnitsSelected:
		return b.sp[i].Selected
	}
	return b.sp[i].Name == telemetry.SpanWork
}

// topmost returns the span that stands in for a trace's missing root: of
// the spans whose parent is missing, the earliest to start (the longest
// among those), or -1.
func (b *treeBuilder) topmost() int32 {
	best := int32(-1)
	for i := range b.sp {
		if b.parent[i] != missingParent || b.bad[i] != timeOK {
			continue
		}
		s, o := &b.sp[i], (*spans.Span)(nil)
		if best >= 0 {
			o = &b.sp[best]
		}
		if o == nil || s.Start < o.Start || s.Start == o.Start && s.End > o.End {
			best = int32(i)
		}
	}
	return best
}

// oneTrace reports whether every span is of the same trace.
func oneTrace(spans []spans.Span) bool {
	for i := 1; i < len(spans); i++ {
		if spans[i].TraceID != spans[0].TraceID {
			return false
		}
	}
	return true
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// find returns the index of span id in b.sp, noParent for the zero id, or
// missingParent.
func (b *treeBuilder) find(id spans.SpanID) int32 {
	if id.IsZero() {
		return noParent
	}
	i, ok := slices.BinarySearch(b.ids, id.Uint64())
	if !ok {
		return missingParent
	}
	return int32(i)
}

// units sets b.unit: for each span, the topmost amdahl.work among itself
// and its ancestors, or noUnit, cyclic or tooDeep. Iterative, with a
// bounded chain.
func (b *treeBuilder) units() {
	n := len(b.sp)
	b.unit = resize(b.unit, n)
	if cap(b.state) < n {
		b.state = make([]uint8, n)
	}
	b.state = b.state[:n]
	clear(b.state) // 0 new, 1 on the stack, 2 done
	b.depth = resize(b.depth, n)
	for i := range b.sp {
		if b.state[i] == 2 {
			continue
		}
		// Climb until a span that is done or has no parent in the trace.
		b.stack = b.stack[:0]
		j := int32(i)
		res := int32(noUnit)
		depth := int32(-1)
		for {
			if b.state[j] == 2 {
				res, depth = b.unit[j], b.depth[j]
				break
			}
			if b.state[j] == 1 {
				res = cyclic
				break
			}
			b.state[j] = 1
			b.stack = append(b.stack, j)
			p := b.parent[j]
			if p < 0 {
				res = noUnit
				break
			}
			j = p
		}
		// Come back down: the topmost amdahl.work wins.
		for k := len(b.stack) - 1; k >= 0; k-- {
			s := b.stack[k]
			depth++
			b.depth[s] = depth
			if depth > MaxTreeDepth && res != cyclic {
				res = tooDeep
			}
			if res >= 0 || res == cyclic || res == tooDeep {
				b.unit[s] = res
			} else if b.isUnit(s) {
				res = s
				b.unit[s] = s
			} else {
				b.unit[s] = noUnit
			}
			b.state[s] = 2
		}
	}
}

// work builds the nodes of the unit rooted at r, places far-side spans
// causally, walks the critical path and sums the rows.
func (b *treeBuilder) work(r int32, d *Diagnostics) Work {
	root := b.sp[r]
	// At most every span of the trace is a node: one allocation, not a
	// growing slice's several.
	var w Work
	if b.reuse {
		w = Work{Root: root, Nodes: slices.Grow(b.nodes[:0], len(b.sp))}
	} else {
		w = Work{Root: root, Nodes: make([]Node, 0, len(b.sp))}
	}
	// Nodes in pre-order; far-side spans whose parent is a near-side send
	// hang under the send's parent, beside the send (placement below).
	stack := append(b.frames[:0], frame{r, -1})
	defer func() { b.frames = stack[:0] }()
	b.nodeSpan = b.nodeSpan[:0]
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		kids := b.kid[b.kidAt[f.span]:b.kidAt[f.span+1]]
		me := int32(len(w.Nodes))
		if b.bad[f.span] != timeOK {
			// Left out (counted in trace); its children hang under its
			// parent.
			for k := len(kids) - 1; k >= 0; k-- {
				stack = append(stack, frame{kids[k], f.node})
			}
			continue
		}
		b.nodeSpan = append(b.nodeSpan, f.span)
		s := &b.sp[f.span]
		nd := Node{Key: keyOf(s), Start: s.Start, End: s.End, Dur: s.Duration(), Parent: f.node, Row: -1}
		if f.node >= 0 {
			ps := &b.sp[b.nodeSpan[f.node]]
			nd.Far = s.Remote && !ps.Remote || s.Process != ps.Process && s.Process != 0 && ps.Process != 0
			pn := &w.Nodes[f.node]
			// A far span under a near send happened after the send's
			// request: beside it, when the send is a request's (amdahl's)
			// or too short to hold it (a CLIENT span recorded as the
			// request only); a far span that fits in a send of no
			// direction (a CLIENT span of a whole call) stays inside.
			if nd.Far && pn.Key.Phase == telemetry.Send && pn.Parent >= 0 && !pn.Far &&
				(pn.Key.Direction != telemetry.None || nd.Dur > pn.Dur) {
				nd.Parent = pn.Parent
				pn.via = pn.Key.Direction == telemetry.None
			}
		}
		w.Nodes = append(w.Nodes, nd)
		for k := len(kids) - 1; k >= 0; k-- {
			stack = append(stack, frame{kids[k], me})
		}
	}
	t := &b.tree
	t.reset(w.Nodes)
	t.place(d)
	t.clip(d)
	w.Stats = t.attribute(b.reuse)
	if b.reuse {
		b.nodes = w.Nodes
	}
	return w
}

package attribution

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// Key identifies a row: a component's phase and direction
// ("ipc.send/request"). The zero Key collects the time on the critical path
// that no phase span covers: the root's own time and spans that are not
// phases and have no phase among their ancestors.
type Key struct {
	Component string
	Phase     telemetry.Phase
	Direction telemetry.Direction
}

// String returns "ipc.serialize/request", "taskhost.execute",
// "serialize/request" when the component is folded away, or "other" for
// the zero Key.
func (k Key) String() string {
	if !k.Phase.Valid() {
		return "other"
	}
	s := k.Phase.String()
	if k.Component != "" {
		s = k.Component + "." + s
	}
	if k.Direction != telemetry.None {
		s += "/" + k.Direction.String()
	}
	return s
}

// ByPhase returns k without its component, for tables folded by phase.
func (k Key) ByPhase() Key { return Key{Phase: k.Phase, Direction: k.Direction} }

// Node is one span of a unit of work as the critical path saw it: its
// window after causal placement and clipping to its parent, and its
// measured duration.
type Node struct {
	Key        Key   // the span's own row; the zero Key if it is not a phase
	Start, End int64 // Unix ns, placed and clipped
	Dur        time.Duration
	Parent     int32 // index in Work.Nodes; -1 for the root
	// Row is the index in Work.Stats of the node's row (its Key's); -1
	// if the node is not a phase.
	Row int32
	Far bool // measured in another process than its parent
}

// KeyStat is one row's share of one unit of work.
type KeyStat struct {
	Key Key
	// Critical is the row's exclusive time on the unit's critical path.
	Critical time.Duration
	// Naive is the sum of the row's span durations (overlap counted twice);
	// Count the number of its spans.
	Naive time.Duration
	Count int
}

// Work is the attribution of one unit of work.
type Work struct {
	Root Span
	// Stats holds one entry per row present in the unit, sorted by key;
	// their Critical times add up to the root's duration exactly.
	Stats []KeyStat
	// Nodes is the unit's tree (root first, parents before children), for
	// the critical-path replay.
	Nodes []Node
}

// E2E returns the unit's end-to-end time (its root's duration).
func (w Work) E2E() time.Duration { return w.Root.Duration() }

// Stat returns the unit's entry for row k (zero if absent).
func (w Work) Stat(k Key) KeyStat {
	for _, s := range w.Stats {
		if s.Key == k {
			return s
		}
	}
	return KeyStat{Key: k}
}

// Diagnostics counts what the input held besides clean trees. Every count
// is shown in reports: none of it is dropped silently.
type Diagnostics struct {
	Spans int `json:"spans"`
	// Duplicates are spans seen again with the same trace and span id (an
	// export retried, a file concatenated twice); the first copy is kept.
	Duplicates int `json:"duplicates"`
	// Orphans are spans whose parent is not in the input; Attached of them
	// were attached to the unit of their trace (its root was known).
	Orphans  int `json:"orphans"`
	Attached int `json:"orphans_attached"`
	// Cycles are spans whose chain of parents loops; TooDeep spans nested
	// deeper than MaxTreeDepth. Both are left out.
	Cycles  int `json:"cycles"`
	TooDeep int `json:"too_deep"`
	// Nested are amdahl.work spans inside another unit: counted as
	// phase-less children of the outer unit, not as units.
	Nested int `json:"nested_roots"`
	// Unrooted are spans of traces that hold no amdahl.work root.
	Unrooted int `json:"unrooted"`
	// Placed counts far-side groups moved by causal placement (clock skew
	// between processes), Clipped near-side spans cut at a far-side group,
	// Unplaced parents with several round trips, walked as recorded.
	Placed   int `json:"placed"`
	Clipped  int `json:"clipped"`
	Unplaced int `json:"unplaced"`
	// Outside counts spans that ran (partly) outside their parent's
	// window once placed, cut to it (a cut span's subtree counts once):
	// time the critical path does not see. A few come from races and
	// clocks (an in-process gRPC server span that ends after its client's,
	// the wall clock stepped, a far-side group longer than its window, an
	// orphan attached to its unit); a count near the number of units says
	// a span is started in the wrong place: the sidecar's execute, under
	// its deserialize after that had ended, counted here once a unit
	// (and nothing in its row) before December 5.
	Outside int `json:"outside_parent"`
}

// Add adds o's counts to d.
func (d *Diagnostics) Add(o Diagnostics) {
	d.Spans += o.Spans
	d.Duplicates += o.Duplicates
	d.Orphans += o.Orphans
	d.Attached += o.Attached
	d.Cycles += o.Cycles
	d.TooDeep += o.TooDeep
	d.Nested += o.Nested
	d.Unrooted += o.Unrooted
	d.Placed += o.Placed
	d.Clipped += o.Clipped
	d.Unplaced += o.Unplaced
	d.Outside += o.Outside
}

// MaxTreeDepth bounds how deep a span may sit below its unit's root.
const MaxTreeDepth = 1000

// Trees groups spans into units of work and attributes each: a unit is an
// amdahl.work span with no amdahl.work above it, with every span reachable
// from it through parent ids. Spans are deduplicated by (trace id, span
// id); a span whose parent is missing is attached to its trace's unit when
// that is known. Units are returned in order of their root's start.
func Trees(spans []Span) ([]Work, Diagnostics) {
	var out []Work
	d := EachTree(spans, func(w Work) { out = append(out, w) })
	slices.SortStableFunc(out, func(a, b Work) int { return cmp.Compare(a.Root.Start, b.Root.Start) })
	return out, d
}

// EachTree is Trees without holding the units: fn receives each unit as
// it is built (grouped by trace, not in time order) and may keep it or
// fold it into an Accumulator. spans is not modified.
func EachTree(spans []Span, fn func(Work)) Diagnostics {
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

	idx []int32
	b   treeBuilder
}

// EachTree is the package's EachTree, reusing b's scratch space.
func (bd *Builder) EachTree(spans []Span, fn func(Work)) Diagnostics {
	var d Diagnostics
	d.Spans = len(spans)
	if len(spans) == 0 {
		return d
	}
	b := &bd.b
	b.reuse = bd.Reuse
	// A unit's spans, as the runtime hands them, are of one trace, and
	// most are of a shape seen before (shape.go).
	one := oneTrace(spans)
	if one && b.knownShape(spans, fn, &d) {
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
		b.learnShape(spans, dt)
		d.Add(dt)
		return d
	}
	slices.SortFunc(idx, func(a, b int32) int {
		if c := spans[a].TraceID.compare(spans[b].TraceID); c != 0 {
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
	ord    []idIndex // the trace's spans by id, then input order
	inv    []int32   // each span's index in sp, by input order; -1 a duplicate
	ids    []uint64  // sp's span ids, for find
	sp     []Span    // the trace's spans, deduplicated, sorted by span id
	parent []int32   // index in sp; -1 root or no parent, -2 missing parent
	unit   []int32   // index in sp of the span's unit root; -1 none
	depth  []int32   // below the topmost ancestor in the trace
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

func (b *treeBuilder) trace(all []Span, group []int32, fn func(Work), d *Diagnostics) {
	// By span id, then input order, so the first copy of a duplicate
	// comes first; then the spans are copied once, in that order. Sorted
	// as (id, input index) pairs: a comparison reads 16 bytes, not two
	// spans.
	ord := b.ord[:0]
	for k, i := range group {
		ord = append(ord, idIndex{all[i].SpanID.u64(), int32(k)})
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
	n := len(b.sp)
	b.parent = resize(b.parent, n)
	for i := range b.sp {
		b.parent[i] = b.find(b.sp[i].ParentID)
	}
	b.units()
	// Orphans: attach to the trace's unit when there is one (the unit
	// whose window holds the orphan's start, else the first).
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
		if b.parent[i] != missingParent || b.sp[i].Name == telemetry.SpanWork || above[int32(i)] {
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
	if attached {
		b.units()
	}
	// Children lists, in input order (so units of one shape list them
	// alike: shape.go), all in one slice: span p's are
	// kid[kidAt[p]:kidAt[p+1]].
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
			if b.sp[i].Name == telemetry.SpanWork {
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
	for _, r := range roots {
		fn(b.work(r, d))
	}
}

// oneTrace reports whether every span is of the same trace.
func oneTrace(spans []Span) bool {
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
func (b *treeBuilder) find(id SpanID) int32 {
	if id.IsZero() {
		return noParent
	}
	i, ok := slices.BinarySearch(b.ids, id.u64())
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
			} else if b.sp[s].Name == telemetry.SpanWork {
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
		b.nodeSpan = append(b.nodeSpan, f.span)
		s := &b.sp[f.span]
		nd := Node{Key: s.Key(), Start: s.Start, End: s.End, Dur: s.Duration(), Parent: f.node, Row: -1}
		if nd.End < nd.Start {
			nd.End = nd.Start
		}
		if f.node >= 0 {
			ps := &b.sp[b.parent[f.span]]
			nd.Far = s.Remote && !ps.Remote || s.Process != ps.Process && s.Process != 0 && ps.Process != 0
			pn := &w.Nodes[f.node]
			if nd.Far && pn.Key.Phase == telemetry.Send && pn.Parent >= 0 && !pn.Far {
				nd.Parent = pn.Parent
			}
		}
		me := int32(len(w.Nodes))
		w.Nodes = append(w.Nodes, nd)
		kids := b.kid[b.kidAt[f.span]:b.kidAt[f.span+1]]
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

// tree is a unit's nodes with children lists. Its slices are reused by
// reset: a treeBuilder keeps one for all its units.
type tree struct {
	nodes  []Node
	first  []int32 // node i's children are kid[first[i]:first[i+1]], in index order
	kid    []int32
	sc     []int32   // walk's stack of sorted children
	far    []int32   // placeUnder's far-side children
	stats  []KeyStat // attribute's, with reuse
	row    []int32   // attribute's: each phase node's index in stats
	sorted []Key     // sortRows': the last unit's row keys, sorted
	slot   []int32   // sortRows': each row's place in sorted
	spare  []KeyStat // sortRows' copy of the rows
	cut    []bool    // clip's: each node cut to its parent's window
}

func newTree(nodes []Node) *tree {
	t := &tree{}
	t.reset(nodes)
	return t
}

// reset makes t the tree of nodes (parents before children).
func (t *tree) reset(nodes []Node) {
	n := len(nodes)
	t.nodes = nodes
	t.first = resize(t.first, n+1)
	clear(t.first)
	for i := 1; i < n; i++ {
		t.first[nodes[i].Parent+1]++
	}
	for i := 1; i <= n; i++ {
		t.first[i] += t.first[i-1]
	}
	t.kid = resize(t.kid, max(n-1, 0))
	fill := resize(t.sc, n) // next free slot of each parent
	copy(fill, t.first[:n])
	for i := 1; i < n; i++ {
		p := nodes[i].Parent
		t.kid[fill[p]] = int32(i)
		fill[p]++
	}
	t.sc = fill[:0]
}

// kids returns node i's children, in index order.
func (t *tree) kids(i int32) []int32 { return t.kid[t.first[i]:t.first[i+1]] }

// place puts far-side spans causally (attribution's doc.go, "Two
// clocks"). For every near-side parent with far-side children, the far
// group is shifted as a whole (with its descendants) into the window
// between the end of the near request spans and the start of the near
// reply spans when it fits there, else into the hard bounds: after the
// near request send began and before the near reply receive ended; the
// shift is the smallest that satisfies the bounds (none when they hold).
// Near request spans that still overlap the group are cut at its start,
// near reply spans at its end.
func (t *tree) place(d *Diagnostics) {
	for p := range t.nodes {
		t.placeUnder(int32(p), d)
	}
}

// placeUnder places the far-side children of node p, if it has any.
func (t *tree) placeUnder(p int32, d *Diagnostics) {
	far := t.far[:0]
	for _, c := range t.kids(p) {
		if t.nodes[c].Far {
			far = append(far, c)
		}
	}
	t.far = far
	if len(far) == 0 {
		return
	}
	pn := t.nodes[p]
	l, lh := pn.Start, int64(-1)
	u, uh := pn.End, int64(-1)
	haveReq, haveRep := false, false
	for _, c := range t.kids(p) {
		n := t.nodes[c]
		if n.Far {
			continue
		}
		switch n.Key.Direction {
		case telemetry.Request:
			if !haveReq || n.End > l {
				l = n.End
			}
			haveReq = true
			if n.Key.Phase == telemetry.Send && n.Start > lh {
				lh = n.Start
			}
		case telemetry.Reply:
			if !haveRep || n.Start < u {
				u = n.Start
			}
			haveRep = true
			if n.Key.Phase == telemetry.Receive && (uh < 0 || n.End < uh) {
				uh = n.End
			}
		}
	}
	if haveReq && haveRep && !oneRoundTrip(t, p) {
		// Several round trips under one parent: which far span belongs
		// to which cannot be told from clocks that may disagree, so
		// the spans are walked as recorded.
		d.Unplaced++
		return
	}
	if lh < 0 {
		lh = l
	}
	if uh < 0 {
		uh = u
	}
	g0, g1 := t.nodes[far[0]].Start, t.nodes[far[0]].End
	for _, c := range far[1:] {
		g0 = min(g0, t.nodes[c].Start)
		g1 = max(g1, t.nodes[c].End)
	}
	var delta int64
	if g1-g0 <= u-l {
		delta = clampShift(l-g0, u-g1)
	} else {
		delta = clampShift(lh-g0, uh-g1)
	}
	if delta != 0 {
		d.Placed++
		for _, c := range far {
			t.shift(c, delta)
		}
		g0, g1 = g0+delta, g1+delta
	}
	for _, c := range t.kids(p) {
		n := &t.nodes[c]
		if n.Far {
			continue
		}
		switch {
		case n.Key.Direction == telemetry.Request && n.End > g0 && n.Start < g0:
			n.End = g0
			d.Clipped++
		case n.Key.Direction == telemetry.Reply && n.Start < g1 && n.End > g1:
			n.Start = g1
			d.Clipped++
		}
	}
}

// oneRoundTrip reports whether the near children of p are one round trip:
// every request span starts before every reply span.
func oneRoundTrip(t *tree, p int32) bool {
	lastReq, firstRep := int64(math.MinInt64), int64(math.MaxInt64)
	for _, c := range t.kids(p) {
		n := t.nodes[c]
		if n.Far {
			continue
		}
		switch n.Key.Direction {
		case telemetry.Request:
			lastReq = max(lastReq, n.Start)
		case telemetry.Reply:
			firstRep = min(firstRep, n.Start)
		}
	}
	return lastReq < firstRep
}

// clampShift returns the shift closest to 0 within [lo, hi], or lo when
// the bounds cannot both hold (the group is longer than its window: its
// start is kept after the request began, the walk clips its end).
func clampShift(lo, hi int64) int64 {
	if lo > hi {
		return lo
	}
	return min(max(0, lo), hi)
}

func (t *tree) shift(i int32, delta int64) {
	t.nodes[i].Start += delta
	t.nodes[i].End += delta
	for _, c := range t.kids(i) {
		t.shift(c, delta)
	}
}

// clip cuts every node to its parent's window (pre-order, so parents are
// clipped first), counting in d.Outside each node it cuts whose parent
// was not cut (a cut subtree counts once). A child that overflows its
// parent counts only inside it.
func (t *tree) clip(d *Diagnostics) {
	t.cut = resize(t.cut, len(t.nodes))
	clear(t.cut)
	for i := 1; i < len(t.nodes); i++ {
		n := &t.nodes[i]
		p := t.nodes[n.Parent]
		start := min(max(n.Start, p.Start), p.End)
		end := min(max(n.End, start), p.End)
		if start != n.Start || end != n.End {
			t.cut[i] = true
			if !t.cut[n.Parent] {
				d.Outside++
			}
		}
		n.Start, n.End = start, end
	}
}

// attribute walks the critical path and sums the rows; with reuse, into
// t's scratch space (valid until the next call).
func (t *tree) attribute(reuse bool) []KeyStat {
	var stats []KeyStat
	if reuse {
		stats = t.stats[:0]
	} else {
		stats = make([]KeyStat, 0, min(len(t.nodes), 16))
	}
	// Rows are few (components × phases × directions): a linear search
	// beats a map up to a few dozen; past that (hostile input with many
	// components) a map keeps it linear.
	const maxLinear = 32
	var at map[Key]int
	row := func(k Key) int {
		if at != nil {
			if j, ok := at[k]; ok {
				return j
			}
		} else {
			for j := range stats {
				if stats[j].Key == k {
					return j
				}
			}
		}
		i := len(stats)
		stats = append(stats, KeyStat{Key: k})
		if at != nil {
			at[k] = i
		} else if len(stats) > maxLinear {
			at = make(map[Key]int, 2*len(stats))
			for j, s := range stats {
				at[s.Key] = j
			}
		}
		return i
	}
	// Each phase node's row, found once: the walk files a node's own time
	// under the row of the phase node that owns it.
	t.row = resize(t.row, len(t.nodes))
	for i, n := range t.nodes {
		if !n.Key.Phase.Valid() {
			continue
		}
		r := row(n.Key)
		t.row[i] = int32(r)
		if i > 0 { // the root's span counts in no row
			stats[r].Naive += n.Dur
			stats[r].Count++
		}
	}
	stats = t.walkRows(stats, func(owner int32) int32 { return t.row[owner] })
	t.sortRows(stats)
	// Each phase node's row, now that they are in order (t.slot).
	for i := range t.nodes {
		if n := &t.nodes[i]; n.Key.Phase.Valid() {
			n.Row = t.slot[t.row[i]]
		}
	}
	if reuse {
		t.stats = stats
	}
	return stats
}

// sortRows puts a unit's rows in compareKeys order, and leaves in t.slot
// where each went (the row at i before is at t.slot[i]). Units of one shape
// have the same rows, though not always made in the same order (a node's
// children are in input order, and spans may end in another order from
// unit to unit), so the last unit's
// sorted keys are kept: when this unit's keys are the same set, each row
// goes to its key's place, found by comparing keys (strings whose bytes
// are mostly shared, so mostly as pointers), and nothing is sorted. The
// row of time no phase owns, when there is one, was made last and stays
// last.
func (t *tree) sortRows(stats []KeyStat) {
	if n := len(stats); n > 0 && !stats[n-1].Key.Phase.Valid() {
		stats = stats[:n-1]
	}
	if len(stats) == len(t.sorted) && len(stats) <= maxInsertion {
		t.spare = append(t.spare[:0], stats...)
		t.slot = t.slot[:0]
		for _, st := range t.spare {
			k, at := st.Key, -1
			for j, sk := range t.sorted {
				if sk.Phase == k.Phase && sk.Direction == k.Direction && sk.Component == k.Component {
					at = j
					break
				}
			}
			if at < 0 {
				break
			}
			t.slot = append(t.slot, int32(at))
		}
		// Rows are distinct, so as many found as there are rows is a
		// one-to-one match.
		if len(t.slot) == len(stats) {
			for i, j := range t.slot {
				stats[j] = t.spare[i]
			}
			return
		}
	}
	t.spare = append(t.spare[:0], stats...)
	slices.SortFunc(stats, func(a, b KeyStat) int { return compareKeys(a.Key, b.Key) })
	t.sorted = t.sorted[:0]
	for _, st := range stats {
		t.sorted = append(t.sorted, st.Key)
	}
	// Rows are distinct: each is found where it went.
	t.slot = t.slot[:0]
	for _, st := range t.spare {
		j, _ := slices.BinarySearchFunc(t.sorted, st.Key, compareKeys)
		t.slot = append(t.slot, int32(j))
	}
}

// maxInsertion: at most this many elements are sorted by insertion, and
// at most this many rows are matched key by key in sortRows (both are
// quadratic; a unit of the built-in scenarios has fewer).
const maxInsertion = 16

// walk attributes node i's window by the last-finishing-child walk (Jaeger
// UI, CRISP): from the end of the window, the child that finished last
// before the cursor is on the critical path; the gap between its end and
// the cursor is the node's own time; recurse into it and move the cursor
// to its start; repeat. A node that is not a phase (a gRPC span, a
// per-chunk span, a nested amdahl.work) counts toward the phase that
// encloses it: owner is the nearest phase node above i (-1: none, the
// time is in no phase's row). emit receives the node whose own time it
// is, the phase node that owns it (i itself if i is a phase; its row is
// that node's Key, or the zero Key for -1), and the time.
func (t *tree) walk(i, owner int32, emit func(node, owner int32, d time.Duration)) {
	n := t.nodes[i]
	own := owner
	if n.Key.Phase.Valid() {
		own = i
	}
	// The children, sorted, on t.sc: the walks below push theirs after
	// them and pop them before returning.
	base := len(t.sc)
	t.sc = append(t.sc, t.kids(i)...)
	nk := len(t.sc) - base
	// Latest end first; among equal ends the later start (the replay
	// breaks ties the same way).
	if kids := t.sc[base:]; nk > maxInsertion {
		slices.SortStableFunc(kids, func(a, b int32) int {
			if c := cmp.Compare(t.nodes[b].End, t.nodes[a].End); c != 0 {
				return c
			}
			return cmp.Compare(t.nodes[b].Start, t.nodes[a].Start)
		})
	} else {
		for a := 1; a < nk; a++ {
			x, b := kids[a], a
			xn := &t.nodes[x]
			for ; b > 0; b-- {
				yn := &t.nodes[kids[b-1]]
				if xn.End < yn.End || xn.End == yn.End && xn.Start <= yn.Start {
					break
				}
				kids[b] = kids[b-1]
			}
			kids[b] = x
		}
	}
	cursor := n.End
	for k := range nk {
		c := t.sc[base+k]
		cn := t.nodes[c]
		if cn.End <= cn.Start || cn.End > cursor {
			continue // empty, or overlaps a child already on the path
		}
		if cursor > cn.End {
			emit(i, own, time.Duration(cursor-cn.End))
		}
		t.walk(c, own, emit)
		cursor = cn.Start
	}
	if cursor > n.Start {
		emit(i, own, time.Duration(cursor-n.Start))
	}
	t.sc = t.sc[:base]
}

// compareKeys orders rows in pipeline order: by phase, then direction,
// then component; "other" last.
func compareKeys(a, b Key) int {
	if a.Phase.Valid() != b.Phase.Valid() {
		if a.Phase.Valid() {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(a.Phase, b.Phase); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Direction, b.Direction); c != 0 {
		return c
	}
	return cmp.Compare(a.Component, b.Component)
}

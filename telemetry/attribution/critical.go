package attribution

import (
	"cmp"
	"slices"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// Key identifies a row: a component's phase and direction
// ("ipc.send/request"), and the operation when a rule set other than
// amdahl's made the row ("inventory.execute GET /items", or
// "checkout/computeTotals" for a row without a phase). The zero Key
// collects the time on the critical path that no row's span covers: the
// root's own time and spans that are not rows and have no row among
// their ancestors.
type Key struct {
	Component string
	Phase     telemetry.Phase
	Direction telemetry.Direction
	// Op is the operation ("GET /items"); "" for amdahl's rows.
	Op string
	// Gap marks a gap: critical time no row's span covers, between the
	// rows named Component (its start's: "start" for the unit's) and Op
	// (its end's: "end"). Gaps are parts of "other", not rows.
	Gap bool
}

// keyOf returns the row s belongs to: component, phase and direction (and
// the operation a rule gave it); the zero Key when s is not a phase.
func keyOf(s *spans.Span) Key {
	if !s.Phase.Valid() && s.Op == "" {
		return Key{}
	}
	return Key{Component: s.Component, Phase: s.Phase, Direction: s.Direction, Op: s.Op}
}

// Gap ends at the unit's edges.
const (
	GapStart = "start"
	GapEnd   = "end"
)

// IsRow reports whether k is a row of spans (not "other" or a gap).
func (k Key) IsRow() bool { return k.Phase.Valid() || k.Op != "" && !k.Gap }

// String returns "ipc.serialize/request", "taskhost.execute",
// "serialize/request" when the component is folded away,
// "inventory.execute GET /items" with an operation, "checkout/computeTotals"
// for an operation without a phase, or "other" for the zero Key.
func (k Key) String() string {
	if k.Gap {
		return "gap " + k.Component + " → " + k.Op
	}
	if !k.Phase.Valid() {
		switch {
		case k.Op == "":
			return "other"
		case k.Component == "":
			return k.Op
		}
		return k.Component + "/" + k.Op
	}
	s := k.Phase.String()
	if k.Component != "" {
		s = k.Component + "." + s
	}
	if k.Direction != telemetry.None {
		s += "/" + k.Direction.String()
	}
	if k.Op != "" {
		s += " " + k.Op
	}
	return s
}

// ByPhase returns k without its component, for tables folded by phase; a
// gap as it is.
func (k Key) ByPhase() Key {
	if k.Gap {
		return k
	}
	return Key{Phase: k.Phase, Direction: k.Direction, Op: k.Op}
}

// sameKey is k == o, comparing the fields that differ most often first.
func sameKey(k, o *Key) bool {
	return k.Phase == o.Phase && k.Direction == o.Direction && k.Component == o.Component && k.Op == o.Op && k.Gap == o.Gap
}

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
	// via: a send whose far-side children were placed beside it (its
	// far side did not fit in it); placement takes it for the request.
	via bool
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
	Root spans.Span
	// Stats holds one entry per row present in the unit, sorted by key;
	// their Critical times add up to the root's duration exactly.
	Stats []KeyStat
	// Nodes is the unit's tree (root first, parents before children), for
	// the critical-path replay.
	Nodes []Node
	// StandIn is set when Root stands in for a root that is not in the
	// input (UnitsRoots: the trace's topmost span).
	StandIn bool
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

// tree is a unit's nodes with children lists. Its slices are reused by
// reset: a treeBuilder keeps one for all its units.
type tree struct {
	nodes  []Node
	first  []int32 // node i's children are kid[first[i]:first[i+1]], in index order
	kid    []int32
	sc     []int32   // walk's stack of sorted children
	segs   []segment // walkRows': the critical path's pieces, latest first
	rnames []string  // walkRows': each row's name, once looked up
	// sortGaps': the last unit's gaps in order, and scratch.
	gapOrder []Key
	gapSlot  []int32
	gapSpare []KeyStat
	names    map[Key]string
	far      []int32   // placeUnder's far-side children
	stats    []KeyStat // attribute's, with reuse
	row      []int32   // attribute's: each phase node's index in stats
	sorted   []Key     // sortRows': the last unit's row keys, sorted
	slot     []int32   // sortRows': each row's place in sorted
	spare    []KeyStat // sortRows' copy of the rows
	cut      []bool    // clip's: each node cut to its parent's window
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
		if !n.Key.IsRow() {
			continue
		}
		r := row(n.Key)
		t.row[i] = int32(r)
		// amdahl.work is no row; a root that is one (a server span of
		// someone else's trace) counts in it.
		stats[r].Naive = satAdd(stats[r].Naive, n.Dur)
		stats[r].Count++
	}
	stats = t.walkRows(stats, nil, func(owner int32) int32 { return t.row[owner] })
	t.sortRows(stats)
	// Each phase node's row, now that they are in order (t.slot).
	for i := range t.nodes {
		if n := &t.nodes[i]; n.Key.IsRow() {
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
	for n := len(stats); n > 0 && !stats[n-1].Key.IsRow(); n-- {
		stats = stats[:n-1] // the gaps, last (walkRows)
	}
	if len(stats) == len(t.sorted) && len(stats) <= maxInsertion {
		t.spare = append(t.spare[:0], stats...)
		t.slot = t.slot[:0]
		for _, st := range t.spare {
			k, at := st.Key, -1
			for j, sk := range t.sorted {
				if sameKey(&sk, &k) {
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
	if n.Key.IsRow() {
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
	if a.IsRow() != b.IsRow() {
		if a.IsRow() {
			return -1
		}
		return 1
	}
	if a.Gap != b.Gap { // "other", then its gaps
		if b.Gap {
			return -1
		}
		return 1
	}
	if a.Phase.Valid() != b.Phase.Valid() { // rows without a phase after the phases
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
	if c := cmp.Compare(a.Component, b.Component); c != 0 {
		return c
	}
	return cmp.Compare(a.Op, b.Op)
}

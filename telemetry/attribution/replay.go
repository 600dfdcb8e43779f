package attribution

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// replayPlan is a unit's tree prepared for replays, in flat arrays: per
// node its children in start order and in end order and, for each child,
// the siblings it waited for (a join: every sibling that ended at or
// before its start) and the last of them.
type replayPlan struct {
	nodes []Node
	first []int32 // node i's children are kids[first[i]:first[i+1]]
	kids  []int32 // in start order
	byEnd []int32 // node i's children in end order: byEnd[first[i]:first[i+1]]
	pos   []int32 // per node: its index in its parent's start order
	predN []int32 // per kids entry: how many of byEnd's children it waited for
	pred  []int32 // per kids entry: the sibling that ended last at or before its start, or -1
	last  []int32 // per node: the child that ended last, or -1
	keyAt []int32 // per node: index of its key in the factor list, or -1
}

func newReplayPlan(w Work, keyIndex map[Key]int) *replayPlan {
	n := len(w.Nodes)
	nodes := w.Nodes
	m := max(n-1, 0)
	p := &replayPlan{nodes: nodes, first: make([]int32, n+1), kids: make([]int32, m), byEnd: make([]int32, m),
		pos: make([]int32, n), predN: make([]int32, m), pred: make([]int32, m), last: make([]int32, n), keyAt: make([]int32, n)}
	for i := 1; i < n; i++ {
		p.first[nodes[i].Parent+1]++
	}
	for i := range n {
		p.first[i+1] += p.first[i]
	}
	fill := slices.Clone(p.first[:n])
	for i := 1; i < n; i++ {
		par := nodes[i].Parent
		p.kids[fill[par]] = int32(i)
		fill[par]++
	}
	pos := p.pos
	for i := range n {
		p.keyAt[i] = -1
		if k := nodes[i].Key; k.IsRow() {
			if j, ok := keyIndex[k]; ok {
				p.keyAt[i] = int32(j)
			}
		}
		kids := p.kids[p.first[i]:p.first[i+1]]
		slices.SortStableFunc(kids, func(a, b int32) int {
			return cmp.Or(cmp.Compare(nodes[a].Start, nodes[b].Start), cmp.Compare(nodes[a].End, nodes[b].End))
		})
		p.last[i] = -1
		if len(kids) == 0 {
			continue
		}
		for j, c := range kids {
			pos[c] = int32(j)
		}
		byEnd := p.byEnd[p.first[i]:p.first[i+1]]
		copy(byEnd, kids)
		slices.SortStableFunc(byEnd, func(a, b int32) int { return cmp.Compare(nodes[a].End, nodes[b].End) })
		p.last[i] = byEnd[len(byEnd)-1]
		pred := p.pred[p.first[i]:p.first[i+1]]
		predN := p.predN[p.first[i]:p.first[i+1]]
		for j, c := range kids {
			// The siblings ending at or before c's start: byEnd[:k]; the
			// last of them replayed before c.
			k, _ := slices.BinarySearchFunc(byEnd, nodes[c].Start+1, func(x int32, t int64) int { return cmp.Compare(nodes[x].End, t) })
			predN[j] = int32(k)
			pred[j] = -1
			for k--; k >= 0; k-- {
				if pos[byEnd[k]] < int32(j) {
					pred[j] = byEnd[k]
					break
				}
			}
		}
	}
	return p
}

// e2e replays the unit with every node of row j lasting factor[j] times
// as long (the whole span, its subtree compressed with it), everything
// causally after it moved. A child waits for every sibling that ended at
// or before its start (a join: the conservative reading of timestamps,
// which cannot tell a dependency from a coincidence): it starts when the
// last of them ends in the replay, plus the gap it left after the one that
// ended last as recorded; with none, the same gap after its parent's
// start. A parent ends the same gap after its last-finishing child, and no
// earlier than any child's new end. With every factor 1 (or none) it
// returns the unit's e2e exactly. newEnd is scratch space of at least
// len(nodes), or nil.
func (p *replayPlan) e2e(factor []float64, newEnd []int64) time.Duration {
	if len(p.nodes) == 0 {
		return 0
	}
	if len(newEnd) < len(p.nodes) {
		newEnd = make([]int64, len(p.nodes))
	}
	root := p.nodes[0]
	return time.Duration(p.replay(0, root.Start, factor, newEnd) - root.Start)
}

func (p *replayPlan) replay(i int32, start int64, factor []float64, newEnd []int64) int64 {
	n := p.nodes[i]
	if j := p.keyAt[i]; j >= 0 && int(j) < len(factor) && factor[j] != 1 {
		newEnd[i] = start + int64(float64(n.End-n.Start)*factor[j])
		return newEnd[i]
	}
	lo, hi := p.first[i], p.first[i+1]
	if lo == hi {
		newEnd[i] = start + (n.End - n.Start)
		return newEnd[i]
	}
	maxEnd := start
	joined, m := int64(math.MinInt64), lo // max newEnd over byEnd[lo:m]
	for j := lo; j < hi; j++ {
		c := p.kids[j]
		cn := p.nodes[c]
		st := start + (cn.Start - n.Start)
		if pr := p.pred[j]; pr >= 0 {
			for ; m < lo+p.predN[j]; m++ {
				e := p.byEnd[m]
				if p.pos[e] >= j-lo {
					break // not replayed yet (a zero-length tie): joined later
				}
				joined = max(joined, newEnd[e])
			}
			st = max(joined, newEnd[pr]) + (cn.Start - p.nodes[pr].End)
		}
		maxEnd = max(maxEnd, p.replay(c, st, factor, newEnd))
	}
	l := p.last[i]
	newEnd[i] = max(newEnd[l]+(n.End-p.nodes[l].End), maxEnd)
	return newEnd[i]
}

package attribution

import (
	"cmp"
	"slices"
	"time"
)

// replayPlan is a unit's tree prepared for replays, in flat arrays: per
// node its children in start order and, for each child, the sibling it
// waited for.
type replayPlan struct {
	nodes []Node
	first []int32 // node i's children are kids[first[i]:first[i+1]]
	kids  []int32 // in start order
	pred  []int32 // per kids entry: the sibling that ended last at or before its start, or -1
	last  []int32 // per node: the child that ended last, or -1
	keyAt []int32 // per node: index of its key in the factor list, or -1
}

func newReplayPlan(w Work, keyIndex map[Key]int) *replayPlan {
	n := len(w.Nodes)
	nodes := w.Nodes
	p := &replayPlan{nodes: nodes, first: make([]int32, n+1), kids: make([]int32, max(n-1, 0)),
		pred: make([]int32, max(n-1, 0)), last: make([]int32, n), keyAt: make([]int32, n)}
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
	pos := make([]int32, n) // a child's place in its parent's start order
	var byEnd []int32
	for i := range n {
		p.keyAt[i] = -1
		if k := nodes[i].Key; k.IsRow() {
			if j, ok := keyIndex[k]; ok {
				p.keyAt[i] = int32(j)
			}
		}
		kids := p.kids[p.first[i]:p.first[i+1]]
		slices.SortStableFunc(kids, func(a, b int32) int {
			if c := cmp.Compare(nodes[a].Start, nodes[b].Start); c != 0 {
				return c
			}
			return cmp.Compare(nodes[a].End, nodes[b].End)
		})
		p.last[i] = -1
		if len(kids) == 0 {
			continue
		}
		for j, c := range kids {
			pos[c] = int32(j)
		}
		byEnd = append(byEnd[:0], kids...)
		slices.SortStableFunc(byEnd, func(a, b int32) int { return cmp.Compare(nodes[a].End, nodes[b].End) })
		p.last[i] = byEnd[len(byEnd)-1]
		pred := p.pred[p.first[i]:p.first[i+1]]
		for j, c := range kids {
			// The last of byEnd ending at or before c's start and replayed
			// before c.
			k, _ := slices.BinarySearchFunc(byEnd, nodes[c].Start+1, func(x int32, t int64) int { return cmp.Compare(nodes[x].End, t) })
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
// causally after it moved: a child starts the same gap after the sibling
// it waited for (the one that ended last before it started) or after its
// parent's start; a parent ends the same gap after its last-finishing
// child, and no earlier than any child's new end. With every factor 1 (or
// none) it returns the unit's e2e exactly. newEnd is scratch space of at
// least len(nodes), or nil.
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
	for j := lo; j < hi; j++ {
		c := p.kids[j]
		cn := p.nodes[c]
		st := start + (cn.Start - n.Start)
		if pr := p.pred[j]; pr >= 0 {
			st = newEnd[pr] + (cn.Start - p.nodes[pr].End)
		}
		maxEnd = max(maxEnd, p.replay(c, st, factor, newEnd))
	}
	l := p.last[i]
	newEnd[i] = max(newEnd[l]+(n.End-p.nodes[l].End), maxEnd)
	return newEnd[i]
}

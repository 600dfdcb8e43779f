package attribution

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Frame is one frame of a flame graph of critical paths: a row reached
// through the rows that enclose it on the path (CRISP's summary of
// critical paths, stacked by component and phase). Critical is the time
// on the path under the frame (its Self plus its children's Critical);
// Self is the row's exclusive critical time at this place in the stack.
type Frame struct {
	Key      Key           `json:"-"`
	Name     string        `json:"name"`
	Critical time.Duration `json:"critical_ns"`
	Self     time.Duration `json:"self_ns"`
	Children []Frame       `json:"children,omitempty"`
}

// FlameGraph is the critical paths of a set of units of work, aggregated.
// Root is named "e2e": its Critical is the units' total e2e, its Self the
// time no phase covers at the top ("other"). Across the graph, the Self of
// the frames of a row adds up to the row's critical time (Report's q ×
// e2e total), except for time Folded past MaxFrames.
type FlameGraph struct {
	Units int   `json:"units"`
	Root  Frame `json:"root"`
	// Folded is critical time whose stack would have made more than
	// MaxFrames frames: it is counted in its deepest frame that exists.
	Folded time.Duration `json:"folded_ns"`
	// NoTree counts units added without their tree (Work.Nodes dropped):
	// they are in no frame.
	NoTree int `json:"units_without_tree"`
}

// MaxFrames bounds the distinct frames (stacks) a Flame keeps.
const MaxFrames = 10_000

// Flame aggregates the critical paths of units of work into a FlameGraph,
// and their e2e times into a Sketch, in memory bounded by MaxFrames: never
// a record per unit. Safe for concurrent use; the zero value is ready.
type Flame struct {
	mu     sync.Mutex
	root   flameNode
	frames int
	units  int
	noTree int
	folded time.Duration
	e2e    FineSketch
}

type flameNode struct {
	key  Key
	self time.Duration
	kids []*flameNode // few: a linear search beats a map
}

func (n *flameNode) kid(k Key) *flameNode {
	for _, c := range n.kids {
		if c.key == k {
			return c
		}
	}
	return nil
}

// Add adds one unit: the critical-path walk of its tree (Work.Nodes, as
// placed and clipped when the unit was built), each node's own time
// filed under the stack of phase rows from the root down to it. w is not
// retained.
func (f *Flame) Add(w Work) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.e2e.Add(w.E2E())
	if len(w.Nodes) == 0 {
		f.noTree++
		return
	}
	f.units++
	t := newTree(w.Nodes)
	at := make([]*flameNode, len(w.Nodes)) // frame of each node, by walk
	var frame func(i int32) *flameNode
	frame = func(i int32) *flameNode {
		if at[i] != nil {
			return at[i]
		}
		var fr *flameNode
		if n := t.nodes[i]; n.Parent < 0 {
			fr = &f.root
		} else {
			fr = frame(n.Parent)
			if fr != nil && n.Key.IsRow() {
				c := fr.kid(n.Key)
				switch {
				case c != nil:
					fr = c
				case f.frames < MaxFrames:
					c = &flameNode{key: n.Key}
					fr.kids = append(fr.kids, c)
					f.frames++
					fr = c
				default:
					fr = nil // folded: the caller files the time in the parent
				}
			}
		}
		at[i] = fr
		return fr
	}
	t.walk(0, -1, func(i, _ int32, d time.Duration) {
		fr := frame(i)
		if fr == nil {
			f.folded += d
			for j := t.nodes[i].Parent; fr == nil; j = t.nodes[j].Parent {
				fr = frame(j) // the root always has one
			}
		}
		fr.self += d
	})
}

// Graph returns the aggregated critical paths of the units added so far;
// children in pipeline order. With byPhase, rows of different components
// are folded into one per phase and direction, as in Report.
func (f *Flame) Graph(byPhase bool) FlameGraph {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := FlameGraph{Units: f.units, Folded: f.folded, NoTree: f.noTree}
	g.Root = f.root.frame(byPhase)
	g.Root.Name = "e2e"
	return g
}

// frame converts n and its subtree, folding components with byPhase.
func (n *flameNode) frame(byPhase bool) Frame {
	fr := Frame{Key: n.key, Name: n.key.String(), Self: n.self, Critical: n.self}
	merged := map[Key]*Frame{}
	var order []Key
	for _, c := range n.kids {
		cf := c.frame(byPhase)
		if byPhase {
			cf.Key = cf.Key.ByPhase()
			cf.Name = cf.Key.String()
		}
		if m := merged[cf.Key]; m != nil {
			m.merge(cf)
			continue
		}
		merged[cf.Key] = &cf
		order = append(order, cf.Key)
	}
	slices.SortFunc(order, compareKeys)
	for _, k := range order {
		fr.Children = append(fr.Children, *merged[k])
		fr.Critical += merged[k].Critical
	}
	return fr
}

// merge adds o (same key) into fr, merging children of the same key.
func (fr *Frame) merge(o Frame) {
	fr.Self += o.Self
	fr.Critical += o.Critical
	for _, oc := range o.Children {
		i := slices.IndexFunc(fr.Children, func(c Frame) bool { return c.Key == oc.Key })
		if i < 0 {
			fr.Children = append(fr.Children, oc)
			continue
		}
		fr.Children[i].merge(oc)
	}
	slices.SortFunc(fr.Children, func(a, b Frame) int { return compareKeys(a.Key, b.Key) })
}

// E2EHistogram returns the distribution of the e2e times added so far
// (every unit, with or without its tree) in at most bins log-spaced bins.
func (f *Flame) E2EHistogram(bins int) []Bin {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.e2e.Histogram(bins)
}

// Bin is one bin of a histogram: Count durations in [Lo, Hi) (the last
// bin holds its Hi).
type Bin struct {
	Lo    time.Duration `json:"lo_ns"`
	Hi    time.Duration `json:"hi_ns"`
	Count uint64        `json:"count"`
}

// Histogram returns the durations added in n log-spaced bins from the
// smallest to the largest (one bin when they are all equal; none when
// empty). Each value is binned at its bucket's estimate (within 1 %, as
// Quantile); the counts add up to Count.
func (s *Sketch) Histogram(n int) []Bin { return s.histogram(n, sketchGamma) }

// Histogram is Sketch.Histogram, each value binned within 0.05 %.
func (s *FineSketch) Histogram(n int) []Bin { return s.s.histogram(n, fineGamma) }

// histogram is Histogram for buckets of γ = gamma.
func (s *Sketch) histogram(n int, gamma float64) []Bin {
	if s.n == 0 || n < 1 {
		return nil
	}
	lo, hi := max(s.min, 1), max(s.max, 1)
	if hi <= lo {
		return []Bin{{Lo: s.min, Hi: s.max, Count: s.n}}
	}
	edges := make([]time.Duration, n+1)
	ratio := math.Log(float64(hi) / float64(lo))
	for i := range edges {
		edges[i] = time.Duration(math.Round(float64(lo) * math.Exp(ratio*float64(i)/float64(n))))
	}
	edges[0], edges[n] = s.min, s.max
	out := make([]Bin, n)
	for i := range out {
		out[i] = Bin{Lo: edges[i], Hi: edges[i+1]}
	}
	put := func(v time.Duration, c uint64) {
		v = min(max(v, s.min), s.max)
		// The last edge ≤ v.
		i, _ := slices.BinarySearch(edges, v+1)
		out[min(max(i-1, 0), n-1)].Count += c
	}
	for v, c := range s.small {
		if c > 0 {
			put(time.Duration(v), c)
		}
	}
	for i, c := range s.counts {
		if c > 0 {
			put(bucketValue(s.base+i, gamma), c)
		}
	}
	return out
}

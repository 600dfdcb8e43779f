package attribution

import (
	"math"

	"github.com/amdahl-rt/amdahl/telemetry"
)

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
		switch n.placeDir() {
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
		switch dir := n.placeDir(); {
		case dir == telemetry.Request && n.End > g0 && n.Start < g0:
			n.End = g0
			d.Clipped++
		case dir == telemetry.Reply && n.Start < g1 && n.End > g1:
			n.Start = g1
			d.Clipped++
		}
	}
}

// placeDir is n's direction for placement: a send of no direction whose
// far side was placed beside it is a request.
func (n *Node) placeDir() telemetry.Direction {
	if n.via && n.Key.Direction == telemetry.None {
		return telemetry.Request
	}
	return n.Key.Direction
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
		switch n.placeDir() {
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

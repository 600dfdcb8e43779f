package htmlreport

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// The charts are laid out here, in SVG user units, and drawn by the
// template: no script is needed to see them.

const (
	labelW = 240 // the row names' column
	colW   = 220 // one chart column
	colGap = 24
	rowH   = 20
	headH  = 28
)

// chart is a bar chart with one row per attribution row and one column
// per measure (q; or q, r and q·r), bars from zero with an optional
// interval whisker.
type chart struct {
	Width, Height int
	Cols          []chartCol
	Rows          []chartRow
}

type chartCol struct {
	Name     string
	X, W     float64
	Zero     float64 // x of 0
	Lo, Hi   string  // the domain's ends, formatted
	LoX, HiX float64
	AxisY    int
	Clipped  bool // the domain was cut to [-100 %, 100 %]
	lo, hi   float64
}

type chartRow struct {
	Name   string
	Target bool
	Y      int // top
	TextY  int
	Bars   []bar
}

type bar struct {
	Col          string
	X, W         float64
	Y, H         int
	Class        string
	Whisker      bool
	WLo, WHi, WY float64
	Title        string
	V            string
}

// scale maps a value into a column's x.
func (c *chartCol) x(v float64) float64 {
	v = min(max(v, c.lo), c.hi)
	return c.X + (v-c.lo)/(c.hi-c.lo)*c.W
}

func newCol(name string, i int, lo, hi float64, clip bool) chartCol {
	c := chartCol{Name: name, X: float64(labelW + i*(colW+colGap)), W: colW, lo: min(lo, 0), hi: max(hi, 0)}
	if clip && (c.lo < -1 || c.hi > 1) {
		c.lo, c.hi, c.Clipped = max(c.lo, -1), min(c.hi, 1), true
	}
	if c.hi-c.lo < 1e-9 {
		c.hi = c.lo + 0.01
	}
	// A little room past the longest bar.
	c.hi += (c.hi - c.lo) * 0.02
	c.Zero = c.x(0)
	c.Lo, c.Hi = pctSigned(c.lo), pctSigned(c.hi)
	c.LoX, c.HiX = c.X, c.X+c.W
	return c
}

// qChart: per row q, with the naive share behind it.
func qChart(r attribution.Report) *chart {
	if len(r.Rows) == 0 {
		return nil
	}
	hi := 0.0
	rows := append(slices.Clone(r.Rows), r.Gaps...) // other's gaps after it
	for _, row := range rows {
		hi = max(hi, row.Q, row.Naive)
	}
	col := newCol("q (dark) and naive share (light)", 0, 0, hi, false)
	ch := &chart{Width: labelW + colW + 60}
	for i, row := range rows {
		cr := chartRow{Name: row.Name, Y: headH + i*rowH}
		cr.TextY = cr.Y + rowH/2 + 4
		if row.Key.IsRow() {
			cr.Bars = append(cr.Bars, bar{Col: "naive", X: col.Zero, W: col.x(row.Naive) - col.Zero, Y: cr.Y + 3, H: rowH - 6, Class: "naive",
				Title: row.Name + " naive share " + pct(row.Naive), V: raw(row.Naive)})
		}
		cr.Bars = append(cr.Bars, bar{Col: "q", X: col.Zero, W: col.x(row.Q) - col.Zero, Y: cr.Y + 6, H: rowH - 12, Class: "q",
			Title: row.Name + " q " + pct(row.Q), V: raw(row.Q)})
		ch.Rows = append(ch.Rows, cr)
	}
	ch.Height = headH + len(rows)*rowH + 20
	col.AxisY = ch.Height - 16
	ch.Cols = []chartCol{col}
	return ch
}

// abChart: per row q, r and q·r, each with its interval.
func abChart(c attribution.Comparison) *chart {
	if len(c.Rows) == 0 {
		return nil
	}
	names := []string{"q", "r", "q·r"}
	ivs := func(r attribution.CompareRow) [3]attribution.Interval { return [3]attribution.Interval{r.Q, r.R, r.QR} }
	ch := &chart{Width: labelW + 3*(colW+colGap) + 40}
	ch.Height = headH + len(c.Rows)*rowH + 20
	for i := range names {
		lo, hi := 0.0, 0.0
		for _, r := range c.Rows {
			iv := ivs(r)[i]
			for _, v := range []float64{iv.Value, iv.Lo, iv.Hi} {
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					lo, hi = min(lo, v), max(hi, v)
				}
			}
		}
		col := newCol(names[i], i, lo, hi, true)
		col.AxisY = ch.Height - 16
		ch.Cols = append(ch.Cols, col)
	}
	for j, r := range c.Rows {
		cr := chartRow{Name: r.Name, Target: r.Target, Y: headH + j*rowH}
		cr.TextY = cr.Y + rowH/2 + 4
		for i, iv := range ivs(r) {
			if !iv.Defined() {
				continue
			}
			col := &ch.Cols[i]
			x0, x1 := col.Zero, col.x(iv.Value)
			b := bar{Col: names[i], X: min(x0, x1), W: math.Abs(x1 - x0), Y: cr.Y + 5, H: rowH - 10, Class: "ab",
				Title: r.Name + " " + names[i] + " " + ival(iv), V: raw(iv.Value)}
			if iv.Value < 0 {
				b.Class = "ab neg"
			}
			if !math.IsNaN(iv.Lo) && !math.IsNaN(iv.Hi) {
				b.Whisker, b.WLo, b.WHi, b.WY = true, col.x(iv.Lo), col.x(iv.Hi), float64(cr.Y)+rowH/2
			}
			cr.Bars = append(cr.Bars, b)
		}
		ch.Rows = append(ch.Rows, cr)
	}
	return ch
}

// histChart is the e2e distribution: bins on a log axis.
type histChart struct {
	Width, Height int
	Bars          []histBar
	Ticks         []tick
	Marks         []markLine
	Base          int
}

type histBar struct {
	X, W, Y, H float64
	Title      string
	Count      uint64
}

type tick struct {
	X     float64
	Label string
	End   bool // anchored at its end
}

type markLine struct {
	X     float64
	Label string
	V     string
}

func histogram(s Set) *histChart {
	if len(s.E2E) == 0 {
		return nil
	}
	const w, h, left, bottom = 760.0, 180.0, 40.0, 24.0
	hc := &histChart{Width: int(w), Height: int(h + bottom + 18), Base: int(h)}
	lo, hi := float64(max(s.E2E[0].Lo, 1)), float64(max(s.E2E[len(s.E2E)-1].Hi, 1))
	if hi <= lo {
		hi = lo * 1.1
	}
	xOf := func(d time.Duration) float64 {
		v := min(max(float64(max(d, 1)), lo), hi)
		return left + (math.Log(v)-math.Log(lo))/(math.Log(hi)-math.Log(lo))*(w-left-10)
	}
	var top uint64
	for _, b := range s.E2E {
		top = max(top, b.Count)
	}
	for i, b := range s.E2E {
		x0, x1 := xOf(b.Lo), xOf(b.Hi)
		if len(s.E2E) == 1 {
			x0, x1 = left, w-10
		}
		bh := float64(b.Count) / float64(max(top, 1)) * (h - 10)
		hc.Bars = append(hc.Bars, histBar{X: x0, W: max(x1-x0-1, 1), Y: h - bh, H: bh, Count: b.Count,
			Title: round(b.Lo).String() + " – " + round(b.Hi).String() + ": " + raw(b.Count) + " units"})
		if i%max(len(s.E2E)/6, 1) == 0 && (len(s.E2E) == 1 || xOf(s.E2E[len(s.E2E)-1].Hi)-x0 > 80) {
			hc.Ticks = append(hc.Ticks, tick{X: x0, Label: round(b.Lo).String()})
		}
	}
	last := s.E2E[len(s.E2E)-1]
	hc.Ticks = append(hc.Ticks, tick{X: xOf(last.Hi), Label: round(last.Hi).String(), End: true})
	for _, m := range s.Marks {
		hc.Marks = append(hc.Marks, markLine{X: xOf(m.At), Label: m.Name + " " + round(m.At).String(), V: raw(m.At)})
	}
	return hc
}

// flameChart is the aggregated critical paths as an icicle: the root on
// top, each frame below its parent, widths by critical time.
type flameChart struct {
	Width, Height int
	Frames        []flameRect
	Units         int
	Left          int // frames not drawn (MaxFlameFrames)
}

type flameRect struct {
	X, W        float64 // fractions of the root's width
	Depth       int
	Y           int
	Name        string
	Class       string
	Critical    string
	Self        string
	Share       string
	CriticalRaw string
	SelfRaw     string
}

const flameRowH = 18

func flame(g attribution.FlameGraph) *flameChart {
	if g.Root.Critical <= 0 {
		return nil
	}
	fc := &flameChart{Width: 1000, Units: g.Units}
	total := float64(g.Root.Critical)
	type item struct {
		fr    *attribution.Frame
		x     float64
		depth int
	}
	var all []item
	var visit func(fr *attribution.Frame, x float64, depth int)
	visit = func(fr *attribution.Frame, x float64, depth int) {
		all = append(all, item{fr, x, depth})
		cx := x
		for i := range fr.Children {
			visit(&fr.Children[i], cx, depth+1)
			cx += float64(fr.Children[i].Critical) / total
		}
	}
	visit(&g.Root, 0, 0)
	// The widest frames first; a parent is never narrower than a child,
	// and comes before it on a tie (shallower).
	slices.SortStableFunc(all, func(a, b item) int {
		return cmp.Or(cmp.Compare(b.fr.Critical, a.fr.Critical), cmp.Compare(a.depth, b.depth))
	})
	if len(all) > MaxFlameFrames {
		fc.Left = len(all) - MaxFlameFrames
		all = all[:MaxFlameFrames]
	}
	depth := 0
	for _, it := range all {
		class := "ph-other"
		if it.fr.Key.Phase.Valid() {
			class = "ph-" + it.fr.Key.Phase.String()
		}
		if it.depth == 0 {
			class = "ph-root"
		}
		fc.Frames = append(fc.Frames, flameRect{X: it.x, W: float64(it.fr.Critical) / total, Depth: it.depth, Y: it.depth * flameRowH,
			Name: it.fr.Name, Class: class,
			Critical: round(it.fr.Critical / time.Duration(max(g.Units, 1))).String(), Self: round(it.fr.Self / time.Duration(max(g.Units, 1))).String(),
			Share: pct(float64(it.fr.Critical) / total), CriticalRaw: raw(it.fr.Critical), SelfRaw: raw(it.fr.Self)})
		depth = max(depth, it.depth)
	}
	// Drawn in tree order, so that a parent is under its children.
	slices.SortStableFunc(fc.Frames, func(a, b flameRect) int { return cmp.Compare(a.Depth, b.Depth) })
	fc.Height = (depth + 1) * flameRowH
	return fc
}

// profileTable is one phase's top functions, formatted.
type profileTable struct {
	PhaseFuncs
	Rows []profileRow
}

type profileRow struct {
	Name, Flat, Cum, FlatShare, CumShare string
	FlatRaw, CumRaw                      string
	BarW                                 float64
}

func profileView(p PhaseFuncs) profileTable {
	t := profileTable{PhaseFuncs: p}
	share := func(v int64) string {
		if p.Total <= 0 {
			return "-"
		}
		return pct(float64(v) / float64(p.Total))
	}
	for _, f := range p.Funcs {
		r := profileRow{Name: f.Name, Flat: value(f.Flat, p.Unit), Cum: value(f.Cum, p.Unit), FlatShare: share(f.Flat), CumShare: share(f.Cum),
			FlatRaw: raw(f.Flat), CumRaw: raw(f.Cum)}
		if p.Total > 0 {
			r.BarW = min(max(100*float64(f.Flat)/float64(p.Total), 0), 100)
		}
		t.Rows = append(t.Rows, r)
	}
	return t
}

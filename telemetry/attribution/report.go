package attribution

import (
	"fmt"
	"io"
	"math"
	"sort"
	"text/tabwriter"
	"time"
)

// Row is the attribution of one phase (and direction) over many units of work.
type Row struct {
	Key   Key `json:"-"`
	Name  string
	Spans int
	// Mean and P99 of the phase's span durations.
	Mean time.Duration
	P99  time.Duration
	// Q is the phase's share of end-to-end time on the critical path:
	// Σ critical / Σ e2e. The Q of all rows (with "other") adds up to 1.
	Q float64
	// Naive is Σ span durations / Σ e2e; above Q where the phase overlaps.
	Naive float64
	// CriticalPerWork is the mean critical-path time per unit of work.
	CriticalPerWork time.Duration
}

// Report is the attribution of a set of units of work.
type Report struct {
	Works    int
	Failed   int
	E2EMean  time.Duration
	E2EP50   time.Duration
	E2EP99   time.Duration
	E2ETotal time.Duration
	Rows     []Row
}

// Summarize aggregates works into a Report, rows in pipeline order.
func Summarize(works []Work) Report {
	var r Report
	crit := map[Key]time.Duration{}
	naive := map[Key]time.Duration{}
	counts := map[Key]int{}
	e2e := make([]time.Duration, 0, len(works))
	for _, w := range works {
		d := w.Root.Duration()
		e2e = append(e2e, d)
		r.E2ETotal += d
		if w.Root.Outcome != "" && w.Root.Outcome != "ok" {
			r.Failed++
		}
		for k, v := range w.Critical {
			crit[k] += v
		}
		for k, v := range w.Naive {
			naive[k] += v
			counts[k] += w.Count[k]
		}
	}
	r.Works = len(works)
	if r.Works == 0 {
		return r
	}
	r.E2EMean = r.E2ETotal / time.Duration(r.Works)
	r.E2EP50 = quantile(e2e, 0.50)
	r.E2EP99 = quantile(e2e, 0.99)
	keys := map[Key]bool{}
	for k := range crit {
		keys[k] = true
	}
	for k := range naive {
		keys[k] = true
	}
	for k := range keys {
		row := Row{Key: k, Name: k.String(), Spans: counts[k]}
		if r.E2ETotal > 0 {
			row.Q = float64(crit[k]) / float64(r.E2ETotal)
			row.Naive = float64(naive[k]) / float64(r.E2ETotal)
		}
		if counts[k] > 0 {
			row.Mean = naive[k] / time.Duration(counts[k])
		}
		row.CriticalPerWork = crit[k] / time.Duration(r.Works)
		r.Rows = append(r.Rows, row)
	}
	sort.Slice(r.Rows, func(i, j int) bool { return lessKey(r.Rows[i].Key, r.Rows[j].Key) })
	return r
}

// WithP99 fills each row's P99 from the spans' durations.
func (r *Report) WithP99(spans []Span) {
	byKey := map[Key][]time.Duration{}
	for _, s := range spans {
		if s.Phase.Valid() {
			k := keyOf(s)
			byKey[k] = append(byKey[k], s.Duration())
		}
	}
	r.WithP99Durations(byKey)
}

// WithP99Durations fills each row's P99 from phase span durations already
// grouped by key.
func (r *Report) WithP99Durations(byKey map[Key][]time.Duration) {
	for i := range r.Rows {
		r.Rows[i].P99 = quantile(byKey[r.Rows[i].Key], 0.99)
	}
}

func lessKey(a, b Key) bool {
	// "other" last.
	if a.Phase.Valid() != b.Phase.Valid() {
		return a.Phase.Valid()
	}
	if a.Phase != b.Phase {
		return a.Phase < b.Phase
	}
	return a.Direction < b.Direction
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(q*float64(len(s)))) - 1
	if i < 0 {
		i = 0
	}
	return s[i]
}

// WriteText prints the report as an aligned table.
func (r Report) WriteText(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "work items %d (failed %d)   e2e mean %v  p50 %v  p99 %v\n\n",
		r.Works, r.Failed, round(r.E2EMean), round(r.E2EP50), round(r.E2EP99)); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tspans\tmean\tp99\tcritical/work\tq\tnaive share\t")
	var sumQ float64
	for _, row := range r.Rows {
		sumQ += row.Q
		if !row.Key.Phase.Valid() {
			// "other" has no spans of its own: only critical time no phase covers.
			fmt.Fprintf(tw, "%s\t-\t-\t-\t%v\t%s\t-\t\n", row.Name, round(row.CriticalPerWork), pct(row.Q))
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%v\t%v\t%v\t%s\t%s\t\n", row.Name, row.Spans, round(row.Mean), round(row.P99),
			round(row.CriticalPerWork), pct(row.Q), pct(row.Naive))
	}
	fmt.Fprintf(tw, "total\t\t\t\t%v\t%s\t\t\n", round(r.E2EMean), pct(sumQ))
	return tw.Flush()
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(100 * time.Nanosecond)
	}
}

// Comparison is an A/B attribution: per phase q (baseline), r (the phase's
// improvement) and q·r (predicted end-to-end gain), against the measured
// end-to-end gain.
type Comparison struct {
	Rows []CompareRow
	// Predicted is Σ q·r; Measured is 1 - e2e(candidate)/e2e(baseline).
	Predicted float64
	Measured  float64
}

// CompareRow is one phase of a Comparison.
type CompareRow struct {
	Name      string
	Q         float64 // baseline critical-path share
	R         float64 // 1 - candidate/baseline critical time per work
	QR        float64
	Baseline  time.Duration // critical time per work
	Candidate time.Duration
}

// Compare computes the A/B attribution of two reports.
func Compare(base, cand Report) Comparison {
	var c Comparison
	cm := map[Key]Row{}
	for _, row := range cand.Rows {
		cm[row.Key] = row
	}
	for _, b := range base.Rows {
		cr := CompareRow{Name: b.Name, Q: b.Q, Baseline: b.CriticalPerWork, Candidate: cm[b.Key].CriticalPerWork}
		if b.CriticalPerWork > 0 {
			cr.R = 1 - float64(cr.Candidate)/float64(b.CriticalPerWork)
		}
		cr.QR = cr.Q * cr.R
		c.Predicted += cr.QR
		c.Rows = append(c.Rows, cr)
	}
	if base.E2EMean > 0 {
		c.Measured = 1 - float64(cand.E2EMean)/float64(base.E2EMean)
	}
	return c
}

// WriteText prints the comparison as an aligned table.
func (c Comparison) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tbaseline/work\tcandidate/work\tq\tr\tq·r\t")
	for _, r := range c.Rows {
		fmt.Fprintf(tw, "%s\t%v\t%v\t%s\t%s\t%s\t\n", r.Name, round(r.Baseline), round(r.Candidate), pct(r.Q), pct(r.R), pct(r.QR))
	}
	fmt.Fprintf(tw, "%s\t\t\t\t\t%s\t\n", "predicted e2e gain Σq·r", pct(c.Predicted))
	fmt.Fprintf(tw, "%s\t\t\t\t\t%s\t\n", "measured e2e gain", pct(c.Measured))
	return tw.Flush()
}

package attribution

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Row is the attribution of one row (component, phase, direction) over
// many units of work.
type Row struct {
	Key  Key    `json:"-"`
	Name string `json:"row"`
	// Spans is the number of the row's spans; Mean and P99 are of their
	// durations (P99 within 1 %, from a Sketch).
	Spans int           `json:"spans"`
	Mean  time.Duration `json:"mean_ns"`
	P99   time.Duration `json:"p99_ns"`
	// Q is the row's share of end-to-end time on the critical path:
	// Σ critical / Σ e2e. The Q of all rows (with "other") adds up to 1.
	Q float64 `json:"q"`
	// Naive is Σ span durations / Σ e2e; above Q where the row overlaps.
	Naive float64 `json:"naive_share"`
	// CriticalPerWork is the mean critical-path time per unit of work.
	CriticalPerWork time.Duration `json:"critical_per_work_ns"`
	// CPUPerWork is the CPU time the row's phase took per unit of work,
	// from the processes' CPU profiles (see CPU); 0 without them.
	CPUPerWork time.Duration `json:"cpu_per_work_ns"`
	// Gap, on a gap's row, names the rows at its two ends; gap rows are
	// parts of "other" (their Q add up to other's) and count in no total.
	Gap *GapEnds `json:"gap,omitempty"`
}

// GapEnds names a gap's ends: the rows of the critical pieces before and
// after it, "start" and "end" at the unit's edges.
type GapEnds struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// CPU is where the CPU time of the run's processes went, from their CPU
// profiles: attribution reads spans, so a caller that has the profiles
// sets it (and each Row's CPUPerWork), and WriteText then shows the
// rows' CPU beside their critical time, and every other part of the
// processes' CPU below them.
type CPU struct {
	// Total is every sample's CPU time; InRows the part booked to a row
	// of the report; Elsewhere the rest, by where it went: a phase that
	// has no span and so no row of its own (a sidecar's gRPC reader:
	// CPUPart.Kind "row"), a bucket that names what did the work in no
	// phase ("(go runtime)", …: "bucket"), or what nothing names
	// ("other"). InRows + Elsewhere = Total.
	Total     time.Duration `json:"total_ns"`
	InRows    time.Duration `json:"in_rows_ns"`
	Elsewhere []CPUPart     `json:"elsewhere"`
	// Processes is the processes' CPU time as the system counts it, for
	// comparison with Total (0 when not known).
	Processes time.Duration `json:"processes_ns,omitempty"`
	// Unprofiled is the part of Processes that no profile holds, by why
	// (CPUPart.Kind "unprofiled"): before the profiler started, after it
	// stopped, and not sampled while it ran; or by what did it, measured
	// apart from the profiles (Kind "bucket": the Go runtime's sysmon
	// thread, which the profiler never samples). Total + Unprofiled =
	// Processes when both are known.
	Unprofiled []CPUPart `json:"unprofiled,omitempty"`
	// Accounted is InRows and the Elsewhere and Unprofiled parts that
	// name what did the work (kinds "row" and "bucket").
	Accounted time.Duration `json:"accounted_ns"`
	// Resolution is one sample's CPU time per unit of work: a row with
	// CPUPerWork 0 took less than that.
	Resolution time.Duration `json:"resolution_ns"`
}

// Kinds of CPUPart.
const (
	// CPURow is a phase's CPU with no span of the phase: a row of CPU
	// only (no critical time, no q).
	CPURow = "row"
	// CPUBucket is CPU in no phase, named by what did it (the Go
	// runtime, the workload generator, amdahl's own accounting).
	CPUBucket = "bucket"
	// CPUOther is profiled CPU that nothing more specific names.
	CPUOther = "other"
	// CPUUnprofiled is CPU the processes used that no profile holds.
	CPUUnprofiled = "unprofiled"
)

// SetAccounted sets Accounted from InRows and Elsewhere.
func (c *CPU) SetAccounted() {
	c.Accounted = c.InRows
	for _, p := range slices.Concat(c.Elsewhere, c.Unprofiled) {
		if p.Kind == CPURow || p.Kind == CPUBucket {
			c.Accounted += p.CPU
		}
	}
}

// Report is the attribution of a set of units of work.
type Report struct {
	Works   int           `json:"works"`
	Failed  int           `json:"failed"`
	E2EMean time.Duration `json:"e2e_mean_ns"`
	// E2EP50 and E2EP99 are within 0.05 % (FineSketch).
	E2EP50   time.Duration `json:"e2e_p50_ns"`
	E2EP99   time.Duration `json:"e2e_p99_ns"`
	E2ETotal time.Duration `json:"e2e_total_ns"`
	Rows     []Row         `json:"rows"`
	// Gaps are the parts of the "other" row: critical time no span
	// covers, by the gap it lies in (Row.Gap), the largest first. Their Q
	// add up to other's.
	Gaps []Row `json:"gaps"`
	// Diagnostics: what the input held besides clean trees.
	Diagnostics Diagnostics `json:"diagnostics"`
	// CPU, when the caller read the processes' CPU profiles.
	CPU *CPU `json:"cpu,omitempty"`
}

// Accumulator sums units of work into a Report in bounded memory: per row
// sums and a quantile Sketch, never a record per unit, so a live run of
// millions of units costs the same as one of a thousand. Safe for
// concurrent use; the zero value is ready.
type Accumulator struct {
	mu       sync.Mutex
	works    int
	failed   int
	e2eTotal time.Duration
	e2e      FineSketch
	rows     map[Key]*rowSum
	recent   []keyedRow // the rows looked up last, searched before rows
	// The rows of the last units' Stats, by their keys, the latest
	// first: units of one shape have the same rows, and their gaps take a
	// few sets as their phases' times vary.
	last [maxKeySets]keySet
	diag Diagnostics
}

// keySet is the rows of one unit's Stats, by their keys.
type keySet struct {
	keys []Key
	rows []*rowSum
}

// maxKeySets bounds Accumulator.last.
const maxKeySets = 4

// keyedRow is a row of an Accumulator with its key: a unit's few rows are
// found by comparing keys (whose strings are mostly shared, so the
// comparison is a pointer's) rather than by hashing them.
type keyedRow struct {
	key Key
	row *rowSum
}

// maxRecent bounds Accumulator.recent: more than the rows of a unit of
// the built-in scenarios, few enough for a linear search.
const maxRecent = 24

type rowSum struct {
	critical, naive time.Duration
	count           int
	dur             Sketch
	folded          bool // an overflow row (MaxRows)
}

// Add adds one unit of work. Its Nodes feed the rows' duration sketches;
// w is not retained.
func (a *Accumulator) Add(w Work) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.rows == nil {
		a.rows = map[Key]*rowSum{}
	}
	d := w.E2E()
	rows := a.rowsOf(w.Stats)
	if a.overflows(w, rows) {
		a.diag.Overflow++
		return
	}
	a.works++
	a.e2eTotal += d
	a.e2e.Add(d)
	if w.Root.Failed {
		a.failed++
	}
	for i, s := range w.Stats {
		r := rows[i]
		r.critical += s.Critical
		r.naive += s.Naive
		r.count += s.Count
		if r.folded {
			a.diag.Folded += s.Count
		}
	}
	for _, n := range w.Nodes {
		if !n.Key.IsRow() {
			continue
		}
		// A Work from a Builder says which of its Stats is the node's
		// row; one made otherwise may not.
		if j := int(n.Row); j >= 0 && j < len(w.Stats) && w.Stats[j].Key == n.Key {
			rows[j].dur.Add(n.Dur)
		} else {
			a.row(n.Key).dur.Add(n.Dur)
		}
	}
}

// overflows reports whether adding w (its rows' sums in rows) would
// overflow a sum: int64 nanoseconds hold 292 years, which hostile input
// can pass (spans up to MaxMaxSpanDuration, millions of them).
func (a *Accumulator) overflows(w Work, rows []*rowSum) bool {
	const top = time.Duration(math.MaxInt64)
	d := w.E2E()
	if d < 0 || a.e2eTotal > top-d {
		return true
	}
	for i, s := range w.Stats {
		if s.Naive < 0 || s.Naive == top || rows[i].naive > top-s.Naive || rows[i].critical > top-s.Critical {
			return true
		}
	}
	return false
}

// rowsOf returns the rows of stats' keys, in their order: the last
// unit's when the keys are the same. mu is held.
func (a *Accumulator) rowsOf(stats []KeyStat) []*rowSum {
	for j := range a.last {
		if a.last[j].matches(stats) {
			if j > 0 {
				ks := a.last[j]
				copy(a.last[1:j+1], a.last[:j])
				a.last[0] = ks
			}
			return a.last[0].rows
		}
	}
	// The least recent set's slices are reused for this one.
	ks := a.last[len(a.last)-1]
	copy(a.last[1:], a.last[:len(a.last)-1])
	ks.keys, ks.rows = ks.keys[:0], ks.rows[:0]
	for _, s := range stats {
		ks.keys = append(ks.keys, s.Key)
		ks.rows = append(ks.rows, a.row(s.Key))
	}
	a.last[0] = ks
	return ks.rows
}

// matches reports whether ks holds the rows of stats' keys, in order.
func (ks *keySet) matches(stats []KeyStat) bool {
	if len(stats) != len(ks.keys) || ks.rows == nil {
		return false
	}
	for i := range stats {
		if !sameKey(&stats[i].Key, &ks.keys[i]) {
			return false
		}
	}
	return true
}

func (a *Accumulator) row(k Key) *rowSum {
	for _, kr := range a.recent {
		// Phase and direction first: most keys differ there.
		if sameKey(&kr.key, &k) {
			return kr.row
		}
	}
	r := a.lookup(k)
	if len(a.recent) < maxRecent {
		a.recent = append(a.recent, keyedRow{k, r})
	} else {
		a.recent[int(uint(len(a.rows))%maxRecent)] = keyedRow{k, r}
	}
	return r
}

// lookup returns row k, creating it (or its overflow row) if needed.
func (a *Accumulator) lookup(k Key) *rowSum {
	r := a.rows[k]
	if r == nil {
		if len(a.rows) >= MaxRows {
			k = overflowKey(k)
			if r = a.rows[k]; r != nil {
				return r
			}
		}
		r = &rowSum{folded: k.Component == OverflowComponent && len(a.rows) >= MaxRows}
		a.rows[k] = r
	}
	return r
}

// MaxRows bounds the distinct rows (component, phase, direction) a report
// or comparison keeps: components are free text from the input. Rows past
// it are folded into one per phase and direction, with the component
// OverflowComponent.
const MaxRows = 1000

// OverflowComponent names the component of rows folded past MaxRows.
const OverflowComponent = "(more components)"

// OverflowOp names the operation of rows folded past MaxRows that had one.
const OverflowOp = "(more operations)"

func overflowKey(k Key) Key {
	if k.Gap {
		return Key{} // past the bound, gaps are only "other"
	}
	if !k.IsRow() {
		return k
	}
	op := ""
	if k.Op != "" {
		op = OverflowOp
	}
	return Key{Component: OverflowComponent, Phase: k.Phase, Direction: k.Direction, Op: op}
}

// Merge adds everything added to o (units and diagnostics) to a, as if
// it had been added to a; o is unchanged. a and o must differ.
func (a *Accumulator) Merge(o *Accumulator) {
	o.mu.Lock()
	defer o.mu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.works += o.works
	a.failed += o.failed
	a.e2eTotal = satAdd(a.e2eTotal, o.e2eTotal)
	a.e2e.Merge(&o.e2e)
	a.diag.Add(o.diag)
	if len(o.rows) > 0 && a.rows == nil {
		a.rows = map[Key]*rowSum{}
	}
	for k, v := range o.rows {
		r := a.lookup(k)
		if a.e2eTotal < 0 || r.naive > math.MaxInt64-v.naive {
			a.diag.Overflow++ // reported, the sums kept as they were
			continue
		}
		r.critical += v.critical
		r.naive += v.naive
		r.count += v.count
		r.dur.Merge(&v.dur)
	}
}

// AddDiagnostics adds counts about the input to the report.
func (a *Accumulator) AddDiagnostics(d Diagnostics) {
	a.mu.Lock()
	a.diag.Add(d)
	a.mu.Unlock()
}

// Report returns the attribution of the units added so far, rows in
// pipeline order. With byPhase, rows of different components that share a
// phase and direction are folded into one.
func (a *Accumulator) Report(byPhase bool) Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := Report{Works: a.works, Failed: a.failed, E2ETotal: a.e2eTotal, Diagnostics: a.diag, Rows: []Row{}, Gaps: []Row{}} // JSON: [] when empty
	if r.Works == 0 {
		return r
	}
	r.E2EMean = r.E2ETotal / time.Duration(r.Works)
	r.E2EP50 = a.e2e.Quantile(0.50)
	r.E2EP99 = a.e2e.Quantile(0.99)
	rows := map[Key]*rowSum{}
	sum := func(k Key) *rowSum {
		if rows[k] == nil {
			rows[k] = &rowSum{}
		}
		return rows[k]
	}
	for k, v := range a.rows {
		if byPhase {
			k = k.ByPhase()
		}
		if k.Gap { // "other" is the sum of its gaps
			sum(Key{}).critical += v.critical
		}
		m := sum(k)
		m.critical += v.critical
		m.naive += v.naive
		m.count += v.count
		m.dur.Merge(&v.dur)
	}
	for k, v := range rows {
		if v.count == 0 && v.critical == 0 && v.naive == 0 {
			continue // made for a unit then refused (overflows)
		}
		row := Row{Key: k, Name: k.String(), Spans: v.count, P99: v.dur.Quantile(0.99)}
		if r.E2ETotal > 0 {
			row.Q = float64(v.critical) / float64(r.E2ETotal)
			row.Naive = float64(v.naive) / float64(r.E2ETotal)
		}
		if v.count > 0 {
			row.Mean = v.naive / time.Duration(v.count)
		}
		row.CriticalPerWork = v.critical / time.Duration(r.Works)
		if k.Gap {
			row.Gap = &GapEnds{From: k.Component, To: k.Op}
			r.Gaps = append(r.Gaps, row)
			continue
		}
		r.Rows = append(r.Rows, row)
	}
	slices.SortFunc(r.Rows, func(x, y Row) int { return compareKeys(x.Key, y.Key) })
	slices.SortFunc(r.Gaps, func(x, y Row) int { // the largest first
		return cmp.Or(cmp.Compare(y.Q, x.Q), compareKeys(x.Key, y.Key))
	})
	return r
}

// Summarize is the Report of works (rows by component).
func Summarize(works []Work) Report {
	var a Accumulator
	for _, w := range works {
		a.Add(w)
	}
	return a.Report(false)
}

// WriteText prints the report as an aligned table.
func (r Report) WriteText(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "work items %d (failed %d)   e2e mean %v  p50 %v  p99 %v\n",
		r.Works, r.Failed, round(r.E2EMean), round(r.E2EP50), round(r.E2EP99)); err != nil {
		return err
	}
	if line := r.Diagnostics.line(); line != "" {
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// With the CPU profiles, each row's CPU per unit beside its critical
	// time: a phase that computes from one that waits.
	cpu := func(row Row) string {
		if r.CPU == nil {
			return ""
		}
		if !row.Key.IsRow() {
			return "-\t"
		}
		if row.CPUPerWork == 0 && r.CPU.Resolution > 0 {
			return fmt.Sprintf("<%v\t", round(r.CPU.Resolution))
		}
		return fmt.Sprintf("%v\t", round(row.CPUPerWork))
	}
	cpuHead, cpuTotal := "", ""
	if r.CPU != nil {
		cpuHead = "cpu/work\t"
		if r.Works > 0 {
			cpuTotal = fmt.Sprintf("%v\t", round(r.CPU.InRows/time.Duration(r.Works)))
		}
	}
	fmt.Fprintf(tw, "row\tspans\tmean\tp99\tcritical/work\t%sq\tnaive share\t\n", cpuHead)
	var sumQ float64
	for _, row := range r.Rows {
		sumQ += row.Q
		if !row.Key.IsRow() {
			// "other" has no spans of its own: only critical time no phase
			// covers, in the gaps below it.
			fmt.Fprintf(tw, "%s\t-\t-\t-\t%v\t%s%s\t-\t\n", row.Name, round(row.CriticalPerWork), cpu(row), pct(row.Q))
			for _, g := range r.Gaps {
				fmt.Fprintf(tw, "  %s\t-\t-\t-\t%v\t%s%s\t-\t\n", g.Name, round(g.CriticalPerWork), cpu(g), pct(g.Q))
			}
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%v\t%v\t%v\t%s%s\t%s\t\n", row.Name, row.Spans, round(row.Mean), round(row.P99),
			round(row.CriticalPerWork), cpu(row), pct(row.Q), pct(row.Naive))
	}
	fmt.Fprintf(tw, "total\t\t\t\t%v\t%s%s\t\t\n", round(r.E2EMean), cpuTotal, pct(sumQ))
	if r.CPU != nil && r.Works > 0 {
		r.CPU.writeParts(tw, r.Works)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.CPU != nil {
		_, err := fmt.Fprintln(w, r.CPU.line())
		return err
	}
	return nil
}

// CPUPart is CPU time that went to no row of a report with spans: a
// phase without a span (a row of CPU only), a bucket in no phase, or a
// part of the processes' CPU that no profile holds; Kind says which.
type CPUPart struct {
	Name string        `json:"name"`
	Kind string        `json:"kind"`
	CPU  time.Duration `json:"cpu_ns"`
}

// SortCPUParts sorts parts by kind (rows, buckets, other, unprofiled), then
// by CPU, largest first, then by name.
func SortCPUParts(parts []CPUPart) {
	order := map[string]int{CPURow: 0, CPUBucket: 1, CPUOther: 2, CPUUnprofiled: 3}
	slices.SortFunc(parts, func(a, b CPUPart) int {
		return cmp.Or(cmp.Compare(order[a.Kind], order[b.Kind]), cmp.Compare(b.CPU, a.CPU), strings.Compare(a.Name, b.Name))
	})
}

// writeParts prints the CPU that is in no row with spans, one line each in
// the table's columns: the rows of CPU only, marked "(no span)", the
// buckets, the rest, what no profile holds, and the processes' total.
func (c *CPU) writeParts(tw io.Writer, works int) {
	per := func(d time.Duration) time.Duration { return d / time.Duration(works) }
	for _, p := range slices.Concat(c.Elsewhere, c.Unprofiled) {
		name := p.Name
		if p.Kind == CPURow {
			name += " (no span)"
		}
		fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%v\t-\t-\t\n", name, round(per(p.CPU)))
	}
	if c.Processes > 0 {
		fmt.Fprintf(tw, "processes\t\t\t\t\t%v\t\t\t\n", round(per(c.Processes)))
	}
}

// line accounts for the processes' CPU: how much the rows (with spans and
// without) and the named buckets hold, and what is left.
func (c *CPU) line() string {
	var rows, buckets, other time.Duration
	for _, p := range c.Unprofiled {
		if p.Kind == CPUBucket {
			buckets += p.CPU
		}
	}
	for _, p := range c.Elsewhere {
		switch p.Kind {
		case CPURow:
			rows += p.CPU
		case CPUBucket:
			buckets += p.CPU
		default:
			other += p.CPU
		}
	}
	of, whose := c.Total, "profiles'"
	if c.Processes > 0 {
		of, whose = c.Processes, "processes'"
	}
	s := fmt.Sprintf("CPU: rows %v, rows of CPU only %v, buckets %v: %v accounted for (%s of the %s %v)",
		round(c.InRows), round(rows), round(buckets), round(c.Accounted), pctOf(c.Accounted, of), whose, round(of))
	var rest []string
	if other > 0 {
		rest = append(rest, fmt.Sprintf("in no named part %v", round(other)))
	}
	for _, p := range c.Unprofiled {
		if p.Kind != CPUBucket {
			rest = append(rest, fmt.Sprintf("%s %v", strings.Trim(p.Name, "()"), round(p.CPU)))
		}
	}
	if len(rest) > 0 {
		s += "; " + strings.Join(rest, ", ")
	}
	if c.Processes > 0 {
		s += fmt.Sprintf("; the profiles saw %s", pctOf(c.Total, c.Processes))
	}
	return s
}

func pctOf(a, b time.Duration) string {
	if b <= 0 {
		return "-"
	}
	return pct(float64(a) / float64(b))
}

// line is a one-line account of anomalies in the input, or "" when there
// were none worth a line.
func (d Diagnostics) line() string {
	if d.Duplicates+d.Orphans+d.Cycles+d.TooDeep+d.Nested+d.Unrooted+d.Placed+d.Clipped+d.Unplaced+d.Outside+
		d.bad()+d.RootMissing+d.Overflow+d.Folded == 0 {
		return ""
	}
	s := fmt.Sprintf("input: %d spans; %d duplicates dropped, %d orphans (%d attached to their trace's unit), %d nested roots, %d in cycles, %d too deep, %d outside any unit; "+
		"far-side groups placed %d, near spans cut %d, parents with several round trips walked as recorded %d, spans cut to their parent %d",
		d.Spans, d.Duplicates, d.Orphans, d.Attached, d.Nested, d.Cycles, d.TooDeep, d.Unrooted, d.Placed, d.Clipped, d.Unplaced, d.Outside)
	if d.bad()+d.RootMissing+d.Overflow+d.Folded > 0 {
		s += fmt.Sprintf("; hostile timestamps left out: %s; traces without their root %d (topmost span stands in); units left out for overflow %d; spans in rows folded past %d rows %d",
			d.badLine(), d.RootMissing, d.Overflow, MaxRows, d.Folded)
	}
	return s
}

// badLine counts the spans left out for their timestamps, by kind.
func (d Diagnostics) badLine() string {
	return fmt.Sprintf("%d spans (%d units) — %d without a start or end, %d ending before they start, %d longer than the bound, %d from year 2262 on",
		d.bad(), d.BadUnits, d.NoTime, d.Reversed, d.TooLong, d.Beyond)
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second || d <= -time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond || d <= -time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(100 * time.Nanosecond)
	}
}

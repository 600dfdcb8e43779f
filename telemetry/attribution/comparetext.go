package attribution

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// verdict says in words what the comparison shows.
func verdict(c Comparison) []string {
	var out []string
	pp := func(i Interval) string { return fmt.Sprintf("%s ± %.1f", pctSigned(i.Value), 100*i.HalfWidth()) }
	var tq, tr []string
	for _, r := range c.Rows {
		if !r.Target {
			continue
		}
		tq = append(tq, r.Name)
		if !r.R.Defined() {
			tr = append(tr, fmt.Sprintf("%s is absent on one side", r.Name))
			continue
		}
		var change string
		switch x := float64(r.BaseOwn) / float64(r.CandOwn); {
		case r.CandOwn == 0:
			change = fmt.Sprintf("%s did no work in the candidate (r = 1)", r.Name)
		case x >= 1:
			change = fmt.Sprintf("%s got %.2f× faster (r = %.2f ± %.2f)", r.Name, x, r.R.Value, r.R.HalfWidth())
		default:
			change = fmt.Sprintf("%s got %.2f× slower (r = %.2f ± %.2f)", r.Name, 1/x, r.R.Value, r.R.HalfWidth())
		}
		if r.R.Contains(0) {
			change = fmt.Sprintf("%s did not change measurably (r = %.2f ± %.2f)", r.Name, r.R.Value, r.R.HalfWidth())
		}
		tr = append(tr, fmt.Sprintf("%s and is %s of e2e on the critical path", change, pct(r.Q.Value)))
	}
	out = append(out, tr...)
	m := fmt.Sprintf("measured %s", pp(c.Measured))
	if len(tq) == 0 {
		out = append(out, fmt.Sprintf("no target rows (--target): %s, nothing predicted", m))
	} else {
		s := fmt.Sprintf("predicted %s (replay; first order Σq·r %s), %s", pp(c.Replay), pp(c.FirstOrder), m)
		if c.Consistent {
			s += " — consistent."
		} else {
			s += fmt.Sprintf(" — not consistent: the measured interval does not hold the prediction (%s).", direction(c))
		}
		out = append(out, s)
	}
	if c.Measured.Contains(0) {
		out = append(out, "The measured e2e change is not distinguishable from noise at this level.")
	}
	// Rows outside the target whose critical time moved: they explain what
	// the target rows do not.
	var moved []CompareRow
	for _, r := range c.Rows {
		if !r.Target && r.Shift.Defined() && !r.Shift.Contains(0) {
			moved = append(moved, r)
		}
	}
	slices.SortFunc(moved, func(a, b CompareRow) int {
		return cmp.Compare(math.Abs(b.Shift.Value), math.Abs(a.Shift.Value))
	})
	if len(moved) > 0 && (len(tq) == 0 || !c.Consistent) {
		var parts []string
		for _, r := range moved {
			parts = append(parts, fmt.Sprintf("%s %s/unit (%s of e2e)", r.Name, signedDur(r.CandCritical-r.BaseCritical), pp(r.Shift)))
		}
		out = append(out, "Outside the target, critical time moved in: "+strings.Join(parts, "; ")+".")
	}
	if c.Resampled == "units" {
		out = append(out, fmt.Sprintf("Intervals resample units (%d baseline, %d candidate in %d and %d runs): they leave out run-to-run variation; pass several runs per side.",
			c.BaseWorks, c.CandWorks, c.BaseRuns, c.CandRuns))
	}
	return out
}

func direction(c Comparison) string {
	if c.Measured.Value > c.Replay.Value {
		return "the change gained more than its target rows explain"
	}
	return "the change gained less than its target rows predict"
}

func pctSigned(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	if math.Abs(100*f) < 0.05 {
		f = 0 // no "-0.0%"
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

func signedDur(d time.Duration) string {
	if d >= 0 {
		return "+" + round(d).String()
	}
	return "-" + round(-d).String()
}

// perWork is a side's own time per unit of a row as the tables print it,
// none where the side has no span of the row.
func perWork(d time.Duration, spans int, none string) string {
	if spans == 0 {
		return none
	}
	return round(d).String()
}

// intervalsNote says how the intervals were made.
func (c Comparison) intervalsNote() string {
	if c.Resampled == "pairs of runs" {
		return fmt.Sprintf("%.0f %% intervals: Student's t over the %d pairs of runs (each figure per pair; the measured gain from the pairs' log ratios of mean e2e).", 100*c.Level, c.BaseRuns)
	}
	return fmt.Sprintf("%.0f %% intervals: bootstrap over %s, %d resamples.", 100*c.Level, c.Resampled, c.Iterations)
}

// WriteText prints the comparison as an aligned table and the verdict.
func (c Comparison) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\tbaseline own/work\tcandidate own/work\tq\tr\tq·r\tcritical/work Δ\t")
	cell := FormatInterval
	for _, r := range c.Rows {
		name := r.Name
		if r.Target {
			name = "* " + name
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, perWork(r.BaseOwn, r.BaseSpans, "-"), perWork(r.CandOwn, r.CandSpans, "-"),
			cell(r.Q), cell(r.R), cell(r.QR), signedDur(r.CandCritical-r.BaseCritical))
	}
	fmt.Fprintf(tw, "\t\t\t\t\t\t\t\n")
	if len(c.Target) > 0 {
		fmt.Fprintf(tw, "predicted e2e gain, first order Σq·r (* rows)\t\t\t\t\t%s\t\t\n", cell(c.FirstOrder))
		fmt.Fprintf(tw, "predicted e2e gain, critical-path replay\t\t\t\t\t%s\t\t\n", cell(c.Replay))
	}
	fmt.Fprintf(tw, "measured e2e gain (%v → %v)\t\t\t\t\t%s\t\t\n", round(c.BaseE2E), round(c.CandE2E), cell(c.Measured))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%s\n", c.intervalsNote())
	for _, v := range c.Verdict {
		if _, err := fmt.Fprintln(w, v); err != nil {
			return err
		}
	}
	return nil
}

// WriteMarkdown prints the comparison as a Markdown table and the verdict
// as a list.
func (c Comparison) WriteMarkdown(w io.Writer) error {
	cell := func(i Interval) string {
		if !i.Defined() {
			return "–"
		}
		return fmt.Sprintf("%s ± %.1f", pctSigned(i.Value), 100*i.HalfWidth())
	}
	var b strings.Builder
	b.WriteString("| row | baseline own/work | candidate own/work | q | r | q·r | critical/work Δ |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range c.Rows {
		name := "`" + r.Name + "`"
		if r.Target {
			name = "**" + name + "**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", name, perWork(r.BaseOwn, r.BaseSpans, "–"), perWork(r.CandOwn, r.CandSpans, "–"),
			cell(r.Q), cell(r.R), cell(r.QR), signedDur(r.CandCritical-r.BaseCritical))
	}
	b.WriteString("\n| e2e gain | value |\n|---|---:|\n")
	if len(c.Target) > 0 {
		fmt.Fprintf(&b, "| predicted, first order Σq·r (bold rows) | %s |\n| predicted, critical-path replay | %s |\n", cell(c.FirstOrder), cell(c.Replay))
	}
	fmt.Fprintf(&b, "| measured (%v → %v) | %s |\n\n", round(c.BaseE2E), round(c.CandE2E), cell(c.Measured))
	fmt.Fprintf(&b, "%s\n\n", c.intervalsNote())
	for _, v := range c.Verdict {
		fmt.Fprintf(&b, "- %s\n", v)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

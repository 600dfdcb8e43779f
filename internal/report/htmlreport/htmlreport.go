// Package htmlreport renders report.html: one self-contained page (inline
// CSS, JS and SVG; no request leaves it) with the attribution table, a bar
// chart of q per row (and r, q·r with their intervals for an A/B), the e2e
// distribution, a flame graph of the critical paths aggregated over all
// units (stacked by component and phase), and the top functions per phase
// from the CPU profiles.
//
// Every number shown is formatted as amdahl's text tables format it
// (shares with one decimal, durations rounded by size), and carries its
// raw value (the one in summary.json, ab.json or report --json) in a
// data-v attribute; the page also embeds its whole input as JSON in
// <script type="application/json" id="amdahl-data">.
package htmlreport

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/amdahl-rt/amdahl/internal/outfile"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// Input is what a page shows; a nil or empty section is left out.
type Input struct {
	Title string `json:"title"`
	// Facts are the header's name/value lines (scenario, settings, units).
	Facts []Fact `json:"facts,omitempty"`
	// Report is the attribution table of one set of units.
	Report *attribution.Report `json:"report,omitempty"`
	// Comparison is the A/B table: q, r and q·r with intervals per row,
	// the predicted and measured gains and the verdict.
	Comparison *attribution.Comparison `json:"comparison,omitempty"`
	// Sets holds, per set of units (one for a run; baseline and candidate
	// for an A/B), the e2e distribution and the critical-path flame graph.
	Sets []Set `json:"sets,omitempty"`
	// Profiles holds the top functions of each phase.
	Profiles []PhaseFuncs `json:"profiles,omitempty"`
}

// Fact is one line of the page's header.
type Fact struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Set is one set of units: its e2e distribution (with marks such as the
// p50 and p99) and its aggregated critical paths.
type Set struct {
	Name  string                 `json:"name"`
	E2E   []attribution.Bin      `json:"e2e_histogram"`
	Marks []Mark                 `json:"e2e_marks,omitempty"`
	Flame attribution.FlameGraph `json:"flame"`
}

// Mark is a labelled duration on the e2e distribution.
type Mark struct {
	Name string        `json:"name"`
	At   time.Duration `json:"at_ns"`
}

// E2EBins is the number of bins of a Set's e2e distribution.
const E2EBins = 40

// NewSet returns the Set of the units added to f (rows folded by phase
// with byPhase).
func NewSet(name string, f *attribution.Flame, byPhase bool, marks ...Mark) Set {
	return Set{Name: name, E2E: f.E2EHistogram(E2EBins), Marks: marks, Flame: f.Graph(byPhase)}
}

// PhaseFuncs is the top functions of one phase's profile samples (pprof
// labels amdahl.phase): Total is the phase's sum of samples, in Unit
// ("nanoseconds" for CPU, "bytes" for allocations).
type PhaseFuncs struct {
	Phase string `json:"phase"`
	Unit  string `json:"unit"`
	Total int64  `json:"total"`
	Funcs []Func `json:"funcs"`
}

// Func is one function's flat (own) and cumulative samples.
type Func struct {
	Name string `json:"name"`
	Flat int64  `json:"flat"`
	Cum  int64  `json:"cum"`
}

// MaxFlameFrames bounds the frames drawn (the widest first); narrower
// ones are left out of the picture, not out of their parents' widths.
const MaxFlameFrames = 2000

//go:embed page.html.tmpl
var pageSrc string

//go:embed page.css
var pageCSS string

//go:embed page.js
var pageJS string

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"pct":     pct,
	"spct":    pctSigned,
	"dur":     func(d time.Duration) string { return round(d).String() },
	"sdur":    signedDur,
	"ival":    ival,
	"raw":     raw,
	"value":   value,
	"css":     func() template.CSS { return template.CSS(pageCSS) },
	"js":      func() template.JS { return template.JS(pageJS) },
	"sub":     func(a, b time.Duration) time.Duration { return a - b },
	"mul100":  func(f float64) float64 { return 100 * f },
	"mul1000": func(f float64) float64 { return 1000 * f },
	"markY":   func(i int) int { return 12 + 14*i },
}).Parse(pageSrc))

// Write renders the page of in to w.
func Write(w io.Writer, in Input) error {
	data, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("htmlreport: %w", err)
	}
	v := view{Input: in, Data: template.JS(data)} // json.Marshal escapes <, > and &
	if in.Report != nil {
		v.QChart = qChart(*in.Report)
	}
	if in.Comparison != nil {
		v.ABChart = abChart(*in.Comparison)
	}
	for _, s := range in.Sets {
		v.SetViews = append(v.SetViews, setView{Set: s, Hist: histogram(s), Flame: flame(s.Flame)})
	}
	for _, p := range in.Profiles {
		v.Profiles = append(v.Profiles, profileView(p))
	}
	var b bytes.Buffer
	if err := page.Execute(&b, v); err != nil {
		return fmt.Errorf("htmlreport: %w", err)
	}
	_, err = w.Write(b.Bytes())
	return err
}

// WriteFile renders the page of in to path (created or truncated, never
// through a link at its name).
func WriteFile(path string, in Input) error {
	var b bytes.Buffer
	if err := Write(&b, in); err != nil {
		return err
	}
	return outfile.WriteFile(path, b.Bytes())
}

// view is the template's data: the input and its charts laid out.
type view struct {
	Input
	Data     template.JS
	QChart   *chart
	ABChart  *chart
	SetViews []setView
	Profiles []profileTable
}

type setView struct {
	Set
	Hist  *histChart
	Flame *flameChart
}

// Formatting: as attribution's text tables.
var (
	pct       = attribution.FormatPercent
	pctSigned = attribution.FormatSignedPercent
	ival      = attribution.FormatInterval
	signedDur = attribution.FormatSignedDuration
	round     = attribution.RoundDuration
)

func raw(v any) string {
	switch x := v.(type) {
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return ""
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case time.Duration:
		return strconv.FormatInt(int64(x), 10)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	}
	return fmt.Sprint(v)
}

// value formats a profile sample value in its unit.
func value(v int64, unit string) string {
	switch unit {
	case "nanoseconds":
		return round(time.Duration(v)).String()
	case "bytes":
		const k = 1024
		switch {
		case v >= k*k*k:
			return fmt.Sprintf("%.1f GiB", float64(v)/(k*k*k))
		case v >= k*k:
			return fmt.Sprintf("%.1f MiB", float64(v)/(k*k))
		case v >= k:
			return fmt.Sprintf("%.1f KiB", float64(v)/k)
		}
		return fmt.Sprintf("%d B", v)
	}
	return strconv.FormatInt(v, 10)
}

package attribution

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// Input says how a reader makes units and rows of the spans it reads.
// The zero value reads as amdahl report does by default: units and rows
// "auto", the default Limits, spans up to 24 h.
type Input struct {
	Limits Limits
	// Units says which spans are units of work; Select is the selector
	// of UnitsSelected.
	Units  UnitMode
	Select *Matcher
	// Rows is the rule set (nil: RowsAuto).
	Rows *Rows
	// MaxSpanDuration bounds a span's length (0: 24 h; at most
	// MaxMaxSpanDuration); longer spans are left out and counted.
	MaxSpanDuration time.Duration
}

// ReadFile reads the OTLP JSON trace file at path (amdahl's trace file or
// the OpenTelemetry Collector's file exporter output; "-" is standard
// input) and hands each of its units of work to fn. It streams the file
// (one line or many, of any length) and keeps only compact spans until
// the units are built; fn may keep a unit or fold it into an Accumulator.
// A file with no unit of work is an error.
func ReadFile(path string, lim Limits, in *Interner, fn func(Work)) (Diagnostics, error) {
	return Input{Limits: lim}.ReadFile(path, in, fn)
}

// Read is ReadFile for a reader; name is used in errors.
func Read(r io.Reader, name string, lim Limits, in *Interner, fn func(Work)) (Diagnostics, error) {
	return Input{Limits: lim}.Read(r, name, in, fn)
}

// ReadFile is the package's ReadFile with in's units, rows and bounds.
func (inp Input) ReadFile(path string, in *Interner, fn func(Work)) (Diagnostics, error) {
	var r io.Reader = os.Stdin
	hint := 0
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return Diagnostics{}, err
		}
		defer f.Close()
		r = f
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			// OTLP JSON spends about 450 bytes or more per span; capacity the
			// spans never reach costs address space, not memory, and
			// spares the copies of a growing slice.
			maxSpans := int64(inp.Limits.MaxSpans)
			if maxSpans <= 0 {
				maxSpans = spans.DefaultMaxSpans
			}
			hint = int(min(st.Size()/448, maxSpans))
		}
	}
	return inp.read(r, path, in, fn, hint)
}

// Read is ReadFile for a reader; name is used in errors.
func (inp Input) Read(r io.Reader, name string, in *Interner, fn func(Work)) (Diagnostics, error) {
	return inp.read(r, name, in, fn, 0)
}

func (inp Input) read(r io.Reader, name string, in *Interner, fn func(Work), hint int) (Diagnostics, error) {
	if in == nil {
		in = &Interner{}
	}
	if inp.MaxSpanDuration < 0 || inp.MaxSpanDuration > MaxMaxSpanDuration {
		return Diagnostics{}, fmt.Errorf("%s: longest span %v: want 0 (24h) to %v", name, inp.MaxSpanDuration, MaxMaxSpanDuration)
	}
	if inp.Units == UnitsSelected && inp.Select == nil {
		return Diagnostics{}, fmt.Errorf("%s: units by selector, but no selector", name)
	}
	rows := inp.Rows
	if rows == nil {
		rows = &Rows{}
	}
	var sel *Matcher
	if inp.Units == UnitsSelected {
		sel = inp.Select
	}
	all := make([]Span, 0, hint)
	works := 0
	rules := countingRules{SpanRules: NewSpanRules(rows, sel, in)}
	err := spans.ReadOTLPJSON(r, name, inp.Limits, in, &rules, func(s Span) error {
		if s.Name == telemetry.SpanWork {
			works++
		}
		all = append(all, s)
		return nil
	})
	if err != nil {
		return Diagnostics{}, err
	}
	if rules.amdahl > 0 && usesAuto(rows) {
		// amdahl's own trace: amdahl's rows, not the conventions'.
		for i := range all {
			all[i].ClearSemconvRow()
		}
	}
	mode := inp.Units
	if mode == UnitsAuto {
		mode = UnitsRoots
		if works > 0 {
			mode = UnitsAmdahl
		}
	}
	units := 0
	b := Builder{Units: mode, MaxSpanDuration: inp.MaxSpanDuration}
	d := b.EachTree(all, func(w Work) {
		units++
		fn(w)
	})
	if units == 0 {
		if inp.Units == UnitsAuto {
			mode = UnitsAuto
		}
		return d, noUnits(name, len(all), mode, d)
	}
	return d, nil
}

// countingRules are rules that count the spans with amdahl's attributes.
type countingRules struct {
	*SpanRules
	amdahl int
}

func (r *countingRules) Apply(s *Span, span, res []string, hasAmdahl bool) {
	if hasAmdahl {
		r.amdahl++
	}
	r.SpanRules.Apply(s, span, res, hasAmdahl)
}

// usesAuto reports whether rows leaves any span's rule set to the input.
func usesAuto(rows *Rows) bool {
	return rows.Source == RowsAuto || rows.Source == RowsFile && rows.Fallback == RowsAuto
}

// noUnits is the error of an input without a unit of work, saying why.
func noUnits(name string, spans int, mode UnitMode, d Diagnostics) error {
	what := map[UnitMode]string{UnitsAuto: "units of work (neither amdahl.work spans nor trace roots)",
		UnitsAmdahl: "amdahl.work root spans", UnitsRoots: "root spans",
		UnitsSelected: "spans matching the unit selector"}[mode]
	if d.BadUnits > 0 {
		return fmt.Errorf("%s: no unit of work left among %d spans: every one of the %d units has a root with hostile timestamps (%s)",
			name, spans, d.BadUnits, d.badLine())
	}
	return fmt.Errorf("%s: no %s among %d spans", name, what, spans)
}

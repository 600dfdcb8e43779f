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
	Limits spans.Limits
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
func ReadFile(path string, lim spans.Limits, in *spans.Interner, fn func(Work)) (Diagnostics, error) {
	return Input{Limits: lim}.ReadFile(path, in, fn)
}

// Read is ReadFile for a reader; name is used in errors.
func Read(r io.Reader, name string, lim spans.Limits, in *spans.Interner, fn func(Work)) (Diagnostics, error) {
	return Input{Limits: lim}.Read(r, name, in, fn)
}

// ReadFile is the package's ReadFile with in's units, rows and bounds.
func (inp Input) ReadFile(path string, in *spans.Interner, fn func(Work)) (Diagnostics, error) {
	var r io.Reader = os.Stdin
	var size int64 // of a regular file; 0: unknown
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return Diagnostics{}, err
		}
		defer f.Close()
		r = f
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			size = st.Size()
		}
	}
	return inp.read(r, path, in, fn, size)
}

// Read is ReadFile for a reader; name is used in errors.
func (inp Input) Read(r io.Reader, name string, in *spans.Interner, fn func(Work)) (Diagnostics, error) {
	return inp.read(r, name, in, fn, 0)
}

// firstSpans is the capacity a reader of a file of known size starts
// with: enough spans to tell the file's bytes per span.
const firstSpans = 1 << 14

// read reads r, of size bytes when known (a regular file; 0 otherwise).
// With the size, the spans' slice grows once, when its first firstSpans
// are full, to the file's spans as the bytes read so far project them
// (and 1/16 more): OTLP JSON spends from about 400 bytes a span (the
// conventions' short spans) to 600 (amdahl's), and capacity allocated
// counts toward the heap the garbage collector lets grow to twice the
// live one, touched or not.
func (inp Input) read(r io.Reader, name string, in *spans.Interner, fn func(Work), size int64) (Diagnostics, error) {
	if in == nil {
		in = &spans.Interner{}
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
	var all []spans.Span
	cr := &countingReader{r: r}
	if size > 0 {
		all = make([]spans.Span, 0, firstSpans)
		r = cr
	}
	maxSpans := int64(inp.Limits.MaxSpans)
	if maxSpans <= 0 {
		maxSpans = spans.DefaultMaxSpans
	}
	works := 0
	rules := countingRules{SpanRules: NewSpanRules(rows, sel, in)}
	err := spans.ReadOTLPJSON(r, name, inp.Limits, in, &rules, func(s spans.Span) error {
		if s.Name == telemetry.SpanWork {
			works++
		}
		if len(all) == firstSpans && cap(all) == firstSpans && size > 0 && cr.n > 0 {
			// The reader reads ahead of the spans it has handed over: by
			// its buffer, or by a whole resource's spans when the
			// resource comes after them. Past 1 KiB a span the bytes
			// read say nothing; 448 a span (about the shortest spans')
			// stands in.
			per := cr.n / firstSpans
			if per > 1024 {
				per = 448
			}
			want := min(size/max(per, 1), maxSpans)
			want += want / 16
			if want > firstSpans {
				all = append(make([]spans.Span, 0, want), all...)
			}
		}
		all = append(all, s)
		return nil
	})
	if err != nil {
		return Diagnostics{}, err
	}
	if rules.amdahl > 0 && rows.UsesAuto() {
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

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// countingRules are rules that count the spans with amdahl's attributes.
type countingRules struct {
	*SpanRules
	amdahl int
}

func (r *countingRules) Apply(s *spans.Span, span, res []string, hasAmdahl bool) {
	if hasAmdahl {
		r.amdahl++
	}
	r.SpanRules.Apply(s, span, res, hasAmdahl)
}

// UsesAuto reports whether rows leaves any span's rule set to the input
// (RowsAuto, or a rules file that falls back to it): a reader then gives
// the spans of amdahl's own traces amdahl's rows (Span.ClearSemconvRow).
func (rows *Rows) UsesAuto() bool {
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

package attribution

import (
	"fmt"
	"io"
	"os"
)

// ReadFile reads the OTLP JSON trace file at path (amdahl's trace file or
// the OpenTelemetry Collector's file exporter output; "-" is standard
// input) and hands each of its units of work to fn. It streams the file
// (one line or many, of any length) and keeps only compact spans until
// the units are built; fn may keep a unit or fold it into an Accumulator.
// A file with no unit of work is an error.
func ReadFile(path string, lim Limits, in *Interner, fn func(Work)) (Diagnostics, error) {
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
			// OTLP JSON spends about 500 bytes or more per span; capacity the
			// spans never reach costs address space, not memory, and
			// spares the copies of a growing slice.
			maxSpans := int64(lim.MaxSpans)
			if maxSpans <= 0 {
				maxSpans = defaultMaxSpans
			}
			hint = int(min(st.Size()/512, maxSpans))
		}
	}
	return read(r, path, lim, in, fn, hint)
}

// Read is ReadFile for a reader; name is used in errors.
func Read(r io.Reader, name string, lim Limits, in *Interner, fn func(Work)) (Diagnostics, error) {
	return read(r, name, lim, in, fn, 0)
}

func read(r io.Reader, name string, lim Limits, in *Interner, fn func(Work), hint int) (Diagnostics, error) {
	if in == nil {
		in = &Interner{}
	}
	spans := make([]Span, 0, hint)
	err := ReadOTLPJSON(r, name, lim, in, func(s Span) error {
		spans = append(spans, s)
		return nil
	})
	if err != nil {
		return Diagnostics{}, err
	}
	units := 0
	d := EachTree(spans, func(w Work) {
		units++
		fn(w)
	})
	if units == 0 {
		return d, fmt.Errorf("%s: no amdahl.work root spans among %d spans", name, len(spans))
	}
	return d, nil
}

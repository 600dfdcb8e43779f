// Command ratiostats states paired ratios the way amdahl ab does, for the
// measurement scripts (scripts/telemetry-tax.sh), so that the statistics
// live in one place (telemetry/attribution) rather than in each script:
//
//	ratiostats set NAME KIND POOLED <ratios
//
// reads one ratio a line (a set's pairs), prints their median, min, max and
// geometric mean with its 95 % interval (Student's t over the log ratios),
// and appends "NAME\tKIND\tMEANLOG" to the file POOLED;
//
//	ratiostats pool <POOLED
//
// reads those lines and prints, per NAME and KIND in their first order, the
// sets' least and greatest geometric means and the geometric mean over the
// sets with Student's t over the sets' mean log ratios.
//
// Input is bounded: a line of at most 4 KiB, at most 1,000,000 lines.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

const (
	maxLine  = 4 << 10
	maxLines = 1_000_000
	level    = 0.95
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ratiostats:", err)
		os.Exit(1)
	}
}

func run(args []string, in io.Reader, out io.Writer) error {
	switch {
	case len(args) == 4 && args[0] == "set":
		f, err := os.OpenFile(args[3], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		err = set(args[1], args[2], in, out, f)
		return errors.Join(err, f.Close())
	case len(args) == 1 && args[0] == "pool":
		return pool(in, out)
	}
	return errors.New("usage: ratiostats set NAME KIND POOLED <ratios | ratiostats pool <POOLED")
}

// lines calls f with each non-empty line of in, bounded.
func lines(in io.Reader, f func(n int, line string) error) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 256), maxLine)
	n := 0
	for sc.Scan() {
		n++
		if n > maxLines {
			return fmt.Errorf("more than %d lines", maxLines)
		}
		if line := strings.TrimSpace(sc.Text()); line != "" {
			if err := f(n, line); err != nil {
				return err
			}
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return fmt.Errorf("line %d is longer than %d bytes", n+1, maxLine)
	}
	return sc.Err()
}

func set(name, kind string, in io.Reader, out, pooled io.Writer) error {
	var v []float64
	err := lines(in, func(n int, line string) error {
		x, err := strconv.ParseFloat(line, 64)
		if err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		v = append(v, x)
		return nil
	})
	if err != nil {
		return err
	}
	g, err := attribution.GeoMean(v, level)
	if err != nil {
		return fmt.Errorf("%s %s: %w", name, kind, err)
	}
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	fmt.Fprintf(out, "%-30s %s: median %.3f  min %.3f  max %.3f  geomean %.3f [%.3f, %.3f] 95%%  (n=%d)\n",
		name, kind, med, v[0], v[len(v)-1], g.Value, g.Lo, g.Hi, len(v))
	_, err = fmt.Fprintf(pooled, "%s\t%s\t%.9f\n", name, kind, math.Log(g.Value))
	return err
}

func pool(in io.Reader, out io.Writer) error {
	type key struct{ name, kind string }
	var order []key
	logs := map[key][]float64{}
	err := lines(in, func(n int, line string) error {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return fmt.Errorf("line %d: want NAME\\tKIND\\tMEANLOG, got %d fields", n, len(f))
		}
		x, err := strconv.ParseFloat(f[2], 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("line %d: mean log ratio %q is not a finite number", n, f[2])
		}
		k := key{f[0], f[1]}
		if _, ok := logs[k]; !ok {
			order = append(order, k)
		}
		logs[k] = append(logs[k], x)
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range order {
		l := logs[k]
		m := attribution.MeanLogInterval(l, level)
		fmt.Fprintf(out, "%-30s %s: sets %.3f .. %.3f  pooled %.3f [%.3f, %.3f] 95%%  (sets=%d)\n",
			k.name, k.kind, math.Exp(slices.Min(l)), math.Exp(slices.Max(l)), math.Exp(m.Value), math.Exp(m.Lo), math.Exp(m.Hi), len(l))
	}
	return nil
}

package main

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/amdahl-rt/amdahl/internal/report/profiles"
	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// profileJSON is amdahl profile --json.
type profileJSON struct {
	SchemaVersion int      `json:"schema_version"`
	Dir           string   `json:"dir"`
	Kind          string   `json:"kind"` // cpu or alloc
	Attribution   string   `json:"attribution"`
	Files         []string `json:"files"`
	// Total, ByLabel, ByStack and InBuckets: every sample's value, and
	// its parts booked to a phase by label, to a phase by stack, and to
	// a bucket (profiles.Analysis).
	Total     int64 `json:"total"`
	ByLabel   int64 `json:"by_label"`
	ByStack   int64 `json:"by_stack"`
	InBuckets int64 `json:"in_buckets"`
	// Samples and InPhase (CPU only): how many samples the profiles hold
	// (total over the sampling period), and the share booked to a phase
	// with its 95 % interval as a proportion of that many samples.
	Samples int64               `json:"samples,omitempty"`
	InPhase *shareInterval      `json:"in_phase,omitempty"`
	Phases  []profiles.PhaseTop `json:"phases"`
}

// shareInterval is a share with its 95 % (Wilson score) interval.
type shareInterval struct {
	Share float64 `json:"share"`
	Low   float64 `json:"low"`
	High  float64 `json:"high"`
}

// wilson is the share k/n with its 95 % Wilson score interval: the range
// of shares that n samples of the same run would give 19 times in 20.
// A default run's CPU profiles hold about 115 samples, so its share in a
// phase moves by ±5 points from one run to the next on sampling alone.
func wilson(k, n int64) *shareInterval {
	if n <= 0 {
		return nil
	}
	const z = 1.96
	p, fn := float64(k)/float64(n), float64(n)
	d := 1 + z*z/fn
	c := (p + z*z/(2*fn)) / d
	h := z * math.Sqrt(p*(1-p)/fn+z*z/(4*fn*fn)) / d
	return &shareInterval{Share: p, Low: max(0, c-h), High: min(1, c+h)}
}

const (
	cpuAttribution   = "pprof label phase, else the innermost phase entry function on the stack, else a bucket"
	allocAttribution = "innermost phase entry function on the stack, else a bucket"
)

func newProfileCmd() *cobra.Command {
	var (
		phase  string
		alloc  bool
		top    int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "profile DIR",
		Short: "Top functions per phase from the CPU or heap profiles of a run --out directory",
		Long: `profile reads the pprof files of an amdahl run --out DIR (the parent's
cpu.pprof or heap.pprof and every task host's under DIR/hosts/host-N/,
merged) and prints, per phase, the total and the top functions by flat
(the function itself) with cum (the function and what it calls).

A CPU sample is booked to a phase by its pprof label phase, set around
every phase body and on the goroutines that do a phase's work outside one
(ipc's reader and writer, the sidecar's gRPC goroutines). A sample without
the label is booked by its stack: to the phase of the innermost frame that
opens or does a phase (taskproto.runTask: execute, ipc.(*Conn).serialize:
serialize, chunking.(*Sender).sendChunk: send, gRPC's transport reader and
writer: receive and send, …; the table is profiles.Entries in
internal/report/profiles/entries.go). What is in no phase goes to a named bucket:
(workload generator), (accounting) (attribution, span and metric
recording), (go runtime) (background GC, scheduler) and (process)
(start-up, outputs, anything else outside the units). The second line says
how much was booked each way, and for CPU the share's 95 % interval: a
profile at runtime/pprof's 100 Hz holds one sample per 10 ms of CPU, so a
run of about a second is a proportion of about a hundred samples.

--alloc reads the bytes allocated (alloc_space) instead. Go heap profiles
carry no labels, so an allocation is booked by its stack alone.

Profiles that went to Pyroscope (--pyroscope) are not in DIR; there, the
same labels select the phase in the flame graph.`,
		Example: `  amdahl run --scenario taskhost --out out
  amdahl profile out                       # CPU, top 10 per phase
  amdahl profile out --phase execute --top 20
  amdahl profile out --alloc --phase serialize
  amdahl profile out --json | jq '.phases[0].funcs[0]'`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("profile takes one directory (a run --out DIR), got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if top < 0 {
				return usageError{fmt.Errorf("--top %d: want 0 (every function) or more", top)}
			}
			if phase != "" {
				var valid []string
				for _, p := range telemetry.Phases() {
					valid = append(valid, p.String())
				}
				valid = append(append(valid, profiles.Buckets...), profiles.NoPhase)
				if err := checkChoice("phase", phase, valid...); err != nil {
					return err
				}
			}
			an, err := profiles.Analyze(dir, alloc, top)
			if err != nil {
				return err
			}
			files, tops := an.Files, an.Phases
			shown := tops
			if phase != "" {
				shown = slices.DeleteFunc(slices.Clone(tops), func(pt profiles.PhaseTop) bool { return pt.Phase != phase })
			}
			out := profileJSON{SchemaVersion: runtime.SchemaVersion, Dir: dir, Kind: "cpu", Attribution: cpuAttribution, Files: files,
				Total: an.Total, ByLabel: an.ByLabel, ByStack: an.ByStack, InBuckets: an.InBuckets, Phases: shown}
			if alloc {
				out.Kind, out.Attribution = "alloc", allocAttribution
			} else if an.Period > 0 {
				out.Samples = an.Total / an.Period
				out.InPhase = wilson((an.ByLabel+an.ByStack)/an.Period, out.Samples)
			}
			if out.Phases == nil {
				out.Phases = []profiles.PhaseTop{}
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			return printProfile(cmd.OutOrStdout(), out, tops, phase)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&phase, "phase", "", "show this phase or bucket only (queue, dispatch, serialize, send, receive, deserialize, execute, or a bucket: \"(go runtime)\", …)")
	fl.BoolVar(&alloc, "alloc", false, "allocated bytes (heap.pprof, alloc_space) instead of CPU time")
	fl.IntVar(&top, "top", 10, "functions per phase (0: all)")
	fl.BoolVar(&asJSON, "json", false, "print JSON instead of a table (docs/json.md)")
	return cmd
}

// printProfile writes the table of amdahl profile; all is every phase
// (for the percentages of the whole).
func printProfile(w io.Writer, out profileJSON, all []profiles.PhaseTop, phase string) error {
	var grand int64
	unit := ""
	for _, pt := range all {
		grand += pt.Total
		unit = pt.Unit
	}
	hosts := 0
	for _, f := range out.Files {
		if strings.Contains(filepath.ToSlash(f), "/"+profiles.HostsDir+"/") {
			hosts++
		}
	}
	what := "CPU time"
	if out.Kind == "alloc" {
		what = "bytes allocated"
	}
	fmt.Fprintf(w, "%s by phase in %s: %d profiles (%d from task hosts), %s in all; phase by %s\n",
		what, out.Dir, len(out.Files), hosts, formatValue(grand, unit), out.Attribution)
	interval := ""
	if ip := out.InPhase; ip != nil {
		interval = fmt.Sprintf(" [%.1f–%.1f%%: 95%% interval over %d samples]", 100*ip.Low, 100*ip.High, out.Samples)
	}
	fmt.Fprintf(w, "in a phase %s%s (by label %s, by stack %s), in buckets %s\n", percent(out.ByLabel+out.ByStack, out.Total), interval,
		percent(out.ByLabel, out.Total), percent(out.ByStack, out.Total), percent(out.InBuckets, out.Total))
	if len(out.Phases) == 0 {
		fmt.Fprintf(w, "no samples in phase %s\n", phase)
		return nil
	}
	for _, pt := range out.Phases {
		if pt.Bucket {
			fmt.Fprintf(w, "\nbucket %s: %s (%s of all)\n", pt.Phase, formatValue(pt.Total, pt.Unit), percent(pt.Total, grand))
		} else {
			fmt.Fprintf(w, "\nphase %s: %s (%s of all; by label %s, by stack %s)\n", pt.Phase, formatValue(pt.Total, pt.Unit),
				percent(pt.Total, grand), formatValue(pt.ByLabel, pt.Unit), formatValue(pt.ByStack, pt.Unit))
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "flat\tflat%\tcum\tcum%\t\tfunction")
		for _, f := range pt.Funcs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\t%s\n", formatValue(f.Flat, pt.Unit), percent(f.Flat, pt.Total),
				formatValue(f.Cum, pt.Unit), percent(f.Cum, pt.Total), f.Name)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func formatValue(v int64, unit string) string {
	switch unit {
	case "nanoseconds":
		return time.Duration(v).Round(time.Millisecond).String()
	case "bytes":
		return formatBytes(v)
	}
	return fmt.Sprintf("%d %s", v, unit)
}

// formatBytes is v in B, KiB, MiB or GiB, with one decimal above B.
func formatBytes(v int64) string {
	const k = 1024
	switch {
	case v < k:
		return fmt.Sprintf("%dB", v)
	case v < k*k:
		return fmt.Sprintf("%.1fKiB", float64(v)/k)
	case v < k*k*k:
		return fmt.Sprintf("%.1fMiB", float64(v)/(k*k))
	}
	return fmt.Sprintf("%.1fGiB", float64(v)/(k*k*k))
}

func percent(v, of int64) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(v)/float64(of))
}

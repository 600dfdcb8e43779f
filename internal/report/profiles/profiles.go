// Package profiles reads the pprof files of an `amdahl run --out`
// directory (the parent's cpu.pprof and heap.pprof, and each task host's
// under hosts/host-<id>/) and tells, per phase, which functions the CPU
// time or the allocated bytes went to: `amdahl profile` for a user without
// Pyroscope.
//
// Every sample is booked to one row, in this order:
//
//   - by label: a CPU sample with the pprof label phase (set around every
//     phase body by package telemetry, and on the goroutines that do a
//     phase's work outside one: ipc's reader and writer, the sidecar's
//     gRPC goroutines) is in that phase; with its labels component and
//     direction it names a row of the run's table (RowOf);
//   - by stack: a sample without the label (every allocation sample: heap
//     profiles carry no labels) is in the phase of the innermost frame on
//     its stack that is one of Entries, the functions that open or do
//     each phase (a gRPC transport goroutine's reader and writer among
//     them);
//   - in a bucket: what is in no phase is named by what did it
//     (Buckets): the Go runtime's own work (GC, scheduler), the workload
//     generator, amdahl's accounting, and the process's start-up, output
//     and anything else outside the units. NoPhase is left for a sample
//     with no stack at all.
package profiles

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/amdahl-rt/amdahl/internal/proccpu"
)

// Func is one function's share of a phase, in the profile's sample unit:
// Flat where it is the innermost frame, Cum where it is anywhere on the
// stack (once per sample).
type Func struct {
	Name string `json:"name"`
	Flat int64  `json:"flat"`
	Cum  int64  `json:"cum"`
}

// PhaseTop is one phase's (or bucket's) total, how much of it was booked
// by label and by stack, and its top functions, sorted by Flat descending
// (then Cum descending, then name).
type PhaseTop struct {
	Phase string `json:"phase"`
	// Bucket: Phase names a bucket (Buckets), not a phase.
	Bucket  bool   `json:"bucket"`
	Unit    string `json:"unit"`
	Total   int64  `json:"total"`
	ByLabel int64  `json:"by_label"`
	ByStack int64  `json:"by_stack"`
	Funcs   []Func `json:"funcs"`
}

// Analysis is what Analyze read from a directory.
type Analysis struct {
	Files []string `json:"files"`
	Unit  string   `json:"unit"`
	// Period is the profiles' sampling period, in Unit (the largest of
	// the files': one sample's value).
	Period int64 `json:"period"`
	// Total is every sample's value; ByLabel, ByStack and InBuckets are
	// its parts booked to a phase by label, to a phase by stack, and to
	// a bucket (NoPhase's samples are in none of them).
	Total     int64 `json:"total"`
	ByLabel   int64 `json:"by_label"`
	ByStack   int64 `json:"by_stack"`
	InBuckets int64 `json:"in_buckets"`
	// Phases are the phases and buckets, largest Total first.
	Phases []PhaseTop `json:"phases"`
	// Rows is the value per row of the run's table (RowOf), from the
	// samples booked to a phase; the parent's and the hosts' added.
	Rows map[string]int64 `json:"rows"`
	// Window is the CPU profiles' windows added (proccpu.WindowFile
	// beside each cpu.pprof: the process's CPU time when its profile
	// started and stopped), Windows how many of Files had one. CPU only.
	Window  proccpu.Window `json:"window"`
	Windows int            `json:"windows"`
	// Sysmon is the windows' sysmon CPU added (proccpu.Window.Sysmon: the
	// Go runtime's system monitor thread, which no sample holds), Sysmons
	// how many of the windows had it.
	Sysmon  time.Duration `json:"sysmon_ns"`
	Sysmons int           `json:"sysmons"`
	// Writing is the CPU the processes used writing their CPU profiles
	// out once sampling had stopped (proccpu.Window.Written − Stop),
	// Writings how many of the windows had it.
	Writing  time.Duration `json:"writing_ns"`
	Writings int           `json:"writings"`
}

// NoPhase is the phase of a sample that has no stack to book it by.
const NoPhase = "(none)"

// Profile file names in a run's --out directory and in each
// hosts/host-<id>/ below it.
const (
	CPUFile  = "cpu.pprof"
	HeapFile = "heap.pprof"
	HostsDir = "hosts"
)

// Sample types read.
const (
	cpuType   = "cpu"
	allocType = "alloc_space"
)

// TopByPhase is Analyze's Phases.
func TopByPhase(dir string, alloc bool, n int) ([]PhaseTop, error) {
	a, err := Analyze(dir, alloc, n)
	if err != nil {
		return nil, err
	}
	return a.Phases, nil
}

// Analyze reads the pprof files of a `run --out` directory (parent and
// hosts merged) and returns per phase and bucket the top n functions;
// alloc selects allocation (alloc_space) instead of CPU. n ≤ 0 returns
// every function.
func Analyze(dir string, alloc bool, n int) (*Analysis, error) {
	files, err := Files(dir, alloc)
	if err != nil {
		return nil, err
	}
	an := &Analysis{Files: files, Rows: map[string]int64{}}
	agg := map[string]*phaseAgg{}
	for _, f := range files {
		p, err := readFile(f)
		if err != nil {
			return nil, err
		}
		host := isHostFile(dir, f)
		u, err := addProfile(an, agg, p, alloc, host)
		if err != nil {
			return nil, fmt.Errorf("profiles: %s: %w", f, err)
		}
		an.Unit = u
		an.Period = max(an.Period, p.Period)
		if !alloc {
			w, err := proccpu.ReadWindow(filepath.Join(filepath.Dir(f), proccpu.WindowFile))
			switch {
			case err == nil && (w.Stop > math.MaxInt64-an.Window.Stop || w.Written > math.MaxInt64-an.Writing):
				return nil, fmt.Errorf("profiles: %s: the CPU windows of the profiles add up past %v", f, time.Duration(math.MaxInt64))
			case err == nil:
				an.Window.Start += w.Start
				an.Window.Stop += w.Stop
				an.Windows++
				if w.Sysmon != nil {
					an.Sysmon += *w.Sysmon
					an.Sysmons++
				}
				if w.Written != 0 {
					an.Writing += w.Written - w.Stop
					an.Writings++
				}
			case !errors.Is(err, os.ErrNotExist):
				return nil, fmt.Errorf("profiles: %w", err)
			}
		}
	}
	an.Phases = make([]PhaseTop, 0, len(agg))
	for name, a := range agg {
		pt := PhaseTop{Phase: name, Bucket: slices.Contains(Buckets, name), Unit: an.Unit, Total: a.total, ByLabel: a.byLabel, ByStack: a.byStack,
			Funcs: make([]Func, 0, len(a.funcs))}
		for fn, v := range a.funcs {
			pt.Funcs = append(pt.Funcs, Func{Name: fn, Flat: v.flat, Cum: v.cum})
		}
		slices.SortFunc(pt.Funcs, func(a, b Func) int {
			return cmp.Or(cmp.Compare(b.Flat, a.Flat), cmp.Compare(b.Cum, a.Cum), strings.Compare(a.Name, b.Name))
		})
		if n > 0 && len(pt.Funcs) > n {
			pt.Funcs = pt.Funcs[:n]
		}
		an.Phases = append(an.Phases, pt)
	}
	slices.SortFunc(an.Phases, func(a, b PhaseTop) int {
		return cmp.Or(cmp.Compare(b.Total, a.Total), strings.Compare(a.Phase, b.Phase))
	})
	return an, nil
}

// isHostFile reports whether f is a task host's profile (under
// dir/hosts/).
func isHostFile(dir, f string) bool {
	rel, err := filepath.Rel(dir, f)
	return err == nil && strings.HasPrefix(filepath.ToSlash(rel), HostsDir+"/")
}

// Files returns the profile files TopByPhase reads in dir: the parent's
// cpu.pprof (alloc: heap.pprof) and each host's in hosts/*/, those that
// exist. It fails when dir cannot be read or holds none.
func Files(dir string, alloc bool) ([]string, error) {
	name := CPUFile
	if alloc {
		name = HeapFile
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	var files []string
	add := func(path string) error {
		fi, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("profiles: %w", err)
		}
		if fi.Mode().IsRegular() {
			files = append(files, path)
		}
		return nil
	}
	if err := add(filepath.Join(dir, name)); err != nil {
		return nil, err
	}
	hosts, err := readDirBounded(filepath.Join(dir, HostsDir), hostLimit)
	if err != nil {
		return nil, err
	}
	for _, h := range hosts {
		if h.IsDir() {
			if err := add(filepath.Join(dir, HostsDir, h.Name(), name)); err != nil {
				return nil, err
			}
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("profiles: no %s in %s or %s (amdahl run --out %s writes them, unless profiles go to Pyroscope)",
			name, dir, filepath.Join(dir, HostsDir, "*"), dir)
	}
	return files, nil
}

// readDirBounded lists at most max entries of dir, sorted by name; a
// missing dir is empty.
func readDirBounded(dir string, max int) ([]os.DirEntry, error) {
	d, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	defer d.Close()
	ents, err := d.ReadDir(max + 1)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	if len(ents) > max {
		return nil, fmt.Errorf("profiles: %s has more than %d entries (the MaxHosts bound on the host directories read)", dir, max)
	}
	slices.SortFunc(ents, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, nil
}

type funcAgg struct{ flat, cum int64 }

type phaseAgg struct {
	total, byLabel, byStack int64
	funcs                   map[string]*funcAgg
}

// addProfile adds p's samples of the CPU (or alloc_space) type to agg
// and an, and returns the sample unit. host: p is a task host's.
func addProfile(an *Analysis, agg map[string]*phaseAgg, p *profile.Profile, alloc, host bool) (string, error) {
	want := cpuType
	if alloc {
		want = allocType
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == want {
			idx = i
		}
	}
	if idx < 0 {
		return "", fmt.Errorf("no %s samples (a profile of another kind?)", want)
	}
	unit := p.SampleType[idx].Unit
	seen := map[string]bool{}
	for _, s := range p.Sample {
		if idx >= len(s.Value) || s.Value[idx] == 0 {
			continue
		}
		v := s.Value[idx]
		b := Book(s, host, !alloc)
		a := agg[b.Phase]
		if a == nil {
			a = &phaseAgg{funcs: map[string]*funcAgg{}}
			agg[b.Phase] = a
		}
		a.total += v
		an.Total += v
		switch b.Basis {
		case ByLabel:
			a.byLabel += v
			an.ByLabel += v
		case ByStack:
			a.byStack += v
			an.ByStack += v
		case InBucket:
			an.InBuckets += v
		}
		if b.Row != "" {
			an.Rows[b.Row] += v
		}
		clear(seen)
		for i, loc := range s.Location {
			for j, name := range frames(loc) {
				fa := a.funcs[name]
				if fa == nil {
					fa = &funcAgg{}
					a.funcs[name] = fa
				}
				if i == 0 && j == 0 {
					fa.flat += v
				}
				if !seen[name] {
					seen[name] = true
					fa.cum += v
				}
			}
		}
	}
	return unit, nil
}

// frames returns loc's function names, innermost (inlined) first; a
// location without symbols is its address.
func frames(loc *profile.Location) []string {
	if len(loc.Line) == 0 {
		return []string{fmt.Sprintf("0x%x", loc.Address)}
	}
	out := make([]string, 0, len(loc.Line))
	for _, l := range loc.Line {
		if l.Function != nil {
			out = append(out, l.Function.Name)
		}
	}
	return out
}

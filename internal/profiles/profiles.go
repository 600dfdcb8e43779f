// Package profiles reads the pprof files of an `amdahl run --out`
// directory (the parent's cpu.pprof and heap.pprof, and each task host's
// under hosts/host-<id>/) and tells, per phase, which functions the CPU
// time or the allocated bytes went to: `amdahl profile` for a user without
// Pyroscope.
//
// CPU samples are grouped by their pprof label phase (set around every
// phase body by package telemetry); a sample without one is in phase
// NoPhase. Heap profiles carry no labels, so an allocation sample is
// attributed from its stack instead: to the phase of the innermost frame
// that is one of Entries, the functions that open each phase; a sample
// with no such frame is in NoPhase.
package profiles

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/google/pprof/profile"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// Func is one function's share of a phase, in the profile's sample unit:
// Flat where it is the innermost frame, Cum where it is anywhere on the
// stack (once per sample).
type Func struct {
	Name string `json:"name"`
	Flat int64  `json:"flat"`
	Cum  int64  `json:"cum"`
}

// PhaseTop is one phase's total and its top functions, sorted by Flat
// descending (then Cum descending, then name).
type PhaseTop struct {
	Phase string `json:"phase"`
	Unit  string `json:"unit"`
	Total int64  `json:"total"`
	Funcs []Func `json:"funcs"`
}

// NoPhase is the phase of a CPU sample without a phase label, and of an
// allocation sample with no entry function on its stack.
const NoPhase = "(none)"

// Bounds on what is read from the directory.
const (
	// MaxFileBytes bounds one profile file, compressed and decompressed.
	MaxFileBytes = 64 << 20
	// MaxHosts bounds the hosts/ subdirectories read.
	MaxHosts = 4096
)

// fileLimit and hostLimit are MaxFileBytes and MaxHosts; tests lower them.
var fileLimit, hostLimit = MaxFileBytes, MaxHosts

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

// TopByPhase reads the pprof files of a `run --out` directory (parent and hosts merged),
// and returns per phase the top n functions; alloc selects allocation (alloc_space) instead of CPU.
// n ≤ 0 returns every function. Phases are sorted by Total, largest first.
func TopByPhase(dir string, alloc bool, n int) ([]PhaseTop, error) {
	files, err := Files(dir, alloc)
	if err != nil {
		return nil, err
	}
	agg := map[string]*phaseAgg{}
	unit := ""
	for _, f := range files {
		p, err := readFile(f)
		if err != nil {
			return nil, err
		}
		u, err := addProfile(agg, p, alloc)
		if err != nil {
			return nil, fmt.Errorf("profiles: %s: %w", f, err)
		}
		unit = u
	}
	out := make([]PhaseTop, 0, len(agg))
	for name, a := range agg {
		pt := PhaseTop{Phase: name, Unit: unit, Total: a.total, Funcs: make([]Func, 0, len(a.funcs))}
		for fn, v := range a.funcs {
			pt.Funcs = append(pt.Funcs, Func{Name: fn, Flat: v.flat, Cum: v.cum})
		}
		sort.Slice(pt.Funcs, func(i, j int) bool {
			a, b := pt.Funcs[i], pt.Funcs[j]
			if a.Flat != b.Flat {
				return a.Flat > b.Flat
			}
			if a.Cum != b.Cum {
				return a.Cum > b.Cum
			}
			return a.Name < b.Name
		})
		if n > 0 && len(pt.Funcs) > n {
			pt.Funcs = pt.Funcs[:n]
		}
		out = append(out, pt)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Total != out[j].Total {
			return out[i].Total > out[j].Total
		}
		return out[i].Phase < out[j].Phase
	})
	return out, nil
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
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	return ents, nil
}

// readFile parses one pprof file, gzipped or not, of at most MaxFileBytes
// either way.
func readFile(path string) (*profile.Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	defer f.Close()
	tooBig := func() error {
		return fmt.Errorf("profiles: %s: larger than %d bytes (the MaxFileBytes bound on a profile file)", path, fileLimit)
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(fileLimit)+1))
	if err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	if len(data) > fileLimit {
		return nil, tooBig()
	}
	if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("profiles: %s: %w", path, err)
		}
		if data, err = io.ReadAll(io.LimitReader(zr, int64(fileLimit)+1)); err != nil {
			return nil, fmt.Errorf("profiles: %s: %w", path, err)
		}
		if len(data) > fileLimit {
			return nil, tooBig()
		}
	}
	p, err := profile.ParseData(data)
	if err != nil {
		return nil, fmt.Errorf("profiles: %s: %w", path, err)
	}
	return p, nil
}

type funcAgg struct{ flat, cum int64 }

type phaseAgg struct {
	total int64
	funcs map[string]*funcAgg
}

// addProfile adds p's samples of the CPU (or alloc_space) type to agg and
// returns the sample unit.
func addProfile(agg map[string]*phaseAgg, p *profile.Profile, alloc bool) (string, error) {
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
		phase := NoPhase
		if alloc {
			phase = stackPhase(s)
		} else if l := s.Label[telemetry.LabelPhase]; len(l) > 0 {
			phase = l[0]
		}
		a := agg[phase]
		if a == nil {
			a = &phaseAgg{funcs: map[string]*funcAgg{}}
			agg[phase] = a
		}
		a.total += v
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

// stackPhase is the phase of the innermost entry function on s's stack.
func stackPhase(s *profile.Sample) string {
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			if l.Function == nil {
				continue
			}
			if ph, ok := entryPhase[l.Function.Name]; ok {
				return ph
			}
		}
	}
	return NoPhase
}

// Package features implements feature waves (after MSBuild's change waves):
// behaviour changes ship enabled, grouped by the amdahl version that
// introduced them, and AMDAHL_DISABLE_FEATURES_FROM_VERSION=X.Y turns off
// every wave ≥ X.Y at once, restoring the legacy behaviour.
//
// Environment:
//
//	AMDAHL_DISABLE_FEATURES_FROM_VERSION  unset or empty: every wave enabled.
//	    A version of 2 to 4 non-negative integers (X.Y[.Z[.W]]) compared like
//	    .NET System.Version (absent components are -1, so "0.1.0" > "0.1").
//	    A value between two waves rounds up to the next wave. A value
//	    outside the known waves is clamped, and the clamping is logged as a
//	    warning (it is a valid version, so the process runs): below the
//	    lowest wave to the lowest (all disabled), above the highest to the
//	    highest (the highest wave disabled); 999.999 keeps every wave. A
//	    value that is not a version is an error naming the variable and the
//	    waves; nothing falls back to "all enabled".
//
// The program resolves the variable once (Current, from the process
// environment; runtime.ResolveSettings and runtime.DefaultSettings call it)
// and reports an invalid value as bad usage. The resolution, or the error,
// is cached for the life of the process and logged through log/slog on
// first use; Reset forgets it (for tests).
package features

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
)

// EnvDisableFrom is the environment variable that disables waves.
const EnvDisableFrom = "AMDAHL_DISABLE_FEATURES_FROM_VERSION"

// Version is a wave version with System.Version semantics: Build and
// Revision are -1 when absent.
type Version struct {
	Major, Minor, Build, Revision int
}

// Wave returns the two-component version major.minor.
func Wave(major, minor int) Version { return Version{major, minor, -1, -1} }

// The waves amdahl has shipped, oldest first.
var (
	// Wave0_1 raised the default ipc buffer (ipc.buffer) from 128 KiB to 1 MiB
	// and made the cached chunk planner (chunking.algorithm=cached) the
	// runtime's default over the legacy one.
	Wave0_1 = Wave(0, 1)
)

// Waves lists every wave, oldest first.
func Waves() []Version { return []Version{Wave0_1} }

// EnableAll is the sentinel resolution that keeps every wave enabled.
var EnableAll = Wave(999, 999)

// String formats v as .NET does: only present components.
func (v Version) String() string {
	s := strconv.Itoa(v.Major) + "." + strconv.Itoa(v.Minor)
	if v.Build >= 0 {
		s += "." + strconv.Itoa(v.Build)
		if v.Revision >= 0 {
			s += "." + strconv.Itoa(v.Revision)
		}
	}
	return s
}

// Compare returns -1, 0 or +1 as v is less than, equal to or greater than w.
func (v Version) Compare(w Version) int {
	return cmp.Or(cmp.Compare(v.Major, w.Major), cmp.Compare(v.Minor, w.Minor),
		cmp.Compare(v.Build, w.Build), cmp.Compare(v.Revision, w.Revision))
}

// ParseVersion parses 2 to 4 dot-separated non-negative integers.
func ParseVersion(s string) (Version, error) {
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) < 2 || len(parts) > 4 {
		return Version{}, fmt.Errorf("parse version %q: want 2 to 4 dot-separated integers", s)
	}
	c := [4]int{-1, -1, -1, -1}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p == "" || strings.ContainsAny(p, "+- ") {
			return Version{}, fmt.Errorf("parse version %q: component %q is not a non-negative integer", s, p)
		}
		c[i] = n
	}
	return Version{c[0], c[1], c[2], c[3]}, nil
}

// State says how a resolution was reached.
type State uint8

// The states of a resolution.
const (
	// Unset: the variable is unset or empty; every wave is enabled.
	Unset State = iota
	// Valid: the value named a wave or EnableAll, or was rounded up to one.
	Valid
	// OutOfRotation: the value was outside the known waves and was clamped.
	OutOfRotation
)

var stateNames = [...]string{"unset", "valid", "out-of-rotation"}

// String returns the state's name.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Resolution is the outcome of resolving the disable-from value.
type Resolution struct {
	// DisableFrom is the resolved wave: every wave w with w ≥ DisableFrom
	// is disabled. EnableAll when nothing is disabled.
	DisableFrom Version
	State       State
	// Notice explains a clamped value (State OutOfRotation); empty
	// otherwise. Current logs it as a warning.
	Notice string
}

// Enabled reports whether wave w is enabled under r.
func (r Resolution) Enabled(w Version) bool { return w.Compare(r.DisableFrom) < 0 }

// Resolve resolves value (the content of AMDAHL_DISABLE_FEATURES_FROM_VERSION)
// against waves, which must be sorted oldest first and non-empty. A value
// that is not a version is an error naming the variable and the waves.
func Resolve(value string, waves []Version) (Resolution, error) {
	if strings.TrimSpace(value) == "" {
		return Resolution{DisableFrom: EnableAll, State: Unset}, nil
	}
	v, err := ParseVersion(value)
	if err != nil {
		names := make([]string, len(waves))
		for i, w := range waves {
			names[i] = w.String()
		}
		return Resolution{}, fmt.Errorf("invalid %s=%q: want a version X.Y[.Z[.W]]: a wave (%s) to disable it and every later one, or %s to keep every wave (%v)",
			EnvDisableFrom, value, strings.Join(names, ", "), EnableAll, err)
	}
	if v.Compare(EnableAll) == 0 {
		return Resolution{DisableFrom: EnableAll, State: Valid}, nil
	}
	lowest, highest := waves[0], waves[len(waves)-1]
	if v.Compare(lowest) < 0 {
		return Resolution{DisableFrom: lowest, State: OutOfRotation,
			Notice: fmt.Sprintf("%s=%s is below the lowest wave %s; clamped to %s (all waves disabled)", EnvDisableFrom, v, lowest, lowest)}, nil
	}
	if v.Compare(highest) > 0 {
		return Resolution{DisableFrom: highest, State: OutOfRotation,
			Notice: fmt.Sprintf("%s=%s is above the highest wave %s; clamped to %s (wave %s disabled)", EnvDisableFrom, v, highest, highest, highest)}, nil
	}
	for _, w := range waves {
		if v.Compare(w) <= 0 {
			return Resolution{DisableFrom: w, State: Valid}, nil
		}
	}
	return Resolution{DisableFrom: highest, State: Valid}, nil
}

// FromEnv resolves the variable read with lookupEnv against Waves(),
// without caching or logging (see Current for the process-wide one).
func FromEnv(lookupEnv func(string) (string, bool)) (Resolution, error) {
	v, _ := lookupEnv(EnvDisableFrom)
	return Resolve(v, Waves())
}

var (
	mu          sync.Mutex
	resolved    *Resolution
	resolvedErr error
)

// Current returns the process-wide resolution from the environment,
// resolving and logging it on first use; the result, error included, is
// the same on every call until Reset. Safe for concurrent use.
func Current() (Resolution, error) {
	mu.Lock()
	defer mu.Unlock()
	if resolved == nil {
		r, err := FromEnv(os.LookupEnv)
		resolved, resolvedErr = &r, err
		switch {
		case err != nil:
			slog.Debug("feature waves: not resolved", "err", err)
		case r.Notice != "":
			slog.Warn("feature waves: "+r.Notice, "state", r.State.String())
		default:
			slog.Debug("feature waves resolved", "disable_from", r.DisableFrom.String(), "state", r.State.String())
		}
	}
	return *resolved, resolvedErr
}

// Reset forgets the process-wide resolution so that the next Current reads
// the environment again. For tests (use with t.Setenv).
func Reset() {
	mu.Lock()
	resolved, resolvedErr = nil, nil
	mu.Unlock()
}

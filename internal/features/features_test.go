package features

import (
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	waves := []Version{Wave(18, 4), Wave(18, 9), Wave(18, 11)}
	tests := []struct {
		in    string
		want  Version
		state State
	}{
		{"", EnableAll, Unset},
		{"   ", EnableAll, Unset},
		{"18.9", Wave(18, 9), Valid},
		{"999.999", EnableAll, Valid},
		{"18.5", Wave(18, 9), Valid},    // between waves: rounds up
		{"18.9.0", Wave(18, 11), Valid}, // 18.9.0 > 18.9 (System.Version)
		{"17.0", Wave(18, 4), OutOfRotation},
		{"100.10", Wave(18, 11), OutOfRotation},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r, err := Resolve(tt.in, waves)
			if err != nil {
				t.Fatal(err)
			}
			if r.DisableFrom != tt.want || r.State != tt.state {
				t.Fatalf("Resolve(%q) = %v %v, want %v %v", tt.in, r.DisableFrom, r.State, tt.want, tt.state)
			}
			if (r.Notice != "") != (tt.state == OutOfRotation) {
				t.Errorf("Resolve(%q) notice %q for state %v", tt.in, r.Notice, r.State)
			}
		})
	}
}

// TestResolveInvalid: a value that is not a version is an error naming
// the variable, the value and the waves; it never means "all enabled".
func TestResolveInvalid(t *testing.T) {
	waves := []Version{Wave(18, 4), Wave(18, 9)}
	for _, in := range []string{"garbage", "16x8", "17_0", "1", "1.2.3.4.5", "18.-1", "v0.1"} {
		t.Run(in, func(t *testing.T) {
			r, err := Resolve(in, waves)
			if err == nil {
				t.Fatalf("Resolve(%q) = %v %v, want an error", in, r.DisableFrom, r.State)
			}
			msg := err.Error()
			for _, want := range []string{EnvDisableFrom, `"` + in + `"`, "18.4, 18.9", EnableAll.String()} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q lacks %q", msg, want)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error %q is more than one line", msg)
			}
		})
	}
}

func TestEnabled(t *testing.T) {
	waves := []Version{Wave(18, 4), Wave(18, 9), Wave(18, 11)}
	r, err := Resolve("18.9", waves)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		w    Version
		want bool
	}{{Wave(18, 4), true}, {Wave(18, 9), false}, {Wave(18, 11), false}} {
		if got := r.Enabled(tt.w); got != tt.want {
			t.Errorf("Enabled(%v) under 18.9 = %v, want %v", tt.w, got, tt.want)
		}
	}
}

func TestCurrentResolvesOnceAndResets(t *testing.T) {
	enabled := func() bool {
		t.Helper()
		r, err := Current()
		if err != nil {
			t.Fatal(err)
		}
		return r.Enabled(Wave0_1)
	}
	t.Setenv(EnvDisableFrom, "0.1")
	Reset()
	t.Cleanup(Reset)
	if enabled() {
		t.Fatalf("wave 0.1 enabled with %s=0.1, want disabled", EnvDisableFrom)
	}
	t.Setenv(EnvDisableFrom, "")
	if enabled() {
		t.Fatalf("wave 0.1 enabled again without Reset; the resolution must be cached")
	}
	Reset()
	if !enabled() {
		t.Fatalf("wave 0.1 disabled after Reset with %s unset, want enabled", EnvDisableFrom)
	}
	t.Setenv(EnvDisableFrom, "junk")
	Reset()
	for range 2 {
		if _, err := Current(); err == nil {
			t.Fatalf("Current with %s=junk: no error, want one on every call", EnvDisableFrom)
		}
	}
}

func TestFromEnv(t *testing.T) {
	r, err := FromEnv(func(k string) (string, bool) { return "0.1", k == EnvDisableFrom })
	if err != nil || r.Enabled(Wave0_1) {
		t.Fatalf("FromEnv(0.1) = %v, %v; want wave 0.1 disabled", r.DisableFrom, err)
	}
	if _, err := FromEnv(func(k string) (string, bool) { return "x", k == EnvDisableFrom }); err == nil {
		t.Fatal("FromEnv(x) succeeded, want an error")
	}
}

func TestVersionString(t *testing.T) {
	for in, want := range map[string]string{"0.1": "0.1", "18.9.0": "18.9.0", "1.2.3.4": "1.2.3.4"} {
		v, err := ParseVersion(in)
		if err != nil {
			t.Fatalf("ParseVersion(%q): %v", in, err)
		}
		if v.String() != want {
			t.Errorf("ParseVersion(%q).String() = %q, want %q", in, v.String(), want)
		}
	}
}

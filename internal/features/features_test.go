package features

import "testing"

func TestResolve(t *testing.T) {
	waves := []Version{Wave(18, 4), Wave(18, 9), Wave(18, 11)}
	tests := []struct {
		in    string
		want  Version
		state State
	}{
		{"", EnableAll, Unset},
		{"   ", EnableAll, Unset},
		{"garbage", EnableAll, InvalidFormat},
		{"16x8", EnableAll, InvalidFormat},
		{"17_0", EnableAll, InvalidFormat},
		{"1", EnableAll, InvalidFormat},
		{"1.2.3.4.5", EnableAll, InvalidFormat},
		{"18.-1", EnableAll, InvalidFormat},
		{"18.9", Wave(18, 9), Valid},
		{"999.999", EnableAll, Valid},
		{"18.5", Wave(18, 9), Valid},    // between waves: rounds up
		{"18.9.0", Wave(18, 11), Valid}, // 18.9.0 > 18.9 (System.Version)
		{"17.0", Wave(18, 4), OutOfRotation},
		{"100.10", Wave(18, 11), OutOfRotation},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r := Resolve(tt.in, waves)
			if r.DisableFrom != tt.want || r.State != tt.state {
				t.Fatalf("Resolve(%q) = %v %v, want %v %v", tt.in, r.DisableFrom, r.State, tt.want, tt.state)
			}
			if (r.Warning != "") != (tt.state == InvalidFormat || tt.state == OutOfRotation) {
				t.Errorf("Resolve(%q) warning %q for state %v", tt.in, r.Warning, r.State)
			}
		})
	}
}

func TestEnabled(t *testing.T) {
	waves := []Version{Wave(18, 4), Wave(18, 9), Wave(18, 11)}
	r := Resolve("18.9", waves)
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
	t.Setenv(EnvDisableFrom, "0.1")
	Reset()
	t.Cleanup(Reset)
	if Enabled(Wave0_1) {
		t.Fatalf("Enabled(Wave0_1) = true with %s=0.1, want false", EnvDisableFrom)
	}
	t.Setenv(EnvDisableFrom, "")
	if Enabled(Wave0_1) {
		t.Fatalf("Enabled(Wave0_1) changed without Reset; resolution must be cached")
	}
	Reset()
	if !Enabled(Wave0_1) {
		t.Fatalf("Enabled(Wave0_1) = false after Reset with %s unset, want true", EnvDisableFrom)
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

package runtime

import (
	"errors"
	"testing"

	"github.com/amdahl-rt/amdahl/internal/features"
)

// checkValid checks that every value s holds is one its setting accepts:
// setting each setting to its own printed value succeeds and changes
// nothing.
func checkValid(t *testing.T, s Settings) {
	t.Helper()
	for _, name := range SettingNames() {
		v, _ := s.Get(name)
		if v == "" && name == "scenario.seed" && !s.SeedSet {
			continue
		}
		again := s
		if err := again.Set(name, v, "--set"); err != nil {
			t.Fatalf("setting %s holds %q, which Set refuses: %v", name, v, err)
		}
		if again != s {
			t.Fatalf("setting %s to its own value %q changed the settings: %+v, want %+v", name, v, again, s)
		}
	}
}

// FuzzSettings sets an arbitrary name to an arbitrary value, by Set and by
// ResolveSettings (from --set, from the environment, with an arbitrary
// feature-wave variable): each must return an error naming the setting and
// change nothing, or settings every one of whose values is valid.
func FuzzSettings(f *testing.F) {
	// More seeds live in testdata/fuzz/FuzzSettings.
	for _, v := range validSettings {
		f.Add(v.name, v.value, v.value, "")
	}
	f.Add("ipc.buffer", "1.5MiB", "0", "0.1")
	f.Add("runtime.nodes", "0", "257", "9.9")
	f.Add("nope", "1", "", "")
	f.Fuzz(func(t *testing.T, name, value, env, wave string) {
		def, err := DefaultSettings()
		if err != nil {
			t.Fatal(err)
		}
		s := def
		if err := s.Set(name, value, "--set"); err != nil {
			var se *SettingError
			if !errors.As(err, &se) || se.Name != name {
				t.Fatalf("Set(%q, %q) = %v, want a *SettingError naming %q", name, value, err, name)
			}
			if s != def {
				t.Fatalf("Set(%q, %q) failed and changed the settings", name, value)
			}
		} else {
			checkValid(t, s)
		}
		lookup := func(k string) (string, bool) {
			switch k {
			case EnvName(name):
				return env, true
			case features.EnvDisableFrom:
				return wave, wave != ""
			}
			return "", false
		}
		r, err := ResolveSettings([]string{name + "=" + value}, lookup)
		if err != nil {
			if r != (Settings{}) {
				t.Fatalf("ResolveSettings failed (%v) and returned settings %+v", err, r)
			}
			return
		}
		checkValid(t, r)
	})
}

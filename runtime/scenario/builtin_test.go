package scenario

import (
	"reflect"
	"slices"
	"testing"
)

func TestBuiltins(t *testing.T) {
	all := Builtins()
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
	}
	if want := []string{"taskhost", "fanout", "mixed", "orchestrated"}; !slices.Equal(names, want) {
		t.Fatalf("names: got %v, want %v", names, want)
	}
	task := DefaultTaskSpec()
	fanout := FanoutSpec{Shapes: []FanoutShape{
		{Name: "64x128KiB", Weight: 2, Actions: 64, ActionBytes: 128 << 10},
		{Name: "32x2MiB", Weight: 1, Actions: 32, ActionBytes: 2 << 20},
		{Name: "100x1KiB", Weight: 2, Actions: 100, ActionBytes: 1 << 10},
		{Name: "oversized-first", Weight: 1, Actions: 8, ActionBytes: 64 << 10, FirstActionBytes: 4_500_000},
	}}
	want := map[string]*Scenario{
		"taskhost": {Name: "taskhost", Seed: 1, Count: 2000, Workloads: []Workload{
			{Kind: KindTask, Weight: 1, Task: &task},
		}},
		"fanout": {Name: "fanout", Seed: 1, Count: 48, Workloads: []Workload{
			{Kind: KindFanout, Weight: 1, Fanout: &fanout},
		}},
		"mixed": {Name: "mixed", Seed: 1, Count: 1000, Workloads: []Workload{
			{Kind: KindTask, Weight: 0.95, Task: &task},
			{Kind: KindFanout, Weight: 0.05, Fanout: &fanout},
		}},
		"orchestrated": {Name: "orchestrated", Seed: 1, Count: 1000, Workloads: []Workload{
			{Kind: KindTask, Weight: 1, Orchestration: true, Task: &task},
		}},
	}
	for _, s := range all {
		t.Run(s.Name, func(t *testing.T) {
			if err := s.Validate(); err != nil {
				t.Fatalf("Validate: got %v, want nil", err)
			}
			if s.Description == "" {
				t.Errorf("Description: got empty, want a description")
			}
			got := *s
			got.Description = ""
			if !reflect.DeepEqual(&got, want[s.Name]) {
				t.Errorf("got %+v, want %+v", &got, want[s.Name])
			}
			byName, err := Builtin(s.Name)
			if err != nil {
				t.Fatalf("Builtin(%q): %v", s.Name, err)
			}
			if !reflect.DeepEqual(byName, s) {
				t.Errorf("Builtin(%q): got %+v, want %+v", s.Name, byName, s)
			}
		})
	}
	if first := all[1].Workloads[0].Fanout.Shapes[3].FirstActionBytes; first <= 4_089_446 {
		t.Errorf("oversized-first: got first action %d bytes, want more than the 4,089,446-byte chunk limit", first)
	}

	// Each call returns fresh copies.
	all[0].Count = 1
	all[0].Workloads[0].Task.Parameters = 99
	again, err := Builtin("taskhost")
	if err != nil {
		t.Fatal(err)
	}
	if again.Count != 2000 || again.Workloads[0].Task.Parameters != 8 {
		t.Errorf("after modifying a returned copy: got count %d, parameters %d, want 2000, 8",
			again.Count, again.Workloads[0].Task.Parameters)
	}
}

func TestBuiltinUnknown(t *testing.T) {
	_, err := Builtin("nope")
	want := `unknown scenario "nope" (valid: taskhost, fanout, mixed, orchestrated)`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
}

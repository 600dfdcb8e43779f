package scenario

import (
	"math"
	"reflect"
	"testing"
)

func TestParseKind(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Kind
		wantErr string
	}{
		{"taskhost", KindTask, ""},
		{"fanout", KindFanout, ""},
		{"task", 0, `invalid kind "task" (valid: taskhost, fanout)`},
		{"", 0, `invalid kind "" (valid: taskhost, fanout)`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseKind(tc.in)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("ParseKind(%q): got error %v, want %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseKind(%q): got %v, %v, want %v", tc.in, got, err, tc.want)
			}
			if s := got.String(); s != tc.in {
				t.Errorf("String: got %q, want %q", s, tc.in)
			}
		})
	}
	if got, want := Kind(9).String(), "kind(9)"; got != want {
		t.Errorf("Kind(9).String(): got %q, want %q", got, want)
	}
}

func TestErrorString(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{File: "a.yaml", Line: 12, Column: 5, Field: "count", Msg: "bad"}, "a.yaml:12:5: count: bad"},
		{Error{File: "a.yaml", Line: 12, Msg: "bad"}, "a.yaml:12: bad"},
		{Error{File: "a.yaml", Field: "count", Msg: "bad"}, "a.yaml: count: bad"},
		{Error{Field: "count", Msg: "bad"}, "count: bad"},
		{Error{Line: 3, Column: 1, Msg: "bad"}, "3:1: bad"},
		{Error{Msg: "bad"}, "bad"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Scenario
		want string // "" for valid
	}{
		{"zero values are defaults", Scenario{Name: "x", Count: 1, Workloads: []Workload{
			{Kind: KindTask},
			{Kind: KindTask, Task: &TaskSpec{}},
			{Kind: KindFanout, Fanout: &FanoutSpec{Shapes: []FanoutShape{{Actions: 1, ActionBytes: 1}}}},
		}}, ""},
		{"no name", Scenario{Count: 1, Workloads: []Workload{{Kind: KindTask}}}, "name: required"},
		{"no count", Scenario{Name: "x", Workloads: []Workload{{Kind: KindTask}}}, "count: 0 is out of range (valid: 1..10000000)"},
		{"no workloads", Scenario{Name: "x", Count: 1}, "workloads: at least one workload is required"},
		{"no kind", Scenario{Name: "x", Count: 1, Workloads: []Workload{{}}}, "workloads[0].kind: required (valid: taskhost, fanout)"},
		{"bad kind", Scenario{Name: "x", Count: 1, Workloads: []Workload{{Kind: 7}}}, "workloads[0].kind: invalid kind 7 (valid: taskhost, fanout)"},
		{"negative weight", Scenario{Name: "x", Count: 1, Workloads: []Workload{{Kind: KindTask, Weight: -1}}}, "workloads[0].weight: -1 is out of range (valid: a finite number > 0)"},
		{"both specs", Scenario{Name: "x", Count: 1, Workloads: []Workload{{Kind: KindTask}, {Kind: KindTask, Fanout: &FanoutSpec{}}}}, "workloads[1].fanout: not allowed for kind taskhost (use task)"},
		{"weights overflow", Scenario{Name: "x", Count: 1, Workloads: []Workload{{Kind: KindTask, Weight: math.MaxFloat64}, {Kind: KindTask, Weight: math.MaxFloat64}}}, "workloads: the weights add up to more than 1.7976931348623157e+308"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.s.clone()
			err := tc.s.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v, want nil", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if !reflect.DeepEqual(before, &tc.s) {
				t.Errorf("Validate modified the scenario: got %+v, want %+v", &tc.s, before)
			}
		})
	}
}

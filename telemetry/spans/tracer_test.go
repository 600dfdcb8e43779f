package spans

import (
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// TestPhaseLead: the attributes an exported phase span begins with are
// its own component's, phase's and direction's, made once per phase,
// whether the component was the first seen with that phase and direction
// (the array) or not (the map); a phase no Component makes is not kept.
func TestPhaseLead(t *testing.T) {
	var e export
	str := func(a *SharedAttributes) string { return fmt.Sprint(a.KeyValues()) }
	for range 2 {
		for _, c := range []string{"ipc", "taskhost", "chunking"} {
			for _, ph := range telemetry.Phases() {
				for d := range telemetry.Direction(telemetry.NumDirections) {
					a := e.phaseLead(c, ph, d)
					want := fmt.Sprint([]attribute.KeyValue{telemetry.AttrComponent.String(c), telemetry.AttrPhase.String(ph.String()), telemetry.AttrDirection.String(d.String())})
					if d == telemetry.None {
						want = fmt.Sprint([]attribute.KeyValue{telemetry.AttrComponent.String(c), telemetry.AttrPhase.String(ph.String())})
					}
					if got := str(a); got != want {
						t.Fatalf("phaseLead(%s, %v, %v) = %s, want %s", c, ph, d, got, want)
					}
					if again := e.phaseLead(c, ph, d); again != a {
						t.Fatalf("phaseLead(%s, %v, %v) made twice", c, ph, d)
					}
				}
			}
		}
	}
	if a := e.phaseLead("ipc", 0, telemetry.None); a != nil {
		t.Errorf("not a phase: %s, want none", str(a))
	}
	bad := telemetry.Phase(99)
	if a, b := e.phaseLead("ipc", bad, telemetry.None), e.phaseLead("ipc", bad, telemetry.None); a == b || a.Len() != 2 {
		t.Errorf("an invalid phase: %s (kept: %v)", str(a), a == b)
	}
}

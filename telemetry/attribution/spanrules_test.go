package attribution

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// TestSetString: SetString(k, v) makes the Span SetAttribute(attribute.String(k, v)) makes.
func TestSetString(t *testing.T) {
	keys := []attribute.Key{telemetry.AttrPhase, telemetry.AttrDirection, telemetry.AttrComponent, telemetry.AttrOutcome,
		telemetry.AttrRemote, telemetry.AttrTransport, "other.key"}
	vals := []string{"send", "reply", "ipc", "ok", "failed", "", "true", "bogus"}
	for _, k := range keys {
		for _, v := range vals {
			var got, want spans.Span
			got.SetString(string(k), v)
			want.SetAttribute(attribute.String(string(k), v))
			if got != want {
				t.Errorf("SetString(%q, %q) = %+v, SetAttribute gives %+v", k, v, got, want)
			}
		}
	}
}

// TestPhaseNamed: phaseNamed agrees with telemetry.ParsePhase.
func TestPhaseNamed(t *testing.T) {
	for _, s := range []string{"queue", "dispatch", "serialize", "send", "receive", "deserialize", "execute", "work", "", "Send"} {
		p, ok := phaseNamed(s)
		want, err := telemetry.ParsePhase(s)
		if ok != (err == nil) || p != want {
			t.Errorf("phaseNamed(%q) = %v, %v; ParsePhase gives %v, %v", s, p, ok, want, err)
		}
	}
}

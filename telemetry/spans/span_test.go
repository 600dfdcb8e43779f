package spans

import (
	"reflect"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// TestReadsAttribute: ReadsAttribute names exactly the keys SetAttribute
// applies: a valid value of each changes a span, and no other key's does.
func TestReadsAttribute(t *testing.T) {
	for _, kv := range []attribute.KeyValue{
		telemetry.AttrRemote.Bool(true), telemetry.AttrPhase.String("send"), telemetry.AttrDirection.String("request"),
		telemetry.AttrComponent.String("ipc"), telemetry.AttrOutcome.String("failed"),
		telemetry.AttrBytes.Int(7), telemetry.AttrTransport.String("ipc"), telemetry.AttrWorkID.String("w1"), attribute.String("other", "x"),
	} {
		var sp Span
		sp.SetAttribute(kv)
		if applied := !reflect.DeepEqual(sp, Span{}); applied != ReadsAttribute(kv.Key) {
			t.Errorf("%s: SetAttribute applied it %v, ReadsAttribute says %v", kv.Key, applied, ReadsAttribute(kv.Key))
		}
	}
}

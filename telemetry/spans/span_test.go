package spans

import (
	"reflect"
	"testing"
	"unsafe"

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

// TestSpanSize: a span is 112 bytes on 64-bit machines: a reader holds
// one per span of its input (a million spans of amdahl's own traces:
// scripts/report1m), so a field that pads it is a cost of its own.
func TestSpanSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are for 64-bit machines")
	}
	if got := unsafe.Sizeof(Span{}); got != 112 {
		t.Errorf("Span is %d bytes, want 112 (its one-byte fields in one word after Process)", got)
	}
}

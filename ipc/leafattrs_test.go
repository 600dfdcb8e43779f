package ipc

import (
	"context"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/amdahl-rt/amdahl/internal/telemetrytest"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// TestLeafAttributesOnlyWhenRead: a Conn gives its leaves (serialize,
// send, receive, deserialize) their attributes only when the tracer reads
// them (PhaseAttributes); otherwise it builds none, which would allocate
// on every packet.
func TestLeafAttributesOnlyWhenRead(t *testing.T) {
	for _, exported := range []bool{false, true} {
		at := &telemetrytest.Leaves{Exported: exported}
		comp, err := telemetry.NewComponent("ipc", telemetry.ComponentConfig{TracerProvider: at, MeterProvider: metricnoop.NewMeterProvider()})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		parent, child := inProcessPair(t, []Option{WithTelemetry(comp)}, nil)
		if err := parent.Send(ctx, taskConfig(1, nil)); err != nil {
			t.Fatal(err)
		}
		if _, err := child.Recv(ctx); err != nil {
			t.Fatal(err)
		}
		if err := child.Send(ctx, &ipcpb.TaskResult{Id: 1, Status: ipcpb.Status_STATUS_SUCCESS}); err != nil {
			t.Fatal(err)
		}
		if _, err := parent.Recv(ctx); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"ipc.serialize", "ipc.send", "ipc.receive", "ipc.deserialize"} {
			lf, ok := at.Get(name)
			if !ok {
				t.Errorf("exported=%v: no %s leaf recorded (have %d)", exported, name, at.Len())
				continue
			}
			attrs := lf.Attrs
			hasBytes := false
			for _, kv := range attrs {
				hasBytes = hasBytes || kv.Key == telemetry.AttrBytes
			}
			if exported != hasBytes || !exported && len(attrs) > 0 {
				t.Errorf("exported=%v: %s recorded with %v, want amdahl.bytes only when exported", exported, name, attrs)
			}
		}
	}
}

// leaveCodec is awaitCodec whose Received leaves every result's receive
// and deserialize phases to the receiver.
type leaveCodec struct{ awaitCodec }

func (c *leaveCodec) Received(in *Incoming) (context.Context, bool) {
	c.awaitCodec.Received(in)
	_, isResult := in.Msg.(*ipcpb.TaskResult)
	return nil, isResult
}

// TestPhasePolicy: a Conn traces the packet types its codec's PhasePolicy
// names (without one, every packet), and records no receive or
// deserialize span for a packet the policy leaves to the receiver, which
// it marks PhasesLeft.
func TestPhasePolicy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		codec    func() Codec
		logSpans int  // a log message's phase spans, both ends
		left     bool // a result's receive phases are left
	}{
		{"none", nil, 4, false},
		{"await", newAwaitCodec, 0, false},
		{"leave", func() Codec { return &leaveCodec{awaitCodec{awaited: map[uint64]bool{}}} }, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ptel, ctel := newTel(t), newTel(t)
			parent, child := inProcessPair(t, append(ptel.opts(), WithCodec(tc.codec)), append(ctel.opts(), WithCodec(tc.codec)))
			if err := child.Send(ctx, &ipcpb.LogMessage{Text: "hello"}); err != nil {
				t.Fatal(err)
			}
			if _, err := parent.Recv(ctx); err != nil {
				t.Fatal(err)
			}
			if n := len(ptel.Spans.Ended()) + len(ctel.Spans.Ended()); n != tc.logSpans {
				t.Fatalf("a log message got %d phase spans, want %d", n, tc.logSpans)
			}
			if err := parent.Send(ctx, taskConfig(1, nil)); err != nil {
				t.Fatal(err)
			}
			if _, err := child.Recv(ctx); err != nil {
				t.Fatal(err)
			}
			ptel.Spans.Reset()
			if err := child.Send(ctx, &ipcpb.TaskResult{Id: 1}); err != nil {
				t.Fatal(err)
			}
			in, err := parent.Recv(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if in.PhasesLeft != tc.left {
				t.Errorf("PhasesLeft = %v, want %v", in.PhasesLeft, tc.left)
			}
			want := 2 // receive, deserialize
			if tc.left {
				want = 0
			}
			if n := len(ptel.Spans.Ended()); n != want {
				t.Errorf("the result got %d receive-side spans on the parent, want %d", n, want)
			}
		})
	}
}

package runtime

import (
	"context"
	"testing"

	"github.com/amdahl-rt/amdahl/ipc/taskproto"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// TestTracerSpansLeaveReplyPhases: a span of the runtime's tracer marked
// with spans.LeaveReplyPhases (a task's runtime.host span:
// startHostSpan) is a taskproto.ReplyPhaseRecorder that records them, so
// that taskproto's codec leaves the result's receive and deserialize to
// the worker (replyPhases); an unmarked one records none. spans cannot
// import taskproto, so nothing but this test ties the two.
func TestTracerSpansLeaveReplyPhases(t *testing.T) {
	tr := spans.NewTracerProvider(spans.TracerConfig{}).Tracer("test")
	for _, marked := range []bool{true, false} {
		_, s := tr.Start(context.Background(), SpanHost)
		if marked && !spans.LeaveReplyPhases(s) {
			t.Fatalf("LeaveReplyPhases(%T) = false, want true for the tracer's span", s)
		}
		r, ok := s.(taskproto.ReplyPhaseRecorder)
		if !ok {
			t.Fatalf("%T is not a taskproto.ReplyPhaseRecorder", s)
		}
		if got := r.RecordsReplyPhases(); got != marked {
			t.Errorf("marked %v: RecordsReplyPhases() = %v, want %v", marked, got, marked)
		}
		s.End()
	}
}

package ipc

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// goroutineLabels returns the pprof labels of the goroutines whose stack
// holds fn, as the goroutine profile prints them ("" for none).
func goroutineLabels(t *testing.T, fn string) []string {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, block := range strings.Split(buf.String(), "\n\n") {
		if !strings.Contains(block, fn) {
			continue
		}
		l := ""
		for _, line := range strings.Split(block, "\n") {
			if v, ok := strings.CutPrefix(line, "# labels: "); ok {
				l = v
			}
		}
		out = append(out, l)
	}
	return out
}

// TestLoopLabels: with a Component that sets labels, a Conn's reader
// goroutine runs under receive (the direction of what it reads) and its
// writer under send (the direction of what it writes), between packets
// too; without labels, neither has any.
func TestLoopLabels(t *testing.T) {
	for _, labels := range []bool{true, false} {
		comp, err := telemetry.NewComponent("ipc", telemetry.ComponentConfig{TracerProvider: tracenoop.NewTracerProvider(),
			MeterProvider: metricnoop.NewMeterProvider(), PhaseLabels: labels})
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
		// The parent's loops are labelled (its Conn has the component),
		// the child's not (the goroutine profile merges goroutines of
		// the same stack and labels into one block).
		for fn, want := range map[string]string{
			"ipc.(*Conn).readLoop":  `{"component":"ipc", "direction":"reply", "phase":"receive"}`,
			"ipc.(*Conn).writeLoop": `{"component":"ipc", "direction":"request", "phase":"send"}`,
		} {
			// A loop of a Conn closed before (the other case's, another
			// test's) may still be in the profile for a moment after
			// Close: its goroutine has called wg.Done but not returned.
			var got []string
			found, other := false, false
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				got, found, other = goroutineLabels(t, fn), false, false
				for _, l := range got {
					found = found || l == want
					other = other || l != want && l != ""
				}
				if found == labels && !other || time.Now().After(deadline) {
					break
				}
			}
			if found != labels || other {
				t.Errorf("labels %v: %s goroutines labelled %q, want %s on the parent's only", labels, fn, got, want)
			}
		}
		parent.Close()
		child.Close()
	}
}

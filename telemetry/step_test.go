package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// goroutineLabels returns the pprof labels of the calling goroutine as the
// goroutine profile prints them ("" for none): the block of the profile
// whose stack holds fn.
func goroutineLabels(t *testing.T, fn string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(buf.String(), "\n\n") {
		if !strings.Contains(block, fn) {
			continue
		}
		for _, line := range strings.Split(block, "\n") {
			if l, ok := strings.CutPrefix(line, "# labels: "); ok {
				return l
			}
		}
		return ""
	}
	t.Fatalf("no goroutine running %s in the goroutine profile", fn)
	return ""
}

func TestStepLabels(t *testing.T) {
	const fn = "telemetry.TestStepLabels"
	mk := func(labels bool) *Component {
		c, err := NewComponent("chunking", ComponentConfig{TracerProvider: tracenoop.NewTracerProvider(),
			MeterProvider: metricnoop.NewMeterProvider(), PhaseLabels: labels})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := mk(true)
	st := c.Steps(Serialize, "size", "pack")
	check := func(when, want string) {
		t.Helper()
		if got := goroutineLabels(t, fn); got != want {
			t.Errorf("%s: labels %s, want %s", when, got, want)
		}
	}

	_, ph := c.Start(context.Background(), Serialize, Request)
	check("phase", `{"component":"chunking", "direction":"request", "phase":"serialize"}`)
	ph.Step(st, 0)
	check("step 0", `{"component":"chunking", "direction":"request", "phase":"serialize", "step":"size"}`)
	ph.Step(st, 1)
	check("step 1", `{"component":"chunking", "direction":"request", "phase":"serialize", "step":"pack"}`)
	if a := testing.AllocsPerRun(100, func() { ph.Step(st, 0) }); a != 0 {
		t.Errorf("Step allocates %v times without parent labels, want 0", a)
	}
	ph.Step(st, -1)
	check("step -1", `{"component":"chunking", "direction":"request", "phase":"serialize"}`)
	ph.Step(c.Steps(Send, "size"), 0)
	check("steps of another phase", `{"component":"chunking", "direction":"request", "phase":"serialize"}`)
	ph.End()
	check("after End", "")

	// Labels of the parent context are kept, and restored by End.
	parent := pprof.WithLabels(context.Background(), pprof.Labels("span_id", "abc"))
	pprof.SetGoroutineLabels(parent)
	_, ph = c.Start(parent, Serialize, Request)
	ph.Step(st, 0)
	check("step under parent labels", `{"component":"chunking", "direction":"request", "phase":"serialize", "span_id":"abc", "step":"size"}`)
	ph.Step(st, -1)
	check("step -1 under parent labels", `{"component":"chunking", "direction":"request", "phase":"serialize", "span_id":"abc"}`)
	ph.End()
	check("after End under parent labels", `{"span_id":"abc"}`)
	pprof.SetGoroutineLabels(context.Background())

	// Labels off, or a disabled component: no step labels, nothing set.
	for _, off := range []*Component{mk(false), nil} {
		if s := off.Steps(Serialize, "size"); s != nil {
			t.Errorf("Steps of a component without labels = %v, want nil", s)
		}
		_, ph := off.Start(context.Background(), Serialize, Request)
		ph.Step(st, 0) // st of another component: still nothing, the phase has no labels
		check("labels off", "")
		ph.End()
	}
}

// TestStepKeepsSpanLabels: a step of a phase that is the first span of its
// trace in the process keeps the span_id label its tracer set, beside phase
// and step (the labels are on the span's context, not on the parent's).
func TestStepKeepsSpanLabels(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	c, err := NewComponent("chunking", ComponentConfig{TracerProvider: labellingProvider{tp}, PhaseLabels: true})
	if err != nil {
		t.Fatal(err)
	}
	st := c.Steps(Serialize, "size")
	_, ph := c.Start(context.Background(), Serialize, Request)
	ph.Step(st, 0)
	got := goroutineLabels(t, "TestStepKeepsSpanLabels")
	ph.End()
	want := ph.Span().SpanContext().SpanID().String()
	for _, l := range []string{`"span_id":"` + want + `"`, `"step":"size"`, `"phase":"serialize"`} {
		if !strings.Contains(got, l) {
			t.Errorf("goroutine labels %s, want %s among them", got, l)
		}
	}
}

func TestLabelContext(t *testing.T) {
	c, err := NewComponent("ipc", ComponentConfig{TracerProvider: tracenoop.NewTracerProvider(),
		MeterProvider: metricnoop.NewMeterProvider(), PhaseLabels: true})
	if err != nil {
		t.Fatal(err)
	}
	labels := func(ctx context.Context) map[string]string {
		m := map[string]string{}
		pprof.ForLabels(ctx, func(k, v string) bool { m[k] = v; return true })
		return m
	}
	for _, tc := range []struct {
		p    Phase
		d    Direction
		want string
	}{{Receive, Reply, "map[component:ipc direction:reply phase:receive]"}, {Execute, None, "map[component:ipc phase:execute]"}} {
		ctx := c.LabelContext(tc.p, tc.d)
		if got := fmt.Sprint(labels(ctx)); got != tc.want {
			t.Errorf("LabelContext(%v, %v) labels %s, want %s", tc.p, tc.d, got, tc.want)
		}
		if c.WithPhaseLabels(context.Background(), tc.p, tc.d) != ctx {
			t.Errorf("WithPhaseLabels(%v, %v) of a context without labels is not LabelContext's", tc.p, tc.d)
		}
	}
	parent := pprof.WithLabels(context.Background(), pprof.Labels("span_id", "abc"))
	if got, want := fmt.Sprint(labels(c.WithPhaseLabels(parent, Send, Request))), "map[component:ipc direction:request phase:send span_id:abc]"; got != want {
		t.Errorf("WithPhaseLabels under span_id: labels %s, want %s", got, want)
	}
	var off *Component
	if off.LabelContext(Send, Request) != nil || off.WithPhaseLabels(parent, Send, Request) != nil {
		t.Error("a disabled component's LabelContext or WithPhaseLabels is not nil")
	}
}

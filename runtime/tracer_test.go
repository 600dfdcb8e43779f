package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
)

// keptSpans returns the spans the collector holds for trace id (a unit in
// flight).
func keptSpans(c *collector, id trace.TraceID) []attribution.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.traces[id])
}

// TestAccountingTracerSpans: the accountingTracer's spans reach the
// collector as the attribution.Spans the SDK's would have made: ids and
// parents, names, component, phase, direction, remote, times, outcome;
// once each; none from an unsampled parent; and they propagate a sampled
// W3C context.
func TestAccountingTracerSpans(t *testing.T) {
	var works []attribution.Work
	var mu sync.Mutex
	col := newCollector(func(w attribution.Work) {
		mu.Lock()
		works = append(works, attribution.Work{Root: w.Root, Stats: slices.Clone(w.Stats), Nodes: slices.Clone(w.Nodes)})
		mu.Unlock()
	}, nil)
	defer col.close()
	tp := newAccountingProvider(col)
	comp, err := telemetry.NewComponent("ipc", telemetry.ComponentConfig{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := telemetry.NewComponent("runtime", telemetry.ComponentConfig{TracerProvider: tp})

	ctx, work := rt.StartWork(context.Background(), telemetry.AttrWorkID.String("u1"))
	root := work.Span().SpanContext()
	if !root.IsValid() || !root.IsSampled() || root.IsRemote() {
		t.Fatalf("root span context %+v: want valid, sampled, local", root)
	}
	col.track(root.TraceID())

	// A phase through the PhaseTracer path, a span through the OTel API
	// with its own timestamps, and a phase recorded after the fact.
	pctx, ph := comp.StartPhase(ctx, telemetry.Send, telemetry.Request)
	if sc := trace.SpanContextFromContext(pctx); sc.TraceID() != root.TraceID() || sc.SpanID() == root.SpanID() || !sc.IsSampled() {
		t.Errorf("phase context %+v: want a new sampled span of the root's trace", sc)
	}
	ph.End()
	t0 := time.Unix(1000, 0)
	_, host := rt.Tracer().Start(ctx, SpanHost, trace.WithTimestamp(t0), trace.WithAttributes(AttrHostID.Int(3)))
	host.SetName("runtime.host.renamed")
	hctx := trace.ContextWithSpan(ctx, host)
	comp.RecordSpan(hctx, telemetry.Receive, telemetry.Reply, t0.Add(time.Millisecond), t0.Add(2*time.Millisecond), telemetry.AttrRemote.Bool(true))
	host.End(trace.WithTimestamp(t0.Add(3 * time.Millisecond)))
	host.End() // a second End changes nothing
	if host.IsRecording() {
		t.Error("a span is recording after End")
	}
	host.SetAttributes(telemetry.AttrOutcome.String("failed")) // after End: ignored

	// An unsampled parent makes unsampled, non-recording children that
	// reach nothing.
	unsampled := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: root.TraceID(), SpanID: trace.SpanID{1}, TraceFlags: 0}))
	_, ns := rt.Tracer().Start(unsampled, "not.sampled")
	if ns.IsRecording() || ns.SpanContext().IsSampled() {
		t.Error("a child of an unsampled parent is recording or sampled")
	}
	ns.End()
	comp.RecordSpan(unsampled, telemetry.Deserialize, telemetry.Reply, t0, t0.Add(time.Microsecond))

	got := keptSpans(col, root.TraceID())
	if len(got) != 3 {
		t.Fatalf("collector holds %d spans of the unit before its root ended, want 3: %+v", len(got), got)
	}
	send, rec, hs := got[0], got[1], got[2]
	if send.Name != "ipc.send" || send.Component != "ipc" || send.Phase != telemetry.Send || send.Direction != telemetry.Request ||
		send.ParentID != attribution.SpanID(root.SpanID()) || send.End < send.Start || send.Remote {
		t.Errorf("phase span %+v: want ipc.send/request under the root", send)
	}
	if rec.Name != "ipc.receive" || rec.Phase != telemetry.Receive || rec.Direction != telemetry.Reply || !rec.Remote ||
		rec.ParentID != hs.SpanID || rec.Start != t0.Add(time.Millisecond).UnixNano() || rec.End != t0.Add(2*time.Millisecond).UnixNano() {
		t.Errorf("recorded span %+v: want ipc.receive/reply, remote, under the host span, at its given times", rec)
	}
	if hs.Name != "runtime.host.renamed" || hs.Phase.Valid() || hs.Start != t0.UnixNano() || hs.End != t0.Add(3*time.Millisecond).UnixNano() || hs.Failed {
		t.Errorf("host span %+v: want renamed, not a phase, at its given times, not failed", hs)
	}
	ids := map[attribution.SpanID]bool{attribution.SpanID(root.SpanID()): true}
	for _, s := range got {
		if s.TraceID != attribution.TraceID(root.TraceID()) || ids[s.SpanID] || s.SpanID.IsZero() {
			t.Errorf("span %s: trace %s id %s: want the root's trace and a new, unique id", s.Name, s.TraceID, s.SpanID)
		}
		ids[s.SpanID] = true
	}

	work.End(telemetry.Failed, fmt.Errorf("boom"))
	if err := col.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(works) != 1 {
		t.Fatalf("accounted %d units, want 1", len(works))
	}
	w := works[0]
	if w.Root.Name != telemetry.SpanWork || !w.Root.Failed || w.Root.TraceID != attribution.TraceID(root.TraceID()) {
		t.Errorf("unit root %+v: want a failed amdahl.work of the trace", w.Root)
	}
	if len(w.Nodes) != 4 {
		t.Errorf("unit has %d nodes, want 4 (root, send, host, receive)", len(w.Nodes))
	}

	// A new root makes a new trace.
	_, other := rt.Tracer().Start(ctx, "other", trace.WithNewRoot())
	if other.SpanContext().TraceID() == root.TraceID() {
		t.Error("WithNewRoot kept the parent's trace id")
	}
}

// TestAccountingTracerConcurrent: a span is safe for concurrent use (run
// with -race).
func TestAccountingTracerConcurrent(t *testing.T) {
	col := newCollector(func(attribution.Work) {}, nil)
	defer col.close()
	_, s := newAccountingProvider(col).Tracer("").Start(context.Background(), "s")
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.SetAttributes(telemetry.AttrPhase.String("send"))
			s.SetName(fmt.Sprint(i))
			_ = s.IsRecording()
			s.End()
		}()
	}
	wg.Wait()
}

// TestAccountingMatchesSDK: a run whose spans go through the runtime's
// accountingTracer is attributed like one whose spans go through the
// SDK: the same rows, with the same number of spans each, and every
// unit's critical times adding up to its end-to-end time.
func TestAccountingMatchesSDK(t *testing.T) {
	sc, err := scenario.Builtin("mixed")
	if err != nil {
		t.Fatal(err)
	}
	const units = 60
	rows := map[string]string{}
	for _, path := range []string{"sdk", "accounting"} {
		cfg := testConfig(t, testSettings(t, fmt.Sprintf("scenario.count=%d", units)), nil)
		if path == "accounting" {
			cfg.TracerProvider = nil
		}
		var mu sync.Mutex
		var bad []string
		cfg.OnWork = func(w attribution.Work) {
			var sum time.Duration
			for _, s := range w.Stats {
				sum += s.Critical
			}
			if sum != w.E2E() {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("critical times add up to %v, e2e %v", sum, w.E2E()))
				mu.Unlock()
			}
		}
		sum, err := Run(context.Background(), cfg, sc)
		if err != nil {
			t.Fatal(err)
		}
		// The scenario fails a unit on purpose (an oversized action).
		if sum.Submitted != units || sum.Attribution.Works != units || sum.Attribution.Failed != sum.Failed {
			t.Fatalf("%s: %d units ended, %d attributed (%d failed of %d), want %d each (failures: %v)",
				path, sum.Submitted, sum.Attribution.Works, sum.Attribution.Failed, sum.Failed, units, sum.Examples)
		}
		if len(bad) > 0 {
			t.Errorf("%s: %d units: %s", path, len(bad), bad[0])
		}
		var b strings.Builder
		fmt.Fprintf(&b, "failed %d\n", sum.Attribution.Failed)
		for _, r := range sum.Attribution.Rows {
			fmt.Fprintf(&b, "%s %d\n", r.Name, r.Spans)
		}
		rows[path] = b.String()
	}
	if rows["sdk"] != rows["accounting"] {
		t.Errorf("rows and their span counts differ:\nSDK:\n%s\naccountingTracer:\n%s", rows["sdk"], rows["accounting"])
	}
}

// TestUseTelemetryChoosesTracer: UseTelemetry leaves the tracer to the
// runtime (TracerProvider nil) only when nothing but the attribution
// would read the spans, and the runtime then attributes every unit
// without one SDK span.
func TestUseTelemetryChoosesTracer(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []otelsetup.Option
		own  bool
	}{
		{"nothing exported", nil, true},
		{"recorder", []otelsetup.Option{otelsetup.WithRecorder()}, false},
		{"trace file", []otelsetup.Option{otelsetup.WithTraceFile(t.TempDir() + "/trace.jsonl")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := otelsetup.Setup(ctx, append([]otelsetup.Option{otelsetup.WithLookupEnv(noEnv)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tel.Shutdown(ctx) }()
			cfg := testConfig(t, testSettings(t), nil)
			cfg.UseTelemetry(tel)
			if own := cfg.TracerProvider == nil; own != tc.own {
				t.Fatalf("UseTelemetry: the runtime's own tracer %v, want %v", own, tc.own)
			}
			r := startRuntime(t, cfg)
			submitSmall(t, r, 1, 5)
			if got := r.Summary().Attribution.Works; got != 5 {
				t.Errorf("attributed %d units, want 5", got)
			}
			if rec := tel.Recorder(); rec != nil && len(rec.Spans()) == 0 {
				t.Error("the recorder got no span")
			}
		})
	}
}

// TestHostComponentSpans: a task host makes spans only when something
// exports them; one that only takes profiles keeps its phases (labels,
// timings) without spans.
func TestHostComponentSpans(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opt  otelsetup.Option
		want bool
	}{
		{"profiles only", otelsetup.WithProfileDir(t.TempDir()), false},
		{"spans recorded", otelsetup.WithRecorder(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := otelsetup.Setup(ctx, otelsetup.WithLookupEnv(noEnv), tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tel.Shutdown(ctx) }()
			comp, err := hostComponent(tel)
			if err != nil {
				t.Fatal(err)
			}
			_, ph := comp.StartPhase(ctx, telemetry.Execute, telemetry.None)
			if got := ph.Span().IsRecording(); got != tc.want {
				t.Errorf("the host's execute span recording %v, want %v", got, tc.want)
			}
			ph.End()
		})
	}
	if c, err := hostComponent(nil); c != nil || err != nil {
		t.Errorf("no telemetry: got %v, %v, want a disabled component", c, err)
	}
}

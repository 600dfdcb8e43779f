package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// testCollector returns a collector that attributes each unit as the
// runtime does (account), handing onWork the unit's attribution and
// owner, and onDiag (if not nil) its trace's diagnostics.
func testCollector(onWork func(attribution.Work, any), onDiag func(attribution.Diagnostics)) *spans.Collector {
	b := attribution.Builder{Reuse: true}
	return spans.NewCollector(func(sp []spans.Span, owner any) {
		d := b.EachTree(sp, func(w attribution.Work) { onWork(w, owner) })
		if onDiag != nil {
			onDiag(d)
		}
	})
}

// ownTracer is the runtime's tracer over col (telemetry/spans), sampled
// by sampler (nil: every root), exporting nothing.
func ownTracer(col *spans.Collector, sampler spans.Sampler) *spans.TracerProvider {
	return spans.NewTracerProvider(spans.TracerConfig{Collector: col, Sampler: sampler})
}

// exportingTracer is the runtime's tracer over col that also exports
// every span to exp, with resource res.
func exportingTracer(col *spans.Collector, exp spans.Exporter, res *spans.Resource, sampler spans.Sampler) *spans.TracerProvider {
	return spans.NewTracerProvider(spans.TracerConfig{Collector: col, Export: exp, Resource: res, Sampler: sampler})
}

// keepingCollector returns a collector, closed when the test ends, that
// keeps a copy of every unit it accounts, and a function returning them.
func keepingCollector(t *testing.T) (*spans.Collector, func() []attribution.Work) {
	col, works, _ := spanKeepingCollector(t)
	return col, works
}

// spanKeepingCollector is keepingCollector that also keeps every unit's
// spans, as the collector hands them to the accounting.
func spanKeepingCollector(t *testing.T) (*spans.Collector, func() []attribution.Work, func() [][]spans.Span) {
	var works []attribution.Work
	var units [][]spans.Span
	var mu sync.Mutex
	b := attribution.Builder{Reuse: true}
	col := spans.NewCollector(func(sp []spans.Span, _ any) {
		mu.Lock()
		defer mu.Unlock()
		units = append(units, slices.Clone(sp))
		b.EachTree(sp, func(w attribution.Work) {
			works = append(works, attribution.Work{Root: w.Root, Stats: slices.Clone(w.Stats), Nodes: slices.Clone(w.Nodes)})
		})
	})
	t.Cleanup(col.Close)
	return col, func() []attribution.Work {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(works)
		}, func() [][]spans.Span {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(units)
		}
}

// accountingComponents returns keepingCollector's collector and function,
// and a runtime and an ipc Component on the runtime's tracer over it.
func accountingComponents(t *testing.T) (col *spans.Collector, accounted func() []attribution.Work, rt, ipcComp *telemetry.Component) {
	col, accounted = keepingCollector(t)
	rt, ipcComp = tracerComponents(t, ownTracer(col, nil))
	return col, accounted, rt, ipcComp
}

// tracerComponents returns a runtime and an ipc Component on tp.
func tracerComponents(t *testing.T, tp trace.TracerProvider) (rt, ipcComp *telemetry.Component) {
	var err error
	if rt, err = telemetry.NewComponent("runtime", telemetry.ComponentConfig{TracerProvider: tp}); err != nil {
		t.Fatal(err)
	}
	if ipcComp, err = telemetry.NewComponent("ipc", telemetry.ComponentConfig{TracerProvider: tp}); err != nil {
		t.Fatal(err)
	}
	return rt, ipcComp
}

// TestAccountingTracerSpans: the runtime's tracer's spans reach the
// collector as the attribution.Spans the SDK's would have made: ids and
// parents, names, component, phase, direction, remote, times, outcome;
// once each; none from an unsampled parent; and they propagate a sampled
// W3C context.
func TestAccountingTracerSpans(t *testing.T) {
	col, accounted, units := spanKeepingCollector(t)
	rt, comp := tracerComponents(t, ownTracer(col, nil))

	ctx, work := rt.StartWork(context.Background(), telemetry.AttrWorkID.String("u1"))
	root := work.Span().SpanContext()
	if !root.IsValid() || !root.IsSampled() || root.IsRemote() {
		t.Fatalf("root span context %+v: want valid, sampled, local", root)
	}
	col.Track(work.Span(), nil)

	// A phase through the PhaseTracer path, a span through the OTel API
	// with its own timestamps, and a phase recorded after the fact.
	pctx, ph := comp.Start(ctx, telemetry.Send, telemetry.Request)
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

	work.End(telemetry.Failed, fmt.Errorf("boom"))
	if err := col.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if u := units(); len(u) != 1 || len(u[0]) != 4 {
		t.Fatalf("the collector handed off %d units (%v), want 1 of 4 spans", len(u), u)
	}
	got := units()[0][:3] // the root last
	var send, rec, hs spans.Span
	for _, s := range got {
		switch s.Name {
		case "ipc.send":
			send = s
		case "ipc.receive":
			rec = s
		default:
			hs = s
		}
	}
	if send.Name != "ipc.send" || send.Component != "ipc" || send.Phase != telemetry.Send || send.Direction != telemetry.Request ||
		send.ParentID != spans.SpanID(root.SpanID()) || send.End < send.Start || send.Remote {
		t.Errorf("phase span %+v: want ipc.send/request under the root", send)
	}
	if rec.Name != "ipc.receive" || rec.Phase != telemetry.Receive || rec.Direction != telemetry.Reply || !rec.Remote ||
		rec.ParentID != hs.SpanID || rec.Start != t0.Add(time.Millisecond).UnixNano() || rec.End != t0.Add(2*time.Millisecond).UnixNano() {
		t.Errorf("recorded span %+v: want ipc.receive/reply, remote, under the host span, at its given times", rec)
	}
	if hs.Name != "runtime.host.renamed" || hs.Phase.Valid() || hs.Start != t0.UnixNano() || hs.End != t0.Add(3*time.Millisecond).UnixNano() || hs.Failed {
		t.Errorf("host span %+v: want renamed, not a phase, at its given times, not failed", hs)
	}
	ids := map[spans.SpanID]bool{spans.SpanID(root.SpanID()): true}
	for _, s := range got {
		if s.TraceID != spans.TraceID(root.TraceID()) || ids[s.SpanID] || s.SpanID.IsZero() {
			t.Errorf("span %s: trace %s id %s: want the root's trace and a new, unique id", s.Name, s.TraceID, s.SpanID)
		}
		ids[s.SpanID] = true
	}
	works := accounted()
	if len(works) != 1 {
		t.Fatalf("accounted %d units, want 1", len(works))
	}
	w := works[0]
	if w.Root.Name != telemetry.SpanWork || !w.Root.Failed || w.Root.TraceID != spans.TraceID(root.TraceID()) {
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
	col := testCollector(func(attribution.Work, any) {}, nil)
	defer col.Close()
	_, s := ownTracer(col, nil).Tracer("").Start(context.Background(), "s")
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
// tracer (telemetry/spans) is attributed like one whose spans go through the
// SDK: the same rows, with the same number of spans each, and every
// unit's critical times adding up to its end-to-end time; with metrics
// off too, where the trace context crosses the gRPC calls through
// internal/grpctrace rather than otelgrpc (the sidecar's phases stay in
// their units' traces).
func TestAccountingMatchesSDK(t *testing.T) {
	sc := orchestratedMixed(t)
	const units = 60
	rows := map[string]string{}
	for _, path := range []string{"sdk", "accounting", "accounting, no metrics"} {
		cfg := testConfig(t, testSettings(t, fmt.Sprintf("scenario.count=%d", units)), nil)
		if path != "sdk" {
			cfg.Telemetry.TracerProvider = nil
		}
		if path == "accounting, no metrics" {
			// As amdahl run's default: nothing reads a gRPC call's span
			// or metrics, so internal/grpctrace carries the trace
			// context instead of otelgrpc.
			cfg.Telemetry.MeterProvider = metricnoop.NewMeterProvider()
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
	for _, path := range []string{"accounting", "accounting, no metrics"} {
		if rows["sdk"] != rows[path] {
			t.Errorf("rows and their span counts differ:\nSDK:\n%s\n%s:\n%s", rows["sdk"], path, rows[path])
		}
	}
}

// TestUseTelemetryChoosesTracer: UseTelemetry leaves the tracer to the
// runtime (TracerProvider nil) only when nothing but the attribution and
// the trace file would read the spans, hands the runtime the trace file's
// writer (SpanExport) only in the second case, and the runtime then
// attributes every unit.
func TestUseTelemetryChoosesTracer(t *testing.T) {
	ctx := context.Background()
	file := otelsetup.WithTraceFile(t.TempDir() + "/trace.jsonl")
	for _, tc := range []struct {
		name        string
		opts        []otelsetup.Option
		own, export bool
	}{
		{"nothing exported", nil, true, false},
		{"recorder", []otelsetup.Option{otelsetup.WithRecorder()}, false, false},
		{"trace file", []otelsetup.Option{file}, true, true},
		{"trace file and recorder", []otelsetup.Option{file, otelsetup.WithRecorder()}, false, false},
		{"trace file and a processor", []otelsetup.Option{file, otelsetup.WithSpanProcessor(&endCounter{})}, false, false},
		{"trace file and a sampler", []otelsetup.Option{file, otelsetup.WithSampler(sdktrace.AlwaysSample())}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := otelsetup.Setup(ctx, append([]otelsetup.Option{otelsetup.WithLookupEnv(noEnv)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tel.Shutdown(ctx) }()
			cfg := testConfig(t, testSettings(t), nil)
			cfg.UseTelemetry(tel)
			if own := cfg.Telemetry.TracerProvider == nil; own != tc.own {
				t.Fatalf("UseTelemetry: the runtime's own tracer %v, want %v", own, tc.own)
			}
			if export := cfg.Telemetry.Export != nil; export != tc.export || export != (cfg.Telemetry.Resource != nil) {
				t.Fatalf("UseTelemetry: SpanExport set %v, SpanResource set %v; want both %v", export, cfg.Telemetry.Resource != nil, tc.export)
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
			_, ph := comp.Start(ctx, telemetry.Execute, telemetry.None)
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

// TestTraceFileMatchesSDK: the trace file the runtime's own tracer writes
// (amdahl run --out: the file is the only exporter) says what the SDK's
// spans would have said, span for span: the same spans under the same
// parents, with the same names, kinds, flags, scopes, resource,
// attributes in the same order, events and status. Only ids, times and
// the values that differ from run to run (work ids, host ids and pids,
// delta-coded packet sizes, ports, error texts naming a work id) are left
// out, and how the sidecar's work-item stream ended. The mixed scenario
// covers phase spans, leaves, the task hosts' spans, chunking, otelgrpc's
// client and server spans and a failed unit; orchestrated the task units
// inside orchestrations (a lease, the host's spans, a completion);
// taskhost task units sent straight to a host (which, with a trace file,
// no record keeps), one in five failing in its host (the root's reason,
// exception event and status); task-timeouts task units whose host was
// killed (the host span's error event).
func TestTraceFileMatchesSDK(t *testing.T) {
	t.Run("mixed", func(t *testing.T) { testTraceFileMatchesSDK(t, "mixed", 60, 0) })
	t.Run("orchestrated", func(t *testing.T) { testTraceFileMatchesSDK(t, "orchestrated", 60, 0) })
	t.Run("taskhost", func(t *testing.T) { testTraceFileMatchesSDK(t, "taskhost", 60, 5) })
	t.Run("task-timeouts", func(t *testing.T) {
		// The timeout covers the send: at 2 ms a send slowed by the race
		// detector and a loaded machine sometimes timed out in one run
		// and not the other (a failed ipc.send), in 2 of 2 full race
		// runs and 1 in 8 alone beside two busy loops. At 100 ms only
		// the execute, 1 s (the perturbation's most), outlives it.
		sdk := testTraceFileMatchesSDK(t, "taskhost", 6, 0, "runtime.task_timeout=100ms", "perturb.taskhost.execute=1s")
		killed := 0
		for _, l := range sdk {
			if strings.HasPrefix(l, SpanHost+" under") && strings.Contains(l, "| events exception{") {
				killed++
			}
		}
		if killed != 6 {
			t.Errorf("%d host spans with an exception event, want 6 (one a unit: every host killed)", killed)
		}
	})
}

// testTraceFileMatchesSDK runs units of the built-in scenario name, with
// settings set, through both; with failEvery > 0 every failEvery-th unit
// asks for a task its host does not serve. It returns the span signatures
// of the SDK's file (traceFileSignatures).
func testTraceFileMatchesSDK(t *testing.T, name string, units, failEvery int, set ...string) []string {
	sc, err := scenario.Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sigs := map[bool][]string{}
	for _, own := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "trace.jsonl")
		opts := []otelsetup.Option{otelsetup.WithLookupEnv(noEnv), otelsetup.WithTraceFile(path)}
		if !own {
			opts = append(opts, otelsetup.WithSpanProcessor(&endCounter{})) // the SDK's spans, then
		}
		tel, err := otelsetup.Setup(ctx, opts...)
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(t, testSettings(t, append([]string{fmt.Sprintf("scenario.count=%d", units)}, set...)...), nil)
		cfg.UseTelemetry(tel)
		if own != (cfg.Telemetry.Export != nil) {
			t.Fatalf("own=%v: SpanExport set %v", own, cfg.Telemetry.Export != nil)
		}
		r, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		tasks := runScenarioUnits(t, r, sc, units, failEvery)
		sum, recorded := r.Summary(), r.recordedUnits()
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tel.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if sum.Attribution.Works != units {
			t.Fatalf("own=%v: %d units attributed, want %d", own, sum.Attribution.Works, units)
		}
		// A record drops what the file reads: no unit is kept in one.
		if recorded != 0 {
			t.Errorf("own=%v: %d units kept in records, want none (of %d task units sent straight to a host)", own, recorded, tasks)
		}
		sigs[own] = traceFileSignatures(t, path)
	}
	sdk, mine := sigs[false], sigs[true]
	if name != "mixed" && name != "orchestrated" {
		compareSignatures(t, sdk, mine)
		return sdk
	}
	// The lease's calls get no client span (isLeaseMethod); a unit's
	// completion does.
	for _, l := range sdk {
		if strings.Contains(l, "/StartInstance under") && strings.Contains(l, "| kind 3 ") ||
			strings.Contains(l, "/GetWorkItems under") && strings.Contains(l, "| kind 3 ") {
			t.Errorf("a lease call has a client span: %s", l)
		}
	}
	if !slices.ContainsFunc(sdk, func(l string) bool {
		return strings.Contains(l, "/CompleteOrchestratorTask under") && strings.Contains(l, "| kind 3 ")
	}) {
		t.Error("no completion has a client span")
	}
	compareSignatures(t, sdk, mine)
	return sdk
}

// compareSignatures fails t unless the trace files' span signatures
// (traceFileSignatures) of the SDK and of the own tracer are the same.
func compareSignatures(t *testing.T, sdk, mine []string) {
	t.Helper()
	if slices.Equal(sdk, mine) {
		return
	}
	count := func(l []string) map[string]int {
		m := map[string]int{}
		for _, s := range l {
			m[s]++
		}
		return m
	}
	cs, cm := count(sdk), count(mine)
	var diff []string
	for s, n := range cs {
		if cm[s] != n {
			diff = append(diff, fmt.Sprintf("SDK %d, own tracer %d: %s", n, cm[s], s))
		}
	}
	for s, n := range cm {
		if _, ok := cs[s]; !ok {
			diff = append(diff, fmt.Sprintf("SDK 0, own tracer %d: %s", n, s))
		}
	}
	slices.Sort(diff)
	t.Errorf("the trace files differ (%d spans from the SDK, %d from the own tracer); %d kinds of span differ:\n%s",
		len(sdk), len(mine), len(diff), strings.Join(diff[:min(len(diff), 12)], "\n"))
}

// traceFileSignatures reads an OTLP JSON trace file and returns, sorted,
// one line per span with what TestTraceFileMatchesSDK compares.
func traceFileSignatures(t *testing.T, path string) []string {
	t.Helper()
	type kv struct {
		Key   string         `json:"key"`
		Value map[string]any `json:"value"`
	}
	type span struct {
		TraceID           string `json:"traceId"`
		SpanID            string `json:"spanId"`
		ParentSpanID      string `json:"parentSpanId"`
		Name              string `json:"name"`
		Kind              int    `json:"kind"`
		Flags             int    `json:"flags"`
		Attributes        []kv   `json:"attributes"`
		DroppedAttributes int    `json:"droppedAttributesCount"`
		Events            []struct {
			Name       string `json:"name"`
			Attributes []kv   `json:"attributes"`
		} `json:"events"`
		Links  []any `json:"links"`
		Status struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"status"`
	}
	type line struct {
		ResourceSpans []struct {
			Resource struct {
				Attributes []kv `json:"attributes"`
			} `json:"resource"`
			ScopeSpans []struct {
				Scope struct {
					Name    string `json:"name"`
					Version string `json:"version"`
				} `json:"scope"`
				Spans []span `json:"spans"`
			} `json:"scopeSpans"`
		} `json:"resourceSpans"`
	}
	volatile := map[string]bool{"amdahl.work.id": true, "amdahl.host.id": true, "amdahl.host.pid": true,
		"amdahl.bytes": true, "server.port": true, "exception.message": true}
	attrs := func(l []kv) string {
		var b strings.Builder
		for _, a := range l {
			b.WriteString(a.Key)
			if !volatile[a.Key] {
				fmt.Fprintf(&b, "=%v", a.Value)
			}
			b.WriteByte(' ')
		}
		return b.String()
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type placed struct {
		s          span
		scope, res string
	}
	var all []placed
	names := map[string]string{} // trace id + span id → name
	for _, raw := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatal(err)
		}
		for _, rs := range l.ResourceSpans {
			res := attrs(rs.Resource.Attributes)
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					all = append(all, placed{s, ss.Scope.Name + "@" + ss.Scope.Version, res})
					names[s.TraceID+s.SpanID] = s.Name
				}
			}
		}
	}
	out := make([]string, 0, len(all))
	for _, p := range all {
		s := p.s
		parent := "-"
		if s.ParentSpanID != "" {
			parent = "?" + names[s.TraceID+s.ParentSpanID]
		}
		var ev strings.Builder
		for _, e := range s.Events {
			fmt.Fprintf(&ev, "%s{%s} ", e.Name, attrs(e.Attributes))
		}
		msg := s.Status.Message
		if msg != "" {
			msg = "(message)" // error texts name work ids
		}
		if strings.HasSuffix(s.Name, "/GetWorkItems") {
			// The work-item stream ends at Close, OK or Unavailable as
			// the timing falls: its end is not compared.
			s.Status.Code, msg, s.Events = 0, "", nil
			s.Attributes = slices.DeleteFunc(s.Attributes, func(a kv) bool { return a.Key == "rpc.response.status_code" })
		}
		out = append(out, fmt.Sprintf("%s under %s | scope %s | kind %d flags %d | attrs %s(dropped %d) | events %s| links %d | status %d %s | resource %s",
			s.Name, parent, p.scope, s.Kind, s.Flags, attrs(s.Attributes), s.DroppedAttributes, ev.String(), len(s.Links), s.Status.Code, msg, p.res))
	}
	slices.Sort(out)
	return out
}

// namedError is an error of a named type, not a pointer.
type namedError struct{}

func (namedError) Error() string { return "named" }

// TestExportingSpanMatchesSDK: a span of the exportingProvider reaches its
// span processor as the SDK's would, call for call: attributes (invalid
// ones dropped, keys deduplicated where first set with the last value, at
// most 128), kind, events and RecordError's exception event (at most 128,
// the oldest dropped), links, an event's and a link's attributes (at most
// 128), status (Ok final, Error's description kept), scope, parent and
// its remoteness, and the dropped counts.
func TestExportingSpanMatchesSDK(t *testing.T) {
	ctx := context.Background()
	remote := trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true}))
	link := trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{3}, SpanID: trace.SpanID{4}}),
		Attributes: []attribute.KeyValue{attribute.Int("l", 1)}}
	script := func(tp trace.TracerProvider) {
		tr := tp.Tracer("scope.a", trace.WithInstrumentationVersion("1.2"), trace.WithSchemaURL("https://example.com/s"))
		_, s := tr.Start(remote, "many", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("a", "1"), attribute.KeyValue{}, attribute.Int("b", 2)), trace.WithLinks(link))
		for i := range 130 {
			s.SetAttributes(attribute.Int(fmt.Sprint("k", i), i))
			s.AddEvent(fmt.Sprint("e", i), trace.WithAttributes(attribute.Int("i", i)))
		}
		s.SetAttributes(attribute.String("a", "last"))
		s.RecordError(fmt.Errorf("wrapped: %w", context.Canceled))
		s.RecordError(namedError{}) // exception.type with its package path
		s.RecordError(nil)
		s.SetStatus(codes.Error, "bad")
		s.SetStatus(codes.Unset, "ignored")
		s.AddLink(trace.Link{}) // a link to nothing: dropped
		// Past an event's and a link's 128 attributes.
		wide := make([]attribute.KeyValue, 130)
		for i := range wide {
			wide[i] = attribute.Int(fmt.Sprint("w", i), i)
		}
		s.AddEvent("wide", trace.WithAttributes(wide...))
		s.AddLink(trace.Link{SpanContext: link.SpanContext, Attributes: wide})
		s.End()
		s.SetAttributes(attribute.String("after", "end")) // ignored
		_, ok := tr.Start(ctx, "ok")
		ok.SetStatus(codes.Ok, "")
		ok.SetStatus(codes.Error, "too late")
		ok.End()
		_, plain := tp.Tracer("").Start(ctx, "plain")
		plain.End()

		// A Component's phase spans: their amdahl.component, amdahl.phase
		// and amdahl.direction come first (the exporting tracer shares
		// them, encoded once), then the phase's own attributes.
		comp, err := telemetry.NewComponent("ipc", telemetry.ComponentConfig{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider()})
		if err != nil {
			t.Fatal(err)
		}
		pctx, ph := comp.Start(ctx, telemetry.Serialize, telemetry.Request)
		_, leaf1 := comp.Start(pctx, telemetry.Send, telemetry.Request, telemetry.Leaf())
		leaf1.End(telemetry.WithAttributes(telemetry.AttrBytes.Int(10), attribute.String("x", "y"), attribute.String("x", "z")))
		_, leaf2 := comp.Start(pctx, telemetry.Send, telemetry.None, telemetry.Leaf())
		leaf2.End(telemetry.WithAttributes(attribute.KeyValue{}, attribute.Int("n", 1)))
		_, leaf3 := comp.Start(pctx, telemetry.Deserialize, telemetry.Request, telemetry.Leaf())
		leaf3.End(telemetry.WithAttributes(telemetry.AttrPhase.String("leaf")))
		comp.RecordSpan(pctx, telemetry.Receive, telemetry.Reply, time.Unix(1, 0), time.Unix(2, 0), telemetry.AttrBytes.Int(5))
		// Set again: a shared key takes its new value where it stands.
		ph.Span().SetAttributes(attribute.Int("before", 1), telemetry.AttrPhase.String("again"), attribute.Int("after", 2))
		ph.End()
		// Past 128 with the phase's three: the later ones are dropped.
		_, wph := comp.Start(ctx, telemetry.Deserialize, telemetry.Reply)
		for i := range 130 {
			wph.Span().SetAttributes(attribute.Int(fmt.Sprint("p", i), i))
		}
		wph.End()
		_, dph := comp.Start(ctx, telemetry.Execute, telemetry.None)
		dph.Span().SetAttributes(attribute.Int("p", 1), attribute.Int("p", 2))
		dph.End()
	}
	sdkRec, ownRec := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	res := resource.NewSchemaless(attribute.String("service.name", "t"))
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sdkRec), sdktrace.WithResource(res))
	defer func() { _ = sdk.Shutdown(ctx) }()
	script(sdk)
	c := testCollector(func(attribution.Work, any) {}, nil)
	defer c.Close()
	script(exportingTracer(c, otelsetup.ProcessorExporter(ownRec), otelsetup.ResourceOf(res), nil))

	// A parent of the same set is named (its id is random), any other
	// given by its id.
	describe := func(s sdktrace.ReadOnlySpan, set []sdktrace.ReadOnlySpan) string {
		var b strings.Builder
		parent := s.Parent().SpanID().String()
		for _, p := range set {
			if p.SpanContext().SpanID() == s.Parent().SpanID() {
				parent = p.Name()
			}
		}
		fmt.Fprintf(&b, "%s kind=%v scope=%+v parent=%v/%v remote=%v sampled=%v\n", s.Name(), s.SpanKind(), s.InstrumentationScope(),
			parent, s.Parent().IsValid(), s.Parent().IsRemote(), s.SpanContext().IsSampled())
		fmt.Fprintf(&b, "attrs=%v dropped=%d\n", s.Attributes(), s.DroppedAttributes())
		for _, e := range s.Events() {
			fmt.Fprintf(&b, "event %s %v %d; ", e.Name, e.Attributes, e.DroppedAttributeCount)
		}
		fmt.Fprintf(&b, "dropped=%d\n", s.DroppedEvents())
		for _, l := range s.Links() {
			fmt.Fprintf(&b, "link %v %v %d; ", l.SpanContext.SpanID(), l.Attributes, l.DroppedAttributeCount)
		}
		fmt.Fprintf(&b, "dropped=%d status=%+v resource=%v", s.DroppedLinks(), s.Status(), s.Resource().Attributes())
		return b.String()
	}
	want := sdkRec.Ended()
	for _, own := range []struct {
		name string
		got  []sdktrace.ReadOnlySpan
	}{{"records", ownRec.Ended()}} {
		if len(own.got) != len(want) {
			t.Fatalf("%s: %d spans exported, the SDK %d", own.name, len(own.got), len(want))
		}
		for i := range want {
			if w, g := describe(want[i], want), describe(own.got[i], own.got); w != g {
				t.Errorf("%s: span %d differs from the SDK's:\nSDK: %s\nown: %s", own.name, i, w, g)
			}
		}
	}
}

// TestGRPCSpansChangeNoRow: without the gRPC calls' own spans (the
// runtime does not make them when only the attribution reads the spans)
// every unit of a mixed run has the same rows, critical and naive times
// and span counts as with them. The spans of a real run (through the SDK,
// where otelgrpc makes them) are attributed twice: as recorded, and with
// each gRPC span removed and its children moved to its parent, as the
// no-op tracer's propagation places them.
func TestGRPCSpansChangeNoRow(t *testing.T) {
	sc := orchestratedMixed(t)
	rec := otelsetup.NewRecorder()
	cfg := testConfig(t, testSettings(t, "scenario.count=60"), rec)
	if _, err := Run(context.Background(), cfg, sc); err != nil {
		t.Fatal(err)
	}
	var all []spans.Span
	for _, s := range rec.Spans() {
		all = append(all, otelsetup.SpanOf(s))
	}
	isRPC := func(s spans.Span) bool { return strings.HasPrefix(s.Name, "TaskHubSidecarService/") }
	parent := map[spans.SpanID]spans.SpanID{}
	for _, s := range all {
		if isRPC(s) {
			parent[s.SpanID] = s.ParentID
		}
	}
	var without []spans.Span
	rpcs := 0
	for _, s := range all {
		if isRPC(s) {
			rpcs++
			continue
		}
		for {
			p, ok := parent[s.ParentID]
			if !ok {
				break
			}
			s.ParentID = p
		}
		without = append(without, s)
	}
	byRoot := func(in []spans.Span) map[spans.SpanID]string {
		works, _ := attribution.Trees(in)
		m := map[spans.SpanID]string{}
		for _, w := range works {
			m[w.Root.SpanID] = fmt.Sprint(w.Stats)
		}
		return m
	}
	with, wo := byRoot(all), byRoot(without)
	if rpcs < 60 || len(with) != 60 {
		t.Fatalf("%d gRPC spans, %d units: want a gRPC span per orchestrated unit at least, and 60 units", rpcs, len(with))
	}
	for id, w := range with {
		if wo[id] != w {
			t.Errorf("unit %v: rows with the gRPC spans\n%s\nwithout\n%s", id, w, wo[id])
		}
	}
}

// TestSpanExportConfig: New refuses Config.Telemetry.Export or SpanResource
// beside a TracerProvider (whose spans the export would never see), with
// an error that says so; with no SpanResource the exported spans carry
// resource.Default(), as an SDK provider's would.
func TestSpanExportConfig(t *testing.T) {
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	for _, tc := range []struct {
		name string
		set  func(*Config)
	}{
		{"export", func(c *Config) { c.Telemetry.Export = otelsetup.ProcessorExporter(rec) }},
		{"resource", func(c *Config) { c.Telemetry.Resource = otelsetup.ResourceOf(resource.Empty()) }},
	} {
		cfg := testConfig(t, testSettings(t), nil) // with a TracerProvider
		tc.set(&cfg)
		r, err := New(ctx, cfg)
		if err == nil {
			_ = r.Close(ctx)
			t.Fatalf("%s beside a TracerProvider: New accepted it", tc.name)
		}
		if !strings.Contains(err.Error(), "Telemetry.Export") || !strings.Contains(err.Error(), "TracerProvider") {
			t.Errorf("%s: error %q does not say what is wrong", tc.name, err)
		}
	}
	cfg := testConfig(t, testSettings(t), nil)
	cfg.Telemetry.TracerProvider, cfg.Telemetry.Export = nil, otelsetup.ProcessorExporter(rec)
	r := startRuntime(t, cfg)
	submitSmall(t, r, 1, 2)
	spans := rec.Ended()
	if len(spans) == 0 {
		t.Fatal("no span exported")
	}
	for _, s := range spans {
		if !s.Resource().Equal(resource.Default()) {
			t.Fatalf("span %s: resource %v, want resource.Default()", s.Name(), s.Resource())
		}
	}
}

// TestSpanOutlivesUnit: a span that ends after its unit was handed off
// is dropped: it reaches neither its unit nor the next.
func TestSpanOutlivesUnit(t *testing.T) {
	col, accounted, rt, ipcComp := accountingComponents(t)
	start := func() (context.Context, telemetry.WorkSpan) {
		ctx, work := rt.StartWork(context.Background())
		col.Track(work.Span(), nil) // as Submit does
		return ctx, work
	}
	ctx1, work1 := start()
	_, late := ipcComp.Start(ctx1, telemetry.Send, telemetry.Request)
	work1.End(telemetry.OK, nil)
	ctx2, work2 := start()
	late.End()                                                                           // unit 1's, after its root
	ipcComp.RecordSpan(ctx1, telemetry.Receive, telemetry.Reply, time.Now(), time.Now()) // so is this one
	_, ph := ipcComp.Start(ctx2, telemetry.Serialize, telemetry.Request)
	ph.End()
	work2.End(telemetry.OK, nil)
	if err := col.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	works := accounted()
	if len(works) != 2 || len(works[0].Nodes) != 1 || len(works[1].Nodes) != 2 {
		t.Fatalf("accounted %d units (%v): want 2, of 1 node (the root; its late phases dropped) and 2 (root, serialize)", len(works), works)
	}
}

// TestUnsampledUnit: under a sampler that drops a unit's root, the
// runtime tracer's spans under it are that root's own non-recording
// span: no object, no ids, nothing reaches the collector, and what a
// task host is handed is the root's unsampled context. A sampled root
// under the same tracer is recorded as ever.
func TestUnsampledUnit(t *testing.T) {
	col, accounted := keepingCollector(t)
	var drop atomic.Bool
	tp := ownTracer(col, otelsetup.SamplerOf(dropSampler{&drop}))
	// No metrics: what a run records when nothing reads them.
	mp := metricnoop.NewMeterProvider()
	rt, err := telemetry.NewComponent("runtime", telemetry.ComponentConfig{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	comp, err := telemetry.NewComponent("ipc", telemetry.ComponentConfig{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	drop.Store(true)
	ctx, work := rt.StartWork(context.Background())
	root := work.Span().SpanContext()
	if !root.IsValid() || root.IsSampled() || work.Span().IsRecording() {
		t.Fatalf("root %+v (recording %v): want valid, unsampled, not recording", root, work.Span().IsRecording())
	}
	col.Track(work.Span(), nil) // not sampled: not tracked
	phases := func() {
		pctx, ph := comp.Start(ctx, telemetry.Send, telemetry.Request)
		if trace.SpanFromContext(pctx) != work.Span() || ph.Span() != work.Span() {
			t.Fatal("a phase under an unsampled root is not the root's span")
		}
		ph.End()
		_, leaf4 := comp.Start(ctx, telemetry.Serialize, telemetry.Request, telemetry.Leaf())
		leaf4.End()
		comp.RecordSpan(ctx, telemetry.Receive, telemetry.Reply, time.Unix(1, 0), time.Unix(2, 0))
		_, s := rt.Tracer().Start(ctx, "other")
		s.End()
	}
	if n := testing.AllocsPerRun(100, phases); n != 0 {
		t.Errorf("phases under an unsampled root allocate %v times, want 0", n)
	}
	if comp.Records(ctx) {
		t.Error("Records under an unsampled root: true, want false (the host's phases would be built for nothing)")
	}
	work.End(telemetry.OK, nil)
	if err := col.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := accounted(); len(got) != 0 {
		t.Errorf("an unsampled unit reached the collector: %d units accounted", len(got))
	}

	drop.Store(false)
	ctx, work = rt.StartWork(context.Background())
	sampled := work.Span().SpanContext()
	col.Track(work.Span(), nil)
	if !comp.Records(ctx) {
		t.Error("Records under a sampled root: false, want true")
	}
	_, ph := comp.Start(ctx, telemetry.Send, telemetry.Request)
	ph.End()
	work.End(telemetry.OK, nil)
	if err := col.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := accounted(); !sampled.IsSampled() || len(got) != 1 || len(got[0].Nodes) != 2 {
		t.Errorf("a sampled root (%v): %d units accounted (%v), want 1 of 2 nodes (root, send)", sampled.IsSampled(), len(got), got)
	}
}

// dropSampler drops every root while drop is set, and samples it
// otherwise.
type dropSampler struct{ drop *atomic.Bool }

func (s dropSampler) ShouldSample(sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if s.drop.Load() {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop}
	}
	return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
}

func (dropSampler) Description() string { return "dropSampler" }

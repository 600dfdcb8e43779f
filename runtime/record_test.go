package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// recordRig is a collector keeping every unit it accounts, the runtime's
// own tracer over it, and the Components a task unit's spans come from.
type recordRig struct {
	col                *spans.Collector
	accounted          func() []attribution.Work
	tp                 *spans.TracerProvider
	rt, ipc, host, etc *telemetry.Component
	r                  *Runtime // childSpans' fields only
	names              *recordNames
}

func newRecordRig(t *testing.T) *recordRig {
	g := &recordRig{}
	g.col, g.accounted = keepingCollector(t)
	g.tp = ownTracer(g.col, nil)
	g.rt, g.ipc, g.host, g.etc = recordComponents(t, g.tp)
	g.r = &Runtime{col: g.col, hostComp: g.host, ipcComp: g.ipc, phaseTP: g.tp, cfg: Config{Telemetry: TelemetryConfig{AccountRemoteDirectly: true}}}
	g.names = newRecordNames(g.tp, g.col, g.rt, g.ipc, g.host)
	return g
}

// recordComponents returns the runtime, ipc, taskhost and a program's
// ("custom") Components on tp, without metrics.
func recordComponents(t *testing.T, tp trace.TracerProvider) (rt, ipcComp, host, etc *telemetry.Component) {
	for _, c := range []struct {
		dst  **telemetry.Component
		name string
	}{{&rt, "runtime"}, {&ipcComp, "ipc"}, {&host, "taskhost"}, {&etc, "custom"}} {
		var err error
		if *c.dst, err = telemetry.NewComponent(c.name, telemetry.ComponentConfig{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider()}); err != nil {
			t.Fatal(err)
		}
	}
	return rt, ipcComp, host, etc
}

// at is a fixed instant plus us microseconds.
func at(us int) time.Time {
	return time.Unix(1_700_000_000, 0).Add(time.Duration(us) * time.Microsecond)
}

// taskUnit plays one task unit of the taskhost shape at fixed times, as
// Submit, the worker, ipc's writer and reader and the host's reply make
// its spans: with rec, kept in that record, as the runtime keeps a task
// unit's; else through the tracer, tracked by the collector. With extra,
// a phase the record has no slot for starts under the host span, with a
// leaf under it, and a leaf with an attribute (which a slot does not
// keep) is recorded beside. It returns the context under the host span
// and the root span.
func (g *recordRig) taskUnit(rec *unitRecord, extra bool) (context.Context, trace.Span) {
	tp := g.tp
	var wctx, hctx context.Context
	var root, hs trace.Span
	if rec != nil {
		rec.begin(g.names, nil, at(0))
		root = &rec.root
		wctx = trace.ContextWithSpan(context.Background(), root)
		rec.setSlot(slotQueue, at(0).UnixNano(), at(100).UnixNano())
		rec.disp.endAt(at(300))
		hctx, hs = rec.startHost(wctx, at(300))
	} else {
		wctx, root = tp.StartPhaseSpan(trace.ContextWithSpanContext(context.Background(), trace.SpanContext{}), telemetry.SpanWork, "", 0, telemetry.None, at(0))
		g.col.Track(root, nil)
		dctx, disp := tp.StartPhaseSpan(wctx, g.rt.SpanName(telemetry.Dispatch, telemetry.None), "runtime", telemetry.Dispatch, telemetry.None, at(0))
		tp.RecordPhaseSpan(dctx, g.rt.SpanName(telemetry.Queue, telemetry.None), "runtime", telemetry.Queue, telemetry.None, at(0), at(100), nil)
		tp.EndPhaseSpan(disp, at(300))
		hctx, hs = g.r.startHostSpan(wctx, 1, 2, at(300))
	}
	leaf := func(ph telemetry.Phase, d telemetry.Direction, from, to int) {
		g.ipc.RecordSpan(hctx, ph, d, at(from), at(to))
	}
	leaf(telemetry.Serialize, telemetry.Request, 300, 320)
	leaf(telemetry.Send, telemetry.Request, 320, 350)
	res := &ipcpb.TaskResult{ReceiveStartUnixNano: at(400).UnixNano(), Timings: []*ipcpb.PhaseTiming{
		{Phase: ipcpb.Phase_PHASE_RECEIVE, StartOffsetNs: 0, DurationNs: 10_000},
		{Phase: ipcpb.Phase_PHASE_DESERIALIZE, StartOffsetNs: 10_000, DurationNs: 20_000},
		{Phase: ipcpb.Phase_PHASE_EXECUTE, StartOffsetNs: 30_000, DurationNs: 170_000},
		{Phase: ipcpb.Phase_PHASE_REPLY_SERIALIZE, StartOffsetNs: 200_000, DurationNs: 5_000},
	}}
	g.r.childSpans(hctx, &unit{rec: rec}, res, at(300), at(700))
	if extra {
		xctx, x := g.etc.Start(hctx, telemetry.Execute, telemetry.None, telemetry.Detached(), telemetry.StartedAt(at(610)))
		g.etc.RecordSpan(xctx, telemetry.Serialize, telemetry.Request, at(620), at(640))
		x.End(telemetry.EndedAt(at(650)))
		g.ipc.RecordSpan(hctx, telemetry.Send, telemetry.Reply, at(655), at(660), telemetry.AttrBytes.Int(7))
	}
	leaf(telemetry.Receive, telemetry.Reply, 700, 720)
	leaf(telemetry.Deserialize, telemetry.Reply, 720, 740)
	tp.EndPhaseSpan(hs, at(760))
	if rec != nil {
		rec.end(at(800), at(0), telemetry.OK)
	} else {
		root.SetAttributes(telemetry.AttrOutcome.String("ok"))
		tp.EndPhaseSpan(root, at(800))
	}
	return hctx, root
}

// workString is a unit's attribution as text: its rows, and its nodes
// (key, times, parent's key) sorted, so that two units made in another
// order compare equal.
func workString(w attribution.Work) string {
	var b strings.Builder
	fmt.Fprintf(&b, "e2e %v failed %v\n", w.E2E(), w.Root.Failed)
	for _, s := range w.Stats {
		fmt.Fprintf(&b, "row %v: critical %v naive %v count %d\n", s.Key, s.Critical, s.Naive, s.Count)
	}
	var nodes []string
	for _, n := range w.Nodes {
		parent := "-"
		if n.Parent >= 0 {
			p := w.Nodes[n.Parent]
			parent = fmt.Sprintf("%v@%d", p.Key, p.Start)
		}
		nodes = append(nodes, fmt.Sprintf("node %v [%d, %d] far %v under %s\n", n.Key, n.Start, n.End, n.Far, parent))
	}
	slices.Sort(nodes)
	b.WriteString(strings.Join(nodes, ""))
	return b.String()
}

// TestRecordMatchesSpans: a task unit kept in its record is attributed as
// the same unit's spans filed one by one with the collector: the same
// rows with the same critical and naive times, and the same nodes, with
// and without spans the record has no slot for (kept whole beside the
// slots, with their parents). A unit of a record reaches the collector
// as one record and is never in its map of traces.
func TestRecordMatchesSpans(t *testing.T) {
	for _, extra := range []bool{false, true} {
		got := map[bool]string{}
		for _, record := range []bool{false, true} {
			g := newRecordRig(t)
			var rec *unitRecord
			if record {
				rec = new(unitRecord)
			}
			_, root := g.taskUnit(rec, extra)
			if _, ok := root.(*recSpan); ok != record {
				t.Fatalf("record %v: the root is a %T", record, root)
			}
			if err := g.col.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			works := g.accounted()
			if len(works) != 1 {
				t.Fatalf("record %v: %d units accounted, want 1", record, len(works))
			}
			got[record] = workString(works[0])
			if want := map[bool]uint64{false: 0, true: 1}[record]; g.names.recorded.Load() != want {
				t.Errorf("record %v: %d units handed off as records, want %d", record, g.names.recorded.Load(), want)
			}
		}
		if got[true] != got[false] {
			t.Errorf("extra %v: the record's attribution differs from the spans':\nspans:\n%s\nrecord:\n%s", extra, got[false], got[true])
		}
		want := 12
		if extra {
			want += 3
		}
		if n := strings.Count(got[true], "node "); n != want {
			t.Errorf("extra %v: %d nodes, want %d:\n%s", extra, n, want, got[true])
		}
	}
}

// TestRecordLateAndDropped: a span that ends after its unit's root (and
// so after the record was handed off) reaches no unit, as with the
// collector's buffers (TestSpanOutlivesUnit); a record dropped before its
// root ends (a unit never submitted) is not accounted.
func TestRecordLateAndDropped(t *testing.T) {
	g := newRecordRig(t)
	hctx, _ := g.taskUnit(new(unitRecord), false)
	g.ipc.RecordSpan(hctx, telemetry.Send, telemetry.Reply, at(900), at(950))
	_, late := g.etc.Start(hctx, telemetry.Execute, telemetry.None, telemetry.Detached(), telemetry.StartedAt(at(900)))
	late.End(telemetry.EndedAt(at(990)))
	if late.Span().IsRecording() {
		t.Error("a span of a unit handed off records")
	}

	var dropped unitRecord
	dropped.begin(g.names, nil, at(0))
	dropped.drop()
	dropped.end(at(10), at(0), telemetry.OK)
	if err := g.col.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	works := g.accounted()
	if len(works) != 1 {
		t.Fatalf("%d units accounted, want 1 (the dropped one is not)", len(works))
	}
	if n := len(works[0].Nodes); n != 12 {
		t.Errorf("the unit has %d nodes, want 12 (the late spans reach it not)", n)
	}
}

// TestRunKeepsTaskUnitsInRecords: in a taskhost run whose spans only the
// attribution reads, every unit is kept in its record, and the summary
// has the rows and span counts of the same run through the SDK; through
// the SDK, with a sampler, with metrics (which the runtime's Component
// records of a unit's root, dispatch and queue) or with an exporter
// (which reads what a record drops), no unit is.
// One unit in five asks for a task its host does not serve: it fails,
// and fails alike in every path.
func TestRunKeepsTaskUnitsInRecords(t *testing.T) {
	sc, err := scenario.Builtin("taskhost")
	if err != nil {
		t.Fatal(err)
	}
	const units = 40
	rows := map[string]string{}
	for _, path := range []string{"sdk", "records", "sampler", "metrics", "export"} {
		cfg := testConfig(t, testSettings(t, fmt.Sprintf("scenario.count=%d", units)), nil)
		cfg.Telemetry.MeterProvider = metricnoop.NewMeterProvider()
		cfg.Telemetry.PhaseLabels = false
		if path != "sdk" {
			cfg.Telemetry.TracerProvider = nil
		}
		switch path {
		case "sampler":
			cfg.Telemetry.Sampler = otelsetup.SamplerOf(dropSampler{new(atomic.Bool)}) // samples every unit, but may not
		case "export":
			cfg.Telemetry.Export = otelsetup.ProcessorExporter(tracetest.NewSpanRecorder())
		case "metrics":
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			cfg.Telemetry.MeterProvider = mp
		}
		r, err := New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		runScenarioUnits(t, r, sc, units, 5)
		sum, recorded := r.Summary(), r.recordedUnits()
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if want := map[string]uint64{"records": units}[path]; recorded != want {
			t.Errorf("%s: %d units kept in records, want %d", path, recorded, want)
		}
		if sum.Submitted != units || sum.Attribution.Works != units || sum.Failed != units/5 || sum.Attribution.Failed != sum.Failed {
			t.Fatalf("%s: %d units ended, %d attributed, %d failed (%d attributed as failed), want %d, %d and %d", path,
				sum.Submitted, sum.Attribution.Works, sum.Failed, sum.Attribution.Failed, units, units, units/5)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "failed %d\n", sum.Attribution.Failed)
		for _, row := range sum.Attribution.Rows {
			fmt.Fprintf(&b, "%s %d\n", row.Name, row.Spans)
		}
		rows[path] = b.String()
	}
	for _, path := range []string{"records", "sampler", "metrics", "export"} {
		if rows[path] != rows["sdk"] {
			t.Errorf("rows and their span counts differ:\nSDK:\n%s\n%s:\n%s", rows["sdk"], path, rows[path])
		}
	}
}

// runScenarioUnits submits the first units of sc's units to r
// (submitUnits) and waits for them; with failEvery > 0, every
// failEvery-th task unit (the first among them) asks for a task its host
// does not serve, and fails. It returns how many task units went
// straight to a host (no orchestration).
func runScenarioUnits(t *testing.T, r *Runtime, sc *scenario.Scenario, units, failEvery int) (straight int) {
	t.Helper()
	gen := sc.NewGenerator()
	submitUnits(t, r, 0, units-1, func(i int) scenario.Item {
		it := gen.Next()
		if it.Kind == scenario.KindTask && !it.Task.Orchestration {
			straight++
		}
		if failEvery > 0 && i%failEvery == 0 && it.Task != nil {
			task := *it.Task
			task.TaskName = "amdahl.no-such-task"
			it.Task = &task
		}
		return it
	})
	return straight
}

// recordedUnits is how many units r handed off as records so far.
func (r *Runtime) recordedUnits() uint64 {
	if r.records == nil {
		return 0
	}
	return r.records.recorded.Load()
}

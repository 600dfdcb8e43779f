package runtime

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/internal/proccpu"
	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/ipc/taskproto"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// Benchmarks run only with -bench; plain `go test` never calls them. Their
// task hosts are this test binary (TestMain's host mode), as in the tests.
//
//	go test -run '^$' -bench TaskOverhead -benchtime 200x -count 6 ./runtime/
//	go test -run '^$' -bench 'Run$' -benchtime 2x -count 5 ./runtime/

// benchTask is the task configuration runTask sends for smallUnit(seq):
// amdahl.hash over a ~1 KiB parameter, one pass.
func benchTask(seq int) *ipcpb.TaskConfiguration {
	task := smallUnit(seq).Task
	return &ipcpb.TaskConfiguration{
		Id: uint64(seq) + 1, TaskName: TaskHash, TaskLocation: "amdahl", ProjectFile: fmt.Sprintf("amdahl-bench-%d", seq),
		Parameters: task.Parameters, Environment: task.Environment,
	}
}

// bareRuns holds the ns/op of every bare sub-benchmark run of the current
// BenchmarkTaskOverhead (one per -count): their median is the baseline of
// the x-bare ratios. The testing package runs all -count repetitions of
// one sub-benchmark before the next, so pool and unit cannot be paired with
// a single bare run; the median of this process's bare runs is the
// same-run baseline.
var bareRuns []float64

func nsPerOp(b *testing.B) float64 {
	return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
}

// reportRatio reports b's ns/op as a multiple of bare's median, if bare ran.
func reportRatio(b *testing.B) {
	if len(bareRuns) == 0 {
		return
	}
	s := slices.Sorted(slices.Values(bareRuns))
	median := s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + median) / 2
	}
	b.ReportMetric(nsPerOp(b)/median, "x-bare")
}

// warmup is how many untimed tasks each sub-benchmark runs first, so that
// neither process's first-use costs (page faults, lazily grown buffers,
// the delta baseline) land in whichever sub-benchmark happens to run first.
const warmup = 20

// BenchmarkTaskOverhead measures what the runtime adds to one small task
// beyond a bare ipc round trip on the same kind of connection:
//
//	bare  Send the configuration, receive the result (a hand-written client)
//	pool  the node pool: acquire, host.run, release
//	unit  a whole unit of work: dispatch span, StartInstance lease, the task
//	      on the host, completion to the in-process sidecar, span collection
//	      and critical path
//
// pool and unit report x-bare, their ns/op over the median of bare's in
// the same process.
func BenchmarkTaskOverhead(b *testing.B) {
	ctx := context.Background()
	p, set, _ := benchPool(b)
	// Spawn the host outside every timed loop.
	h, err := p.acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	p.release(h)
	bareRuns = nil

	// bare: what a hand-written ipc client does on its connection.
	bare := func(b *testing.B, h *host, seq int) {
		task := benchTask(seq)
		if err := h.conn.Send(ctx, task); err != nil {
			b.Fatal(err)
		}
		select {
		case in := <-h.results:
			if err := checkResult(in.Msg.(*ipcpb.TaskResult), task); err != nil {
				b.Fatal(err)
			}
		case <-h.readDone:
			b.Fatalf("task host died: %v", h.readErr)
		}
	}
	b.Run("bare", func(b *testing.B) {
		h, err := p.acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer p.release(h)
		seq := 0
		for ; seq < warmup; seq++ {
			bare(b, h, seq)
		}
		for b.Loop() {
			bare(b, h, seq)
			seq++
		}
		bareRuns = append(bareRuns, nsPerOp(b))
	})

	// pool: the node pool's bookkeeping around the same round trip.
	viaPool := func(b *testing.B, seq int) {
		task := benchTask(seq)
		h, err := p.acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		in, err := h.run(ctx, task, set.TaskTimeout)
		p.release(h)
		if err != nil {
			b.Fatal(err)
		}
		if err := checkResult(in.Msg.(*ipcpb.TaskResult), task); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("pool", func(b *testing.B) {
		seq := 0
		for ; seq < warmup; seq++ {
			viaPool(b, seq)
		}
		for b.Loop() {
			viaPool(b, seq)
			seq++
		}
		reportRatio(b)
	})

	b.Run("unit", func(b *testing.B) {
		ucfg := testConfig(b, set, nil)
		done := make(chan Result, 1)
		ucfg.OnResult = func(r Result) { done <- r }
		r, err := New(ctx, ucfg)
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			if err := r.Close(ctx); err != nil {
				b.Error(err)
			}
		}()
		unit := func(seq int) {
			if err := r.Submit(ctx, smallUnit(seq)); err != nil {
				b.Fatal(err)
			}
			if res := <-done; res.Outcome != telemetry.OK {
				b.Fatalf("unit %d: %s: %s", seq, res.Class, res.Reason)
			}
		}
		// The first unit spawns the host and opens the work-item stream.
		seq := 0
		for ; seq < warmup; seq++ {
			unit(seq)
		}
		for b.Loop() {
			unit(seq)
			seq++
		}
		reportRatio(b)
	})
}

// checkResult says why res is not task's successful result, if it is not.
func checkResult(res *ipcpb.TaskResult, task *ipcpb.TaskConfiguration) error {
	if res.GetId() != task.GetId() {
		return fmt.Errorf("got the result of task %d, want %d", res.GetId(), task.GetId())
	}
	if res.GetStatus() != ipcpb.Status_STATUS_SUCCESS {
		return fmt.Errorf("task %d: got status %v (%s), want success", task.GetId(), res.GetStatus(), res.GetError())
	}
	return nil
}

// BenchmarkRun measures whole runs of each built-in scenario on two task
// hosts: one iteration is one Run of count units, from New to Close. It
// reports units/s over the whole run (host start and shutdown included),
// the mean over iterations of each run's median end-to-end time, and the
// fraction of units that ended OK. Any failure but "oversized action" (the
// fanout workload's fail-fast shape, also part of mixed) is fatal.
func BenchmarkRun(b *testing.B) {
	for _, tc := range []struct {
		scenario string
		count    int
	}{
		{"taskhost", 1600},
		{"fanout", 48},
		{"mixed", 1000},
		{"orchestrated", 1000},
	} {
		b.Run(tc.scenario, func(b *testing.B) {
			sc, err := scenario.Builtin(tc.scenario)
			if err != nil {
				b.Fatal(err)
			}
			set := testSettings(b, "runtime.nodes=2", "runtime.concurrency=4", fmt.Sprintf("scenario.count=%d", tc.count))
			var units, ok int
			var p50 time.Duration
			for b.Loop() {
				sum, err := Run(context.Background(), testConfig(b, set, nil), sc)
				if err != nil {
					b.Fatal(err)
				}
				if sum.Submitted != tc.count {
					b.Fatalf("got %d units submitted, want %d", sum.Submitted, tc.count)
				}
				for class, n := range sum.Failures {
					if class != "oversized action" {
						b.Fatalf("%d units failed with %q, e.g. %s", n, class, sum.Examples[class])
					}
				}
				units += sum.Submitted
				ok += sum.OK
				p50 += sum.Attribution.E2EP50
			}
			b.ReportMetric(float64(units)/b.Elapsed().Seconds(), "units/s")
			b.ReportMetric(float64(p50.Microseconds())/1e3/float64(b.N), "e2e-p50-ms")
			b.ReportMetric(float64(ok)/float64(units), "ok")
		})
	}
}

// BenchmarkUnitTelemetry measures what telemetry costs the parent per
// task unit, outside any process: the spans of one unit of the taskhost
// shape made by the runtime's own code for them (Submit's root, dispatch
// and queue, runTask's host span, ipc's leaves of the request, the
// reply's receive and deserialize the worker records, the host's phases
// from its reply: childSpans), and the unit's accounting (collector,
// critical path), waited for every 256 units. The host's phases are five:
// its receive, deserialize, execute and serialize, and the send of its
// reply, which a host stamps into the reply of a sampled request; the
// parent's receive of the reply begins after that send's end, as with a
// reply in one write (ipc.SendStamper). cpu-ns/op is
// the process's CPU time per unit (every goroutine's, the accounting's
// and the GC's included): the cost, where ns/op is the wall time of two
// goroutines that may overlap or wait for each other. path=record is
// amdahl run's default for such a unit: kept in its record (record.go),
// where only attribution reads the spans; path=own the same unit through
// the runtime's tracer (telemetry/spans), as a unit no record takes;
// path=sdk records them with the OTel SDK,
// the collector taking them through otelsetup.SDKSource (a run with an
// exporter or a recorder); sdk+export and own+export add the trace file
// (its batcher and its writes, to a file in the test's directory), one
// as an SDK span processor, one as the runtime's tracer's Exporter
// (amdahl run --out). Metrics are off (no reader): they are what a run
// records only when something reads them.
//
//	go test -run '^$' -bench UnitTelemetry -benchmem -count 6 ./runtime/
func BenchmarkUnitTelemetry(b *testing.B) {
	for _, path := range []string{"sdk", "own", "record", "sdk+export", "own+export"} {
		b.Run("path="+path, func(b *testing.B) {
			var works int
			builder := attribution.Builder{Reuse: true} // as the runtime's
			c := spans.NewCollector(func(sp []spans.Span, _ any) {
				builder.EachTree(sp, func(attribution.Work) { works++ })
			})
			defer c.Close()
			// The export: the trace file's batcher, as amdahl run --out
			// gets it (otelsetup's TraceFileOnly), writing to a file.
			tel, err := otelsetup.Setup(context.Background(), otelsetup.WithLookupEnv(noEnv),
				otelsetup.WithTraceFile(filepath.Join(b.TempDir(), "trace.jsonl")))
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = tel.Shutdown(context.Background()) }()
			export, res := tel.TraceFileOnly()
			if export == nil {
				b.Fatal("no trace file processor")
			}
			var tp trace.TracerProvider
			switch path {
			case "sdk", "sdk+export":
				var opts []sdktrace.TracerProviderOption
				if path == "sdk+export" {
					opts = append(opts, sdktrace.WithSpanProcessor(otelsetup.ExporterProcessor(export)))
				}
				sdk := sdktrace.NewTracerProvider(opts...)
				defer otelsetup.SDKSource(sdk).Subscribe(c.Ended)()
				defer func() { _ = sdk.Shutdown(context.Background()) }()
				tp = sdk
			case "own", "record":
				tp = spans.NewTracerProvider(spans.TracerConfig{Collector: c})
			case "own+export":
				tp = spans.NewTracerProvider(spans.TracerConfig{Collector: c, Export: export, Resource: res})
			}
			r := &Runtime{phaseTP: telemetry.PhaseTracerOf(tp)}
			for _, comp := range []struct {
				dst  **telemetry.Component
				name string
			}{{&r.rt, "runtime"}, {&r.ipcComp, "ipc"}, {&r.hostComp, "taskhost"}} {
				*comp.dst, err = telemetry.NewComponent(comp.name, telemetry.ComponentConfig{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider(), PhaseLabels: true})
				if err != nil {
					b.Fatal(err)
				}
			}
			r.tracer = r.rt.Tracer()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := proccpu.Used()
			if path == "record" {
				r.records = newRecordNames(tp.(*spans.TracerProvider), c, r.rt, r.ipcComp, r.hostComp)
			}
			for i := range b.N {
				if r.records != nil {
					benchUnitRecord(r)
				} else {
					benchUnitSpans(r, c)
				}
				if i%256 == 255 || i == b.N-1 {
					_ = c.Flush(context.Background())
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(proccpu.Used()-cpu0)/float64(b.N), "cpu-ns/op")
			c.Close()
			if works != b.N {
				b.Fatalf("accounted %d units, want %d", works, b.N)
			}
		})
	}
}

// benchUnitRecord makes the spans of one task unit in its record, as
// Submit, runTask and ipc (whose leaves carry no attribute when nothing
// reads them) do, and ends its root, which hands it to the collector.
func benchUnitRecord(r *Runtime) {
	u := new(recordedUnit)
	u.unit.rec = &u.rec
	start := time.Now()
	u.rec.begin(r.records, nil, start)
	u.start = start
	r.endQueue(&u.unit)
	sendStart := time.Now()
	u.endDispatchAt(sendStart)
	hctx, hs := u.rec.startHost(trace.ContextWithSpan(context.Background(), &u.rec.root), sendStart)
	for _, p := range []telemetry.Phase{telemetry.Serialize, telemetry.Send} {
		_, leaf1 := r.ipcComp.Start(hctx, p, telemetry.Request, telemetry.Leaf())
		leaf1.End(telemetry.EndedAt(time.Now()))
	}
	timings, in := benchReply()
	r.replyPhases(hctx, &in)
	u.rec.hostPhases(r.hostComp, timings[:])
	r.endHostSpan(hs)
	u.rec.end(time.Now(), start, telemetry.OK)
}

// benchReply is a task's reply as BenchmarkUnitTelemetry's units take
// it: the host's five timings one after another (the send of its reply
// stamped into it, as for a sampled request), and the parent's receive
// of the reply, which begins once the frame's header has arrived: after
// the host's send ends, the reply being stamped before its one write.
func benchReply() ([taskproto.NumTimings]taskproto.Timing, ipc.Incoming) {
	now := time.Now()
	timings := [taskproto.NumTimings]taskproto.Timing{{Phase: telemetry.Receive, Direction: telemetry.Request},
		{Phase: telemetry.Deserialize, Direction: telemetry.Request}, {Phase: telemetry.Execute},
		{Phase: telemetry.Serialize, Direction: telemetry.Reply}, {Phase: telemetry.Send, Direction: telemetry.Reply}}
	for k := range timings {
		timings[k].Start, timings[k].End = now.Add(time.Duration(k)*time.Microsecond), now.Add(time.Duration(k+1)*time.Microsecond)
	}
	return timings, ipc.Incoming{Size: 100, ReceiveStart: now.Add(5*time.Microsecond + time.Microsecond/2),
		ReceiveDuration: time.Microsecond, DeserializeDuration: time.Microsecond}
}

// benchUnitTask is the task of benchUnitSpans' units: sent straight to a
// host, as taskhost's.
var benchUnitTask scenario.TaskItem

// benchUnitSpans makes the spans of one task unit as Submit, runTask and
// ipc make them (r holds the runtime's Components and tracer) and ends
// its root, which hands it to c.
func benchUnitSpans(r *Runtime, c *spans.Collector) {
	r.col = c
	u := &unit{comp: r.rt, id: "w1", item: scenario.Item{Kind: scenario.KindTask, Shape: "small", Task: &benchUnitTask}}
	r.startUnit(u)
	ctx := trace.ContextWithSpan(context.Background(), u.work.Span())
	r.endQueue(u)
	sendStart := time.Now()
	u.disp.End(telemetry.EndedAt(sendStart))
	hctx, hs := r.startHostSpan(ctx, 1, 2, sendStart)
	for _, p := range []telemetry.Phase{telemetry.Serialize, telemetry.Send} {
		_, ph := r.ipcComp.Start(hctx, p, telemetry.Request, telemetry.Leaf())
		if r.ipcComp.SpanAttributes() {
			ph.End(telemetry.EndedAt(time.Now()), telemetry.WithAttributes(telemetry.AttrBytes.Int(100)))
		} else {
			ph.End(telemetry.EndedAt(time.Now()))
		}
	}
	timings, in := benchReply()
	r.replyPhases(hctx, &in)
	r.hostComp.RecordSpans(hctx, timings[:], remoteAttrs...)
	r.endHostSpan(hs)
	u.work.End(telemetry.OK, nil)
}

// BenchmarkTaskUnit measures a whole task unit against the physical limit
// of its work, both in the same run and interleaved, so that the noise of
// a shared machine lands on both alike:
//
//	limit  a bare round trip on a two-process socketpair: a hand-written
//	       client sends the unit's task configuration to a task host, which
//	       executes it (amdahl.hash, one pass over ~1 KiB) and replies
//	unit   the same task submitted to a Runtime (runtime.nodes=1, one unit
//	       at a time, no orchestration): root, dispatch and queue spans,
//	       the worker, the node pool, the ipc phases, the host's phases
//	       placed from its reply timings, the result, and the accounting
//	       (collector, critical path, amdahl.phase.critical)
//
// Each iteration runs one of each, in an order alternated per iteration,
// timed separately. It reports limit-ns and unit-ns (means), x-limit (the
// ratio of the means) and x-limit-p50 (the median of the per-iteration
// ratios, the steadier). telemetry=on is amdahl run's default telemetry
// (otelsetup with no exporter: spans into attribution, metrics into the
// Prometheus registry); telemetry=off is OTEL_SDK_DISABLED=true.
//
//	go test -run '^$' -bench TaskUnit -benchtime 2000x -count 5 ./runtime/
//
// orchestration=true wraps each task in a Durable Task orchestration (the
// lease and the completion through the in-process sidecar, real gRPC), as
// the orchestrated scenario's tasks are; taskhost's and mixed's are not. Each
// kind runs with telemetry on and off: their x-limits' ratio is what
// telemetry costs one unit's latency, alone on the machine.
func BenchmarkTaskUnit(b *testing.B) {
	for _, tc := range []struct {
		disabled, orchestration bool
	}{{false, false}, {true, false}, {false, true}, {true, true}} {
		name := fmt.Sprintf("telemetry=on/orchestration=%v", tc.orchestration)
		if tc.disabled {
			name = fmt.Sprintf("telemetry=off/orchestration=%v", tc.orchestration)
		}
		b.Run(name, func(b *testing.B) { benchTaskUnit(b, tc.disabled, tc.orchestration) })
	}
}

func benchTaskUnit(b *testing.B, disabled, orchestration bool) {
	ctx := context.Background()
	p, _, cfg := benchPool(b)
	h, err := p.acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer p.release(h)
	limit := func(seq int) time.Duration {
		task := benchTask(seq)
		start := time.Now()
		if err := h.conn.Send(ctx, task); err != nil {
			b.Fatal(err)
		}
		select {
		case in := <-h.results:
			d := time.Since(start)
			if err := checkResult(in.Msg.(*ipcpb.TaskResult), task); err != nil {
				b.Fatal(err)
			}
			return d
		case <-h.readDone:
			b.Fatalf("task host died: %v", h.readErr)
		}
		return 0
	}

	tel, err := otelsetup.Setup(ctx, otelsetup.WithLookupEnv(noEnv), otelsetup.WithSDKDisabled(disabled))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(ctx) }()
	cfg.UseTelemetry(tel)
	done := make(chan Result, 1)
	cfg.OnResult = func(r Result) { done <- r }
	r, err := New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := r.Close(ctx); err != nil {
			b.Error(err)
		}
	}()
	unit := func(seq int) time.Duration {
		it := smallUnit(seq)
		it.Task.Orchestration = orchestration
		start := time.Now()
		if err := r.Submit(ctx, it); err != nil {
			b.Fatal(err)
		}
		res := <-done
		d := time.Since(start)
		if res.Outcome != telemetry.OK {
			b.Fatalf("unit %d: %s: %s", seq, res.Class, res.Reason)
		}
		return d
	}

	seq := 0
	for ; seq < warmup; seq++ { // the first unit spawns the runtime's host
		limit(seq)
		unit(seq)
	}
	var limitSum, unitSum time.Duration
	var ratios []float64
	for b.Loop() {
		var l, u time.Duration
		if seq%2 == 0 {
			l, u = limit(seq), unit(seq)
		} else {
			u, l = unit(seq), limit(seq)
		}
		seq++
		limitSum += l
		unitSum += u
		ratios = append(ratios, float64(u)/float64(l))
	}
	b.StopTimer()
	if err := r.Wait(ctx); err != nil { // the accounting of the last units
		b.Fatal(err)
	}
	if !disabled {
		if got := r.Summary().Attribution.Works; got != seq {
			b.Fatalf("attribution covers %d units, want %d", got, seq)
		}
	}
	n := float64(len(ratios))
	slices.Sort(ratios)
	b.ReportMetric(float64(limitSum.Nanoseconds())/n, "limit-ns")
	b.ReportMetric(float64(unitSum.Nanoseconds())/n, "unit-ns")
	b.ReportMetric(float64(unitSum)/float64(limitSum), "x-limit")
	b.ReportMetric(ratios[len(ratios)/2], "x-limit-p50")
}

// benchPool is a pool of one task host for the benchmarks (runtime.nodes=1,
// runtime.concurrency=1), closed when b ends, with its settings and config.
func benchPool(b *testing.B) (*pool, Settings, Config) {
	b.Helper()
	set := testSettings(b, "runtime.nodes=1", "runtime.concurrency=1")
	cfg := testConfig(b, set, nil)
	p := newPool(1, &hostConfig{
		argv: cfg.Hosts.Argv, env: append(slices.Clone(cfg.Hosts.Env), set.childEnv()...),
		transport: set.IPCTransport, logger: cfg.Logger, grace: 2 * time.Second,
		ipcOpts: set.ipcOptions(),
	})
	b.Cleanup(func() {
		if err := p.close(context.Background()); err != nil {
			b.Error(err)
		}
	})
	return p, set, cfg
}

// BenchmarkTelemetryTax measures what telemetry costs a run, with both
// arms in one process: two Runtimes of the scenario's settings
// (runtime.nodes=2, runtime.concurrency=4, each with its own task hosts
// and, for mixed, its own in-process sidecar), one with amdahl run's
// default telemetry (otelsetup with no exporter: spans into attribution),
// one with OTEL_SDK_DISABLED=true (its hosts too). Each iteration is a
// round: a block of the scenario's units through each arm, the order
// alternated per round, both arms drawing the same units (one generator
// each, one seed). A block is timed from its first Submit to the end of
// its accounting (Wait: on the on arm, the critical paths of the block's
// units, so that none of its cost lands in the next block), after a GC
// outside the timing, so that neither arm collects the other's garbage.
//
// Blocks of a fraction of a second, alternated, meet the same machine:
// scripts/telemetry-tax.sh pairs whole processes seconds apart, and its
// sets drift with the VM over the hour (docs/measurements/telemetry-cost.md, "Measured").
// What a block leaves out is what a whole run adds: process start,
// telemetry setup and the first units' warm-up (one round, untimed).
//
// Per round it takes on/off of the block's throughput (units over the
// block's time), of its e2e p50 (the exact median of its units' Result.E2E)
// and of the process's CPU per unit (the runtime's own: the hosts are
// other processes), and reports each as the geometric mean over rounds
// with its 95 % interval (Student's t over the log ratios):
// thr-ratio, thr-lo, thr-hi (below 1: telemetry costs throughput),
// p50-ratio, p50-lo, p50-hi (above 1: it lengthens units) and cpu-ratio,
// cpu-lo, cpu-hi; and each arm's median units/s. Where the kernel says
// how long each task host ran (Linux: /proc/PID/task/*/schedstat), it also
// reports, as scripts/telemetry-tax.sh prints them, busy (throughput
// times the hosts' CPU per unit: their CPU seconds per second, in which
// how fast the machine ran the block cancels out; it reads as the
// throughput ratio while telemetry leaves the hosts' work alone) and
// rt/host (the runtime's CPU per unit over its hosts'). For mixed it
// also reports each kind's e2e p50 on/off, p50task-ratio (p50task-lo,
// p50task-hi) and p50fanout-ratio: the median of the block's task units'
// e2e times, and of its fanout units' (docs/measurements/telemetry-cost.md, "December 5,
// later": the task units carry mixed's e2e p50 tax).
//
//	go test -run '^$' -bench TelemetryTax -benchtime 100x -count 1 ./runtime/
//
// Each arm's goroutines carry the pprof label arm=on or arm=off, so that
// one CPU profile of the benchmark splits into the two arms' profiles,
// sampled over the same seconds: -cpuprofile, then go tool pprof
// -tagfocus arm=on (and arm=off).
//
// With -tax.calibrate=D (after -args) a third arm runs in the same rounds,
// the order rotated over the three: telemetry off, as the off arm, and D of
// CPU spent on the worker's path per unit (a loop of arithmetic, in
// OnResult, after the unit's e2e was taken; pprof label arm=cal). It says
// what D of the runtime's own CPU per unit costs on this machine, as
// telemetry's would, so that the tax reads as CPU: cal-thr-ratio, cal-lo,
// cal-hi and cal-p50-ratio, cal-cpu-ratio (cal/off, as the tax's on/off);
// cal-cpu-us (the cal arm's CPU per unit over off's: about D if a µs spent
// costs a µs); on-cpu-us (the same for telemetry: its CPU per unit); and
// tax-us, telemetry's throughput tax in µs of such CPU (D times the log of
// thr-ratio over the log of cal-thr-ratio; a point estimate).
//
//	go test -run '^$' -bench TelemetryTax/scenario=taskhost -benchtime 240x ./runtime/ -args -tax.calibrate=5us
func BenchmarkTelemetryTax(b *testing.B) {
	for _, tc := range []struct {
		scenario string
		block    int // units per arm per round
	}{
		{"taskhost", 1000},
		{"mixed", 250},
		{"orchestrated", 250},
	} {
		b.Run("scenario="+tc.scenario, func(b *testing.B) { benchTelemetryTax(b, tc.scenario, tc.block) })
	}
}

var taxCalibrate = flag.Duration("tax.calibrate", 0, "BenchmarkTelemetryTax: run a third arm, telemetry off with this much CPU spent per unit on the worker's path")

// taxArm is one arm of BenchmarkTelemetryTax: a Runtime, its units and
// their results.
type taxArm struct {
	labels  context.Context // carries the pprof label arm=on or arm=off
	r       *Runtime
	gen     *scenario.Generator
	results chan Result
	units   int // submitted so far
}

// newTaxArm returns an arm with telemetry on, or off (disabled); with
// spin > 0 (and disabled) the calibration arm, which spends spin of CPU
// per unit on the worker's path.
func newTaxArm(b *testing.B, sc *scenario.Scenario, set Settings, disabled bool, block int, spin time.Duration) *taxArm {
	ctx := context.Background()
	tel, err := otelsetup.Setup(ctx, otelsetup.WithLookupEnv(noEnv), otelsetup.WithSDKDisabled(disabled))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tel.Shutdown(ctx) })
	cfg := testConfig(b, set, nil)
	cfg.UseTelemetry(tel)
	if disabled {
		// As amdahl run's task hosts inherit it.
		cfg.Hosts.Env = append(cfg.Hosts.Env, otelsetup.EnvSDKDisabled+"=true")
	}
	arm := pprof.Labels("arm", "on")
	switch {
	case spin > 0:
		arm = pprof.Labels("arm", "cal")
	case disabled:
		arm = pprof.Labels("arm", "off")
	}
	a := &taxArm{labels: pprof.WithLabels(ctx, arm), gen: sc.NewGenerator(), results: make(chan Result, block)}
	cfg.OnResult = func(res Result) { a.results <- res } // never blocks: a block's results fit
	if spin > 0 {
		n := spinIterations(spin)
		cfg.OnResult = func(res Result) {
			spinFor(n)
			a.results <- res
		}
	}
	// The runtime's goroutines (workers, accounting, and those its task
	// hosts' connections start) inherit the label from New's.
	pprof.Do(ctx, arm, func(context.Context) { a.r, err = New(ctx, cfg) })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := a.r.Close(ctx); err != nil {
			b.Error(err)
		}
	})
	return a
}

// taxBlock is what runBlock measured of one block.
type taxBlock struct {
	elapsed, p50 time.Duration
	kindP50      [2]time.Duration // of the task units and the fanout units; 0 for none
	cpu          time.Duration    // this process's
	hostCPU      time.Duration    // the task hosts'; 0 when the kernel does not say
}

// hostsCPU returns how long the runtime's task hosts' threads have run on
// a CPU, from /proc/PID/task/TID/schedstat (nanoseconds, where
// /proc/PID/stat counts clock ticks; /proc/PID/schedstat is the main
// thread's alone), or 0 where that cannot be read. A thread that exited
// takes its time with it: a Go host's threads live as long as it does.
func hostsCPU(r *Runtime) time.Duration {
	r.pool.mu.Lock()
	pids := make([]int, 0, len(r.pool.all))
	for _, h := range r.pool.all {
		pids = append(pids, h.pid)
	}
	r.pool.mu.Unlock()
	var sum time.Duration
	for _, pid := range pids {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
		if err != nil || len(tasks) == 0 {
			return 0
		}
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			var ns int64
			if err == nil {
				_, err = fmt.Sscan(string(b), &ns)
			}
			if err != nil {
				return 0
			}
			sum += time.Duration(ns)
		}
	}
	return sum
}

// runBlock runs n units through the arm.
func (a *taxArm) runBlock(b *testing.B, n int) taxBlock {
	ctx := context.Background()
	goruntime.GC()
	pprof.SetGoroutineLabels(a.labels) // Submit's share of the block
	defer pprof.SetGoroutineLabels(ctx)
	host0, cpu0, start := hostsCPU(a.r), proccpu.Used(), time.Now()
	e2e := make([]time.Duration, 0, n)
	var byKind [2][]time.Duration // task, fanout
	for range n {
		if err := a.r.Submit(ctx, a.gen.Next()); err != nil {
			b.Fatal(err)
		}
		a.units++
	}
	for range n {
		res := <-a.results
		if res.Outcome != telemetry.OK && res.Class != "oversized action" { // mixed's fail-fast fanout shape
			b.Fatalf("unit %d: %s: %s", res.Seq, res.Class, res.Reason)
		}
		e2e = append(e2e, res.E2E)
		if k := kindIndex(res.Kind); k >= 0 {
			byKind[k] = append(byKind[k], res.E2E)
		}
	}
	if err := a.r.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	blk := taxBlock{elapsed: time.Since(start), cpu: proccpu.Used() - cpu0}
	if host1 := hostsCPU(a.r); host0 > 0 && host1 > host0 {
		blk.hostCPU = host1 - host0
	}
	slices.Sort(e2e)
	blk.p50 = e2e[len(e2e)/2]
	for k, d := range byKind {
		if len(d) > 0 {
			slices.Sort(d)
			blk.kindP50[k] = d[len(d)/2]
		}
	}
	return blk
}

// kindIndex is the index of taxBlock.kindP50 for units of kind k, or -1.
func kindIndex(k scenario.Kind) int {
	switch k {
	case scenario.KindTask:
		return 0
	case scenario.KindFanout:
		return 1
	}
	return -1
}

func benchTelemetryTax(b *testing.B, name string, block int) {
	sc, err := scenario.Builtin(name)
	if err != nil {
		b.Fatal(err)
	}
	set := testSettings(b)
	if *taxCalibrate < 0 {
		b.Fatalf("-tax.calibrate=%v: want a duration of CPU per unit, 0 (no calibration arm) or more", *taxCalibrate)
	}
	// Arm 0 is on, 1 off, 2 (with -tax.calibrate) the calibration arm.
	arms := []*taxArm{newTaxArm(b, sc, set, false, block, 0), newTaxArm(b, sc, set, true, block, 0)}
	if *taxCalibrate > 0 {
		arms = append(arms, newTaxArm(b, sc, set, true, block, *taxCalibrate))
	}
	for _, a := range arms {
		a.runBlock(b, block) // warm-up: hosts started, buffers grown, shapes learnt
	}

	// Per arm, per round: throughput, e2e p50, CPU per unit, host busy,
	// runtime/host CPU; then the task units' and the fanout units' e2e
	// p50 (0 for a kind the block has none of).
	const nMeasures = 7
	m := make([][nMeasures][]float64, len(arms))
	hosts := true
	round := 0
	for b.Loop() {
		// Each arm first, second (and third) as often as the others:
		// rotated by one each round, reversed every other cycle.
		n := len(arms)
		for j := range n {
			if (round/n)%2 == 1 {
				j = n - 1 - j
			}
			k := (j + round) % n
			a := arms[k]
			blk := a.runBlock(b, block)
			thr, cpu, hostCPU := float64(block)/blk.elapsed.Seconds(), float64(blk.cpu)/float64(block), float64(blk.hostCPU)/float64(block)
			hosts = hosts && hostCPU > 0
			for i, v := range [nMeasures]float64{thr, float64(blk.p50), cpu, thr * hostCPU, cpu / hostCPU, float64(blk.kindP50[0]), float64(blk.kindP50[1])} {
				m[k][i] = append(m[k][i], v)
			}
		}
		round++
	}
	b.StopTimer()
	if got, want := arms[0].r.Summary().Attribution.Works, arms[0].units; got != want {
		b.Fatalf("attribution covers %d units of the on arm, want %d", got, want)
	}
	if round < 2 {
		b.Logf("%d round: the ratios need two or more (-benchtime 100x)", round)
		return
	}
	// ratio reports the geometric mean of arm k's over off's, per round,
	// with its 95 % interval (MeanGain's paired gain is 1 - e^d, d the
	// mean log ratio).
	ratio := func(k, i int, name, lo, hi string) float64 {
		g := attribution.MeanGain(m[1][i], m[k][i], attribution.CompareOptions{Paired: true})
		b.ReportMetric(1-g.Value, name)
		if lo != "" {
			b.ReportMetric(1-g.Hi, lo)
			b.ReportMetric(1-g.Lo, hi)
		}
		return 1 - g.Value
	}
	var thr float64
	for i, name := range [...]string{"thr", "p50", "cpu", "busy", "rt/host"} {
		if i >= 3 && !hosts {
			break
		}
		r := ratio(0, i, name+"-ratio", name+"-lo", name+"-hi")
		if i == 0 {
			thr = r
		}
	}
	// Each kind's e2e p50, when every block of both arms had units of
	// both kinds (mixed; a ratio needs a median in each).
	everyBlock := func(i int) bool {
		return !slices.Contains(m[0][i], 0) && !slices.Contains(m[1][i], 0)
	}
	if everyBlock(5) && everyBlock(6) {
		ratio(0, 5, "p50task-ratio", "p50task-lo", "p50task-hi")
		ratio(0, 6, "p50fanout-ratio", "", "")
	}
	median := func(xs []float64) float64 { s := slices.Sorted(slices.Values(xs)); return s[len(s)/2] }
	b.ReportMetric(median(m[0][0]), "on-units/s")
	b.ReportMetric(median(m[1][0]), "off-units/s")
	if len(arms) < 3 {
		return
	}
	calThr := ratio(2, 0, "cal-thr-ratio", "cal-lo", "cal-hi")
	ratio(2, 1, "cal-p50-ratio", "", "")
	ratio(2, 2, "cal-cpu-ratio", "", "")
	// CPU per unit over off's, in µs: the median of the rounds' differences.
	extra := func(k int) float64 {
		d := make([]float64, len(m[k][2]))
		for r := range d {
			d[r] = m[k][2][r] - m[1][2][r]
		}
		return median(d) / 1e3
	}
	b.ReportMetric(extra(2), "cal-cpu-us")
	b.ReportMetric(extra(0), "on-cpu-us")
	if calThr < 1 {
		b.ReportMetric(taxCalibrate.Seconds()*1e6*math.Log(thr)/math.Log(calThr), "tax-us")
	}
}

// spinIterations returns how many rounds of spinFor take about d of CPU on
// this machine, timed over 20 ms now (the benchmark calls it before its
// rounds, with nothing else running).
func spinIterations(d time.Duration) int {
	const probe = 1 << 16
	n, start := 0, time.Now()
	for time.Since(start) < 20*time.Millisecond {
		spinFor(probe)
		n += probe
	}
	return max(1, int(float64(n)*d.Seconds()/time.Since(start).Seconds()))
}

// spinSink keeps spinFor's result alive, so the compiler keeps its loop.
var spinSink atomic.Uint64

// spinFor runs n rounds of a xorshift generator: CPU and registers only,
// no memory beyond them.
func spinFor(n int) {
	x := uint64(88172645463325252)
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	spinSink.Add(x)
}

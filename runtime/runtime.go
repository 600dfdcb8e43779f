package runtime

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/internal/proccpu"
	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// Span names and attributes the runtime adds (telemetry/doc.go lists them).
const (
	SpanDispatch = "runtime.dispatch"
	// SpanQueue is a unit's wait for a worker, inside runtime.dispatch.
	SpanQueue   = "runtime.queue"
	SpanHost    = "runtime.host"
	AttrHostID  = attribute.Key("amdahl.host.id")
	AttrHostPID = attribute.Key("amdahl.host.pid")
	AttrKind    = attribute.Key("amdahl.work.kind")
	AttrShape   = attribute.Key("amdahl.work.shape")
	AttrReason  = attribute.Key("amdahl.reason")
)

// Transport attribute values of units of work.
const (
	TransportIPC      = "ipc"
	TransportChunking = "chunking"
)

// Result is how one unit of work ended.
type Result struct {
	Seq     int
	Kind    scenario.Kind
	Shape   string
	Outcome telemetry.Outcome
	// Reason says why a unit failed or was cancelled; Class is its short,
	// stable form for grouping ("task host died", "oversized action", …).
	Reason string
	Class  string
	E2E    time.Duration
	// Outputs are the task's outputs (task units that ran to a result).
	Outputs map[string]string
}

// Runtime runs units of work: a bounded submission queue, Concurrency
// workers, a node pool of task hosts and a chunking sender to a sidecar.
// Submit, Wait and Close are safe for concurrent use.
type Runtime struct {
	cfg         Config
	set         Settings
	log         *slog.Logger
	unsubscribe func() // ends col's subscription to Config.Telemetry.Spans, if any
	col         *spans.Collector
	builder     attribution.Builder // the accounting goroutine's scratch space
	pool        *pool
	runID       string
	sender      *chunking.Sender
	cc          *grpc.ClientConn
	side        *chunking.Sidecar // the sidecar this process serves, or nil
	ownSide     bool              // side was started by New: Close closes it
	sideCh      chan error
	lease       *leaser
	breaker     *chunking.Breaker // nil with sidecar.breaker.open_after=0
	// payloads admits fanout completions by their payload bytes
	// (runtime.completion_bytes).
	payloads *byteBudget

	rt, rtChunk, hostComp, ipcComp *telemetry.Component
	tracer                         trace.Tracer
	phaseTP                        telemetry.PhaseTracer // the run's provider's (telemetry.PhaseTracerOf); nil: the OTel API
	// records, when not nil, are the names of a task unit's record's
	// spans: the run keeps a task unit's spans in its record (record.go)
	// when only the attribution reads them (the run's tracer is
	// telemetry/spans' with no Exporter), every unit is sampled (no
	// Config.Telemetry.Sampler), and the runtime's Component would do
	// nothing else with the unit's root, dispatch and queue (it records
	// no metrics and delays no phase of its own).
	records *recordNames

	queue    chan *unit
	stopping chan struct{}      // closed when no more work is accepted
	drainEnd context.CancelFunc // cancels the context of every running unit
	workers  sync.WaitGroup
	inflight sync.WaitGroup // units submitted and not yet ended

	mu          sync.Mutex
	acc         attribution.Accumulator
	byKind      map[scenario.Kind]*attribution.Accumulator
	counts      [3]int
	classes     map[string]int
	examples    map[string]string
	appliedBase int64 // the sidecar's Applied when the runtime started
	seq         atomic.Int64
	start       time.Time
	lastEnd     time.Time                   // when the last unit ended
	startCPU    time.Duration               // the process's CPU time at start
	e2e         e2eStats                    // every ended unit's, measured without telemetry
	e2eByKind   map[scenario.Kind]*e2eStats // the same per kind of unit (at most one entry a kind)

	// untraced: the sidecar calls carry no trace context
	// (Config.Telemetry.Propagator); completed: a unit has called it to complete.
	// Summary.SidecarUntraced is both.
	untraced  bool
	completed atomic.Bool

	smu     sync.Mutex // guards closed; orders Submit against Close
	closed  bool
	submits sync.WaitGroup // Submit calls under way

	closeOnce sync.Once
	closeErr  error
}

// rootContext is a context carrying the unit's root span only (metric
// exemplars); the running unit's own context is runUnit's.
func (u *unit) rootContext() context.Context {
	return trace.ContextWithSpan(context.Background(), u.rootSpan())
}

// rootSpan is the unit's root span (amdahl.work): its record's, or its
// WorkSpan's.
func (u *unit) rootSpan() trace.Span {
	if u.rec != nil {
		return &u.rec.root
	}
	return u.work.Span()
}

// dispSpan is the unit's runtime.dispatch span.
func (u *unit) dispSpan() trace.Span {
	if u.rec != nil {
		return &u.rec.disp
	}
	return u.disp.Span()
}

// endDispatchAt ends the dispatch phase at end (span and
// amdahl.phase.duration).
func (u *unit) endDispatchAt(end time.Time) {
	if u.rec != nil {
		u.rec.disp.endAt(end)
		return
	}
	u.disp.End(telemetry.EndedAt(end))
}

// unit is one unit of work in flight.
type unit struct {
	item   scenario.Item
	id     string
	work   telemetry.WorkSpan
	disp   telemetry.PhaseSpan // runtime.dispatch
	queued telemetry.PhaseSpan // runtime.queue, ended when a worker takes the unit
	// queueEnded: queued has ended (a leaf: its span is made then).
	queueEnded bool
	comp       *telemetry.Component
	start      time.Time
	outputs    map[string]string // the task's, once its host replied
	// rec, when not nil, is the unit's record, where its spans are kept
	// (a task unit sent straight to a host, with Runtime.records;
	// record.go): work, disp and queued are not used. It is allocated
	// with the unit (recordedUnit), so that other units stay small.
	rec *unitRecord
}

// recordedUnit is a unit and its record, in one allocation.
type recordedUnit struct {
	unit
	rec unitRecord
}

// New starts a Runtime: its instrumentation on the given providers, the sidecar connection (and the
// in-process sidecar), the work-item stream and the workers. Task hosts are
// spawned lazily. The caller must call Close.
func New(ctx context.Context, cfg Config) (_ *Runtime, err error) {
	if cfg.Settings.Nodes < 1 || cfg.Settings.Concurrency < 1 || cfg.Settings.Queue < 1 {
		return nil, errors.New("runtime: settings not resolved (use DefaultSettings or ResolveSettings)")
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	r := &Runtime{
		cfg: cfg, set: cfg.Settings, log: cfg.Logger,
		queue:     make(chan *unit, cfg.Settings.Queue),
		payloads:  newByteBudget(cfg.Settings.CompletionBytes),
		stopping:  make(chan struct{}),
		byKind:    map[scenario.Kind]*attribution.Accumulator{},
		e2eByKind: map[scenario.Kind]*e2eStats{},
		classes:   map[string]int{},
		examples:  map[string]string{},
		runID:     rand.Text()[:12],
	}
	drain, drainEnd := context.WithCancel(context.Background())
	r.drainEnd = drainEnd
	r.builder.Reuse = true
	r.col = spans.NewCollector(r.account)
	defer func() {
		if err != nil {
			r.drainEnd()
			_ = r.shutdownParts(context.Background())
		}
	}()
	tp, mp, chunkComp, err := r.instrument(cfg)
	if err != nil {
		return nil, err
	}
	if err := r.connect(ctx, cfg, tp, mp, chunkComp); err != nil {
		return nil, err
	}

	hostEnv := append(append([]string(nil), cfg.Hosts.Env...), cfg.Settings.childEnv()...)
	r.pool = newPool(cfg.Settings.Nodes, &hostConfig{
		argv: cfg.Hosts.Argv, env: hostEnv, transport: cfg.Settings.IPCTransport, logger: r.log, grace: cfg.Hosts.Grace,
		profileDir: cfg.Hosts.ProfileDir,
		ipcOpts:    append(cfg.Settings.ipcOptions(), ipc.WithTelemetry(r.ipcComp), ipc.WithMeterProvider(mp), ipc.WithLogger(r.log)),
	})
	r.start, r.startCPU = time.Now(), proccpu.Used()
	for range cfg.Settings.Concurrency {
		r.workers.Add(1)
		go r.worker(drain)
	}
	return r, nil
}

// instrument builds the components of the runtime and of the libraries
// it drives on the configured providers: the runtime's tracer
// (telemetry/spans) when no TracerProvider is given, its spans filed
// straight into the collector and, with Config.Telemetry.Export, exported;
// else the given provider, whose spans the collector takes from
// Config.Telemetry.Spans.
func (r *Runtime) instrument(cfg Config) (tp trace.TracerProvider, mp metric.MeterProvider, chunkComp *telemetry.Component, err error) {
	tp, mp = cfg.Telemetry.TracerProvider, cfg.Telemetry.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	switch {
	case tp != nil && (cfg.Telemetry.Export != nil || cfg.Telemetry.Resource != nil):
		return nil, nil, nil, errors.New("runtime: Config.Telemetry.Export and Resource are for the runtime's own tracer (no TracerProvider); with a TracerProvider, export through it")
	case tp == nil:
		res := cfg.Telemetry.Resource
		if res == nil && cfg.Telemetry.Export != nil {
			res = otelsetup.DefaultResource() // as an SDK provider's without one
		}
		own := spans.NewTracerProvider(spans.TracerConfig{Collector: r.col, Export: cfg.Telemetry.Export, Resource: res, Sampler: cfg.Telemetry.Sampler})
		tp = own
		defer func() {
			if err == nil && !own.PhaseAttributes() && cfg.Telemetry.Sampler == nil && !r.rt.RecordsMetrics() && len(cfg.Settings.delays()["runtime"]) == 0 {
				r.records = newRecordNames(own, r.col, r.rt, r.ipcComp, r.hostComp)
			}
		}()
	case cfg.Telemetry.Spans == nil:
		return nil, nil, nil, fmt.Errorf("runtime: attribution needs the run's spans: Config.Telemetry.TracerProvider is a %T, so set Config.Telemetry.Spans to where it records them (otelsetup.SDKSource for an SDK provider)", tp)
	default:
		r.unsubscribe = cfg.Telemetry.Spans.Subscribe(r.col.Ended)
	}
	attrs := func(transport string) []attribute.KeyValue {
		return []attribute.KeyValue{telemetry.AttrTransport.String(transport),
			telemetry.AttrScenario.String(cfg.Scenario), telemetry.AttrVariant.String(cfg.Settings.Variant)}
	}
	delays := cfg.Settings.delays()
	for _, c := range []struct {
		dst       **telemetry.Component
		name, tpt string
	}{{&r.rt, "runtime", TransportIPC}, {&r.rtChunk, "runtime", TransportChunking}, {&r.hostComp, "taskhost", TransportIPC},
		{&r.ipcComp, "ipc", TransportIPC}, {&chunkComp, "chunking", TransportChunking}} {
		if *c.dst, err = telemetry.NewComponent(c.name, telemetry.ComponentConfig{TracerProvider: tp, MeterProvider: mp,
			PhaseLabels: cfg.Telemetry.PhaseLabels, Attributes: attrs(c.tpt), Delay: delays[c.name]}); err != nil {
			return nil, nil, nil, err
		}
	}
	r.tracer = r.rt.Tracer()
	r.phaseTP = telemetry.PhaseTracerOf(tp)
	return tp, mp, chunkComp, nil
}

// HostPIDs returns the process ids of the live task hosts by host id.
func (r *Runtime) HostPIDs() map[int]int {
	out := map[int]int{}
	for _, h := range r.pool.hosts() {
		if !h.dead.Load() {
			out[h.id] = h.pid
		}
	}
	return out
}

// Submit queues one unit of work, blocking while the queue is full. Its
// end-to-end time starts now: queue wait is part of its dispatch phase.
// After Submit returns nil the unit ends in exactly one Result (OnResult,
// Summary), also if the runtime is closed first (cancelled). It returns
// ErrClosed after Close, or ctx's error if ctx ends while the queue is full
// (the unit is then not submitted).
func (r *Runtime) Submit(ctx context.Context, it scenario.Item) error {
	// Close waits for every Submit that got past this point, then drains
	// the queue itself, so no unit is left in it unaccounted for.
	r.smu.Lock()
	if r.closed {
		r.smu.Unlock()
		return ErrClosed
	}
	r.submits.Add(1)
	r.inflight.Add(1)
	r.smu.Unlock()
	defer r.submits.Done()
	var u *unit
	if r.records != nil && it.Kind == scenario.KindTask && !it.Task.Orchestration {
		ru := new(recordedUnit)
		ru.unit.rec = &ru.rec
		u = &ru.unit
	} else {
		u = new(unit)
	}
	u.item, u.id = it, fmt.Sprintf("%s%d", r.instancePrefix(), r.seq.Add(1))
	u.comp = r.rt // its transport attribute is the unit's
	if it.Kind == scenario.KindFanout {
		u.comp = r.rtChunk
	}
	if u.rec != nil {
		// A task unit of the taskhost shape keeps its spans in its
		// record (record.go): its root and dispatch begin now, and so
		// does its queue wait.
		u.start = time.Now()
		u.rec.begin(r.records, u, u.start)
	} else {
		r.startUnit(u)
	}
	select {
	case <-r.stopping:
		r.finish(u, telemetry.Cancelled, "cancelled", ErrClosed)
		return nil
	default:
	}
	select {
	case r.queue <- u:
		return nil
	case <-r.stopping:
		r.finish(u, telemetry.Cancelled, "cancelled", ErrClosed)
		return nil
	case <-ctx.Done():
		// Not submitted: forget the unit before ending its spans, so it is
		// neither attributed nor counted in amdahl.work.duration.
		r.dropUnit(u)
		u.queueEnded = true // its span is never made
		u.dispSpan().End()
		u.rootSpan().End()
		r.inflight.Done()
		return fmt.Errorf("runtime: submit: %w", ctx.Err())
	}
}

// startUnit starts unit u's root, dispatch and queue wait.
func (r *Runtime) startUnit(u *unit) {
	// Every unit is a root of its own trace (no span in its context); its
	// attributes are set only where something reads them.
	root := context.Background()
	var wctx context.Context
	if u.comp.SpanAttributes() {
		wctx, u.work = u.comp.StartWork(root, telemetry.AttrWorkID.String(u.id), AttrKind.String(u.item.Kind.String()), AttrShape.String(u.item.Shape))
	} else {
		wctx, u.work = u.comp.StartWork(root)
	}
	u.start = u.work.Start()
	// A sampled root's unit is attributed: the collector hands its spans
	// to account when the root ends.
	if u.item.Kind == scenario.KindTask && !u.item.Task.Orchestration {
		// A task sent straight to a host: every span of its trace in this
		// process starts under its root (the host's come in its reply).
		r.col.TrackDirect(u.work.Span(), u)
	} else {
		r.col.Track(u.work.Span(), u)
	}
	// Dispatch and the queue wait begin when the unit does: one clock read.
	dctx, disp := u.comp.Start(wctx, telemetry.Dispatch, telemetry.None, telemetry.Detached(), telemetry.StartedAt(u.start))
	u.disp = disp
	// The wait for a worker (Submit blocked on a full queue, then queued)
	// is its own row: load, not code.
	_, u.queued = u.comp.Start(dctx, telemetry.Queue, telemetry.None, telemetry.Leaf(), telemetry.Detached(), telemetry.StartedAt(u.start))
}

// dropUnit keeps a unit that was not submitted from being accounted.
func (r *Runtime) dropUnit(u *unit) {
	if u.rec != nil {
		u.rec.drop()
		return
	}
	r.col.Forget(u.work.Span())
}

// worker runs units until Close; drain ends when running units must stop.
func (r *Runtime) worker(drain context.Context) {
	defer r.workers.Done()
	for {
		// Stopping wins over queued work: once Close has begun, no new
		// unit starts (select alone would pick at random).
		select {
		case <-r.stopping:
			r.cancelQueued()
			return
		default:
		}
		select {
		case u := <-r.queue:
			r.runUnit(drain, u)
		case <-r.stopping:
			r.cancelQueued()
			return
		}
	}
}

// cancelQueued reports every unit still queued as cancelled: none is lost.
func (r *Runtime) cancelQueued() {
	for {
		select {
		case u := <-r.queue:
			r.finish(u, telemetry.Cancelled, "cancelled", errors.New("the run was stopped before this unit started"))
		default:
			return
		}
	}
}

// runUnit runs one unit of work on the worker's goroutine.
func (r *Runtime) runUnit(drain context.Context, u *unit) {
	r.endQueue(u)
	// The unit's context carries its root span and ends with the drain.
	ctx := trace.ContextWithSpan(drain, u.rootSpan())
	var err error
	var class string
	outcome := telemetry.OK
	switch u.item.Kind {
	case scenario.KindTask:
		class, err = r.runTask(ctx, u)
	case scenario.KindFanout:
		class, err = r.runFanout(ctx, u)
	default:
		class, err = "bad item", fmt.Errorf("unit %d: unknown kind %v", u.item.Seq, u.item.Kind)
	}
	if err != nil {
		outcome = telemetry.Failed
		// Cut off by the end of the drain: whatever the error looks like (a
		// gRPC Canceled status does not match context.Canceled), the unit
		// was cancelled, not failed.
		if drain.Err() != nil {
			outcome, class = telemetry.Cancelled, "cancelled"
		}
	}
	r.finish(u, outcome, class, err)
}

// finish ends the unit's spans (once) and records its result.
func (r *Runtime) finish(u *unit, o telemetry.Outcome, class string, err error) {
	r.endQueue(u)
	if u.dispSpan().IsRecording() {
		u.endDispatchAt(time.Now())
	}
	var e2e time.Duration
	if u.rec != nil {
		e2e = u.rec.end(time.Now(), u.start, o)
	} else {
		if err != nil {
			u.work.Span().SetAttributes(AttrReason.String(class))
		}
		e2e = u.work.End(o, err)
	}
	res := Result{Seq: u.item.Seq, Kind: u.item.Kind, Shape: u.item.Shape, Outcome: o, Class: class, E2E: e2e, Outputs: u.outputs}
	if err != nil {
		res.Reason = err.Error()
	}
	r.mu.Lock()
	r.counts[o]++
	r.lastEnd = time.Now()
	r.e2e.add(e2e)
	k := r.e2eByKind[u.item.Kind]
	if k == nil {
		k = new(e2eStats)
		r.e2eByKind[u.item.Kind] = k
	}
	k.add(e2e)
	if o != telemetry.OK {
		r.classes[class]++
		if _, ok := r.examples[class]; !ok {
			r.examples[class] = res.Reason
		}
	}
	r.mu.Unlock()
	if r.cfg.OnResult != nil {
		r.cfg.OnResult(res)
	}
	r.inflight.Done()
}

// account attributes a unit's spans, on the collector's accounting
// goroutine, in the builder's scratch space.
func (r *Runtime) account(sp []spans.Span, owner any) {
	r.acc.AddDiagnostics(r.builder.EachTree(sp, func(w attribution.Work) { r.onWork(w, owner) }))
}

// onWork receives each unit's attribution from the collector's
// accounting goroutine. A unit is added to its kind's accumulator only:
// Summary merges them (adding each unit twice, to the run's and to its
// kind's, cost as much again as its tree).
func (r *Runtime) onWork(w attribution.Work, owner any) {
	u, _ := owner.(*unit)
	r.mu.Lock()
	acc := &r.acc // units of no known kind, and the diagnostics
	if u != nil {
		acc = r.byKind[u.item.Kind]
		if acc == nil {
			acc = &attribution.Accumulator{}
			r.byKind[u.item.Kind] = acc
		}
	}
	r.mu.Unlock()
	acc.Add(w)
	if r.cfg.OnWork != nil {
		// w's Stats and Nodes are the collector's scratch space.
		r.cfg.OnWork(attribution.Work{Root: w.Root, Stats: slices.Clone(w.Stats), Nodes: slices.Clone(w.Nodes)})
	}
	if u == nil || !u.comp.RecordsMetrics() {
		return
	}
	ctx := u.rootContext()
	for _, s := range w.Stats {
		if s.Key.Gap {
			u.comp.RecordCriticalGap(ctx, s.Key.Component, s.Key.Op, s.Critical)
			continue
		}
		u.comp.RecordCritical(ctx, s.Key.Component, s.Key.Phase, s.Key.Direction, s.Critical)
	}
}

// endQueue ends the queue phase, once: when a worker takes the unit, or
// when the unit ends without having run.
func (r *Runtime) endQueue(u *unit) {
	if !u.queueEnded {
		u.queueEnded = true
		if u.rec != nil {
			u.rec.setSlot(slotQueue, u.start.UnixNano(), time.Now().UnixNano())
			return
		}
		u.queued.End()
	}
}

// endDispatch ends the dispatch phase (span and amdahl.phase.duration).
func (r *Runtime) endDispatch(u *unit) { u.endDispatchAt(time.Now()) }

// Wait blocks until every submitted unit has ended and been accounted
// (Summary, OnWork), or ctx ends.
func (r *Runtime) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { r.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return r.col.Flush(ctx)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops accepting work, reports queued units as cancelled, lets
// running units finish for up to DrainTimeout (then cancels them), stops
// every task host gracefully, the work-item stream, the sidecar connection
// and the in-process sidecar, and shuts telemetry down. Safe to call more
// than once; ctx bounds the shutdown of hosts and telemetry.
func (r *Runtime) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		r.smu.Lock()
		r.closed = true
		r.smu.Unlock()
		close(r.stopping)
		timer := time.AfterFunc(r.cfg.DrainTimeout, r.drainEnd)
		r.submits.Wait()
		r.workers.Wait()
		r.cancelQueued() // put there by a Submit racing the workers' exit
		timer.Stop()
		r.inflight.Wait()
		r.drainEnd()
		r.closeErr = r.shutdownParts(ctx)
	})
	return r.closeErr
}

func (r *Runtime) shutdownParts(ctx context.Context) error {
	var errs []error
	if r.pool != nil {
		errs = append(errs, r.pool.close(ctx))
	}
	r.breaker.Close() // its probes may wake the lease
	if r.lease != nil {
		r.lease.close()
	}
	if r.cc != nil {
		errs = append(errs, r.cc.Close())
	}
	if r.side != nil && r.ownSide {
		// The in-process sidecar drains its calls in flight, for at most 5 s.
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		errs = append(errs, r.side.Close(sctx))
		cancel()
		if r.sideCh != nil {
			errs = append(errs, <-r.sideCh)
		}
	}
	if r.unsubscribe != nil {
		r.unsubscribe()
	}
	r.col.Close() // accounts for every unit ended
	return errors.Join(errs...)
}

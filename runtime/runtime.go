package runtime

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/internal/grpctrace"
	"github.com/amdahl-rt/amdahl/internal/proccpu"
	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/ipc/taskproto"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
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

// Config configures a Runtime. Settings is required (DefaultSettings or
// ResolveSettings); every other field has a default.
type Config struct {
	Settings Settings
	// Scenario labels every span and metric (amdahl.scenario).
	Scenario string
	// HostArgv is the program and arguments of a task host; default: this
	// executable with the argument "taskhost" (amdahl's hidden command).
	// Any program that calls ServeHost will do.
	HostArgv []string
	// HostEnv is added to the environment of every task host.
	HostEnv []string
	// HostGrace bounds each step of a host's graceful shutdown (default 2s).
	HostGrace time.Duration
	// HostProfileDir, if set, makes every task host write cpu.pprof and
	// heap.pprof into HostProfileDir/host-<id>/.
	HostProfileDir string
	// SidecarAddr is the address (host:port) of a TaskHubSidecarService to
	// complete to; "" starts an in-process sidecar on 127.0.0.1:0, which
	// Close closes.
	SidecarAddr string
	// Sidecar, if set, is the sidecar this process serves at SidecarAddr,
	// started by the caller, who closes it after the runtime's Close: the
	// runtime counts the completions it applied (Summary.SidecarApplied,
	// from Sidecar.Applied) and drains the kept ones, so a sidecar without
	// SidecarConfig.OnApplied keeps no payloads either.
	Sidecar *chunking.Sidecar
	// SidecarCredentials secure the connection to SidecarAddr, e.g.
	// credentials.NewTLS with the CA that signed the sidecar's
	// certificate; nil dials plaintext. Only with SidecarAddr.
	SidecarCredentials credentials.TransportCredentials
	// SidecarToken, if not empty, is sent on every call to SidecarAddr as
	// "authorization: Bearer <token>" (chunking.SidecarConfig.Token is the
	// server's side). It travels over TLS (SidecarCredentials), or over
	// plaintext only to a loopback address (an IP literal or "localhost",
	// never resolved): New refuses to send it in clear to anything else.
	// Only with SidecarAddr.
	SidecarToken string
	// SidecarConnectTimeout bounds the check New makes that SidecarAddr
	// answers (default 5s): it waits up to this long for a connection (and
	// the TLS handshake) and one call to go through, so that an
	// unreachable sidecar, an untrusted certificate or a refused token
	// fails New, naming the address, rather than every unit later.
	SidecarConnectTimeout time.Duration
	// Retry is the per-call retry budget of the chunking sender and of
	// StartInstance; its zero fields take the settings sidecar.retry.*
	// (MaxAttempts, BaseDelay, MaxDelay) and chunking's default jitter.
	Retry chunking.RetryPolicy
	// LeaseTimeout bounds the wait for a unit's orchestration work item
	// after StartInstance (default 1 minute); past it the unit fails with
	// ErrLeaseTimeout.
	LeaseTimeout time.Duration
	// DrainTimeout bounds how long units already running may take to finish
	// once the run's context ends (default 10s); after it they are
	// cancelled.
	DrainTimeout time.Duration
	// TracerProvider and MeterProvider instrument the runtime and the ipc
	// and chunking it drives; the runtime never sets up the process's
	// telemetry (amdahl's command does, with package telemetry/otelsetup,
	// and passes it with UseTelemetry). Attribution needs every ended span
	// of the run: New registers its span processor on Spans, or on
	// TracerProvider when that is an *sdktrace.TracerProvider, and
	// unregisters it at Close. With no TracerProvider the runtime traces
	// with its own tracer, which hands its spans straight to attribution
	// and exports nothing: no SDK span is made (UseTelemetry leaves it nil
	// when nothing set up would read the spans but attribution). A nil
	// MeterProvider is the otel global one.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Spans          SpanProcessorRegistry
	// SpanExport, with no TracerProvider, makes the runtime's own tracer
	// hand every span it records to this processor as well, ended and
	// whole, as an SDK span processor would get it (OnEnd, never
	// OnStart): its name, attributes, kind, events, links and status,
	// with SpanResource as its resource (nil: resource.Default(), as an
	// SDK provider's). That is how amdahl run writes its
	// trace file without SDK spans (UseTelemetry with
	// otelsetup.Telemetry.TraceFileOnly). The runtime does not shut it
	// down: its owner does, after Close. New refuses either with a
	// TracerProvider, whose spans it would never see.
	SpanExport   sdktrace.SpanProcessor
	SpanResource *resource.Resource
	// Sampler, with no TracerProvider, decides which units the runtime's
	// own tracer samples, as an SDK provider's sampler would decide for
	// the unit's root (its children follow it, as under the samplers
	// OTEL_TRACES_SAMPLER names): only those are attributed (and
	// exported, with SpanExport); the others record no span and cost
	// little. nil samples every unit. UseTelemetry sets it from
	// otelsetup.Telemetry.Sampler (OTEL_TRACES_SAMPLER). With a
	// TracerProvider, the provider's sampler decides.
	Sampler sdktrace.Sampler
	// Propagator decides whether a unit's trace context crosses its gRPC
	// calls to the sidecar: it does, as a W3C traceparent, when
	// Propagator is nil or its Fields include "traceparent", and the
	// calls carry nothing of it otherwise (no baggage either way).
	// UseTelemetry sets it from otelsetup.Telemetry.Propagator
	// (OTEL_PROPAGATORS). Without it the sidecar's phases
	// (chunking.deserialize, chunking.execute) start traces of their own:
	// the in-process sidecar's drop out of the attribution, and an
	// external sidecar that traces exports them as unrelated traces. It
	// is for a sidecar that reads no trace context, where the header is
	// cost only (about 1.7 KB and 15 allocations a call: BenchmarkCall in
	// internal/grpctrace). The task hosts' pipe carries the trace context
	// in its own message field regardless.
	Propagator propagation.TextMapPropagator
	// PhaseLabels runs every phase body under the pprof label
	// phase=<name> (telemetry.ComponentConfig.PhaseLabels).
	PhaseLabels bool
	// AccountRemoteDirectly hands a task host's phases, which the parent
	// synthesises from the host's reply timings, straight to the
	// attribution (with amdahl.phase.duration recorded as before) instead
	// of making SDK spans of them (taskhost.<phase>, amdahl.remote=true)
	// that only the attribution would read: four fewer spans per task.
	// Set it only when nothing else on TracerProvider wants those spans;
	// UseTelemetry sets it when the telemetry's exporters, trace file and
	// recorder would leave them out (otelsetup's RemoteSpansWanted).
	AccountRemoteDirectly bool
	// OnResult, if set, is called once per unit of work as it ends, from
	// the runtime's goroutines (it must be safe for concurrent use and
	// quick).
	OnResult func(Result)
	// Logger receives host output and lifecycle events (default
	// slog.Default()).
	Logger *slog.Logger
	// MaxInFlight, for Run: submit a unit only while fewer than this many
	// are in flight (0: as fast as the queue takes them). With MaxInFlight
	// at most runtime.nodes, units do not wait for a host or in the queue:
	// a run measures the code, not the queue (amdahl ab's default).
	MaxInFlight int
	// OnWork, if set, receives each attributed unit of work (its critical
	// path, rows and tree) soon after it ends, from the runtime's
	// accounting goroutine (one at a time; Wait and Close return after the
	// last); it must be quick. The runtime
	// itself keeps nothing per unit: OnWork is how a caller (amdahl ab)
	// keeps units for a comparison.
	OnWork func(attribution.Work)
	// ByPhase folds the summary's attribution rows of different components
	// (ipc.send/request, chunking.send/request) into one row per phase and
	// direction.
	ByPhase bool
}

// SpanProcessorRegistry is where the runtime registers the span processor
// that assembles each unit of work for attribution: an
// *sdktrace.TracerProvider, or an *otelsetup.Telemetry.
type SpanProcessorRegistry interface {
	RegisterSpanProcessor(sdktrace.SpanProcessor)
	UnregisterSpanProcessor(sdktrace.SpanProcessor)
}

// UseTelemetry makes the runtime record through tel's providers, with its
// phase-label setting, and register its span processor on it. The caller
// keeps owning tel: shut it down after Close, which flushes what the run's
// last units exported.
//
// When nothing tel set up would read the run's spans but the attribution
// (tel.SpansOnlyForAttribution: no exporter, trace file, recorder, span
// processor, sampler of the program's or Pyroscope), the runtime records
// them with its own tracer rather than tel's SDK (TracerProvider nil):
// the attribution is the same and costs a fraction of the SDK's. When
// tel's trace file is the only other reader (tel.TraceFileOnly), the own
// tracer hands the file's writer every span too (SpanExport).
func (c *Config) UseTelemetry(tel *otelsetup.Telemetry) {
	c.TracerProvider, c.MeterProvider, c.Spans, c.PhaseLabels = tel.TracerProvider(), tel.MeterProvider(), tel, tel.PhaseLabels()
	c.AccountRemoteDirectly = !tel.RemoteSpansWanted()
	c.SpanExport, c.SpanResource, c.Sampler, c.Propagator = nil, nil, tel.Sampler(), tel.Propagator()
	if tel.SpansOnlyForAttribution() {
		c.TracerProvider, c.Spans = nil, nil
	} else if proc, res := tel.TraceFileOnly(); proc != nil {
		c.TracerProvider, c.Spans, c.SpanExport, c.SpanResource = nil, nil, proc, res
	}
}

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
	cfg     Config
	set     Settings
	log     *slog.Logger
	spans   SpanProcessorRegistry // where col is registered, if on an SDK
	col     *collector
	pool    *pool
	runID   string
	sender  *chunking.Sender
	cc      *grpc.ClientConn
	side    *chunking.Sidecar // the sidecar this process serves, or nil
	ownSide bool              // side was started by New: Close closes it
	sideCh  chan error
	lease   *leaser
	breaker *chunking.Breaker // nil with sidecar.breaker.open_after=0

	rt, rtChunk, hostComp *telemetry.Component
	tracer                trace.Tracer
	own                   telemetry.PhaseTracer // the runtime's own tracer, when it is the run's
	// records, when not nil, are the names of a task unit's record's
	// spans: the run keeps a task unit's spans in its record (record.go)
	// when only the attribution and at most the trace file read them (own
	// is an accountingProvider, or an exportingProvider: the record hands
	// the file its spans), every unit is sampled (no Config.Sampler),
	// and the runtime's Component would do nothing else with the unit's
	// root, dispatch and queue (it records no metrics and delays no
	// phase of its own).
	records *recordNames
	phaseTP telemetry.PhaseTracer // own, or the run's provider's (telemetry.PhaseTracerOf); nil: the OTel API

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
	// (Config.Propagator); completed: a unit has called it to complete.
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
	u.disp.EndAt(end)
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
		stopping:  make(chan struct{}),
		byKind:    map[scenario.Kind]*attribution.Accumulator{},
		e2eByKind: map[scenario.Kind]*e2eStats{},
		classes:   map[string]int{},
		examples:  map[string]string{},
		runID:     rand.Text()[:12],
	}
	drain, drainEnd := context.WithCancel(context.Background())
	r.drainEnd = drainEnd
	r.col = newCollector(r.onWork, r.acc.AddDiagnostics)
	defer func() {
		if err != nil {
			r.drainEnd()
			_ = r.shutdownParts(context.Background())
		}
	}()
	tp, mp, ipcComp, chunkComp, err := r.instrument(cfg)
	if err != nil {
		return nil, err
	}
	if err := r.connect(ctx, cfg, tp, mp, chunkComp); err != nil {
		return nil, err
	}

	hostEnv := append(append([]string(nil), cfg.HostEnv...), cfg.Settings.childEnv()...)
	r.pool = newPool(cfg.Settings.Nodes, &hostConfig{
		argv: cfg.HostArgv, env: hostEnv, transport: cfg.Settings.IPCTransport, logger: r.log, grace: cfg.HostGrace,
		profileDir: cfg.HostProfileDir,
		ipcOpts:    append(cfg.Settings.ipcOptions(), ipc.WithTelemetry(ipcComp), ipc.WithMeterProvider(mp), ipc.WithLogger(r.log)),
	})
	r.start, r.startCPU = time.Now(), proccpu.Used()
	for range cfg.Settings.Concurrency {
		r.workers.Add(1)
		go r.worker(drain)
	}
	return r, nil
}

// defaults fills the fields of c left zero.
func (c *Config) defaults() error {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.HostGrace <= 0 {
		c.HostGrace = 2 * time.Second
	}
	if c.LeaseTimeout <= 0 {
		c.LeaseTimeout = time.Minute
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 10 * time.Second
	}
	if c.Scenario == "" {
		c.Scenario = "custom"
	}
	if len(c.HostArgv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("runtime: find this executable for task hosts: %w", err)
		}
		c.HostArgv = []string{exe, "taskhost"}
	}
	return nil
}

// instrument registers the attribution span processor and builds the
// components of the runtime and of the libraries it drives on the
// configured providers.
func (r *Runtime) instrument(cfg Config) (tp trace.TracerProvider, mp metric.MeterProvider, ipcComp, chunkComp *telemetry.Component, err error) {
	tp, mp = cfg.TracerProvider, cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	spans := cfg.Spans
	if tp != nil && (cfg.SpanExport != nil || cfg.SpanResource != nil) {
		return nil, nil, nil, nil, errors.New("runtime: Config.SpanExport and SpanResource are for the runtime's own tracer (no TracerProvider); with a TracerProvider, register the span processor on it")
	}
	if tp == nil && cfg.SpanExport != nil {
		// Attribution and one span processor (the trace file) read the
		// spans: the runtime's own tracer hands them to both.
		res := cfg.SpanResource
		if res == nil {
			res = resource.Default() // as an SDK provider's without one
		}
		r.own = newExportingProvider(r.col, cfg.SpanExport, res, cfg.Sampler)
		tp, spans = r.own, nil
	} else if tp == nil {
		// Nothing but attribution reads the spans: the runtime's own
		// tracer hands them to the collector without the SDK.
		r.own = newAccountingProvider(r.col, cfg.Sampler)
		tp, spans = r.own, nil
	} else if spans == nil {
		sdk, ok := tp.(*sdktrace.TracerProvider)
		if !ok {
			return nil, nil, nil, nil, fmt.Errorf("runtime: attribution needs the run's spans: Config.TracerProvider is a %T, so set Config.Spans to the SDK provider it records into", tp)
		}
		spans = sdk
	}
	if spans != nil {
		spans.RegisterSpanProcessor(r.col)
		r.spans = spans
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
		{&ipcComp, "ipc", TransportIPC}, {&chunkComp, "chunking", TransportChunking}} {
		if *c.dst, err = telemetry.NewComponent(c.name, telemetry.ComponentConfig{TracerProvider: tp, MeterProvider: mp,
			PhaseLabels: cfg.PhaseLabels, Attributes: attrs(c.tpt), Delay: delays[c.name]}); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	r.tracer = r.rt.Tracer()
	if cfg.Sampler == nil && !r.rt.RecordsMetrics() && len(delays["runtime"]) == 0 {
		switch own := r.own.(type) {
		case *accountingProvider:
			r.records = newRecordNames(&own.tracer, r.rt, ipcComp, r.hostComp)
		case *exportingProvider:
			// The trace file reads the spans too: the record hands
			// them to it, through the tracer of the Components' scope.
			r.records = newRecordNames(own.phaseTracer.t, r.rt, ipcComp, r.hostComp)
			r.records.rootAttrs = attrs(TransportIPC)
		}
	}
	r.phaseTP = r.own
	if r.phaseTP == nil {
		r.phaseTP = telemetry.PhaseTracerOf(tp)
	}

	return tp, mp, ipcComp, chunkComp, nil
}

// isLeaseMethod reports whether method (a gRPC method's name) is one of
// the lease's calls: the leaser's, not a unit's work. They get no client
// span. otelgrpc's filter still injects their trace context; grpctrace's
// Skip injects none, which changes no row: the sidecar makes no span for
// them (TestAccountingMatchesSDK runs both).
func isLeaseMethod(method string) bool { return method == "StartInstance" || method == "GetWorkItems" }

// traceparentField is the W3C trace context's header, among the Fields of
// a propagator that carries it (Config.Propagator).
const traceparentField = "traceparent"

// connect starts the in-process sidecar when there is none to complete
// to, then the client, the chunking sender and the work-item stream. An
// external sidecar must answer within SidecarConnectTimeout.
func (r *Runtime) connect(ctx context.Context, cfg Config, tp trace.TracerProvider, mp metric.MeterProvider, chunkComp *telemetry.Component) (err error) {
	// The gRPC calls' own spans (otelgrpc's, client and in-process
	// server): when only the attribution reads the run's spans they are
	// not made. The trace context still crosses each call (a no-op tracer
	// carries its parent's span context, which otelgrpc propagates; with
	// no metrics read either, internal/grpctrace carries it instead of
	// otelgrpc), so the sidecar's phases stay in the unit's trace, under
	// the span that made the call; a gRPC span is no phase, so its time
	// counted toward the phase around it, as it now does without it
	// (TestGRPCSpansChangeNoRow attributes a run's units with and without
	// them).
	rpcTP := tp
	if r.own != nil && !r.own.PhaseAttributes() {
		rpcTP = tracenoop.NewTracerProvider()
	}
	// Sidecar: one the caller serves, in-process on loopback, or the one at
	// SidecarAddr.
	addr := cfg.SidecarAddr
	r.side = cfg.Sidecar
	if r.side != nil && addr == "" {
		return errors.New("runtime: Config.Sidecar without Config.SidecarAddr: say where it is served")
	}
	if r.side != nil {
		r.appliedBase = r.side.Applied()
	}
	if addr == "" && (cfg.SidecarCredentials != nil || cfg.SidecarToken != "") {
		return errors.New("runtime: Config.SidecarCredentials or Config.SidecarToken without Config.SidecarAddr: they are for an external sidecar")
	}
	if cfg.SidecarConnectTimeout < 0 {
		return fmt.Errorf("runtime: Config.SidecarConnectTimeout is %v, want ≥ 0 (0 takes the default %v)", cfg.SidecarConnectTimeout, defaultSidecarConnectTimeout)
	}
	creds := cfg.SidecarCredentials
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if cfg.SidecarToken != "" {
		secure := cfg.SidecarCredentials != nil
		if !secure && !loopbackAddr(addr) {
			return fmt.Errorf("runtime: sidecar %s: Config.SidecarToken would travel in clear to an address that is not loopback; set Config.SidecarCredentials (TLS)", addr)
		}
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{md: map[string]string{"authorization": "Bearer " + cfg.SidecarToken}, secure: secure}))
	}
	if addr == "" {
		r.ownSide = true
		if r.side, err = chunking.NewSidecar(chunking.SidecarConfig{Component: chunkComp, TracerProvider: rpcTP, MeterProvider: mp,
			// A worker goroutine for each unit in flight and one for the
			// work-item stream: no call grows a new goroutine's stack.
			StreamWorkers: min(cfg.Settings.Concurrency+1, chunking.MaxStreamWorkers),
			// Count, keep nothing: the payloads are garbage once applied.
			OnApplied: func(chunking.Completion) {}}); err != nil {
			return err
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("runtime: in-process sidecar: %w", err)
		}
		addr = lis.Addr().String()
		r.sideCh = make(chan error, 1)
		go func() { r.sideCh <- r.side.Serve(lis) }()
	}
	var tracing []grpc.DialOption
	traceContext := cfg.Propagator == nil || slices.Contains(cfg.Propagator.Fields(), traceparentField)
	r.untraced = !traceContext
	suffices := grpctrace.Suffices(rpcTP, mp)
	switch {
	case suffices && !traceContext:
		// Nothing reads a call's span or its RPC metrics, and no trace
		// context is to cross: no handler at all.
	case suffices:
		// Nothing reads a call's span or its RPC metrics: the trace
		// context is all otelgrpc would carry, and interceptors carry it
		// without a stats handler's events (internal/grpctrace).
		tc := grpctrace.Client{Skip: isLeaseMethod}
		tracing = append(tracing, grpc.WithChainUnaryInterceptor(tc.Unary()), grpc.WithChainStreamInterceptor(tc.Stream()))
	default:
		var prop propagation.TextMapPropagator = propagation.TraceContext{}
		if !traceContext {
			prop = propagation.NewCompositeTextMapPropagator() // carries nothing
		}
		notLease := func(info *stats.RPCTagInfo) bool { return !isLeaseMethod(grpctrace.MethodName(info.FullMethodName)) }
		tracing = append(tracing, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(rpcTP), otelgrpc.WithMeterProvider(mp),
			otelgrpc.WithPropagators(prop), otelgrpc.WithFilter(notLease))))
	}
	r.cc, err = grpc.NewClient(addr, append(append(tracing, dial...),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(chunking.DefaultMaxRecvMsgSize)))...)
	if err != nil {
		return fmt.Errorf("runtime: sidecar %s: %w", addr, err)
	}
	if cfg.SidecarAddr != "" {
		if err := probeSidecar(ctx, addr, dial, cfg.SidecarConnectTimeout); err != nil {
			return err
		}
	}
	planner, err := chunking.NewPlanner(chunking.PlannerConfig{
		MaxChunkBytes: cfg.Settings.MaxChunkBytes, Algorithm: cfg.Settings.ChunkAlgorithm,
		Accounting: cfg.Settings.ChunkAccounting, LargePayloads: cfg.Settings.LargePayloads,
		Component: chunkComp, MeterProvider: mp,
	})
	if err != nil {
		return err
	}
	retry := cfg.Retry
	if retry.MaxAttempts == 0 {
		retry.MaxAttempts = cfg.Settings.RetryAttempts
	}
	if retry.BaseDelay == 0 {
		retry.BaseDelay = cfg.Settings.RetryBaseDelay
	}
	if retry.MaxDelay == 0 {
		retry.MaxDelay = cfg.Settings.RetryMaxDelay
	}
	wake := make(chan struct{}, 1) // the breaker closed: the stream reconnects at once
	if cfg.Settings.BreakerOpenAfter > 0 {
		if r.breaker, err = r.newBreaker(addr, dial, cfg.Settings, wake); err != nil {
			return err
		}
	}
	if r.sender, err = chunking.NewSender(r.cc, chunking.SenderConfig{Planner: planner, Retry: retry, Component: chunkComp, MeterProvider: mp, Breaker: r.breaker}); err != nil {
		return err
	}
	r.lease = startLeaser(r.cc, r.sender, r.breaker, wake, r.instancePrefix(), cfg.LeaseTimeout, cfg.Settings.LargePayloads, r.log)
	return nil
}

// newBreaker returns the circuit breaker of the sidecar connection: it
// opens once the sidecar at addr has been unreachable for
// sidecar.breaker.open_after, and then probes it every
// sidecar.breaker.probe_interval on a connection of its own (untraced,
// like New's probe), waking the run's connection to reconnect at once
// each time. When it closes, the work-item stream reconnects at once.
func (r *Runtime) newBreaker(addr string, dial []grpc.DialOption, set Settings, wake chan<- struct{}) (*chunking.Breaker, error) {
	return chunking.NewBreaker(chunking.BreakerConfig{
		OpenAfter: set.BreakerOpenAfter, ProbeInterval: set.BreakerProbe,
		Probe: func(ctx context.Context) error {
			r.cc.ResetConnectBackoff()
			if err := probeCall(ctx, addr, dial); err != nil {
				return fmt.Errorf("probe: %w", err)
			}
			return nil
		},
		OnChange: func(open bool, err error) {
			if open {
				r.log.Warn("runtime: sidecar unreachable; circuit breaker open: units that need it fail at once (class \""+ClassSidecarUnavailable+"\") until a probe reaches it",
					"addr", addr, "open_after", set.BreakerOpenAfter, "probe_interval", set.BreakerProbe, "err", err)
				return
			}
			r.log.Info("runtime: sidecar reachable again; circuit breaker closed", "addr", addr)
			select {
			case wake <- struct{}{}:
			default:
			}
		},
	})
}

// ClassSidecarUnavailable is the class of a unit that failed because the
// sidecar's circuit breaker was open (chunking.ErrSidecarUnavailable).
const ClassSidecarUnavailable = "sidecar unavailable"

// sidecarClass is the class of a unit that failed at the sidecar with
// err: ClassSidecarUnavailable if the breaker refused a call, else class.
func sidecarClass(class string, err error) string {
	if errors.Is(err, chunking.ErrSidecarUnavailable) {
		return ClassSidecarUnavailable
	}
	return class
}

// instancePrefix starts the orchestration instance id of every unit of
// this Runtime: other runs may share an external sidecar.
func (r *Runtime) instancePrefix() string { return "amdahl-" + r.runID + "-" }

// SidecarAddr returns the address of the sidecar the runtime completes to.
func (r *Runtime) SidecarAddr() string { return r.cc.Target() }

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
	recorded := r.records != nil && it.Kind == scenario.KindTask && !it.Task.Orchestration
	var u *unit
	if recorded {
		ru := new(recordedUnit)
		u = &ru.unit
		u.rec = &ru.rec
	} else {
		u = new(unit)
	}
	u.item, u.id = it, fmt.Sprintf("%s%d", r.instancePrefix(), r.seq.Add(1))
	u.comp = r.rt // its transport attribute is the unit's
	if it.Kind == scenario.KindFanout {
		u.comp = r.rtChunk
	}
	if recorded {
		// A task unit of the taskhost shape keeps its spans in its
		// record (record.go): its root and dispatch begin now, and so
		// does its queue wait.
		u.start = time.Now()
		u.rec.begin(r.records, u, u.start)
		if u.rec.exp != nil {
			u.rec.setWork(telemetry.AttrWorkID.String(u.id), AttrKind.String(it.Kind.String()), AttrShape.String(it.Shape))
		}
	} else {
		// Every unit is a root of its own trace.
		root := trace.ContextWithSpanContext(context.Background(), trace.SpanContext{})
		wctx, work := u.comp.StartWork(root, telemetry.AttrWorkID.String(u.id), AttrKind.String(it.Kind.String()),
			AttrShape.String(it.Shape))
		u.work = work
		u.start = u.work.Start()
		// A sampled root's unit is attributed: its spans are collected in a
		// buffer that hands the unit to onWork with them.
		if sc := u.work.Span().SpanContext(); sc.IsSampled() {
			setUnit(u.work.Span(), r.col.track(sc.TraceID(), u))
		}
		var dctx context.Context
		// Dispatch and the queue wait begin when the unit does: one clock read.
		dctx, disp := u.comp.StartDetachedAt(wctx, telemetry.Dispatch, telemetry.None, u.start)
		u.disp = disp
		// The wait for a worker (Submit blocked on a full queue, then queued)
		// is its own row: load, not code.
		u.queued = u.comp.StartDetachedLeafAt(dctx, telemetry.Queue, telemetry.None, u.start)
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

func (r *Runtime) dropUnit(u *unit) {
	if u.rec != nil {
		u.rec.drop()
		return
	}
	r.col.forget(u.work.Span().SpanContext().TraceID())
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
		e2e = u.rec.end(time.Now(), u.start, o, class, err)
	} else {
		if err != nil {
			u.work.Span().SetAttributes(AttrReason.String(class))
		}
		e2e = u.work.End(o, err) // an unsampled root was never tracked (Submit)
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
		u.comp.RecordCriticalOf(ctx, s.Key.Component, s.Key.Phase, s.Key.Direction, s.Critical)
	}
}

// endQueue ends the queue phase, once: when a worker takes the unit, or
// when the unit ends without having run.
func (r *Runtime) endQueue(u *unit) {
	if !u.queueEnded {
		u.queueEnded = true
		if u.rec != nil {
			u.rec.setSlot(slotQueue, u.start.UnixNano(), time.Now().UnixNano(), nil)
			return
		}
		u.queued.End()
	}
}

// endDispatch ends the dispatch phase (span and amdahl.phase.duration).
func (r *Runtime) endDispatch(u *unit) { u.endDispatchAt(time.Now()) }

// runTask: acquire a host and run the task there; with an orchestration
// (scenario.TaskItem.Orchestration), lease it first and complete it with
// the task's outputs (or as failed) after.
func (r *Runtime) runTask(ctx context.Context, u *unit) (string, error) {
	dctx := trace.ContextWithSpan(ctx, u.dispSpan())
	task := u.item.Task
	orch := task.Orchestration
	var token string
	if orch {
		var err error
		if token, err = r.lease.lease(dctx, r.sender, u.id); err != nil {
			r.endDispatch(u)
			return sidecarClass("sidecar", err), err
		}
	}
	h, err := r.pool.acquire(dctx)
	if err != nil {
		r.endDispatch(u)
		if !orch {
			return "task host start", err
		}
		return "task host start", r.failOrchestration(ctx, u, token, err)
	}
	params := task.Parameters
	if task.ExecutePasses != 1 {
		params = make(map[string]string, len(task.Parameters)+1)
		for k, v := range task.Parameters {
			params[k] = v
		}
		params[ParamPasses] = strconv.Itoa(task.ExecutePasses)
	}
	name := task.TaskName
	if name == "" {
		name = TaskHash
	}
	cfg := &ipcpb.TaskConfiguration{
		Id: uint64(u.item.Seq) + 1, TaskName: name, TaskLocation: "amdahl", ProjectFile: u.id,
		Parameters: params, Environment: task.Environment,
	}
	// Dispatch ends once the host is ours and the task's configuration
	// built; the round trip on the host is its own span beside it, so the
	// gaps between the ipc phases of both processes (kernel transit,
	// wake-ups) are not charged to dispatch. One clock read for
	// dispatch's end, the host span's start and the send's: they are the
	// same instant (a clock read is 0.1–0.25 µs on the 2-vCPU VM).
	sendStart := time.Now()
	u.endDispatchAt(sendStart)
	var hctx context.Context
	var hs trace.Span
	if u.rec != nil {
		hctx, hs = u.rec.startHost(ctx, sendStart, h.id, h.pid)
	} else {
		hctx, hs = startHostSpan(ctx, r.phaseTP, r.tracer, h.id, h.pid, sendStart)
	}
	in, err := h.run(hctx, cfg, r.set.TaskTimeout)
	r.pool.release(h)
	if err != nil {
		hs.RecordError(err)
		hs.End()
		class := "task host died"
		switch {
		case errors.Is(err, ErrTaskTimeout):
			class = "task timed out"
		case errors.Is(err, context.Canceled):
			class = "cancelled"
		}
		if !orch {
			return class, err
		}
		return class, r.failOrchestration(ctx, u, token, err)
	}
	res := in.Msg.(*ipcpb.TaskResult)
	u.outputs = res.GetOutputs()
	if in.ReplyPhasesLeft && u.rec != nil {
		u.rec.replyPhases(hctx, in)
	}
	r.childSpans(hctx, res, sendStart, in.ReceiveStart)
	hs.End()

	status := dtpb.OrchestrationStatus_ORCHESTRATION_STATUS_COMPLETED
	var taskErr error
	if res.GetStatus() != ipcpb.Status_STATUS_SUCCESS {
		status = dtpb.OrchestrationStatus_ORCHESTRATION_STATUS_FAILED
		taskErr = fmt.Errorf("task %s failed in host %d: %s", name, h.id, res.GetError())
	}
	if !orch {
		if taskErr != nil {
			return "task failed", taskErr
		}
		return "", nil
	}
	out, _ := json.Marshal(res.GetOutputs())
	resp := &dtpb.OrchestratorResponse{InstanceId: u.id, CompletionToken: token, Actions: []*dtpb.OrchestratorAction{{
		Id: 0, OrchestratorActionType: &dtpb.OrchestratorAction_CompleteOrchestration{CompleteOrchestration: &dtpb.CompleteOrchestrationAction{
			OrchestrationStatus: status, Result: wrapperspb.String(string(out)),
		}},
	}}}
	if _, err := r.complete(ctx, resp); err != nil {
		return sidecarClass("completion", err), err
	}
	if taskErr != nil {
		return "task failed", taskErr
	}
	return "", nil
}

// startHostSpan starts, at start, the runtime.host span of a round trip
// on the host with id and pid: through the run's PhaseTracer (own: the
// runtime's own tracer, or the no-op provider's) if it has one, else with
// tracer. Through own it is started without options (they allocate), and
// the host's attributes are set only if own's spans are exported (nothing
// else reads them).
func startHostSpan(ctx context.Context, own telemetry.PhaseTracer, tracer trace.Tracer, id, pid int, start time.Time) (context.Context, trace.Span) {
	if own != nil {
		ctx, s := own.StartPhaseSpan(ctx, SpanHost, "", 0, telemetry.None, start)
		if own.PhaseAttributes() {
			s.SetAttributes(AttrHostID.Int(id), AttrHostPID.Int(pid))
		}
		return ctx, s
	}
	return tracer.Start(ctx, SpanHost, trace.WithTimestamp(start), trace.WithAttributes(AttrHostID.Int(id), AttrHostPID.Int(pid)))
}

// failOrchestration completes the orchestration as failed with cause (so
// the sidecar's lease is not left dangling) and returns cause, joined with
// the completion's error if that failed too. ctx is the unit's: it ends
// only with the drain.
func (r *Runtime) failOrchestration(ctx context.Context, u *unit, token string, cause error) error {
	resp := &dtpb.OrchestratorResponse{InstanceId: u.id, CompletionToken: token, Actions: []*dtpb.OrchestratorAction{{
		Id: 0, OrchestratorActionType: &dtpb.OrchestratorAction_CompleteOrchestration{CompleteOrchestration: &dtpb.CompleteOrchestrationAction{
			OrchestrationStatus: dtpb.OrchestrationStatus_ORCHESTRATION_STATUS_FAILED,
			FailureDetails:      &dtpb.TaskFailureDetails{ErrorType: "amdahl.TaskHostError", ErrorMessage: cause.Error()},
		}},
	}}}
	// Not cut off by the unit's own failure, but bounded, and by the drain.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := r.complete(ctx, resp); err != nil {
		return errors.Join(cause, fmt.Errorf("and completing the orchestration as failed: %w", err))
	}
	return cause
}

// complete sends a completion; a caller's sidecar is drained, so that it
// keeps no payloads (the in-process one keeps none).
func (r *Runtime) complete(ctx context.Context, resp *dtpb.OrchestratorResponse) (chunking.Result, error) {
	if !r.completed.Load() {
		r.completed.Store(true)
	}
	res, err := r.sender.Complete(ctx, resp)
	if r.side != nil && !r.ownSide {
		r.side.DrainCompletions()
	}
	if err != nil {
		return res, fmt.Errorf("sidecar: %w", err)
	}
	return res, nil
}

// runFanout: lease the orchestration, then complete it with the item's
// actions, chunked.
func (r *Runtime) runFanout(ctx context.Context, u *unit) (string, error) {
	dctx := trace.ContextWithSpan(ctx, u.dispSpan())
	token, err := r.lease.lease(dctx, r.sender, u.id)
	r.endDispatch(u)
	if err != nil {
		return sidecarClass("sidecar", err), err
	}
	fo := u.item.Fanout
	resp := &dtpb.OrchestratorResponse{InstanceId: u.id, CompletionToken: token, Actions: make([]*dtpb.OrchestratorAction, len(fo.ActionBytes))}
	for i := range fo.ActionBytes {
		resp.Actions[i] = &dtpb.OrchestratorAction{Id: int32(i), OrchestratorActionType: &dtpb.OrchestratorAction_ScheduleTask{
			ScheduleTask: &dtpb.ScheduleTaskAction{Name: "amdahl.fanout", Input: wrapperspb.String(fo.Payload(i))}}}
	}
	res, err := r.complete(ctx, resp)
	if err != nil {
		return sidecarClass("completion", err), err
	}
	if res.Plan != nil && res.Plan.Oversized != nil {
		return "oversized action", fmt.Errorf("orchestration failed: %w", res.Plan.Oversized)
	}
	return "", nil
}

// childSpans records the task host's phases, returned in its reply, as
// spans of the parent's trace (amdahl.remote=true) under the host span,
// placed in the parent's clock within [sendStart, replyStart] (package
// taskproto decodes and places them).
//
// With Config.AccountRemoteDirectly the phases go to the collector as the
// spans attribution would have read from the SDK's (the same names,
// component, phase, direction and times, parented to the host span), and
// to amdahl.phase.duration, without SDK spans. Under the host span of a
// unit's record (record.go) they fill the record's slots.
func (r *Runtime) childSpans(ctx context.Context, res *ipcpb.TaskResult, sendStart, replyStart time.Time) {
	var buf [taskproto.NumTimings]taskproto.Timing
	_, unit, rec, rs := parentOf(ctx)
	if rs != nil && rs == &rec.host {
		// The host span of a unit's record: the phases go to its slots.
		timings := taskproto.AppendTimings(buf[:0], res, sendStart, replyStart)
		if r.hostComp.RecordsMetrics() {
			for _, t := range timings {
				r.hostComp.RecordPhase(ctx, t.Phase, t.Direction, t.End.Sub(t.Start))
			}
		}
		rec.hostPhases(r.hostComp, timings)
		return
	}
	if !r.hostComp.Records(ctx) {
		return // nothing would record them (OTEL_SDK_DISABLED=true, or the unit's trace sampled out)
	}
	timings := taskproto.AppendTimings(buf[:0], res, sendStart, replyStart)
	host := trace.SpanContextFromContext(ctx)
	if !r.cfg.AccountRemoteDirectly || !host.IsSampled() || r.hostComp == nil {
		for _, t := range timings {
			r.hostComp.RecordSpan(ctx, t.Phase, t.Direction, t.Start, t.End, telemetry.AttrRemote.Bool(true))
		}
		return
	}
	var spans [taskproto.NumTimings]attribution.Span
	n := 0
	for _, t := range timings {
		if !t.Phase.Valid() || t.Direction > telemetry.Reply {
			continue // as RecordSpan: what another process sent
		}
		r.hostComp.RecordPhase(ctx, t.Phase, t.Direction, t.End.Sub(t.Start))
		spans[n] = remoteSpan(r.hostComp, host, r.col.newSpanID(), t)
		n++
	}
	if rec != nil {
		// A second host span of a unit's record: kept beside its slots.
		for _, sp := range spans[:n] {
			rec.addExtra(sp)
		}
		return
	}
	r.col.add(unit, host.TraceID(), spans[:n])
}

// remoteSpan is the span of a task host's phase t (from its reply, placed
// in the parent's clock), id under the host span host, as comp's.
func remoteSpan(comp *telemetry.Component, host trace.SpanContext, id attribution.SpanID, t taskproto.Timing) attribution.Span {
	return attribution.Span{TraceID: attribution.TraceID(host.TraceID()), SpanID: id, ParentID: attribution.SpanID(host.SpanID()),
		Name: comp.SpanName(t.Phase, t.Direction), Component: comp.Name(),
		Start: t.Start.UnixNano(), End: t.End.UnixNano(), Phase: t.Phase, Direction: t.Direction, Remote: true}
}

// Wait blocks until every submitted unit has ended and been accounted
// (Summary, OnWork), or ctx ends.
func (r *Runtime) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { r.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return r.col.flush(ctx)
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
	if r.spans != nil {
		r.spans.UnregisterSpanProcessor(r.col)
	}
	r.col.close() // accounts for every unit ended
	return errors.Join(errs...)
}

// SchemaVersion is the version of amdahl's JSON schema, shared by
// summary.json, ab.json and every command's --json output (docs/json.md).
// 2: Causal's added_ns_per_work became added_per_work_ns, and every
// output carries it.
const SchemaVersion = 2

// Summary is the account of a run.
type Summary struct {
	// SchemaVersion of this JSON (summary.json, amdahl run --json).
	SchemaVersion int               `json:"schema_version"`
	Scenario      string            `json:"scenario"`
	Variant       string            `json:"variant"`
	Settings      map[string]string `json:"settings"`
	// Submitted counts the units that ended: OK + Failed + Cancelled. Once
	// Wait or Close has returned it equals the units Submit accepted.
	Submitted int `json:"submitted"`
	OK        int `json:"ok"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	// Failures counts failed and cancelled units by reason class;
	// Examples holds the first full reason of each class.
	Failures map[string]int    `json:"failures,omitempty"`
	Examples map[string]string `json:"failure_examples,omitempty"`
	Elapsed  time.Duration     `json:"elapsed_ns"`
	// Elapsed runs from New to the end of the last unit; Throughput is
	// units of work ended per second of it.
	Throughput float64 `json:"throughput_per_s"`
	// E2EMean, E2EP50 and E2EP99 are of every ended unit's end-to-end
	// time (Result.E2E), measured by the runtime itself: they are there
	// with telemetry off (OTEL_SDK_DISABLED=true) too, unlike
	// Attribution's, which cover the sampled units. P50 and P99 within
	// 0.05 % (attribution.FineSketch).
	E2EMean time.Duration `json:"e2e_mean_ns"`
	E2EP50  time.Duration `json:"e2e_p50_ns"`
	E2EP99  time.Duration `json:"e2e_p99_ns"`
	// HostsSpawned and HostsReplaced count task host processes started,
	// and discarded because they died, hung or were killed.
	HostsSpawned  int64 `json:"hosts_spawned"`
	HostsReplaced int64 `json:"hosts_replaced"`
	// SidecarApplied counts completions the in-process sidecar applied
	// (-1 with an external sidecar).
	SidecarApplied int64 `json:"sidecar_applied"`
	// ProcessCPU is the CPU time (user and system) this process used from
	// New to the summary: the runtime's own cost (its workers, ipc,
	// accounting and telemetry, and whatever else the process runs), the
	// task hosts' not included. Over Submitted it is the runtime's CPU per
	// unit, which telemetry-tax.sh compares with telemetry on and off.
	ProcessCPU time.Duration `json:"process_cpu_ns"`
	// Attribution: e2e quantiles and, per phase and direction, mean, p99,
	// critical-path share q and naive share, over the units whose traces
	// were sampled.
	Attribution attribution.Report `json:"attribution"`
	// Sampler describes the sampler that chose those units
	// (Config.Sampler: OTEL_TRACES_SAMPLER, whether the runtime's own
	// tracer or the SDK's applied it), "" when Config.Sampler was nil
	// (every unit's trace sampled, or a caller's TracerProvider decided).
	Sampler string `json:"sampler,omitempty"`
	// SidecarUntraced: units completed to the sidecar, and their calls
	// carried no trace context (Config.Propagator: OTEL_PROPAGATORS
	// without tracecontext), so the sidecar's phases are in no unit's
	// trace: the in-process sidecar's rows (chunking.deserialize,
	// chunking.execute) are not in Attribution.
	SidecarUntraced bool `json:"sidecar_untraced,omitempty"`
	// Kinds is the same attribution per kind of unit ("taskhost",
	// "fanout"), when the run had more than one.
	Kinds map[string]attribution.Report `json:"kinds,omitempty"`
	// E2EByKind is E2EMean, E2EP50 and E2EP99 per kind of unit, measured
	// by the runtime as they are (with telemetry off too), when the run
	// had more than one kind: in a mixed run the task units' median and
	// the fanout units' apart.
	E2EByKind map[string]KindE2E `json:"e2e_by_kind,omitempty"`
}

// KindE2E is the end-to-end times of one kind of unit in a Summary.
type KindE2E struct {
	Units   int           `json:"units"` // ended units of the kind
	E2EMean time.Duration `json:"e2e_mean_ns"`
	E2EP50  time.Duration `json:"e2e_p50_ns"`
	E2EP99  time.Duration `json:"e2e_p99_ns"`
}

// Summary returns the account of the units ended so far; their
// attribution is complete once Wait or Close has returned (units are
// accounted on a goroutine of the runtime's, soon after they end).
func (r *Runtime) Summary() Summary {
	r.mu.Lock()
	lastEnd := r.lastEnd
	byKind := map[scenario.Kind]*attribution.Accumulator{}
	for k, a := range r.byKind {
		byKind[k] = a
	}
	s := Summary{
		SchemaVersion: SchemaVersion,
		Scenario:      r.cfg.Scenario, Variant: r.set.Variant, Settings: r.set.Map(),
		OK: r.counts[telemetry.OK], Failed: r.counts[telemetry.Failed], Cancelled: r.counts[telemetry.Cancelled],
		Failures: map[string]int{}, Examples: map[string]string{},
	}
	if r.cfg.Sampler != nil {
		s.Sampler = r.cfg.Sampler.Description()
	}
	for k, v := range r.classes {
		s.Failures[k] = v
	}
	for k, v := range r.examples {
		s.Examples[k] = v
	}
	s.E2EMean, s.E2EP50, s.E2EP99 = r.e2e.mean(), r.e2e.sketch.Quantile(0.50), r.e2e.sketch.Quantile(0.99)
	if len(r.e2eByKind) > 1 {
		s.E2EByKind = map[string]KindE2E{}
		for k, e := range r.e2eByKind {
			s.E2EByKind[k.String()] = KindE2E{Units: e.n, E2EMean: e.mean(), E2EP50: e.sketch.Quantile(0.50), E2EP99: e.sketch.Quantile(0.99)}
		}
	}
	r.mu.Unlock()
	s.Submitted = s.OK + s.Failed + s.Cancelled
	s.Elapsed = time.Since(r.start)
	if s.Submitted > 0 && !lastEnd.IsZero() {
		s.Elapsed = lastEnd.Sub(r.start)
	}
	if s.Elapsed > 0 {
		s.Throughput = float64(s.Submitted) / s.Elapsed.Seconds()
	}
	s.HostsSpawned, s.HostsReplaced = r.pool.spawned.Load(), r.pool.replaced.Load()
	if cpu := proccpu.Used(); cpu > r.startCPU {
		s.ProcessCPU = cpu - r.startCPU
	}
	s.SidecarUntraced = r.untraced && r.completed.Load()
	s.SidecarApplied = -1
	if r.side != nil {
		s.SidecarApplied = r.side.Applied() - r.appliedBase
	}
	var all attribution.Accumulator
	all.Merge(&r.acc)
	for _, a := range byKind {
		all.Merge(a)
	}
	s.Attribution = all.Report(r.cfg.ByPhase)
	if len(byKind) > 1 {
		s.Kinds = map[string]attribution.Report{}
		for k, a := range byKind {
			s.Kinds[k.String()] = a.Report(r.cfg.ByPhase)
		}
	}
	return s
}

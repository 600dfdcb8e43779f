package runtime

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/credentials"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
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
	// hand every span it records to this exporter as well, ended and
	// whole (spans.Record): its name, attributes, kind, events, links and
	// status as the SDK would record them, with SpanResource as its
	// resource (nil: otelsetup.DefaultResource(), as an SDK provider's).
	// That is how amdahl run writes its trace file without SDK spans
	// (UseTelemetry with otelsetup.Telemetry.TraceFileOnly); an SDK span
	// processor takes them through otelsetup.ProcessorExporter. The runtime does not shut it
	// down: its owner does, after Close. New refuses either with a
	// TracerProvider, whose spans it would never see.
	SpanExport   spans.Exporter
	SpanResource *spans.Resource
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

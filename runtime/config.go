package runtime

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
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
	// Hosts are the task hosts' program and environment.
	Hosts HostsConfig
	// Sidecar is the Durable Task sidecar the runtime completes
	// orchestrations to.
	Sidecar SidecarConfig
	// Telemetry is what the runtime records through and where its spans
	// go besides its attribution.
	Telemetry TelemetryConfig
	// DrainTimeout bounds how long units already running may take to finish
	// once the run's context ends (default 10s); after it they are
	// cancelled.
	DrainTimeout time.Duration
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

// HostsConfig is the task hosts' program and environment.
type HostsConfig struct {
	// Argv is the program and arguments of a task host; default: this
	// executable with the argument "taskhost" (amdahl's hidden command).
	// Any program that calls ServeHost will do.
	Argv []string
	// Env is added to the environment of every task host.
	Env []string
	// Grace bounds each step of a host's graceful shutdown (default 2s).
	Grace time.Duration
	// ProfileDir, if set, makes every task host write cpu.pprof and
	// heap.pprof into ProfileDir/host-<id>/.
	ProfileDir string
}

// SidecarConfig is the Durable Task sidecar the runtime completes to, and
// how it calls it.
type SidecarConfig struct {
	// Addr is the address (host:port) of a TaskHubSidecarService to
	// complete to; "" starts an in-process sidecar on 127.0.0.1:0, which
	// Close closes.
	Addr string
	// Server, if set, is the sidecar this process serves at Addr, started
	// by the caller, who closes it after the runtime's Close: the runtime
	// counts the completions it applied (Summary.SidecarApplied, from
	// Sidecar.Applied) and drains the kept ones, so a sidecar without
	// SidecarConfig.OnApplied keeps no payloads either.
	Server *chunking.Sidecar
	// Credentials secure the connection to Addr, e.g. credentials.NewTLS
	// with the CA that signed the sidecar's certificate; nil dials
	// plaintext. Only with Addr.
	Credentials credentials.TransportCredentials
	// Token, if not empty, is sent on every call to Addr as
	// "authorization: Bearer <token>" (chunking.SidecarConfig.Token is the
	// server's side). It travels over TLS (Credentials), or over
	// plaintext only to a loopback address (an IP literal or "localhost",
	// never resolved): New refuses to send it in clear to anything else.
	// Only with Addr.
	Token string
	// ConnectTimeout bounds the check New makes that Addr answers
	// (default 5s): it waits up to this long for a connection (and the
	// TLS handshake) and one call to go through, so that an unreachable
	// sidecar, an untrusted certificate or a refused token fails New,
	// naming the address, rather than every unit later.
	ConnectTimeout time.Duration
	// Retry is the per-call retry budget of the chunking sender and of
	// StartInstance; its zero fields take the settings sidecar.retry.*
	// (MaxAttempts, BaseDelay, MaxDelay) and chunking's default jitter.
	Retry chunking.RetryPolicy
	// LeaseTimeout bounds the wait for a unit's orchestration work item
	// after StartInstance (default 1 minute); past it the unit fails with
	// ErrLeaseTimeout.
	LeaseTimeout time.Duration
}

// TelemetryConfig is what a runtime records through. The runtime never
// sets up the process's telemetry (amdahl's command does, with package
// telemetry/otelsetup, and passes it with UseTelemetry); it holds no SDK
// type: the OTel SDK, when it records the spans, is one Source of them.
type TelemetryConfig struct {
	// TracerProvider and MeterProvider instrument the runtime and the ipc
	// and chunking it drives. Attribution needs every ended span of the
	// run: with a TracerProvider, New subscribes to Spans (required
	// then; otelsetup.SDKSource for an SDK provider of one's own) and
	// cancels at Close. With no TracerProvider the runtime traces with
	// its own tracer, which hands its spans straight to attribution, and
	// to Export if set: no SDK span is made (UseTelemetry leaves it nil
	// when nothing set up would read the spans but attribution and the
	// trace file). A nil MeterProvider is the otel global one.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Spans          spans.Source
	// Export, with no TracerProvider, makes the runtime's own tracer hand
	// every span it records to this exporter as well, ended and whole
	// (spans.Record): its name, attributes, kind, events, links and status
	// as the SDK would record them, with Resource as its resource (nil:
	// otelsetup.DefaultResource(), as an SDK provider's). That is how
	// amdahl run writes its trace file without SDK spans (UseTelemetry
	// with otelsetup.Telemetry.TraceFileOnly); an SDK span processor
	// takes them through otelsetup.ProcessorExporter. The runtime does
	// not shut it down: its owner does, after Close. New refuses either
	// with a TracerProvider, whose spans it would never see.
	Export   spans.Exporter
	Resource *spans.Resource
	// Sampler, with no TracerProvider, decides which units the runtime's
	// own tracer samples, as an SDK provider's sampler would decide for
	// the unit's root (its children follow it, as under the samplers
	// OTEL_TRACES_SAMPLER names): only those are attributed (and
	// exported, with Export); the others record no span and cost
	// little. nil samples every unit. UseTelemetry sets it from
	// otelsetup.Telemetry.Sampler (OTEL_TRACES_SAMPLER). With a
	// TracerProvider, the provider's sampler decides.
	Sampler spans.Sampler
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
	// cost only (BenchmarkCall in internal/grpctrace). The task hosts'
	// pipe carries the trace context in its own message field
	// regardless.
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
	// recorder would leave them out (otelsetup's RemoteSpansWanted). It
	// applies with a TracerProvider only: the runtime's own tracer keeps
	// those phases compactly with their unit anyway.
	AccountRemoteDirectly bool
}

// UseTelemetry makes the runtime record through tel's providers, with its
// phase-label setting, and take its spans from it. The caller keeps
// owning tel: shut it down after Close, which flushes what the run's last
// units exported.
//
// When nothing tel set up would read the run's spans but the attribution
// (tel.SpansOnlyForAttribution: no exporter, trace file, recorder, span
// processor, sampler of the program's or Pyroscope), the runtime records
// them with its own tracer rather than tel's SDK (TracerProvider nil):
// the attribution is the same and costs a fraction of the SDK's. When
// tel's trace file is the only other reader (tel.TraceFileOnly), the own
// tracer hands the file's writer every span too (Export).
func (c *Config) UseTelemetry(tel *otelsetup.Telemetry) {
	t := TelemetryConfig{TracerProvider: tel.TracerProvider(), MeterProvider: tel.MeterProvider(), Spans: tel,
		Sampler: otelsetup.SamplerOf(tel.Sampler()), Propagator: tel.Propagator(), PhaseLabels: tel.PhaseLabels(),
		AccountRemoteDirectly: !tel.RemoteSpansWanted()}
	if tel.SpansOnlyForAttribution() {
		t.TracerProvider, t.Spans = nil, nil
	} else if exp, res := tel.TraceFileOnly(); exp != nil {
		t.TracerProvider, t.Spans, t.Export, t.Resource = nil, nil, exp, res
	}
	c.Telemetry = t
}

// defaults fills the fields of c left zero.
func (c *Config) defaults() error {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Hosts.Grace <= 0 {
		c.Hosts.Grace = 2 * time.Second
	}
	if c.Sidecar.LeaseTimeout <= 0 {
		c.Sidecar.LeaseTimeout = time.Minute
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 10 * time.Second
	}
	if c.Scenario == "" {
		c.Scenario = "custom"
	}
	if len(c.Hosts.Argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("runtime: find this executable for task hosts: %w", err)
		}
		c.Hosts.Argv = []string{exe, "taskhost"}
	}
	return nil
}

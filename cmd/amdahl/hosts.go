package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/internal/bytesize"
	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
)

// newTaskhostCmd is the hidden child mode: amdahl run spawns this binary
// as "amdahl taskhost" with a connection and a token in its environment.
func newTaskhostCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "taskhost",
		Short:  "Serve tasks for an amdahl parent (started by amdahl run, not by hand)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := runtime.ServeHost(cmd.Context(), runtime.BuiltinTasks())
			if errors.Is(err, ipc.ErrNotChild) {
				return usageError{err}
			}
			return err
		},
	}
}

// sidecarCmdFlags are the flags of `amdahl sidecar`.
type sidecarCmdFlags struct {
	listen, metricsAddr string
	asJSON              bool
	bounds              sidecarFlags
	sec                 serverSecurity
}

func newSidecarCmd() *cobra.Command {
	var f sidecarCmdFlags
	cmd := &cobra.Command{
		Use:   "sidecar",
		Short: "Run the Durable Task sidecar (TaskHubSidecarService) standalone",
		Example: `  amdahl sidecar --listen 127.0.0.1:4001 &
  amdahl run --sidecar 127.0.0.1:4001`,
		Long: `sidecar serves TaskHubSidecarService on --listen: StartInstance, GetWorkItems,
CompleteOrchestratorTask (chunked completions reassembled by completion token)
and AbandonTaskOrchestratorWorkItem, wire-compatible with Durable Task workers.
amdahl run --sidecar ADDR completes to it. It runs until interrupted, then
drains the calls in flight (for up to 5 s, then it stops them) and prints
how many completions it applied. Telemetry follows the standard
environment variables (OTEL_EXPORTER_OTLP_ENDPOINT, PYROSCOPE_SERVER_ADDRESS,
AMDAHL_METRICS_ADDR, …) as service.name amdahl-sidecar: its spans are
children of the callers' through the W3C trace context of each call.

What a client can make it hold is bounded by the --buffer-ttl and --max-*
flags (sizes take a unit: 64MiB, 1GiB, 1.5GB); a call over a bound fails
with ResourceExhausted (an instance id too long: InvalidArgument) and a
message naming the bound. --max-total-buffered-bytes counts the messages
being received with the chunked completions buffered: a message reserves
its share from its length prefix and waits, unread, until it fits. The
process's memory limit is 1.25 × --max-total-buffered-bytes + 48 MiB
unless GOMEMLIMIT is set. See chunking/doc.go, "Sidecar bounds".

It listens on loopback (127.0.0.1:4001) by default. A --listen address that
is not loopback (0.0.0.0, ::, an empty host, another IP, or a host name that
resolves to one) needs TLS (--tls-cert FILE --tls-key FILE) or an explicit
--insecure; without either it exits 2 and listens nowhere. --token-file FILE
makes every call carry "authorization: Bearer <token>" (the file holds the
token, at most 4 KiB, white space around it trimmed); a call without it or
with another fails with Unauthenticated on its headers, before any of its
message is read. --max-connections and --max-streams-per-connection cap
what clients can open at once. amdahl run reaches such a sidecar
with --sidecar-tls or --sidecar-ca FILE and --sidecar-token-file FILE. See
chunking/doc.go, "Sidecar security".`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSidecar(cmd, &f) },
	}
	cmd.Flags().StringVar(&f.listen, "listen", "127.0.0.1:4001", "address to serve gRPC on (host:port; port 0 picks one); not loopback: needs --tls-cert/--tls-key or --insecure")
	cmd.Flags().StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on host:port")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "once stopped, print the address and the completions applied as JSON (docs/json.md) on stdout")
	f.bounds.register(cmd)
	f.sec.register(cmd)
	return cmd
}

// runSidecar is amdahl sidecar: the bounds and the address checked, the
// process's telemetry set up, then the sidecar served until ctx ends and
// drained.
func runSidecar(cmd *cobra.Command, f *sidecarCmdFlags) error {
	ctx := cmd.Context()
	cfg, err := f.bounds.config()
	if err != nil {
		return usageError{err}
	}
	if !cmd.Flags().Changed("max-recv-msg-size") {
		cfg.MaxRecvMsgSize = 0 // the library's default, from the total bound
	} else if cfg.MaxRecvMsgSize > cfg.MaxTotalBufferedBytes {
		return usageError{fmt.Errorf("--max-recv-msg-size %s is over --max-total-buffered-bytes %s: a message being received counts toward the total, so one that large could never be let in",
			bytesize.Format(cfg.MaxRecvMsgSize), bytesize.Format(cfg.MaxTotalBufferedBytes))}
	}
	// A malformed address is bad usage; a port already taken is a
	// failure to run.
	ta, err := net.ResolveTCPAddr("tcp", f.listen)
	if err != nil {
		return usageError{fmt.Errorf("--listen %s: %w", f.listen, err)}
	}
	if err := f.sec.apply(f.listen, ta, &cfg); err != nil {
		return usageError{err}
	}
	opts := []otelsetup.Option{otelsetup.WithServiceName("amdahl-sidecar")}
	if f.metricsAddr != "" {
		opts = append(opts, otelsetup.WithMetricsAddr(f.metricsAddr))
	}
	tel, err := otelsetup.Setup(ctx, opts...)
	if err != nil {
		return err
	}
	defer tel.Shutdown(context.WithoutCancel(ctx))
	tp := sidecarTracing(tel)
	comp, err := telemetry.NewComponent("chunking", telemetry.ComponentConfig{TracerProvider: tp, MeterProvider: tel.MeterProvider(),
		PhaseLabels: tel.PhaseLabels(), Attributes: []attribute.KeyValue{telemetry.AttrTransport.String(runtime.TransportChunking)}})
	if err != nil {
		return err
	}
	cfg.Component, cfg.TracerProvider, cfg.MeterProvider = comp, tp, tel.MeterProvider()
	// Count completions, keep none: memory does not grow with their
	// payloads, and their memory is reused for later messages.
	cfg.OnApplied, cfg.BorrowPayloads = func(chunking.Completion) {}, true
	sc, err := chunking.NewSidecar(cfg)
	if err != nil {
		return err
	}
	setMemoryBudget(sidecarMemoryLimit(cfg), 0) // unless GOMEMLIMIT is set
	// Listen on the address checked, not on the name again: what
	// it resolves to may have changed.
	lis, err := net.ListenTCP("tcp", ta)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", f.listen, err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "amdahl sidecar: listening on %s\n", lis.Addr())
	if f.sec.insecure && !loopbackIP(ta.IP) {
		fmt.Fprintf(cmd.ErrOrStderr(), "amdahl sidecar: --insecure: plaintext on %s; whoever reaches it can use the sidecar (and read any token)\n", lis.Addr())
	}
	served := make(chan error, 1)
	go func() { served <- sc.Serve(lis) }()
	select {
	case err := <-served:
		return errors.Join(err, closeSidecar(ctx, sc))
	case <-ctx.Done():
	}
	if err := closeSidecar(ctx, sc); err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "amdahl sidecar: %v\n", err)
	}
	slog.Debug("sidecar stopped")
	fmt.Fprintf(cmd.ErrOrStderr(), "amdahl sidecar: stopped; %d completions applied\n", sc.Applied())
	err = <-served
	if f.asJSON {
		err = errors.Join(err, writeJSON(cmd.OutOrStdout(), sidecarJSON{SchemaVersion: runtime.SchemaVersion,
			Address: lis.Addr().String(), CompletionsApplied: sc.Applied()}))
	}
	return err
}

// sidecarFlags are amdahl sidecar's bounds, one flag for each bound of
// chunking.SidecarConfig, with the same defaults.
type sidecarFlags struct {
	bufferTTL   time.Duration
	tokenBytes  sizeFlag
	tokenChunks int
	totalBytes  sizeFlag
	pending     int
	idBytes     sizeFlag
	recvMsgSize sizeFlag
	conns       int
	streams     int
	calls       int
}

func (f *sidecarFlags) register(cmd *cobra.Command) {
	f.tokenBytes = chunking.DefaultMaxBufferedBytes
	f.totalBytes = chunking.DefaultMaxTotalBufferedBytes
	f.idBytes = chunking.DefaultMaxInstanceIDBytes
	f.recvMsgSize = chunking.DefaultMaxRecvMsgSize
	fl := cmd.Flags()
	fl.DurationVar(&f.bufferTTL, "buffer-ttl", chunking.DefaultBufferTTL,
		"drop a chunked completion whose next chunk has not come for this long; forget completed tokens after it")
	fl.Var(&f.tokenBytes, "max-token-bytes",
		"bound on the bytes one chunked completion may buffer; a chunk over it drops that completion")
	fl.IntVar(&f.tokenChunks, "max-token-chunks", chunking.DefaultMaxBufferedChunks,
		"bound on the chunks of one chunked completion; a chunk over it drops that completion")
	fl.Var(&f.totalBytes, "max-total-buffered-bytes",
		"bound on the bytes of the messages being received and the chunked completions buffered, together; a message that does not fit waits before its body is read, a partial chunk over it is refused (ResourceExhausted) and may be sent again later; the process's memory limit follows it")
	fl.IntVar(&f.pending, "max-pending-instances", chunking.DefaultMaxPendingInstances,
		"bound on the instances started (StartInstance) and not yet completed; a start over it is refused (ResourceExhausted)")
	fl.Var(&f.idBytes, "max-instance-id-bytes",
		"bound on the length of an instance id given to StartInstance; a longer one is refused (InvalidArgument)")
	fl.Var(&f.recvMsgSize, "max-recv-msg-size",
		"largest gRPC message accepted, at most --max-total-buffered-bytes (default: the smaller of 64MiB and an eighth of it); a larger one fails with ResourceExhausted before it is read")
	fl.IntVar(&f.conns, "max-connections", chunking.DefaultMaxConnections,
		"bound on the client connections served at once; a connection over it is closed as soon as it is accepted")
	fl.IntVar(&f.streams, "max-streams-per-connection", chunking.DefaultMaxStreamsPerConnection,
		"bound on the calls one connection may have open at once; a client queues the calls over it")
	fl.IntVar(&f.calls, "max-calls", chunking.DefaultMaxCalls,
		"bound on the calls open at once over every connection (each may send 64KiB before its size is read); a call over it is refused (ResourceExhausted)")
}

// config returns the SidecarConfig of the flags; every bound must be
// positive (SidecarConfig reads 0 as "the default", which a flag set to 0
// should not silently mean).
func (f *sidecarFlags) config() (chunking.SidecarConfig, error) {
	if f.bufferTTL <= 0 {
		return chunking.SidecarConfig{}, fmt.Errorf("--buffer-ttl %v: want a positive duration", f.bufferTTL)
	}
	for _, c := range []struct {
		flag string
		v    int
	}{
		{"max-token-bytes", int(f.tokenBytes)},
		{"max-token-chunks", f.tokenChunks},
		{"max-total-buffered-bytes", int(f.totalBytes)},
		{"max-pending-instances", f.pending},
		{"max-instance-id-bytes", int(f.idBytes)},
		{"max-recv-msg-size", int(f.recvMsgSize)},
		{"max-connections", f.conns},
		{"max-streams-per-connection", f.streams},
		{"max-calls", f.calls},
	} {
		if c.v <= 0 {
			return chunking.SidecarConfig{}, fmt.Errorf("--%s %d: want ≥ 1", c.flag, c.v)
		}
	}
	return chunking.SidecarConfig{
		BufferTTL:               f.bufferTTL,
		MaxBufferedBytes:        int(f.tokenBytes),
		MaxBufferedChunks:       f.tokenChunks,
		MaxTotalBufferedBytes:   int(f.totalBytes),
		MaxPendingInstances:     f.pending,
		MaxInstanceIDBytes:      int(f.idBytes),
		MaxRecvMsgSize:          int(f.recvMsgSize),
		MaxConnections:          f.conns,
		MaxStreamsPerConnection: f.streams,
		MaxCalls:                f.calls,
	}, nil
}

// sizeFlag is a flag value in bytes, written as bytesize reads them
// ("64MiB", "1.5GB", "4096").
type sizeFlag int

func (s *sizeFlag) String() string { return bytesize.Format(int(*s)) }

func (s *sizeFlag) Set(v string) error {
	n, err := bytesize.Parse(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

func (s *sizeFlag) Type() string { return "size" }

// sidecarDrainTimeout bounds how long amdahl sidecar waits, once
// interrupted, for the calls in flight before it force-stops.
const sidecarDrainTimeout = 5 * time.Second

// closeSidecar closes sc, draining its calls in flight for up to
// sidecarDrainTimeout (ctx may already be cancelled by the interrupt).
func closeSidecar(ctx context.Context, sc *chunking.Sidecar) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sidecarDrainTimeout)
	defer cancel()
	return sc.Close(ctx)
}

func newScenariosCmd() *cobra.Command {
	var listJSON, validateJSONOut bool
	validate := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check scenario files without running them",
		Long: `validate parses each scenario file (YAML or JSON) as amdahl run --scenario-file
would, and prints one line per file: its units, seed and workloads, or the
error with the file, line, column and field. Exit status 2 when a file is
invalid.`,
		Example: `  amdahl scenarios validate runtime/scenario/builtin/fanout.yaml docs/scenarios/tiny20k.yaml
  amdahl scenarios validate --json my.yaml     # valid, error, and the scenario with its defaults filled in`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{fmt.Errorf("scenarios validate takes one scenario file or more, got none")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var bad []string
			res := validateJSON{SchemaVersion: runtime.SchemaVersion, Files: []validateFileJSON{}}
			for _, f := range args {
				s, err := scenario.Load(f)
				if err != nil {
					res.Files = append(res.Files, validateFileJSON{File: f, Error: err.Error()})
					if !validateJSONOut {
						fmt.Fprintf(cmd.OutOrStdout(), "%s: invalid: %v\n", f, err)
					}
					bad = append(bad, f)
					continue
				}
				v := scenarioView(s)
				res.Files = append(res.Files, validateFileJSON{File: f, Valid: true, Scenario: &v})
				if !validateJSONOut {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: ok: scenario %s, %d units, seed %d, %s\n", f, s.Name, s.Count, s.Seed, describeWorkloads(s))
				}
			}
			if validateJSONOut {
				if err := writeJSON(cmd.OutOrStdout(), res); err != nil {
					return err
				}
			}
			if len(bad) > 0 {
				return usageError{fmt.Errorf("%d of %d scenario files invalid: %s", len(bad), len(args), strings.Join(bad, ", "))}
			}
			return nil
		},
	}
	cmd := &cobra.Command{
		Use:   "scenarios",
		Short: "List the built-in scenarios; validate scenario files",
		Example: `  amdahl scenarios                                   # the built-ins, their workloads and seeds
  amdahl scenarios validate docs/scenarios/*.yaml
  amdahl scenarios --json                            # every field, defaults filled in, sizes in bytes`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if listJSON {
				res := scenariosJSON{SchemaVersion: runtime.SchemaVersion, Scenarios: []scenarioJSON{}}
				for _, s := range scenario.Builtins() {
					res.Scenarios = append(res.Scenarios, scenarioView(s))
				}
				return writeJSON(cmd.OutOrStdout(), res)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tUNITS\tSEED\tWORKLOADS\tDESCRIPTION")
			for _, s := range scenario.Builtins() {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", s.Name, s.Count, s.Seed, describeWorkloads(s), s.Description)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&listJSON, "json", false, "print the built-ins as JSON (docs/json.md) instead of a table")
	validate.Flags().BoolVar(&validateJSONOut, "json", false, "print the results as JSON (docs/json.md) instead of one line a file")
	cmd.AddCommand(validate)
	return cmd
}

func describeWorkloads(s *scenario.Scenario) string {
	parts := make([]string, len(s.Workloads))
	for i, w := range s.Workloads {
		switch w.Kind {
		case scenario.KindTask:
			parts[i] = fmt.Sprintf("taskhost×%g (config mean %s cap %s, env %s)", w.Weight,
				bytesize.Format(w.Task.ConfigMeanBytes), bytesize.Format(w.Task.ConfigCapBytes), bytesize.Format(w.Task.EnvironmentBytes))
		case scenario.KindFanout:
			names := make([]string, len(w.Fanout.Shapes))
			for j, sh := range w.Fanout.Shapes {
				names[j] = sh.Name
			}
			parts[i] = fmt.Sprintf("fanout×%g (%s)", w.Weight, strings.Join(names, ", "))
		}
	}
	return strings.Join(parts, "; ")
}

// sidecarTracing returns the tracer provider of amdahl sidecar's gRPC
// server and chunking component: the SDK's when something reads the
// spans (an exporter, a trace file, Pyroscope), a no-op one when nothing
// would (otelsetup's SpansOnlyForAttribution; the sidecar has no
// attribution of its own). Then no span is made for nobody, and, with no
// metrics served either, a call only has its trace context taken from
// its metadata (chunking.SidecarConfig), which costs the sidecar a
// fraction of what the SDK's spans and otelgrpc's handlers do
// (docs/measurements/earlier.md, "Figures the code's comments quoted").
func sidecarTracing(tel *otelsetup.Telemetry) trace.TracerProvider {
	if tel.SpansOnlyForAttribution() {
		return tracenoop.NewTracerProvider()
	}
	return tel.TracerProvider()
}

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/credentials"

	"github.com/amdahl-rt/amdahl/internal/outfile"
	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
)

// runFlags are the flags of `amdahl run`.
type runFlags struct {
	scenario     string
	scenarioFile string
	sets         []string
	asJSON       bool
	by           string
	out          string
	metricsAddr  string
	sidecar      string
	sidecarSec   clientSecurity
	otlpEndpoint string
	otlpProtocol string
	pyroscope    string
	progress     string
	verbose      bool
	hostArgv     []string // tests: the task host program
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a scenario through real task hosts and a sidecar, and show where the time went",
		Long: `run executes a scenario on the embedded default: task hosts are child processes
(this binary in its hidden taskhost mode) reached over ipc, completions go
through the chunking sender to a sidecar (in-process on loopback, or --sidecar),
and every unit of work is traced through dispatch, serialize, send, receive,
deserialize and execute. It then prints, per phase and direction, the span
count, mean and p99 duration, the critical-path share q and the naive share,
with throughput and end-to-end p50/p99.

Scenarios: the built-ins (amdahl scenarios) or a YAML/JSON file (--scenario-file).

Settings: --set name=value (repeatable) or AMDAHL_<NAME>; precedence --set >
environment > default. amdahl help settings lists every one with its
default and valid values.

Telemetry: OTLP and Pyroscope through the standard environment variables
(OTEL_EXPORTER_OTLP_ENDPOINT, PYROSCOPE_SERVER_ADDRESS, …; see telemetry/doc.go)
or the flags below.

Sidecar: --sidecar ADDR completes to an external sidecar (amdahl sidecar).
--sidecar-tls dials it with TLS against the system roots, --sidecar-ca FILE
against the CA certificates in FILE; --sidecar-token-file FILE sends
"authorization: Bearer <token>" on every call (over plaintext only to a
loopback address). The sidecar must answer within 5 s of the start, or the
run fails at once (exit 1) naming the address.

Exit status: 0 when the run completed (failed units are reported, not fatal),
1 when it could not run, was interrupted, or no unit succeeded, 2 on bad usage.`,
		Example: `  amdahl run                                   # the mixed scenario, table on stdout
  amdahl run --scenario taskhost --set ipc.buffer=128KiB --out out
  amdahl run --scenario fanout --set chunking.algorithm=legacy --json
  amdahl report out/trace.jsonl                # the same table again, from the trace file`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRun(cmd.Context(), cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.scenario, "scenario", "mixed", "built-in scenario: taskhost, fanout, mixed or orchestrated")
	fl.StringVar(&f.scenarioFile, "scenario-file", "", "scenario file (YAML or JSON); overrides --scenario")
	fl.StringArrayVar(&f.sets, "set", nil, "setting name=value (repeatable; amdahl help settings lists them)")
	fl.BoolVar(&f.asJSON, "json", false, "print the summary as JSON (docs/json.md; the same as --out's summary.json) instead of a table")
	fl.StringVar(&f.by, "by", "component", "attribution rows by component (ipc.send/request) or by phase (send/request: components folded)")
	fl.StringVar(&f.out, "out", "", "write trace.jsonl (OTLP JSON), cpu.pprof, heap.pprof (and hosts/host-N/ for each task host), summary.json and report.html into this directory")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on host:port (AMDAHL_METRICS_ADDR)")
	fl.StringVar(&f.sidecar, "sidecar", "", "complete to the sidecar at host:port (e.g. one started with amdahl sidecar) instead of an in-process one")
	f.sidecarSec.register(cmd)
	fl.StringVar(&f.otlpEndpoint, "otlp-endpoint", "", "export spans to this OTLP endpoint URL (OTEL_EXPORTER_OTLP_ENDPOINT)")
	fl.StringVar(&f.otlpProtocol, "otlp-protocol", "grpc", "OTLP protocol: grpc or http/protobuf (with --otlp-endpoint)")
	fl.StringVar(&f.pyroscope, "pyroscope", "", "push profiles to the Pyroscope server at this URL (PYROSCOPE_SERVER_ADDRESS)")
	fl.StringVar(&f.progress, "progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), always or never")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "log host lifecycle and task host output at debug level")
	return cmd
}

func runRun(ctx context.Context, cmd *cobra.Command, f runFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	set, err := runtime.ResolveSettings(f.sets, nil)
	if err != nil {
		return usageError{err}
	}
	sc, err := loadScenario(f.scenario, f.scenarioFile)
	if err != nil {
		return err
	}
	if err := checkChoice("progress", f.progress, "auto", "always", "never"); err != nil {
		return err
	}
	if err := checkChoice("by", f.by, "component", "phase"); err != nil {
		return err
	}
	if err := checkChoice("otlp-protocol", f.otlpProtocol, "grpc", "http/protobuf"); err != nil {
		return err
	}
	var sidecarCreds credentials.TransportCredentials
	var sidecarToken string
	if err := f.sidecarSec.apply(f.sidecar, &sidecarCreds, &sidecarToken); err != nil {
		return usageError{err}
	}
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	setRunMemoryBudget(set)
	cfg := runtime.Config{Settings: set, Scenario: sc.Name, Logger: logger, ByPhase: f.by == "phase",
		Hosts:   runtime.HostsConfig{Argv: f.hostArgv},
		Sidecar: runtime.SidecarConfig{Addr: f.sidecar, Credentials: sidecarCreds, Token: sidecarToken}}
	tel, wrote, err := setupRunTelemetry(ctx, f, &cfg, logger)
	if err != nil {
		return err
	}
	cfg.UseTelemetry(tel)
	var flame *attribution.Flame // report.html's critical paths
	if f.out != "" {
		flame = &attribution.Flame{}
		cfg.OnWork = flame.Add
	}

	bar := newProgress(stderr, cmp.Or(set.Count, sc.Count), f.progress) // scenario.count 0: the scenario's own
	cfg.OnResult = bar.add
	bar.start()
	sum, runErr := runtime.Run(ctx, cfg, sc)
	bar.stop()
	// After the runtime's Close: the trace file gets the last units' spans.
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	runErr = errors.Join(runErr, tel.Shutdown(shutCtx))
	cancel()
	if c := tel.OTLPSpanCounts(); c.Dropped() > 0 || c.Failed > 0 {
		logger.Warn("otlp: spans not exported (dropped: the batch queue was full, see OTEL_BSP_MAX_QUEUE_SIZE; failed: the endpoint refused them)",
			"ended", c.Ended, "dropped", c.Dropped(), "failed", c.Failed)
	}
	if sum.Submitted == 0 && runErr != nil {
		return runErr
	}
	if f.out != "" {
		runErr = errors.Join(runErr, writeRunOut(f, &sum, flame, tel.SDKDisabled(), logger))
	}
	if f.asJSON {
		if err := writeJSON(stdout, sum); err != nil {
			return err
		}
	} else if err := writeSummary(stdout, sum, f.out, wrote); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	if sum.OK == 0 && sum.Submitted > 0 {
		return fmt.Errorf("all %d units failed (first: %s)", sum.Submitted, firstExample(sum))
	}
	return nil
}

// setupRunTelemetry sets up the process's telemetry from run's flags and
// the environment (OTLP, /metrics, Pyroscope, --out's trace file and
// profiles), and gives cfg the task hosts' share of it (their environment
// and profile directory). wrote names what --out will hold.
func setupRunTelemetry(ctx context.Context, f runFlags, cfg *runtime.Config, logger *slog.Logger) (tel *otelsetup.Telemetry, wrote string, err error) {
	var topts []otelsetup.Option
	if f.metricsAddr != "" {
		topts = append(topts, otelsetup.WithMetricsAddr(f.metricsAddr))
	}
	if f.otlpEndpoint != "" {
		topts = append(topts, otelsetup.WithOTLP(f.otlpEndpoint, f.otlpProtocol))
		// The task hosts export their own spans to the same endpoint (the
		// parent leaves its synthesised copies out): the per-signal
		// variables take the URL as it is, as WithOTLP does, and beat any
		// generic ones inherited.
		cfg.Hosts.Env = append(cfg.Hosts.Env, otelsetup.EnvTracesExporter+"=otlp",
			otelsetup.EnvOTLPTracesEndpoint+"="+f.otlpEndpoint, otelsetup.EnvOTLPTracesProtocol+"="+f.otlpProtocol)
	}
	pyro := f.pyroscope != "" || os.Getenv(otelsetup.EnvPyroscopeAddress) != ""
	if f.pyroscope != "" {
		topts = append(topts, otelsetup.WithPyroscope(otelsetup.PyroscopeConfig{ServerAddress: f.pyroscope}))
		cfg.Hosts.Env = append(cfg.Hosts.Env, otelsetup.EnvPyroscopeAddress+"="+f.pyroscope) // hosts profile too
	}
	if f.out != "" {
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			return nil, "", fmt.Errorf("--out: %w", err)
		}
		topts = append(topts, otelsetup.WithTraceFile(filepath.Join(f.out, "trace.jsonl")))
		if pyro {
			logger.Warn("profiles go to Pyroscope; --out gets no cpu.pprof (one CPU profiler per process)")
		} else {
			topts = append(topts, otelsetup.WithProfileDir(f.out))
			cfg.Hosts.ProfileDir = filepath.Join(f.out, "hosts")
		}
	}
	tel, err = otelsetup.Setup(ctx, topts...)
	if err != nil {
		return nil, "", err
	}
	wrote = "trace.jsonl, summary.json, profiles, report.html"
	if tel.SDKDisabled() {
		logger.Warn(otelsetup.EnvSDKDisabled + "=true: no spans, metrics or profiles are recorded; the summary has no phase rows")
		cfg.Hosts.ProfileDir = ""
		wrote = "summary.json, report.html"
	}
	return tel, wrote, nil
}

// writeRunOut completes --out after the run and its telemetry's shutdown:
// each row's CPU from the profiles (unless they went to Pyroscope or
// nothing was recorded), summary.json and report.html. A file that cannot
// be written (disk full) is an error, but the caller still prints the
// summary: the run's result is not lost.
func writeRunOut(f runFlags, sum *runtime.Summary, flame *attribution.Flame, sdkDisabled bool, logger *slog.Logger) error {
	if f.pyroscope == "" && !sdkDisabled {
		// The profiles are written (the parent's at Shutdown, the hosts'
		// as they exited): each row's CPU beside its critical time.
		if err := addCPU(&sum.Attribution, f.out, f.by == "phase", processesCPU()); err != nil {
			logger.Warn("no CPU per row", "err", err)
		}
	}
	var errs error
	b, err := marshalJSON(*sum)
	if err == nil {
		err = outfile.WriteFile(filepath.Join(f.out, "summary.json"), b)
	}
	if err != nil {
		errs = fmt.Errorf("write summary.json: %w", err)
	}
	return errors.Join(errs, writeRunPage(f.out, *sum, flame, f.by == "phase"))
}

// loadScenario returns the scenario of --scenario-file when given, else
// the built-in --scenario; a bad one is a usage error.
func loadScenario(name, file string) (*scenario.Scenario, error) {
	var sc *scenario.Scenario
	var err error
	if file != "" {
		sc, err = scenario.Load(file)
	} else {
		sc, err = scenario.Builtin(name)
	}
	if err != nil {
		return nil, usageError{err}
	}
	return sc, nil
}

// checkChoice rejects a --flag value outside valid as a usage error.
func checkChoice(flag, value string, valid ...string) error {
	if slices.Contains(valid, value) {
		return nil
	}
	return usageError{fmt.Errorf("--%s %q: want %s or %s", flag, value, strings.Join(valid[:len(valid)-1], ", "), valid[len(valid)-1])}
}

func firstExample(s runtime.Summary) string {
	keys := slices.Sorted(maps.Keys(s.Examples))
	if len(keys) == 0 {
		return "no reason recorded"
	}
	return s.Examples[keys[0]]
}

// untracedNote says why the sidecar's rows are missing from an attributed
// run whose sidecar calls carried no trace context, "" otherwise.
func untracedNote(s runtime.Summary) string {
	if !s.SidecarUntraced || s.Attribution.Works == 0 {
		return ""
	}
	why := "" // a program's Config.Telemetry.Propagator, not the environment
	if v := os.Getenv(otelsetup.EnvPropagators); v != "" {
		why = " (" + otelsetup.EnvPropagators + "=" + v + ")"
	}
	return "sidecar calls carried no trace context" + why +
		": the sidecar's phases (chunking.deserialize, chunking.execute) are in no unit's trace, nor in the table"
}

// sidecarText is what the run's sidecar applied, or "external".
func sidecarText(s runtime.Summary) string {
	if s.SidecarApplied < 0 {
		return "external"
	}
	return fmt.Sprintf("%d completions applied", s.SidecarApplied)
}

// writeSummary prints the run's table.
func writeSummary(w io.Writer, s runtime.Summary, out, wrote string) error {
	fmt.Fprintf(w, "scenario %s  variant %s  transport %s  send %s  buffer %s  chunking %s/%s\n",
		s.Scenario, s.Variant, s.Settings["ipc.transport"], s.Settings["ipc.send"], s.Settings["ipc.buffer"],
		s.Settings["chunking.algorithm"], s.Settings["chunking.accounting"])
	fmt.Fprintf(w, "units %d: ok %d, failed %d, cancelled %d   elapsed %v   throughput %.1f/s   e2e p50 %v  p99 %v\n",
		s.Submitted, s.OK, s.Failed, s.Cancelled, s.Elapsed.Round(time.Millisecond), s.Throughput,
		s.E2EP50.Round(time.Microsecond), s.E2EP99.Round(time.Microsecond))
	fmt.Fprintf(w, "task hosts: %d spawned, %d replaced   sidecar: %s", s.HostsSpawned, s.HostsReplaced, sidecarText(s))
	if s.ProcessCPU > 0 && s.Submitted > 0 {
		fmt.Fprintf(w, "   runtime CPU %v (%v per unit)", attribution.RoundDuration(s.ProcessCPU),
			attribution.RoundDuration(s.ProcessCPU/time.Duration(s.Submitted)))
	}
	fmt.Fprintln(w)
	if s.Sampler != "" {
		// The variables say it shorter than the sampler's description.
		arg := ""
		if v := os.Getenv(otelsetup.EnvTracesSamplerArg); v != "" {
			arg = " " + otelsetup.EnvTracesSamplerArg + "=" + v
		}
		fmt.Fprintf(w, "traces sampled (%s=%s%s): attribution covers %d of %d units\n",
			otelsetup.EnvTracesSampler, os.Getenv(otelsetup.EnvTracesSampler), arg, s.Attribution.Works, s.Submitted)
	}
	if note := untracedNote(s); note != "" {
		fmt.Fprintln(w, note)
	}
	for _, c := range slices.Sorted(maps.Keys(s.Failures)) {
		fmt.Fprintf(w, "  %-18s %5d  e.g. %s\n", c, s.Failures[c], oneLine(s.Examples[c], 160))
	}
	fmt.Fprintln(w)
	if err := s.Attribution.WriteText(w); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(s.Kinds)) {
		fmt.Fprintf(w, "\n%s units only:\n", k)
		if err := s.Kinds[k].WriteText(w); err != nil {
			return err
		}
	}
	if out != "" {
		fmt.Fprintf(w, "\nwrote %s (%s)\n", out, wrote)
	}
	return nil
}

func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// progress is the progress bar on stderr: shown only on a terminal (or
// always), and only once the run has lasted a second.
type progress struct {
	w      io.Writer
	total  int
	on     bool
	done   atomic.Int64
	failed atomic.Int64
	begin  time.Time
	stopc  chan struct{}
	wg     sync.WaitGroup
	shown  bool
}

func newProgress(w io.Writer, total int, mode string) *progress {
	on := mode == "always"
	if mode == "auto" {
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				on = true
			}
		}
	}
	return &progress{w: w, total: total, on: on, stopc: make(chan struct{})}
}

func (p *progress) add(r runtime.Result) {
	p.done.Add(1)
	if r.Outcome != telemetry.OK {
		p.failed.Add(1)
	}
}

func (p *progress) start() {
	p.begin = time.Now()
	if !p.on {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stopc:
				return
			case <-t.C:
				if time.Since(p.begin) >= time.Second {
					p.draw()
				}
			}
		}
	}()
}

func (p *progress) draw() {
	done := int(p.done.Load())
	const width = 30
	fill := 0
	if p.total > 0 {
		fill = min(width, done*width/p.total)
	}
	rate := float64(done) / time.Since(p.begin).Seconds()
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d units  %.0f/s  failed %d ", strings.Repeat("#", fill), strings.Repeat(".", width-fill),
		done, p.total, rate, p.failed.Load())
	p.shown = true
}

func (p *progress) stop() {
	if !p.on {
		return
	}
	close(p.stopc)
	p.wg.Wait()
	if p.shown {
		p.draw()
		fmt.Fprintln(p.w)
	}
}

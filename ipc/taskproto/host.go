package taskproto

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// TaskFunc runs one task inside a task host. It gets the decoded
// configuration (parameters, environment, payload) and returns the task's
// outputs; an error fails the task (STATUS_FAILURE with the error's text)
// without ending the host. ctx ends when the host shuts down.
type TaskFunc func(ctx context.Context, task *ipcpb.TaskConfiguration) (outputs map[string]string, err error)

// The environment variables in which an amdahl parent hands each task host
// the settings both ends of the connection must agree on (the parent's
// settings ipc.buffer, ipc.send, ipc.delta and perturb.taskhost.execute,
// resolved). ServeHost reads them; a host started by another parent, or by
// hand, gets ipc's defaults for an unset one.
const (
	EnvBuffer       = "AMDAHL_IPC_BUFFER"
	EnvSend         = "AMDAHL_IPC_SEND"
	EnvDelta        = "AMDAHL_IPC_DELTA"
	EnvExecuteDelay = "AMDAHL_PERTURB_TASKHOST_EXECUTE"
)

// MaxExecuteDelay bounds perturb.taskhost.execute.
const MaxExecuteDelay = time.Second

// HostSettings are what the two ends of a task host's connection agree on,
// as the parent passed them: the requested buffer (0: ipc's default), the
// send mode, delta encoding, and how much longer every execute phase runs
// (a causal experiment; 0 is off).
type HostSettings struct {
	Buffer       int
	Send         ipc.Mode
	Delta        bool
	ExecuteDelay time.Duration
}

// HostSettingsFromEnv reads HostSettings from lookupEnv (os.LookupEnv in a
// task host): EnvBuffer (a size, ipc.ParseBufferSize), EnvSend (sync or
// async), EnvDelta (on or off; default on) and EnvExecuteDelay (a Go
// duration from 0 to MaxExecuteDelay). An invalid value is an error that
// names the variable and what it takes.
func HostSettingsFromEnv(lookupEnv func(string) (string, bool)) (HostSettings, error) {
	s := HostSettings{Delta: true}
	var errs []error
	if v, ok := lookupEnv(EnvBuffer); ok {
		n, err := ipc.ParseBufferSize(v)
		errs = append(errs, envErr(EnvBuffer, err))
		s.Buffer = n
	}
	if v, ok := lookupEnv(EnvSend); ok {
		m, err := ipc.ParseMode(v)
		errs = append(errs, envErr(EnvSend, err))
		s.Send = m
	}
	if v, ok := lookupEnv(EnvDelta); ok {
		switch strings.TrimSpace(v) {
		case "on":
			s.Delta = true
		case "off":
			s.Delta = false
		default:
			errs = append(errs, fmt.Errorf("%s=%q: want on or off", EnvDelta, v))
		}
	}
	if v, ok := lookupEnv(EnvExecuteDelay); ok {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d < 0 || d > MaxExecuteDelay {
			errs = append(errs, fmt.Errorf("%s=%q: want a Go duration from 0 to %s, such as 200us (0 for off)", EnvExecuteDelay, v, MaxExecuteDelay))
		}
		s.ExecuteDelay = d
	}
	return s, errors.Join(errs...)
}

func envErr(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", name, err)
}

// ConnOptions returns the ipc options of either end of a connection with
// these settings: the buffer, the send mode and this protocol's codec.
func (s HostSettings) ConnOptions() []ipc.Option {
	opts := []ipc.Option{ipc.WithMode(s.Send), WithCodec(WithDelta(s.Delta))}
	if s.Buffer > 0 {
		opts = append(opts, ipc.WithBufferSize(s.Buffer))
	}
	return opts
}

// HostOption configures ServeHost.
type HostOption func(*hostConfig)

type hostConfig struct {
	comp      *telemetry.Component
	logger    *slog.Logger
	connOpts  []ipc.Option
	lookupEnv func(string) (string, bool)
}

// WithHostTelemetry makes the host record its phases (receive,
// deserialize, execute, serialize, send) with c, under the parent's trace
// that every task configuration carries, and run each task under the
// execute phase's pprof label when c sets labels. Without it (the default)
// the host records nothing; the parent still gets the host's phase timings
// in every reply.
func WithHostTelemetry(c *telemetry.Component) HostOption {
	return func(h *hostConfig) { h.comp = c }
}

// WithHostLogger sets the logger of the host and its connection (default
// slog.Default()).
func WithHostLogger(l *slog.Logger) HostOption { return func(h *hostConfig) { h.logger = l } }

// WithConnOptions adds ipc options to the host's connection, applied after
// the ones the parent's settings call for.
func WithConnOptions(opts ...ipc.Option) HostOption {
	return func(h *hostConfig) { h.connOpts = append(h.connOpts, opts...) }
}

// WithHostLookupEnv reads the parent's settings and the inherited
// connection with f instead of os.LookupEnv.
func WithHostLookupEnv(f func(string) (string, bool)) HostOption {
	return func(h *hostConfig) { h.lookupEnv = f }
}

// ServeHost is the child side of a task host, as go-plugin's Serve is a
// plugin's: it takes the connection its amdahl parent handed it
// (ipc.LookupInherited, then ipc.AcceptInherited), with the settings the
// parent passed (HostSettingsFromEnv), then runs every TaskConfiguration
// it receives with the TaskFunc named by its TaskName, one at a time, and
// replies with a TaskResult carrying the outputs and the host's phase
// timings. An unknown task name fails that task, not the host.
//
// It returns nil when the parent sends Shutdown or closes the connection,
// ctx's error when ctx ends, and ipc.ErrNotChild in a program not started
// by an amdahl parent. It sets up no telemetry: pass a Component
// (WithHostTelemetry) to record the host's phases with the program's own
// providers.
func ServeHost(ctx context.Context, tasks map[string]TaskFunc, opts ...HostOption) error {
	cfg := hostConfig{logger: slog.Default(), lookupEnv: os.LookupEnv}
	for _, o := range opts {
		o(&cfg)
	}
	set, err := HostSettingsFromEnv(cfg.lookupEnv)
	if err != nil {
		return fmt.Errorf("taskhost: %w", err)
	}
	inh, err := ipc.LookupInherited(cfg.lookupEnv)
	if err != nil {
		return err
	}
	_ = os.Unsetenv(ipc.EnvToken) // grandchildren must not inherit the token
	connOpts := append(append(set.ConnOptions(), ipc.WithTelemetry(cfg.comp), ipc.WithLogger(cfg.logger)), cfg.connOpts...)
	conn, err := ipc.AcceptInherited(ctx, inh, connOpts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	return serve(ctx, conn, tasks, cfg, set.ExecuteDelay)
}

// serve answers conn's task configurations until the parent ends.
func serve(ctx context.Context, conn *ipc.Conn, tasks map[string]TaskFunc, cfg hostConfig, delay time.Duration) error {
	for {
		in, err := conn.Recv(ctx)
		if errors.Is(err, ipc.ErrPeerClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("taskhost: %w", err)
		}
		switch m := in.Msg.(type) {
		case *ipcpb.Shutdown:
			return conn.Shutdown(ctx)
		case *ipcpb.TaskConfiguration:
			// The task and its reply run under the parent's span: one
			// context for both (Reply sends under it as it is).
			tctx := in.Context(ctx)
			res, start, dur := runTask(tctx, cfg.comp, tasks, m, delay)
			if err := Reply(tctx, conn, in, res, start, dur); err != nil {
				return fmt.Errorf("taskhost: reply to task %d: %w", m.GetId(), err)
			}
		default:
			cfg.logger.Warn("taskhost: ignoring unexpected packet", "type", in.Type)
		}
	}
}

// runTask runs one task in the execute phase and measures it itself (the
// phase API reads no clock when telemetry is off).
func runTask(ctx context.Context, comp *telemetry.Component, tasks map[string]TaskFunc, m *ipcpb.TaskConfiguration, delay time.Duration) (*ipcpb.TaskResult, time.Time, time.Duration) {
	res := &ipcpb.TaskResult{Id: m.GetId(), Status: ipcpb.Status_STATUS_SUCCESS}
	f, ok := tasks[m.GetTaskName()]
	start := time.Now()
	if !ok {
		res.Status, res.Error = ipcpb.Status_STATUS_FAILURE, "unknown task "+strconv.Quote(m.GetTaskName())+" in this task host"
		return res, start, time.Since(start)
	}
	// With telemetry the task body runs under the phase label when the
	// host profiles itself; without, nothing in the host would read one.
	ectx, ph := comp.Start(ctx, telemetry.Execute, telemetry.None)
	out, err := f(ectx, m)
	if delay > 0 {
		time.Sleep(delay) // perturb.taskhost.execute: a causal experiment
	}
	ph.End()
	dur := time.Since(start)
	switch {
	case errors.Is(err, context.Canceled):
		res.Status, res.Error = ipcpb.Status_STATUS_CANCELLED, err.Error()
	case err != nil:
		res.Status, res.Error = ipcpb.Status_STATUS_FAILURE, err.Error()
	default:
		res.Outputs = out
	}
	return res, start, dur
}

package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/ipc/taskproto"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
)

// TaskFunc runs one task inside a task host. It gets the decoded
// configuration (parameters, environment, payload) and returns the task's
// outputs; an error fails the task (STATUS_FAILURE with the error's text)
// without ending the host. ctx ends when the host shuts down.
type TaskFunc func(ctx context.Context, task *ipcpb.TaskConfiguration) (outputs map[string]string, err error)

// Task names of the built-in tasks.
const (
	// TaskHash decodes the parameters and runs SHA-256 over them
	// "amdahl.passes" times (parameter of that name, default 1): the
	// execute phase of the taskhost scenario.
	TaskHash = "amdahl.hash"
	// ParamPasses is TaskHash's parameter naming the number of passes.
	ParamPasses = "amdahl.passes"
)

// BuiltinTasks returns the tasks every amdahl task host serves.
func BuiltinTasks() map[string]TaskFunc {
	return map[string]TaskFunc{TaskHash: hashTask}
}

// hashTask is real CPU work proportional to the configuration's size: the
// parameters are hashed in key order, passes times, each pass over the
// previous digest and every value.
func hashTask(ctx context.Context, task *ipcpb.TaskConfiguration) (map[string]string, error) {
	passes := 1
	if v, ok := task.GetParameters()[ParamPasses]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1000 {
			return nil, fmt.Errorf("%s: parameter %s=%q: want a whole number from 0 to 1000", TaskHash, ParamPasses, v)
		}
		passes = n
	}
	keys := make([]string, 0, len(task.GetParameters()))
	for k := range task.GetParameters() {
		if k != ParamPasses {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var sum [sha256.Size]byte
	n := 0
	for range passes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		h := sha256.New()
		h.Write(sum[:])
		for _, k := range keys {
			v := task.GetParameters()[k]
			h.Write([]byte(k))
			h.Write([]byte(v))
			n += len(v)
		}
		h.Write(task.GetPayload())
		h.Sum(sum[:0])
	}
	return map[string]string{"digest": hex.EncodeToString(sum[:]), "bytes": strconv.Itoa(n)}, nil
}

// EnvHostProfileDir, when set by the parent, makes a task host write its
// own cpu.pprof and heap.pprof into that directory (CPU samples carry the
// phase labels: receive, deserialize, execute, serialize).
const EnvHostProfileDir = "AMDAHL_HOST_PROFILE_DIR"

// HostServiceName is the service.name of a task host's telemetry, unless
// OTEL_SERVICE_NAME is set in its environment (Config.HostEnv).
const HostServiceName = "amdahl-taskhost"

// hostTelemetry sets up a task host's telemetry from the environment its
// parent passed (hostEnviron): the same trace exporter and Pyroscope
// server as the parent, service.name HostServiceName unless
// OTEL_SERVICE_NAME is set, and cpu.pprof and heap.pprof in
// EnvHostProfileDir when that is set (it beats PYROSCOPE_SERVER_ADDRESS:
// one CPU profiler). The parent's own files and ports (AMDAHL_TRACE_FILE,
// AMDAHL_METRICS_ADDR, AMDAHL_PROFILE_DIR) are never read. With nothing
// to export it returns nil (disabled): the host records nothing, as
// before.
func hostTelemetry(ctx context.Context, lookupEnv func(string) (string, bool)) (*otelsetup.Telemetry, error) {
	dir, _ := lookupEnv(EnvHostProfileDir)
	lookup := func(name string) (string, bool) {
		switch name {
		case otelsetup.EnvTraceFile, otelsetup.EnvMetricsAddr, otelsetup.EnvProfileDir:
			return "", false
		case otelsetup.EnvPyroscopeAddress:
			if dir != "" {
				return "", false
			}
		}
		return lookupEnv(name)
	}
	opts := []otelsetup.Option{otelsetup.WithLookupEnv(lookup)}
	if v, ok := lookupEnv("OTEL_SERVICE_NAME"); !ok || v == "" {
		opts = append(opts, otelsetup.WithServiceName(HostServiceName))
	}
	if dir != "" {
		opts = append(opts, otelsetup.WithProfileDir(dir))
	}
	tel, err := otelsetup.Setup(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	if !tel.Exporting() {
		return nil, tel.Shutdown(ctx)
	}
	return tel, nil
}

// hostComponent is the task host's instrumentation: nil without
// telemetry; with spans only when something exports them (a host that
// only takes profiles keeps its phase labels and makes no span nobody
// would read).
func hostComponent(tel *otelsetup.Telemetry) (*telemetry.Component, error) {
	if tel == nil {
		return nil, nil
	}
	tp := tel.TracerProvider()
	if tel.SpansOnlyForAttribution() {
		tp = tracenoop.NewTracerProvider()
	}
	return telemetry.NewComponent("taskhost", telemetry.ComponentConfig{TracerProvider: tp, MeterProvider: tel.MeterProvider(),
		PhaseLabels: tel.PhaseLabels(), Attributes: []attribute.KeyValue{telemetry.AttrTransport.String("ipc")}})
}

// ServeHost is the child side of a task host: it takes the connection its
// amdahl parent handed it (ipc.LookupInherited on the process environment,
// then ipc.AcceptInherited), then runs every
// TaskConfiguration it receives with the TaskFunc named by its TaskName,
// one at a time, and replies with a TaskResult carrying the outputs and
// the child's phase timings. It returns nil when the parent sends Shutdown
// or closes the connection, ctx's error when ctx ends, and ipc.ErrNotChild
// in a program not started by an amdahl parent. An unknown task name fails
// that task, not the host. The settings the parent passed in the
// environment (ipc.buffer, ipc.send, ipc.delta, perturb.taskhost.execute)
// are read through the settings registry; an invalid one is a
// *SettingError. opts are applied after them. Telemetry comes from the
// environment too (package doc, "Task host telemetry"): with a trace
// exporter, Pyroscope or EnvHostProfileDir set, the host records and
// exports its own phase spans, under the parent's trace, and profiles; a
// bad telemetry setting is an *otelsetup.ConfigError.
//
// Programs that host their own task functions call ServeHost from main.
func ServeHost(ctx context.Context, tasks map[string]TaskFunc, opts ...ipc.Option) (err error) {
	logger := slog.Default()
	set, err := hostSettings(os.LookupEnv)
	if err != nil {
		return fmt.Errorf("taskhost: %w", err)
	}
	delay := set.Perturb[2]
	tel, err := hostTelemetry(ctx, os.LookupEnv)
	if err != nil {
		return fmt.Errorf("taskhost: %w", err)
	}
	defer func() { err = errors.Join(err, tel.Shutdown(context.WithoutCancel(ctx))) }()
	comp, err := hostComponent(tel)
	if err != nil {
		return fmt.Errorf("taskhost: %w", err)
	}
	inh, err := ipc.LookupInherited(os.LookupEnv)
	if err != nil {
		return err
	}
	_ = os.Unsetenv(ipc.EnvToken) // grandchildren must not inherit the token
	conn, err := ipc.AcceptInherited(ctx, inh, append(append(set.ipcOptions(), ipc.WithTelemetry(comp), ipc.WithLogger(logger)), opts...)...)
	if err != nil {
		return err
	}
	defer conn.Close()
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
			res, start, dur := runTask(tctx, comp, tasks, m, delay)
			if err := taskproto.Reply(tctx, conn, in, res, start, dur); err != nil {
				return fmt.Errorf("taskhost: reply to task %d: %w", m.GetId(), err)
			}
		default:
			logger.Warn("taskhost: ignoring unexpected packet", "type", in.Type)
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
		res.Status, res.Error = ipcpb.Status_STATUS_FAILURE, fmt.Sprintf("unknown task %q in this task host", m.GetTaskName())
		return res, start, time.Since(start)
	}
	// With telemetry (hostComponent) the task body runs under the phase
	// label when the host profiles itself; without, nothing in the host
	// would read a label.
	ectx, ph := comp.StartPhase(ctx, telemetry.Execute, telemetry.None)
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

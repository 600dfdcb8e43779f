package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"sort"
	"strconv"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/ipc/taskproto"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
)

// TaskFunc runs one task inside a task host (taskproto.TaskFunc).
type TaskFunc = taskproto.TaskFunc

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
			writeString(h, k)
			writeString(h, v)
			n += len(v)
		}
		h.Write(task.GetPayload())
		h.Sum(sum[:0])
	}
	return map[string]string{"digest": hex.EncodeToString(sum[:]), "bytes": strconv.Itoa(n)}, nil
}

// writeString writes s to h without a copy: []byte(s) would allocate
// and copy every value each pass (h is an interface, so the conversion
// escapes), most of what a task host allocates. An io.Writer, h.Write
// among them, must not modify p nor keep it.
func writeString(h hash.Hash, s string) {
	h.Write(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// EnvHostProfileDir, when set by the parent, makes a task host write its
// own cpu.pprof and heap.pprof into that directory (CPU samples carry the
// phase labels: receive, deserialize, execute, serialize).
const EnvHostProfileDir = "AMDAHL_HOST_PROFILE_DIR"

// HostServiceName is the service.name of a task host's telemetry, unless
// OTEL_SERVICE_NAME is set in its environment (Config.Hosts.Env).
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

// ServeHost is the child side of an amdahl task host with amdahl's own
// telemetry: taskproto.ServeHost (the parent's connection and settings,
// every task run with the TaskFunc its name names), with the host's
// telemetry set up from the environment the parent passed ("Task host
// telemetry" in the package doc): with a trace exporter, Pyroscope or
// EnvHostProfileDir set, the host records and exports its own phase
// spans, under the parent's trace, and profiles; a bad telemetry setting
// is an *otelsetup.ConfigError. opts are applied after the parent's
// settings. It links the OpenTelemetry SDK and the profiler: a task host
// of one's own that exports nothing calls taskproto.ServeHost instead.
//
// It returns nil when the parent sends Shutdown or closes the connection,
// ctx's error when ctx ends, and ipc.ErrNotChild in a program not started
// by an amdahl parent.
func ServeHost(ctx context.Context, tasks map[string]TaskFunc, opts ...ipc.Option) (err error) {
	tel, err := hostTelemetry(ctx, os.LookupEnv)
	if err != nil {
		return fmt.Errorf("taskhost: %w", err)
	}
	defer func() { err = errors.Join(err, tel.Shutdown(context.WithoutCancel(ctx))) }()
	comp, err := hostComponent(tel)
	if err != nil {
		return fmt.Errorf("taskhost: %w", err)
	}
	return taskproto.ServeHost(ctx, tasks, taskproto.WithHostTelemetry(comp), taskproto.WithConnOptions(opts...))
}

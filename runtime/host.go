package runtime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
)

// ErrHostDied matches the error of a task whose host process exited or
// whose connection broke while it ran.
var ErrHostDied = errors.New("task host died")

// ErrTaskTimeout matches the error of a task that outlived
// runtime.task_timeout.
var ErrTaskTimeout = errors.New("task timed out")

// hostConfig is what every host of a pool is started with.
type hostConfig struct {
	argv      []string // program and arguments of a task host
	env       []string // added to os.Environ(): settings and the caller's extras
	transport Transport
	ipcOpts   []ipc.Option
	logger    *slog.Logger
	// grace bounds each step of the graceful shutdown (shutdown packet →
	// wait → SIGTERM → wait → SIGKILL).
	grace time.Duration
	// profileDir, if set, gets a host-<id> directory per host for its
	// cpu.pprof and heap.pprof.
	profileDir string
}

// host is one task host child process and its connection. It runs one
// task at a time (the MSBuild TaskHost model); the pool guarantees that.
type host struct {
	id   int
	pid  int
	cmd  *exec.Cmd
	conn *ipc.Conn
	cfg  *hostConfig
	log  *slog.Logger

	results  chan *ipc.Incoming // TaskResults, from the reader goroutine
	readDone chan struct{}      // closed when the connection fails or closes
	readErr  error              // set before readDone is closed
	exited   chan struct{}      // closed when the process has been waited for
	exitErr  error              // set before exited is closed

	dead     atomic.Bool // the process exited, the connection broke, or it was killed
	stopOnce sync.Once
	stopErr  error
	wg       sync.WaitGroup // reader and waiter
	drains   sync.WaitGroup // output drains
	outputs  []*os.File     // read ends of the child's stdout and stderr
}

// startHost spawns a task host and runs the handshake. On error nothing is
// left running.
func startHost(ctx context.Context, id int, cfg *hostConfig) (*host, error) {
	cmd, err := hostCommand(id, cfg)
	if err != nil {
		return nil, err
	}
	ch, err := attachChannel(cmd, id, cfg.transport)
	if err != nil {
		return nil, err
	}
	outR, errR, err := startWithOutputs(cmd)
	if err != nil {
		_ = ch.closeAll()
		return nil, fmt.Errorf("start task host %d (%s): %w", id, cfg.argv[0], err)
	}
	_ = ch.closeChild()

	h := &host{
		id: id, pid: cmd.Process.Pid, cmd: cmd, cfg: cfg,
		log:      cfg.logger.With("host", id, "pid", cmd.Process.Pid),
		results:  make(chan *ipc.Incoming, 1),
		readDone: make(chan struct{}),
		exited:   make(chan struct{}),
	}
	h.outputs = []*os.File{outR, errR}
	h.drains.Add(2)
	go h.drain(outR, "stdout")
	go h.drain(errR, "stderr")
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.exitErr = cmd.Wait()
		h.dead.Store(true)
		close(h.exited)
	}()

	conn, err := ch.connect(ctx, cfg.ipcOpts...)
	if err != nil {
		h.kill()
		<-h.exited
		h.wg.Wait()
		h.closeOutputs()
		return nil, fmt.Errorf("start task host %d (pid %d): %w%s", id, h.pid, err, h.exitNote())
	}
	h.conn = conn
	h.wg.Add(1)
	go h.readLoop()
	h.log.Debug("runtime: task host started", "transport", cfg.transport)
	return h, nil
}

// hostCommand is task host id's command: its program, its environment
// (hostEnviron, its id, its profile directory) and its process attributes.
func hostCommand(id int, cfg *hostConfig) (*exec.Cmd, error) {
	if len(cfg.argv) == 0 {
		return nil, errors.New("start task host: no program configured")
	}
	cmd := exec.Command(cfg.argv[0], cfg.argv[1:]...)
	cmd.Env = append(hostEnviron(os.Environ(), cfg.env), "AMDAHL_HOST_ID="+fmt.Sprint(id))
	if cfg.profileDir != "" {
		dir := filepath.Join(cfg.profileDir, fmt.Sprintf("host-%d", id))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("start task host %d: profile dir: %w", id, err)
		}
		cmd.Env = append(cmd.Env, EnvHostProfileDir+"="+dir)
	}
	// Its own process group: a terminal's Ctrl-C (SIGINT to the
	// foreground group) reaches the parent, which drains and then shuts
	// the hosts down, not the hosts themselves; and stop can signal the
	// host's own children with it. Pdeathsig: the host gets SIGKILL if
	// the parent dies. (Linux sends it when the thread that forked exits,
	// golang/go#27505; Go exits threads rarely, and only locked ones.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}

// hostChannel is the parent's side of a task host's connection before the
// handshake: connect runs it, closeChild closes the child's ends once the
// child holds them, closeAll closes everything.
type hostChannel struct {
	connect              func(context.Context, ...ipc.Option) (*ipc.Conn, error)
	closeChild, closeAll func() error
}

// attachChannel makes task host id's connection over transport and hands
// the child its ends (cmd's ExtraFiles, from fd 3, and the environment
// that names them).
func attachChannel(cmd *exec.Cmd, id int, transport Transport) (hostChannel, error) {
	switch transport {
	case Pipes:
		pp, err := ipc.NewPipePair()
		if err != nil {
			return hostChannel{}, fmt.Errorf("start task host %d: %w", id, err)
		}
		cmd.ExtraFiles = pp.ChildFiles()
		cmd.Env = append(cmd.Env, pp.ChildEnv(3)...)
		return hostChannel{pp.Connect, pp.CloseChild, pp.Close}, nil
	default:
		pair, err := ipc.NewPair()
		if err != nil {
			return hostChannel{}, fmt.Errorf("start task host %d: %w", id, err)
		}
		cmd.ExtraFiles = []*os.File{pair.ChildFile()}
		cmd.Env = append(cmd.Env, pair.ChildEnv(3)...)
		return hostChannel{pair.Connect, pair.CloseChild, pair.Close}, nil
	}
}

// startWithOutputs starts cmd with pipes of its own for the child's stdout
// and stderr, to be drained into the log (the child never inherits the
// parent's, possibly captured, outputs, and a full pipe never blocks it),
// and returns their read ends. On error nothing of it is left open.
func startWithOutputs(cmd *exec.Cmd) (outR, errR *os.File, err error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, nil, fmt.Errorf("stderr pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, nil, err
	}
	return outR, errR, nil
}

// hostEnviron returns a task host's environment: the parent's (environ),
// with its OTEL_* and PYROSCOPE_* variables, so the host exports to the
// same places (ServeHost, hostTelemetry), less what names the parent
// itself: its service.name and Pyroscope application, trace file, /metrics address and profile
// directory, which a host must not reuse. Metrics stay the parent's: it
// records the host's phase durations from the reply timings, so hosts
// export none (OTEL_METRICS_EXPORTER=none). extra (settings and
// Config.Hosts.Env) comes last and wins, so Config.Hosts.Env can name the
// hosts' service (OTEL_SERVICE_NAME) or point them elsewhere.
func hostEnviron(environ, extra []string) []string {
	out := make([]string, 0, len(environ)+len(extra)+1)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "OTEL_SERVICE_NAME", otelsetup.EnvPyroscopeAppName, otelsetup.EnvTraceFile, otelsetup.EnvMetricsAddr, otelsetup.EnvProfileDir,
			otelsetup.EnvMetricsExporter, otelsetup.EnvOTLPMetricsEndpoint, otelsetup.EnvOTLPMetricsProtocol:
			continue
		}
		out = append(out, kv)
	}
	out = append(out, otelsetup.EnvMetricsExporter+"=none")
	return append(out, extra...)
}

// drain copies one output stream of the child into the log, line by line,
// until the child (and anything that inherited the stream) closes it.
func (h *host) drain(r *os.File, stream string) {
	defer h.drains.Done()
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if line[len(line)-1] == '\n' {
				line = line[:len(line)-1]
			}
			h.log.Info("taskhost: "+string(line), "stream", stream)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				h.log.Warn("runtime: reading task host output", "stream", stream, "err", err)
			}
			return
		}
	}
}

// readLoop forwards results to the running task and logs the host's log
// messages, until the connection ends.
func (h *host) readLoop() {
	defer h.wg.Done()
	ctx := context.Background()
	for {
		in, err := h.conn.Recv(ctx)
		if err != nil {
			h.readErr = err
			h.dead.Store(true)
			close(h.readDone)
			return
		}
		switch m := in.Msg.(type) {
		case *ipcpb.TaskResult:
			select {
			case h.results <- in:
			default:
				h.log.Warn("runtime: task host sent a result nobody waits for", "task", m.GetId())
			}
		case *ipcpb.LogMessage:
			h.log.Info("taskhost: "+m.GetText(), "task", m.GetTaskId(), "level", m.GetLevel().String())
		case *ipcpb.Shutdown:
			h.log.Debug("runtime: task host is shutting down", "reason", m.GetReason().String(), "error", m.GetError())
		}
	}
}

// exitNote describes how the process ended, if it has, for error messages.
func (h *host) exitNote() string {
	select {
	case <-h.exited:
		if h.exitErr == nil {
			return "; the process exited with status 0"
		}
		return "; the process ended: " + h.exitErr.Error()
	default:
		return ""
	}
}

// run sends task and waits for its result, the host's death, timeout (0:
// none) or ctx. Any outcome but a result leaves the host dead (killed if it
// was still running): its state is unknown.
func (h *host) run(ctx context.Context, task *ipcpb.TaskConfiguration, timeout time.Duration) (*ipc.Incoming, error) {
	// Drop a stale result of an earlier, abandoned task.
	select {
	case <-h.results:
	default:
	}
	var timer <-chan time.Time
	sctx := ctx
	if timeout > 0 {
		// The timeout covers the send too: a host that stops reading
		// blocks it.
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	timedOut := func() error {
		h.kill()
		return fmt.Errorf("task host %d (pid %d): %w after %v; the host was killed and will be replaced", h.id, h.pid, ErrTaskTimeout, timeout)
	}
	if err := h.conn.Send(sctx, task); err != nil {
		if ctx.Err() == nil && sctx.Err() != nil {
			return nil, timedOut()
		}
		h.kill()
		return nil, h.died(fmt.Errorf("send task %d: %w", task.GetId(), err))
	}
	accept := func(in *ipc.Incoming) bool {
		if res := in.Msg.(*ipcpb.TaskResult); res.GetId() != task.GetId() {
			h.log.Warn("runtime: ignoring a result for another task", "got", res.GetId(), "want", task.GetId())
			return false
		}
		return true
	}
	for {
		select {
		case in := <-h.results:
			if accept(in) {
				return in, nil
			}
		case <-h.readDone:
			// A result that arrived just before the connection ended wins.
			select {
			case in := <-h.results:
				if accept(in) {
					return in, nil
				}
			default:
			}
			return nil, h.died(h.readErr)
		case <-timer:
			return nil, timedOut()
		case <-ctx.Done():
			h.kill()
			return nil, fmt.Errorf("task host %d (pid %d): %w", h.id, h.pid, ctx.Err())
		}
	}
}

// died builds the error of a task whose host failed, naming how the
// process ended when it did so within a moment.
func (h *host) died(cause error) error {
	h.dead.Store(true)
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-h.exited:
	case <-t.C:
	}
	return fmt.Errorf("task host %d (pid %d): %w: %v%s", h.id, h.pid, ErrHostDied, cause, h.exitNote())
}

// kill sends SIGKILL to the host and anything it started in its process
// group (the process is reaped by the waiter goroutine).
func (h *host) kill() {
	h.dead.Store(true)
	select {
	case <-h.exited:
	default:
		_ = syscall.Kill(-h.pid, syscall.SIGKILL)
		_ = h.cmd.Process.Kill()
	}
}

// closeOutputs waits up to the grace for the output drains to reach EOF
// (they do once every process holding the pipes has exited), then closes
// the read ends, which ends the drains: a grandchild that keeps the
// host's stdout open cannot hang the runtime.
func (h *host) closeOutputs() {
	done := make(chan struct{})
	go func() { h.drains.Wait(); close(done) }()
	t := time.NewTimer(h.cfg.grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		h.log.Warn("runtime: task host output still open after it exited (a process it started holds it); closing it", "waited", h.cfg.grace)
	}
	for _, f := range h.outputs {
		_ = f.Close()
	}
	<-done
}

// stop ends the host gracefully: a Shutdown packet, a wait, SIGTERM, a
// wait, SIGKILL; then it closes the connection and waits for every
// goroutine of the host. Safe to call more than once and concurrently.
func (h *host) stop(ctx context.Context) error {
	h.stopOnce.Do(func() {
		grace := h.cfg.grace
		wait := func() bool {
			t := time.NewTimer(grace)
			defer t.Stop()
			select {
			case <-h.exited:
				return true
			case <-t.C:
				return false
			case <-ctx.Done():
				return false
			}
		}
		if !h.dead.Load() && h.conn != nil {
			sctx, cancel := context.WithTimeout(ctx, grace)
			err := h.conn.Send(sctx, &ipcpb.Shutdown{Reason: ipcpb.Shutdown_REASON_REQUESTED})
			cancel()
			if err != nil {
				h.log.Debug("runtime: shutdown packet not delivered", "err", err)
			}
		}
		exited := wait()
		if !exited {
			h.log.Warn("runtime: task host did not exit after the shutdown packet; sending SIGTERM", "waited", grace)
			_ = syscall.Kill(-h.pid, syscall.SIGTERM)
			exited = wait()
		}
		if !exited {
			h.log.Warn("runtime: task host did not exit after SIGTERM; killing it", "waited", grace)
			_ = h.cmd.Process.Kill()
		}
		<-h.exited
		h.dead.Store(true)
		// Whatever the host started and left behind goes with it.
		_ = syscall.Kill(-h.pid, syscall.SIGKILL)
		if h.conn != nil {
			if err := h.conn.Close(); err != nil && !errors.Is(err, ipc.ErrClosed) {
				h.stopErr = err
			}
		}
		h.wg.Wait()
		h.closeOutputs()
	})
	return h.stopErr
}

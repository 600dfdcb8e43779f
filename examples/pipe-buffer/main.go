// Command pipe-buffer repeats, as a program, the experiment behind MSBuild's
// move from 128 KB to 1 MB node pipe buffers: a parent ships large task
// configurations to a task host child over an ipc connection and measures
// how long its sends block and how long each message takes end to end,
// with ipc.buffer 128 KiB and 1 MiB, in sync and in async send mode.
//
// The same program is the parent and (started by itself with
// PIPE_BUFFER_CHILD=1 on an ipc.NewPair socketpair) the child, which
// answers each configuration through the ipc/taskproto codec after a
// simulated execution.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/amdahl-rt/amdahl/internal/bytesize"
	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/ipc/taskproto"
)

const (
	// envChild marks the process started as the child.
	envChild = "PIPE_BUFFER_CHILD"
	// envExecute is the child's simulated execution per task.
	envExecute = "PIPE_BUFFER_EXECUTE"
	// outEnvBytes is the child's output: the environment bytes it received.
	outEnvBytes = "environment_bytes"
)

// Bounds of the flags.
const (
	maxMessages = 10_000
	maxEnvBytes = 64 << 20
	maxExecute  = time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type options struct {
	messages int
	envBytes int
	execute  time.Duration
}

func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if os.Getenv(envChild) == "1" {
		if err := child(ctx); err != nil {
			fmt.Fprintln(stderr, "pipe-buffer child:", err)
			return 1
		}
		return 0
	}
	fs := flag.NewFlagSet("pipe-buffer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var envBytes string
	fs.IntVar(&o.messages, "messages", 32, fmt.Sprintf("task configurations per case (1..%d)", maxMessages))
	fs.StringVar(&envBytes, "env-bytes", "4MiB", fmt.Sprintf("environment bytes per configuration (1KiB..%s)", bytesize.Format(maxEnvBytes)))
	fs.DurationVar(&o.execute, "execute", 2*time.Millisecond, fmt.Sprintf("the child's simulated execution per task (0..%v)", maxExecute))
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	o.envBytes, err = bytesize.Parse(envBytes)
	switch {
	case err != nil:
		err = fmt.Errorf("--env-bytes: %w", err)
	case o.messages < 1 || o.messages > maxMessages:
		err = fmt.Errorf("--messages: %d is out of range (valid: 1..%d)", o.messages, maxMessages)
	case o.envBytes < 1<<10 || o.envBytes > maxEnvBytes:
		err = fmt.Errorf("--env-bytes: %d is out of range (valid: %d..%d)", o.envBytes, 1<<10, maxEnvBytes)
	case o.execute < 0 || o.execute > maxExecute:
		err = fmt.Errorf("--execute: %v is out of range (valid: 0..%v)", o.execute, maxExecute)
	}
	if err != nil {
		fmt.Fprintln(stderr, "pipe-buffer:", err)
		return 2
	}
	if err := parent(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "pipe-buffer:", err)
		return 1
	}
	return 0
}

// child answers every task configuration with the size of the
// environment it received, after the simulated execution, until the
// parent closes the connection.
func child(ctx context.Context) error {
	execute, err := time.ParseDuration(os.Getenv(envExecute))
	if err != nil || execute < 0 || execute > maxExecute {
		return fmt.Errorf("%s=%q: want a duration in 0..%v", envExecute, os.Getenv(envExecute), maxExecute)
	}
	inh, err := ipc.LookupInherited(os.LookupEnv)
	if err != nil {
		return err
	}
	conn, err := ipc.AcceptInherited(ctx, inh, taskproto.WithCodec())
	if err != nil {
		return err
	}
	for {
		in, err := conn.Recv(ctx)
		if errors.Is(err, ipc.ErrPeerClosed) {
			return conn.Close()
		}
		if err != nil {
			return errors.Join(err, conn.Close())
		}
		cfg, ok := in.Msg.(*ipcpb.TaskConfiguration)
		if !ok {
			continue // log and shutdown packets
		}
		start := time.Now()
		n := 0
		for k, v := range cfg.GetEnvironment() {
			n += len(k) + len(v)
		}
		time.Sleep(execute) // the task's work
		res := &ipcpb.TaskResult{Id: cfg.GetId(), Status: ipcpb.Status_STATUS_SUCCESS,
			Outputs: map[string]string{outEnvBytes: strconv.Itoa(n)}}
		if err := taskproto.Reply(ctx, conn, in, res, start, time.Since(start)); err != nil {
			return errors.Join(err, conn.Close())
		}
	}
}

// environment is a deterministic environment of about n bytes.
func environment(n int) (map[string]string, int) {
	const vars = 64
	env := make(map[string]string, vars)
	total := 0
	for i := range vars {
		k := fmt.Sprintf("VAR_%02d", i)
		size := n/vars - len(k)
		if i == vars-1 {
			size = n - total - len(k)
		}
		env[k] = strings.Repeat(string(rune('a'+i%26)), max(size, 0))
		total += len(k) + len(env[k])
	}
	return env, total
}

// sample is one case's measurements, one element per message.
type sample struct {
	buffer, effective int
	mode              ipc.Mode
	sendBlocked, e2e  []time.Duration
	writeBlocked      float64 // mean of amdahl.ipc.send.blocked, seconds
	roundTripped      int
}

func parent(ctx context.Context, o options, stdout, stderr io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	env, envBytes := environment(o.envBytes)
	fmt.Fprintf(stdout, "%d task configurations per case, environment %d bytes each, child execution %v\n\n",
		o.messages, envBytes, o.execute)
	fmt.Fprintf(stdout, "%-8s %-9s %-5s  %-22s %-14s %-22s %s\n",
		"buffer", "effective", "send", "Send returned after", "write blocked", "end to end", "round-tripped")
	for _, buf := range []int{128 << 10, 1 << 20} {
		for _, mode := range []ipc.Mode{ipc.Sync, ipc.Async} {
			s, err := runCase(ctx, exe, env, envBytes, buf, mode, o, stderr)
			if err != nil {
				return fmt.Errorf("buffer %s, %v: %w", bytesize.Format(buf), mode, err)
			}
			fmt.Fprintf(stdout, "%-8s %-9s %-5v  %-22s %-14s %-22s %d/%d\n",
				bytesize.Format(s.buffer), bytesize.Format(s.effective), s.mode,
				interval(s.sendBlocked), fmt.Sprintf("%.3f ms", s.writeBlocked*1e3), interval(s.e2e),
				s.roundTripped, o.messages)
			if s.roundTripped != o.messages {
				return fmt.Errorf("buffer %s, %v: %d of %d messages round-tripped", bytesize.Format(buf), mode, s.roundTripped, o.messages)
			}
		}
	}
	return nil
}

// interval is the mean of ds with a 95% normal-approximation half-width.
func interval(ds []time.Duration) string {
	n := float64(len(ds))
	var sum, sq float64
	for _, d := range ds {
		ms := float64(d) / 1e6
		sum += ms
		sq += ms * ms
	}
	mean := sum / n
	hw := 0.0
	if len(ds) > 1 {
		hw = 1.96 * math.Sqrt(max(sq-n*mean*mean, 0)/(n-1)/n)
	}
	return fmt.Sprintf("%.3f ± %.3f ms", mean, hw)
}

// runCase starts a child and sends it o.messages configurations back to
// back while a receiver collects the results.
func runCase(ctx context.Context, exe string, env map[string]string, envBytes, buf int, mode ipc.Mode, o options, stderr io.Writer) (s sample, err error) {
	s = sample{buffer: buf, mode: mode}
	pair, err := ipc.NewPair()
	if err != nil {
		return s, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(cctx, exe)
	cmd.Env = append(os.Environ(), envChild+"=1", envExecute+"="+o.execute.String())
	cmd.Env = append(cmd.Env, pair.ChildEnv(3)...)
	cmd.ExtraFiles = []*os.File{pair.ChildFile()}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return s, errors.Join(fmt.Errorf("start child: %w", err), pair.Close())
	}
	defer func() {
		if err != nil {
			cancel() // kills the child
		}
		if werr := cmd.Wait(); err == nil && werr != nil {
			err = fmt.Errorf("child: %w", werr)
		}
	}()
	if err := pair.CloseChild(); err != nil {
		return s, errors.Join(err, pair.Close())
	}

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck // a manual reader exports nothing
	conn, err := pair.Connect(cctx, ipc.WithBufferSize(buf), ipc.WithMode(mode), ipc.WithMeterProvider(mp),
		taskproto.WithCodec(taskproto.WithDelta(false))) // every configuration carries its whole environment
	if err != nil {
		return s, err
	}
	_, s.effective = conn.BufferSize()

	arrived := make([]time.Time, o.messages)
	var wg sync.WaitGroup
	var recvErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		// A failed receiver ends the case, or the sender could wait
		// forever on a child that stopped reading.
		if recvErr = receive(cctx, conn, envBytes, arrived); recvErr != nil {
			cancel()
		}
	}()

	started := make([]time.Time, o.messages)
	var sendErr error
	for i := range o.messages {
		cfg := &ipcpb.TaskConfiguration{Id: uint64(i + 1), TaskName: "example.echo", Environment: env}
		started[i] = time.Now()
		if sendErr = conn.Send(cctx, cfg); sendErr != nil {
			break
		}
		s.sendBlocked = append(s.sendBlocked, time.Since(started[i]))
	}
	if sendErr != nil {
		cancel()
	}
	wg.Wait()
	if err := errors.Join(sendErr, recvErr, conn.Shutdown(cctx)); err != nil {
		return s, err
	}
	for i, t := range arrived {
		if !t.IsZero() {
			s.roundTripped++
			s.e2e = append(s.e2e, t.Sub(started[i]))
		}
	}

	s.writeBlocked, err = meanSendBlocked(ctx, reader)
	return s, err
}

// receive reads len(arrived) results, checks each against its
// configuration (its id, and the environment size the child saw) and
// notes when it arrived.
func receive(ctx context.Context, conn *ipc.Conn, envBytes int, arrived []time.Time) error {
	for range arrived {
		in, err := conn.Recv(ctx)
		if err != nil {
			return err
		}
		res, ok := in.Msg.(*ipcpb.TaskResult)
		if !ok {
			continue
		}
		id := res.GetId()
		if id < 1 || id > uint64(len(arrived)) || res.GetOutputs()[outEnvBytes] != strconv.Itoa(envBytes) {
			return fmt.Errorf("unexpected result %d: %v", id, res.GetOutputs())
		}
		arrived[id-1] = time.Now()
	}
	return nil
}

// meanSendBlocked is the mean of ipc's send-blocked histogram in the
// reader's metrics, in seconds (0 without a send).
func meanSendBlocked(ctx context.Context, reader *sdkmetric.ManualReader) (float64, error) {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return 0, fmt.Errorf("collect metrics: %w", err)
	}
	mean := 0.0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == ipc.MetricSendBlocked {
				var sum float64
				var n uint64
				for _, dp := range h.DataPoints {
					sum, n = sum+dp.Sum, n+dp.Count
				}
				if n > 0 {
					mean = sum / float64(n)
				}
			}
		}
	}
	return mean, nil
}

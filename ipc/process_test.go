package ipc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/goleak"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
)

// envChild makes the test binary act as a task host child (the
// helper-process pattern): its value is the child's mode.
const envChild = "AMDAHL_IPC_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode, ok := os.LookupEnv(envChild); ok {
		if err := childMain(mode); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func childMain(mode string) error {
	ctx := context.Background()
	switch mode {
	case "echo":
		return childEcho(ctx)
	case "dial-as-nobody":
		return dialAsNobody()
	case "stall", "partial":
		// Handshake by hand, then misbehave on the raw socket.
		raw, tok, err := inheritedRaw()
		if err != nil {
			return err
		}
		if err := handshake(ctx, raw, tok, false, handshakeTimeoutForTest, nil); err != nil {
			return err
		}
		if mode == "partial" {
			frame, err := AppendFrame(nil, &ipcpb.TaskResult{Id: 1, Outputs: map[string]string{"big": strings.Repeat("x", 1<<20)}}, DefaultMaxPacketSize)
			if err != nil {
				return err
			}
			if _, err := raw.Write(frame[:len(frame)/2]); err != nil {
				return err
			}
		}
		fmt.Println("ready")
		// Wait to be killed; never read.
		_, err = os.Stdin.Read(make([]byte, 1))
		return err
	}
	return fmt.Errorf("unknown child mode %q", mode)
}

func inheritedRaw() (*net.UnixConn, Token, error) {
	tok, err := ParseToken(os.Getenv(EnvToken))
	if err != nil {
		return nil, tok, err
	}
	f := os.NewFile(3, "ipc")
	defer f.Close()
	fc, err := net.FileConn(f)
	if err != nil {
		return nil, tok, err
	}
	return fc.(*net.UnixConn), tok, nil
}

func hashOf(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func mapHash(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%q=%q;", k, m[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// childEcho serves task configurations over the plain codec: each result
// carries hashes of what arrived, and the trace ids the child's own spans
// got. (Package taskproto has the task-host protocol's own child tests.)
func childEcho(ctx context.Context) error {
	tel, err := newTelemetry()
	if err != nil {
		return err
	}
	defer tel.Shutdown()
	inh, err := LookupInherited(os.LookupEnv)
	if err != nil {
		return err
	}
	conn, err := AcceptInherited(ctx, inh, tel.opts()...)
	if err != nil {
		return err
	}
	defer conn.Close()
	for {
		in, err := conn.Recv(ctx)
		if errors.Is(err, ErrPeerClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		cfg, ok := in.Msg.(*ipcpb.TaskConfiguration)
		if !ok {
			if _, ok := in.Msg.(*ipcpb.Shutdown); ok {
				return conn.Shutdown(ctx)
			}
			return fmt.Errorf("child: unexpected %s", in.Type)
		}
		out := map[string]string{
			"payload":     hashOf(cfg.Payload),
			"environment": mapHash(cfg.Environment),
			"parameters":  mapHash(cfg.Parameters),
		}
		if sc := traceSpanContext(in.Context(ctx)); sc.IsValid() {
			out["trace_id"] = sc.TraceID().String()
			out["parent_span_id"] = sc.SpanID().String()
			for _, s := range tel.Spans.Ended() {
				if s.Name() == "ipc.receive" && s.SpanContext().TraceID() == sc.TraceID() {
					out["receive_parent"] = s.Parent().SpanID().String()
				}
			}
		}
		res := &ipcpb.TaskResult{Id: cfg.Id, Status: ipcpb.Status_STATUS_SUCCESS, Outputs: out, Environment: cfg.Environment}
		if err := conn.Send(ctx, res); err != nil {
			return err
		}
	}
}

// childEnds is a *Pair or a *PipePair.
type childEnds interface {
	ChildEnv(fd int) []string
	CloseChild() error
	Connect(ctx context.Context, opts ...Option) (*Conn, error)
}

type child struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
	stderr *bytes.Buffer
	stdin  io.WriteCloser
}

// startChild re-executes the test binary as a child in mode, with its end of
// p as fd 3. env replaces the ipc environment when not nil.
func startChild(t *testing.T, p childEnds, mode string, env []string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if env == nil {
		env = p.ChildEnv(3)
	}
	cmd.Env = append(append(os.Environ(), envChild+"="+mode), env...)
	switch p := p.(type) {
	case *Pair:
		cmd.ExtraFiles = []*os.File{p.ChildFile()}
	case *PipePair:
		cmd.ExtraFiles = p.ChildFiles()
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdout: bufio.NewReader(out), stderr: new(bytes.Buffer), stdin: in}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseChild(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return c
}

// seedSizes returns n payload sizes from the seed's mix: log-normal with a
// mean of about 46 KB, capped at 1.5 MB.
func seedSizes(n int, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 1))
	const sigma = 1.0
	mu := math.Log(46_000) - sigma*sigma/2
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = min(int(math.Exp(mu+sigma*r.NormFloat64())), 1_500_000)
	}
	return sizes
}

func seedEnvironment() map[string]string {
	env := map[string]string{}
	for i := 0; len(env) < 100; i++ {
		env[fmt.Sprintf("VAR_%03d", i)] = strings.Repeat("v", 50) // ≈ 6 KB in all
	}
	return env
}

func TestChildRoundTrip(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 300
	}
	sizes := seedSizes(n, 42)
	env := seedEnvironment()
	tests := []struct {
		name string
		mode Mode
		ends func() (childEnds, error)
	}{
		{"socketpair/sync", Sync, func() (childEnds, error) { return NewPair() }},
		{"socketpair/async", Async, func() (childEnds, error) { return NewPair() }},
		{"pipe/sync", Sync, func() (childEnds, error) { return NewPipePair() }},
	}
	for _, tt := range tests {
		mode := tt.mode
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			tel := newTel(t)
			p, err := tt.ends()
			if err != nil {
				t.Fatal(err)
			}
			ch := startChild(t, p, "echo", nil)
			conn, err := p.Connect(ctx, append(tel.opts(), WithMode(mode))...)
			if err != nil {
				t.Fatalf("connect: %v (child stderr: %s)", err, ch.stderr)
			}
			defer conn.Close()
			r := rand.New(rand.NewPCG(7, 7))
			want := make(chan string, n)
			sendErr := make(chan error, 1)
			go func() {
				for i, size := range sizes {
					payload := make([]byte, size)
					for j := range payload {
						payload[j] = byte(r.Uint32())
					}
					want <- hashOf(payload)
					cfg := &ipcpb.TaskConfiguration{Id: uint64(i), TaskName: "Csc", Environment: env,
						Parameters: map[string]string{"Sources": fmt.Sprint(i)}, Payload: payload}
					if err := conn.Send(ctx, cfg); err != nil {
						sendErr <- err
						return
					}
				}
				sendErr <- conn.Send(ctx, &ipcpb.Shutdown{})
			}()
			envHash := mapHash(env)
			for i := range n {
				in, err := conn.Recv(ctx)
				if err != nil {
					t.Fatalf("recv %d: %v (child stderr: %s)", i, err, ch.stderr)
				}
				res := in.Msg.(*ipcpb.TaskResult)
				if res.Id != uint64(i) {
					t.Fatalf("result %d has id %d", i, res.Id)
				}
				if w := <-want; res.Outputs["payload"] != w {
					t.Fatalf("result %d: payload hash %s, want %s", i, res.Outputs["payload"], w)
				}
				if res.Outputs["environment"] != envHash || !maps.Equal(res.Environment, env) {
					t.Fatalf("result %d: environment not reconstructed", i)
				}
				if got, want := res.Outputs["parameters"], mapHash(map[string]string{"Sources": fmt.Sprint(i)}); got != want {
					t.Fatalf("result %d: parameters hash %s, want %s", i, got, want)
				}
			}
			if err := <-sendErr; err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Recv(ctx); !errors.Is(err, ErrPeerClosed) {
				t.Fatalf("Recv after child shutdown = %v, want ErrPeerClosed", err)
			}
			if err := ch.cmd.Wait(); err != nil {
				t.Fatalf("child: %v (stderr: %s)", err, ch.stderr)
			}
			var payloads int64
			for _, s := range sizes {
				payloads += int64(s)
			}
			if sent := tel.sum(t, MetricBytes, map[string]string{string(AttrOp): "send"}); sent < payloads {
				t.Fatalf("%s{op=send} = %d, want at least the %d payload bytes", MetricBytes, sent, payloads)
			}
		})
	}
}

func TestChildSpansUnderDispatch(t *testing.T) {
	ctx := context.Background()
	tel := newTel(t)
	p, err := NewPair()
	if err != nil {
		t.Fatal(err)
	}
	ch := startChild(t, p, "echo", nil)
	conn, err := p.Connect(ctx, tel.opts()...)
	if err != nil {
		t.Fatalf("connect: %v (child stderr: %s)", err, ch.stderr)
	}
	defer conn.Close()
	dctx, dispatch := tel.TP.Tracer("test").Start(ctx, "runtime.dispatch")
	cfg := &ipcpb.TaskConfiguration{Id: 1, TraceContext: map[string]string{}}
	propagation.TraceContext{}.Inject(dctx, propagation.MapCarrier(cfg.TraceContext))
	if err := conn.Send(dctx, cfg); err != nil {
		t.Fatal(err)
	}
	in, err := conn.Recv(ctx)
	dispatch.End()
	if err != nil {
		t.Fatal(err)
	}
	out := in.Msg.(*ipcpb.TaskResult).Outputs
	sc := dispatch.SpanContext()
	if out["trace_id"] != sc.TraceID().String() || out["receive_parent"] != sc.SpanID().String() {
		t.Fatalf("child's ipc.receive span: trace %s parent %s, want trace %s parent %s",
			out["trace_id"], out["receive_parent"], sc.TraceID(), sc.SpanID())
	}
}

func TestChildStartedByHand(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=echo")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("hand-started child: %v, want a non-zero exit", err)
	}
	if !strings.Contains(stderr.String(), "not meant to be started by hand") {
		t.Fatalf("hand-started child printed %q, want a readable explanation", stderr.String())
	}
}

func TestChildWrongToken(t *testing.T) {
	p, err := NewPair()
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	ch := startChild(t, p, "echo", []string{EnvFD + "=3", EnvToken + "=" + other.String()})
	_, err = p.Connect(context.Background())
	var he *HandshakeError
	if !errors.As(err, &he) || he.Field != "token" {
		t.Fatalf("Connect to a child with another token = %v, want a token mismatch", err)
	}
	werr := ch.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || !strings.Contains(ch.stderr.String(), "token") {
		t.Fatalf("child: %v, stderr %q; want a non-zero exit naming the token", werr, ch.stderr)
	}
}

func TestChildKilledMidSend(t *testing.T) {
	ctx := context.Background()
	p, err := NewPair()
	if err != nil {
		t.Fatal(err)
	}
	ch := startChild(t, p, "stall", nil)
	writing := make(chan struct{}, 1)
	conn, err := p.Connect(ctx, WithBufferSize(smallBuffer), func(c *config) {
		c.onWrite = func(Type, int) { writing <- struct{}{} }
	})
	if err != nil {
		t.Fatalf("connect: %v (child stderr: %s)", err, ch.stderr)
	}
	defer conn.Close()
	if line, err := ch.stdout.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	sendErr := make(chan error, 1)
	go func() {
		// Far more than any socket buffer: the write blocks mid-packet.
		sendErr <- conn.Send(ctx, &ipcpb.TaskConfiguration{Payload: make([]byte, 16<<20)})
	}()
	<-writing
	if err := ch.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = <-sendErr
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Send to a killed child = %v, want EPIPE or ECONNRESET", err)
	}
	if _, err := conn.Recv(ctx); err == nil {
		t.Fatal("Recv from a killed child succeeded")
	}
	if err := conn.Send(ctx, &ipcpb.Shutdown{}); err == nil {
		t.Fatal("Send after a failed write succeeded")
	}
}

func TestChildKilledMidReply(t *testing.T) {
	ctx := context.Background()
	p, err := NewPair()
	if err != nil {
		t.Fatal(err)
	}
	ch := startChild(t, p, "partial", nil)
	conn, err := p.Connect(ctx)
	if err != nil {
		t.Fatalf("connect: %v (child stderr: %s)", err, ch.stderr)
	}
	defer conn.Close()
	// "ready" is printed after half the reply is in the socket.
	if line, err := ch.stdout.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	if err := ch.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Recv(ctx)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Recv of a reply cut by SIGKILL = %v, want io.ErrUnexpectedEOF", err)
	}
}

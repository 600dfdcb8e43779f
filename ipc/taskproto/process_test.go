package taskproto

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// envChild makes the test binary act as a task host child (the
// helper-process pattern).
const envChild = "AMDAHL_TASKPROTO_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode, ok := os.LookupEnv(envChild); ok {
		child := childEcho
		if mode == childServeHost {
			child = serveHostChild
		}
		if err := child(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
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

// childEcho is a task host speaking the protocol: each result carries
// hashes of what arrived (the environment restored from its baseline) and
// the trace ids the host's spans got, and echoes the environment, so that
// both directions are delta-encoded.
func childEcho(ctx context.Context) error {
	tel, err := newTelemetry()
	if err != nil {
		return err
	}
	defer tel.Shutdown()
	inh, err := ipc.LookupInherited(os.LookupEnv)
	if err != nil {
		return err
	}
	conn, err := ipc.AcceptInherited(ctx, inh, append(tel.opts(), WithCodec())...)
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
			return err
		}
		cfg, ok := in.Msg.(*ipcpb.TaskConfiguration)
		if !ok {
			if _, ok := in.Msg.(*ipcpb.Shutdown); ok {
				return conn.Shutdown(ctx)
			}
			return fmt.Errorf("child: unexpected %s", in.Type)
		}
		start := time.Now()
		out := map[string]string{"payload": hashOf(cfg.Payload), "environment": mapHash(cfg.Environment)}
		if sc := trace.SpanContextFromContext(in.Context(ctx)); sc.IsValid() {
			out["trace_id"] = sc.TraceID().String()
			for _, s := range tel.Spans.Ended() {
				if s.Name() == "ipc.receive" && s.SpanContext().TraceID() == sc.TraceID() {
					out["receive_parent"] = s.Parent().SpanID().String()
				}
			}
		}
		res := &ipcpb.TaskResult{Id: cfg.Id, Status: ipcpb.Status_STATUS_SUCCESS, Outputs: out, Environment: cfg.Environment}
		if err := Reply(ctx, conn, in, res, start, time.Since(start)); err != nil {
			return err
		}
	}
}

type childEnds interface {
	ChildEnv(fd int) []string
	CloseChild() error
	Connect(ctx context.Context, opts ...ipc.Option) (*ipc.Conn, error)
}

// startChild re-executes the test binary as a task host with its end of p:
// childEcho, or with env's first entry envChild=childServeHost,
// serveHostChild; env is added to the child's environment.
func startChild(t *testing.T, p childEnds, env ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(append(os.Environ(), envChild+"=1"), env...), p.ChildEnv(3)...)
	switch p := p.(type) {
	case *ipc.Pair:
		cmd.ExtraFiles = []*os.File{p.ChildFile()}
	case *ipc.PipePair:
		cmd.ExtraFiles = p.ChildFiles()
	}
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseChild(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, stderr
}

// TestChildRoundTrip runs the protocol against a real task host process:
// payloads and the environment arrive intact, the environment is sent in
// full only once each way, every reply carries the host's five timings
// (the reply's send stamped into it, ending before the reply was read
// whole), and the host's receive span joins the dispatching span's trace.
func TestChildRoundTrip(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 60
	}
	env := map[string]string{}
	for i := range 100 {
		env[fmt.Sprintf("VAR_%03d", i)] = strings.Repeat("v", 50) // ≈ 6 KB in all
	}
	tests := []struct {
		name string
		mode ipc.Mode
		ends func() (childEnds, error)
	}{
		{"socketpair/sync", ipc.Sync, func() (childEnds, error) { return ipc.NewPair() }},
		{"socketpair/async", ipc.Async, func() (childEnds, error) { return ipc.NewPair() }},
		{"pipe/sync", ipc.Sync, func() (childEnds, error) { return ipc.NewPipePair() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			tel := newTel(t)
			p, err := tt.ends()
			if err != nil {
				t.Fatal(err)
			}
			cmd, stderr := startChild(t, p)
			conn, err := p.Connect(ctx, append(tel.opts(), ipc.WithMode(tt.mode), WithCodec())...)
			if err != nil {
				t.Fatalf("connect: %v (child stderr: %s)", err, stderr)
			}
			defer conn.Close()
			r := rand.New(rand.NewPCG(7, 7))
			var payloads int64
			for i := range n {
				payload := make([]byte, 1000+r.IntN(50_000))
				for j := range payload {
					payload[j] = byte(r.Uint32())
				}
				payloads += int64(len(payload))
				dctx, dispatch := tel.TP.Tracer("test").Start(ctx, "runtime.dispatch")
				sendStart := time.Now()
				if err := conn.Send(dctx, &ipcpb.TaskConfiguration{Id: uint64(i), Environment: env, Payload: payload}); err != nil {
					t.Fatalf("send %d: %v (child stderr: %s)", i, err, stderr)
				}
				in, err := conn.Recv(ctx)
				dispatch.End()
				if err != nil {
					t.Fatalf("recv %d: %v (child stderr: %s)", i, err, stderr)
				}
				res := in.Msg.(*ipcpb.TaskResult)
				if res.Id != uint64(i) || res.Outputs["payload"] != hashOf(payload) {
					t.Fatalf("result %d: id %d, payload hash %s; want %d, %s", i, res.Id, res.Outputs["payload"], i, hashOf(payload))
				}
				if res.Outputs["environment"] != mapHash(env) || !maps.Equal(res.Environment, env) {
					t.Fatalf("result %d: environment not restored on one of the ends", i)
				}
				got := AppendTimings(nil, res, sendStart, in.ReceiveStart)
				if len(got) != NumTimings {
					t.Fatalf("result %d: %d timings, want %d", i, len(got), NumTimings)
				}
				if send, read := got[NumTimings-1], in.ReceiveStart.Add(in.ReceiveDuration); send.Phase != telemetry.Send || send.End.After(read) {
					t.Fatalf("result %d: last timing %v/%v ends %v after the reply was read whole", i, send.Phase, send.Direction, send.End.Sub(read))
				}
				sc := dispatch.SpanContext()
				if res.Outputs["trace_id"] != sc.TraceID().String() || res.Outputs["receive_parent"] != sc.SpanID().String() {
					t.Fatalf("host's ipc.receive span: trace %s parent %s, want trace %s parent %s",
						res.Outputs["trace_id"], res.Outputs["receive_parent"], sc.TraceID(), sc.SpanID())
				}
			}
			if err := conn.Send(ctx, &ipcpb.Shutdown{}); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Recv(ctx); !errors.Is(err, ipc.ErrPeerClosed) {
				t.Fatalf("Recv after the host's shutdown = %v, want ErrPeerClosed", err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("child: %v (stderr: %s)", err, stderr)
			}
			// Delta encoding: only the first configuration carried the
			// environment, so the bytes sent are far below n full copies.
			sent := tel.sum(t, ipc.MetricBytes, map[string]string{string(ipc.AttrOp): "send"})
			if envBytes := int64(6000 * n); sent-payloads > envBytes/4 {
				t.Fatalf("sent %d bytes beyond payloads, want well under %d (the environment is delta-encoded)", sent-payloads, envBytes)
			}
			received := tel.sum(t, ipc.MetricBytes, map[string]string{string(ipc.AttrOp): "receive"})
			if envBytes := int64(6000 * n); received > envBytes/4 {
				t.Fatalf("received %d bytes of results, want well under %d (the echoed environment is delta-encoded)", received, envBytes)
			}
		})
	}
}

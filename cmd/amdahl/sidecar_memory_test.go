package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/internal/testcert"
)

// The memory tests run amdahl sidecar as its own process, built without
// the race detector (which multiplies a process's memory), and read its
// resident set from /proc: VmRSS when idle, VmHWM (the peak) under load.

// amdahlExe builds amdahl, without -race, into a directory of t's and
// returns its path. It skips when the go command is missing, except under
// CI=true.
func amdahlExe(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc/self/status: the peak resident set is read from /proc")
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the go command is needed to build amdahl without -race: %v", err)
		}
		t.Skipf("the go command is needed to build amdahl without -race: %v", err)
	}
	exe := filepath.Join(t.TempDir(), "amdahl")
	cmd := exec.Command(gocmd, "build", "-o", exe, ".")
	cmd.Env = append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return exe
}

// sidecarProc is an amdahl sidecar process.
type sidecarProc struct {
	cmd  *exec.Cmd
	addr string
	rest chan []byte // its stderr after the listening line, once it exits
}

// startSidecarProc starts exe sidecar with args (--listen 127.0.0.1:0 is
// added) and env added to the environment; it is interrupted when the test
// ends.
func startSidecarProc(t *testing.T, exe string, env []string, args ...string) *sidecarProc {
	t.Helper()
	cmd := exec.Command(exe, append([]string{"sidecar", "--listen", "127.0.0.1:0"}, args...)...)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "OTEL_") && !strings.HasPrefix(k, "PYROSCOPE_") && !strings.HasPrefix(k, "AMDAHL_") && k != "GOMEMLIMIT" && k != "GOGC" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &sidecarProc{cmd: cmd, rest: make(chan []byte, 1)}
	br := bufio.NewReader(stderr)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "listening on ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("sidecar: %q, %v", line, err)
	}
	p.addr = strings.TrimSpace(line[strings.Index(line, "listening on ")+len("listening on "):])
	go func() { b, _ := io.ReadAll(br); p.rest <- b }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("sidecar did not stop within 30 s of SIGINT; stderr:\n%s", <-p.rest)
		}
	})
	return p
}

// status returns field (VmRSS, VmHWM) of the process's /proc status, in bytes.
func (p *sidecarProc) status(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", field, line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, p.cmd.Process.Pid)
	return 0
}

// idle returns the resident set now and makes VmHWM count from here
// (clear_refs 5 resets the peak to the current resident set).
func (p *sidecarProc) idle(t *testing.T) int64 {
	t.Helper()
	rss := p.status(t, "VmRSS")
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.cmd.Process.Pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak resident set: %v", err)
	}
	return rss
}

// clientConns dials addr n times, each its own connection.
func clientConns(t *testing.T, addr string, n int, creds credentials.TransportCredentials) []*grpc.ClientConn {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conns := make([]*grpc.ClientConn, n)
	for i := range conns {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(1<<30)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		conns[i] = cc
	}
	return conns
}

// bigChunk returns a completion message of about size bytes, serialized:
// one action whose input is the payload. Its bytes are shared by every
// call that sends it, so the clients hold it once.
func bigChunk(t *testing.T, token string, partial bool, size int) chunking.Encoded {
	t.Helper()
	//nolint:staticcheck // SA1019: IsPartial and ChunkIndex are the protocol.
	m := &dtpb.OrchestratorResponse{InstanceId: "i", CompletionToken: token, IsPartial: partial, ChunkIndex: wrapperspb.Int32(0),
		Actions: []*dtpb.OrchestratorAction{{Id: 1, OrchestratorActionType: &dtpb.OrchestratorAction_ScheduleTask{
			ScheduleTask: &dtpb.ScheduleTaskAction{Name: "t", Input: wrapperspb.String(strings.Repeat("x", size-64))}}}}}
	e, err := chunking.Encode(m, -1)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// complete sends e as one CompleteOrchestratorTask call.
func complete(ctx context.Context, cc *grpc.ClientConn, e chunking.Encoded) error {
	var reply dtpb.CompleteTaskResponse
	return cc.Invoke(ctx, dtpb.MethodCompleteOrchestratorTask, e, &reply, grpc.ForceCodecV2(chunking.Codec{}))
}

// TestSidecarUnauthenticatedMemory: 64 clients without the sidecar's
// token, each sending one 32 MiB message at once, are all refused
// (Unauthenticated), and the sidecar's peak resident set stays within
// 100 MB of its idle one: the token is checked on the call's headers,
// before gRPC reads the body. With TLS and without.
func TestSidecarUnauthenticatedMemory(t *testing.T) {
	exe := amdahlExe(t)
	dir := t.TempDir()
	cert := testcert.New(t)
	certFile, keyFile, tokFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "token")
	writeFile(t, certFile, string(cert.CertPEM))
	writeFile(t, keyFile, string(cert.KeyPEM))
	writeFile(t, tokFile, "s3cret-5e1f\n")
	msg := bigChunk(t, "tok", true, 32<<20)
	const clients = 64
	const within = 100e6
	for _, tc := range []struct {
		name string
		args []string
		tls  bool
	}{
		{"tls", []string{"--tls-cert", certFile, "--tls-key", keyFile}, true},
		{"plaintext", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startSidecarProc(t, exe, nil, append(tc.args, "--token-file", tokFile)...)
			var creds credentials.TransportCredentials
			if tc.tls {
				pool := x509.NewCertPool()
				pool.AppendCertsFromPEM(cert.CertPEM)
				creds = credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
			}
			conns := clientConns(t, p.addr, clients, creds)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// One small refused call on each connection first, so that the
			// connections are up and the idle figure counts them.
			for _, cc := range conns {
				if err := complete(ctx, cc, chunking.Encoded{}); status.Code(err) != codes.Unauthenticated {
					t.Fatalf("a small call without the token: got %v, want Unauthenticated", err)
				}
			}
			idle := p.idle(t)
			var wg sync.WaitGroup
			errs := make([]error, clients)
			for i, cc := range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					wrong := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer not-the-token")
					if i%2 == 0 {
						wrong = ctx
					}
					errs[i] = complete(wrong, cc, msg)
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if status.Code(err) != codes.Unauthenticated {
					t.Errorf("client %d: got %v, want Unauthenticated", i, err)
				}
			}
			peak := p.status(t, "VmHWM")
			t.Logf("%s: idle %.1f MB, peak %.1f MB (+%.1f MB) with %d unauthenticated clients × 32 MiB",
				tc.name, float64(idle)/1e6, float64(peak)/1e6, float64(peak-idle)/1e6, clients)
			if peak-idle > within {
				t.Errorf("peak resident set %.1f MB, %.1f MB above idle (%.1f MB): want at most %.0f MB above",
					float64(peak)/1e6, float64(peak-idle)/1e6, float64(idle)/1e6, within/1e6)
			}
		})
	}
}

// twoPart is a message sent as two byte slices, a per-call head and a
// body shared by every call: protobuf reads the concatenation of two
// encodings as their merge, so the clients hold a large body once.
type twoPart struct{ head, body []byte }

// twoPartCodec sends twoPart as it is and everything else as proto.
type twoPartCodec struct{}

func (twoPartCodec) Marshal(v any) (mem.BufferSlice, error) {
	if p, ok := v.(twoPart); ok {
		return mem.BufferSlice{mem.SliceBuffer(p.head), mem.SliceBuffer(p.body)}, nil
	}
	return encoding.GetCodecV2(protocodec.Name).Marshal(v)
}

func (twoPartCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2(protocodec.Name).Unmarshal(data, v)
}

func (twoPartCodec) Name() string { return protocodec.Name }

// actionsBody returns the encoding of n ScheduleTask actions whose inputs
// are each payload bytes: the actions field of an OrchestratorResponse.
func actionsBody(t *testing.T, n, payload int) []byte {
	t.Helper()
	m := &dtpb.OrchestratorResponse{}
	in := strings.Repeat("x", payload)
	for i := range n {
		m.Actions = append(m.Actions, &dtpb.OrchestratorAction{Id: int32(i), OrchestratorActionType: &dtpb.OrchestratorAction_ScheduleTask{
			ScheduleTask: &dtpb.ScheduleTaskAction{Name: "t", Input: wrapperspb.String(in)}}})
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// chunkHead returns the encoding of a chunk's fields other than its actions.
func chunkHead(t *testing.T, instance, token string, idx int32) []byte {
	t.Helper()
	//nolint:staticcheck // SA1019: IsPartial and ChunkIndex are the protocol.
	b, err := proto.Marshal(&dtpb.OrchestratorResponse{InstanceId: instance, CompletionToken: token, IsPartial: true,
		ChunkIndex: wrapperspb.Int32(idx)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// leaseTokens starts n instances on the sidecar at cc and leases their work
// items on one GetWorkItems stream, open until the test ends; it returns
// the instance ids and their completion tokens.
func leaseTokens(t *testing.T, cc *grpc.ClientConn, n int) (ids, tokens []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for i := range n {
		if _, err := dtpb.StartInstance(ctx, cc, &dtpb.CreateInstanceRequest{InstanceId: fmt.Sprintf("i%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := dtpb.GetWorkItems(ctx, cc, &dtpb.GetWorkItemsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		wi, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, wi.GetOrchestratorRequest().GetInstanceId())
		tokens = append(tokens, wi.GetCompletionToken())
	}
	return ids, tokens
}

// TestSidecarTotalBoundMemory: with --max-total-buffered-bytes B, clients
// sending at once messages up to the per-call maximum (an eighth of B),
// and streams of partial chunks until refused (1 MiB of 1 KiB actions, or
// 256 KiB of 8-byte actions, which decoded hold several times their
// serialized size) take amdahl sidecar's peak
// resident set to at most 1.5 B + 100 MB: each message reserves its size
// against B before its body is let in, and the process's memory limit
// follows B. Every call is applied, buffered or refused with
// ResourceExhausted naming the bound.
func TestSidecarTotalBoundMemory(t *testing.T) {
	exe := amdahlExe(t)
	const big, small, tiny = 16, 16, 16 // clients, each its own connection
	for _, bound := range []int{64 << 20, 256 << 20} {
		t.Run(fmt.Sprintf("%dMiB", bound>>20), func(t *testing.T) {
			p := startSidecarProc(t, exe, nil, "--max-total-buffered-bytes", strconv.Itoa(bound))
			perCall := min(64<<20, bound/8)
			worker := clientConns(t, p.addr, 1, nil)[0]
			ids, tokens := leaseTokens(t, worker, big+small+tiny)
			conns := clientConns(t, p.addr, big+small+tiny, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			// Up the connections, then the idle figure.
			for _, cc := range conns {
				if _, err := dtpb.StartInstance(ctx, cc, &dtpb.CreateInstanceRequest{}); err != nil {
					t.Fatal(err)
				}
			}
			idle := p.idle(t)
			bigBody := actionsBody(t, 1, perCall-4096)
			smallBody := actionsBody(t, 1000, 1024) // 1 MiB chunks of 1 KiB actions
			tinyBody := actionsBody(t, 16384, 8)    // 256 KiB chunks of 8-byte actions
			call := func(cc *grpc.ClientConn, m twoPart) error {
				var reply dtpb.CompleteTaskResponse
				return cc.Invoke(ctx, dtpb.MethodCompleteOrchestratorTask, m, &reply, grpc.ForceCodecV2(twoPartCodec{}))
			}
			var mu sync.Mutex
			outcomes := map[codes.Code]int{}
			var bad []error
			note := func(err error) bool {
				mu.Lock()
				defer mu.Unlock()
				c := status.Code(err)
				outcomes[c]++
				if c != codes.OK && (c != codes.ResourceExhausted || !strings.Contains(err.Error(), "MaxTotalBufferedBytes")) {
					bad = append(bad, err)
				}
				return c == codes.OK
			}
			var wg sync.WaitGroup
			for i, cc := range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if i < big {
						note(call(cc, twoPart{chunkHead(t, ids[i], tokens[i], 0), bigBody}))
						return
					}
					body := smallBody
					if i >= big+small {
						body = tinyBody
					}
					for idx := int32(0); ; idx++ {
						if !note(call(cc, twoPart{chunkHead(t, ids[i], tokens[i], idx), body})) {
							return
						}
					}
				}()
			}
			wg.Wait()
			peak := p.status(t, "VmHWM")
			want := int64(1.5*float64(bound)) + 100e6
			t.Logf("bound %d MiB, per call %d MiB: idle %.1f MB, peak %.1f MB (want ≤ %.1f MB); calls %v",
				bound>>20, perCall>>20, float64(idle)/1e6, float64(peak)/1e6, float64(want)/1e6, outcomes)
			for _, err := range bad {
				t.Errorf("a call failed otherwise than ResourceExhausted naming MaxTotalBufferedBytes: %v", err)
			}
			if outcomes[codes.ResourceExhausted] < big/2 {
				t.Errorf("%d calls refused for the total, want at least %d: the bound was not reached", outcomes[codes.ResourceExhausted], big/2)
			}
			if peak > want {
				t.Errorf("peak resident set %.1f MB, want at most 1.5 × %d MiB + 100 MB = %.1f MB", float64(peak)/1e6, bound>>20, float64(want)/1e6)
			}
		})
	}
}

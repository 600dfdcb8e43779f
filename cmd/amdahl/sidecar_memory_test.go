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
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
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

package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/internal/testcert"
)

// writeSelfSigned writes a self-signed certificate for loopback and its key
// into dir, as cert.pem and key.pem; the certificate is its own CA.
func writeSelfSigned(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	c := testcert.New(t)
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeFile(t, cert, string(c.CertPEM))
	writeFile(t, key, string(c.KeyPEM))
	return cert, key
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startSidecarCLI runs amdahl sidecar with args until the test ends and
// returns the address it listens on.
func startSidecarCLI(t *testing.T, args ...string) string {
	t.Helper()
	t.Setenv(envTestMain, "1")
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		var out bytes.Buffer
		code := run(ctx, append([]string{"sidecar"}, args...), &out, pw)
		pw.Close()
		done <- code
	}()
	br := bufio.NewReader(pr)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "listening on ") {
		cancel()
		<-done
		t.Fatalf("sidecar: %q, %v", line, err)
	}
	t.Cleanup(func() {
		cancel()
		_, _ = io.Copy(io.Discard, br)
		if code := <-done; code != exitOK {
			t.Errorf("sidecar exit %d", code)
		}
	})
	return strings.TrimSpace(line[strings.Index(line, "listening on ")+len("listening on "):])
}

// TestRunSidecarTLSToken: amdahl run completes to an amdahl sidecar that
// serves TLS and wants a token, given the CA and the token; with another
// token the run fails at once (exit 1), saying why.
func TestRunSidecarTLSToken(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeSelfSigned(t, dir)
	tok, wrong := filepath.Join(dir, "token"), filepath.Join(dir, "wrong")
	writeFile(t, tok, "  s3cret-7d1c\n")
	writeFile(t, wrong, "s3cret-0000\n")
	addr := startSidecarCLI(t, "--listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key, "--token-file", tok)

	// Orchestrated tasks, so that every unit calls the sidecar over TLS.
	code, out, errs := runCLI(t, "run", "--sidecar", addr, "--sidecar-ca", cert, "--sidecar-token-file", tok,
		"--scenario-file", orchestratedTasks(t), "--set", "scenario.count=6")
	if code != exitOK || !strings.Contains(out, "units 6: ok 6") {
		t.Fatalf("run over TLS with the token: exit %d, stderr %q, output:\n%s", code, errs, out)
	}
	code, _, errs = runCLI(t, "run", "--sidecar", addr, "--sidecar-ca", cert, "--sidecar-token-file", wrong,
		"--scenario", "taskhost", "--set", "scenario.count=6")
	if code != exitFail || !strings.Contains(errs, addr) || !strings.Contains(errs, "Unauthenticated") {
		t.Errorf("run with another token: exit %d, stderr %q; want %d naming %s and Unauthenticated", code, errs, exitFail, addr)
	}
}

// TestRunSidecarUnreachable: with nothing at --sidecar, amdahl run fails
// at the start (exit 1), naming the address and the bound.
func TestRunSidecarUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	code, out, errs := runCLI(t, "run", "--sidecar", addr, "--scenario", "taskhost", "--set", "scenario.count=3")
	if code != exitFail {
		t.Fatalf("exit %d, want %d; stderr %q, output:\n%s", code, exitFail, errs, out)
	}
	if want := "sidecar " + addr + " not reachable within 5s"; !strings.Contains(errs, want) {
		t.Errorf("stderr %q lacks %q", errs, want)
	}
}

// TestSidecarSecurityUsage: a sidecar that would serve plaintext off
// loopback without --insecure, and bad security flags of sidecar and run,
// are bad usage (exit 2) with a one-line reason; the sidecar listens
// nowhere.
func TestSidecarSecurityUsage(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeSelfSigned(t, dir)
	empty, big, spaced, tok := filepath.Join(dir, "empty"), filepath.Join(dir, "big"), filepath.Join(dir, "spaced"), filepath.Join(dir, "tok")
	writeFile(t, empty, " \n")
	writeFile(t, big, strings.Repeat("x", 4097))
	writeFile(t, spaced, "two words")
	writeFile(t, tok, "t0k")
	notLoopback := []string{"is not a loopback address", "needs TLS (--tls-cert FILE --tls-key FILE) or an explicit --insecure"}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"all IPv4", []string{"sidecar", "--listen", "0.0.0.0:0"}, notLoopback},
		{"all IPv6", []string{"sidecar", "--listen", "[::]:0"}, notLoopback},
		{"empty host", []string{"sidecar", "--listen", ":0"}, notLoopback},
		{"other IP", []string{"sidecar", "--listen", "192.0.2.1:0"}, notLoopback},
		{"cert without key", []string{"sidecar", "--tls-cert", cert}, []string{"--tls-cert and --tls-key go together"}},
		{"insecure with TLS", []string{"sidecar", "--tls-cert", cert, "--tls-key", key, "--insecure"}, []string{"drop --insecure"}},
		{"key not the cert's", []string{"sidecar", "--tls-cert", cert, "--tls-key", cert}, []string{"--tls-cert", "--tls-key"}},
		{"empty token", []string{"sidecar", "--token-file", empty}, []string{"--token-file", "empty"}},
		{"token over the bound", []string{"sidecar", "--token-file", big}, []string{"--token-file", "over the bound of 4096 bytes"}},
		{"token with a space", []string{"sidecar", "--token-file", spaced}, []string{"--token-file", "white space"}},
		{"token file missing", []string{"sidecar", "--token-file", filepath.Join(dir, "nope")}, []string{"--token-file", "nope"}},
		{"run: tls without sidecar", []string{"run", "--sidecar-tls"}, []string{"--sidecar-tls without --sidecar"}},
		{"run: token in clear", []string{"run", "--sidecar", "192.0.2.1:4001", "--sidecar-token-file", tok},
			[]string{"not a loopback address", "--sidecar-tls or --sidecar-ca FILE"}},
		{"run: CA not PEM", []string{"run", "--sidecar", "127.0.0.1:4001", "--sidecar-ca", tok}, []string{"--sidecar-ca", "no PEM certificate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envTestMain, "1")
			// Bounded: a sidecar that wrongly starts serving stops here
			// and exits 0, failing the test rather than hanging it.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			code := run(ctx, tc.args, &out, &errb)
			errs := errb.String()
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr %q", code, exitUsage, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr %q lacks %q", errs, w)
				}
			}
			if strings.Count(strings.TrimSpace(errs), "\n") != 0 {
				t.Errorf("want a one-line reason, got %q", errs)
			}
		})
	}
}

func TestSecurityHelp(t *testing.T) {
	for _, tc := range []struct {
		cmd   string
		flags []string
	}{
		{"sidecar", []string{"--tls-cert", "--tls-key", "--insecure", "--token-file", "127.0.0.1:4001", "Unauthenticated"}},
		{"run", []string{"--sidecar-tls", "--sidecar-ca", "--sidecar-token-file", "within 5 s"}},
	} {
		code, out, _ := runCLI(t, tc.cmd, "--help")
		if code != exitOK {
			t.Fatalf("%s --help: exit %d", tc.cmd, code)
		}
		for _, f := range tc.flags {
			if !strings.Contains(out, f) {
				t.Errorf("%s --help does not mention %s", tc.cmd, f)
			}
		}
	}
}

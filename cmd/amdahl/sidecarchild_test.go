package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sidecarChild is `amdahl sidecar --listen 127.0.0.1:0` run as a child
// process (this test binary as amdahl), once it listens.
type sidecarChild struct {
	cmd  *exec.Cmd
	addr string
	rest chan []byte // the rest of its stderr, once it has closed it
}

// startSidecarChild starts the sidecar with env as its whole environment
// (childEnv's) and waits until it says where it listens; the test's
// cleanup kills it unless stop has waited for it.
func startSidecarChild(t *testing.T, env []string) *sidecarChild {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := &sidecarChild{cmd: exec.Command(exe, "sidecar", "--listen", "127.0.0.1:0"), rest: make(chan []byte, 1)}
	s.cmd.Env = env
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	br := bufio.NewReader(stderr)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "listening on ") {
		t.Fatalf("sidecar: %q, %v", line, err)
	}
	s.addr = strings.TrimSpace(line[strings.Index(line, "listening on ")+len("listening on "):])
	go func() { b, _ := io.ReadAll(br); s.rest <- b }() // a full pipe must not block it
	return s
}

// stop interrupts the sidecar (SIGINT, a graceful shutdown) and returns
// how it exited, with its stderr on an error; it fails the test when the
// sidecar is still running 30 s later.
func (s *sidecarChild) stop(t *testing.T) (stderr string, err error) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	werr := make(chan error, 1)
	go func() { werr <- s.cmd.Wait() }()
	select {
	case err := <-werr:
		if err != nil {
			return string(<-s.rest), err
		}
		return "", nil
	case <-time.After(30 * time.Second):
		t.Fatalf("sidecar still running 30 s after SIGINT")
		return "", nil
	}
}

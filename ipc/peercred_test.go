package ipc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

const (
	envPeerSocket = "AMDAHL_IPC_TEST_SOCKET"
	nobodyUID     = 65534
)

// dialAsNobody is the child of TestNamedSocketRejectsOtherUID: it enters the
// socket's directory while still root, drops to uid nobody for the whole
// process, connects by relative path and waits for the host to hang up.
func dialAsNobody() error {
	path := os.Getenv(envPeerSocket)
	if err := os.Chdir(filepath.Dir(path)); err != nil {
		return err
	}
	if err := syscall.Setgid(nobodyUID); err != nil {
		return fmt.Errorf("setgid: %w", err)
	}
	if err := syscall.Setuid(nobodyUID); err != nil {
		return fmt.Errorf("setuid: %w", err)
	}
	c, err := net.Dial("unix", filepath.Base(path))
	if err != nil {
		return fmt.Errorf("dial as uid %d: %w", os.Getuid(), err)
	}
	defer c.Close()
	_, err = io.Copy(io.Discard, c) // until the host closes the connection
	return err
}

// A peer running as another uid reaches the named socket (the test loosens
// the directory and socket modes so that only SO_PEERCRED stands in its way)
// and is rejected before the handshake.
func TestNamedSocketRejectsOtherUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the peer as uid nobody (65534); run the tests as root to cover it")
	}
	l, err := Listen(filepath.Join(t.TempDir(), "host"), "h.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Loosen what Listen set up (as a careless admin might, after the host
	// started): the directory searchable, the socket writable by all.
	if err := os.Chmod(filepath.Dir(l.Path()), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(l.Path(), 0o777); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=dial-as-nobody", envPeerSocket+"="+l.Path())
	var out bytes.Buffer // read only after Wait
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The child exits only after the host hung up; if it fails before
	// connecting, stop waiting for it.
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait(); cancel() }()
	conn, err := l.Accept(ctx, Token{})
	if conn != nil {
		conn.Close()
	}
	werr := <-waited
	var pe *PeerCredError
	if !errors.As(err, &pe) {
		t.Fatalf("Accept = %v, want a *PeerCredError (child: %v, %s)", err, werr, out.String())
	}
	if pe.UID != nobodyUID || pe.WantUID != 0 || pe.PID != int32(cmd.Process.Pid) {
		t.Errorf("got %+v, want uid %d, want uid 0, pid %d", pe, nobodyUID, cmd.Process.Pid)
	}
	if werr != nil {
		t.Errorf("child: %v: %s", werr, out.String())
	}
}

package ipc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
)

func TestNamedSocketRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "host")
	l, err := Listen(dir, "h.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("socket directory mode %v, want 0700", fi.Mode().Perm())
	}
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept(ctx, tok)
		ch <- res{c, err}
	}()
	parent, err := Dial(ctx, l.Path(), tok)
	if err != nil {
		t.Fatal(err)
	}
	defer parent.Close()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.c.Close()
	if err := parent.Send(ctx, &ipcpb.TaskConfiguration{Id: 9, Payload: []byte("over a named socket")}); err != nil {
		t.Fatal(err)
	}
	in, err := r.c.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := in.Msg.(*ipcpb.TaskConfiguration); got.Id != 9 || string(got.Payload) != "over a named socket" {
		t.Fatalf("got %v", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file after Close: %v, want it removed", err)
	}
}

func TestNamedSocketStaleFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "host")
	l, err := Listen(dir, "h.sock")
	if err != nil {
		t.Fatal(err)
	}
	l.l.SetUnlinkOnClose(false) // a host that died leaves its socket behind
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.Path()); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
	l2, err := Listen(dir, "h.sock")
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestListenRejects(t *testing.T) {
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(open, "h.sock"); err == nil || !strings.Contains(err.Error(), "0700") {
		t.Fatalf("Listen in a 0755 directory = %v, want an error naming mode 0700", err)
	}
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 120))
	if _, err := Listen(long, "h.sock"); err == nil || !strings.Contains(err.Error(), "sun_path") {
		t.Fatalf("Listen with a long path = %v, want an error naming sun_path", err)
	}
}

func TestPeerCredMismatch(t *testing.T) {
	// A second uid cannot be had without privileges here, so the check is
	// run against a real SO_PEERCRED with a uid the peer does not have.
	p, child := rawPair(t)
	want := uint32(os.Geteuid()) + 1
	err := checkPeer(p.parent, want)
	var pe *PeerCredError
	if !errors.As(err, &pe) || pe.UID != uint32(os.Geteuid()) || pe.WantUID != want || pe.PID != int32(os.Getpid()) {
		t.Fatalf("checkPeer = %v, want a *PeerCredError for uid %d pid %d", err, os.Geteuid(), os.Getpid())
	}
	if err := checkPeer(child, uint32(os.Geteuid())); err != nil {
		t.Fatalf("checkPeer for the same uid = %v, want nil", err)
	}
}

func TestAcceptCancelled(t *testing.T) {
	l, err := Listen(filepath.Join(t.TempDir(), "host"), "h.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Accept(ctx, Token{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Accept with a cancelled ctx = %v, want context.Canceled", err)
	}
}

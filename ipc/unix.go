package ipc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// TransportUnix is the amdahl.transport attribute value of a named Unix
// socket connection.
const TransportUnix = "unix"

// maxSocketPath is the longest path that fits sun_path on Linux.
const maxSocketPath = 107

// PeerCredError reports a peer on a named socket that runs as another user
// (SO_PEERCRED).
type PeerCredError struct {
	PID     int32
	UID     uint32
	WantUID uint32
}

func (e *PeerCredError) Error() string {
	return fmt.Sprintf("ipc: peer pid %d runs as uid %d, want uid %d: connection refused", e.PID, e.UID, e.WantUID)
}

// checkPeer reads SO_PEERCRED and requires the peer's uid to be want.
func checkPeer(uc *net.UnixConn, want uint32) error {
	raw, err := uc.SyscallConn()
	if err != nil {
		return fmt.Errorf("ipc: read SO_PEERCRED: %w", err)
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return fmt.Errorf("ipc: read SO_PEERCRED: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("ipc: read SO_PEERCRED: %w", serr)
	}
	if cred.Uid != want {
		return &PeerCredError{PID: cred.Pid, UID: cred.Uid, WantUID: want}
	}
	return nil
}

// Listener is a named Unix socket on which a task host waits for parents
// that connect to an existing host (reuse). The socket lives in a private
// directory (mode 0700, owned by the current user), and every connection
// is checked with SO_PEERCRED before the handshake. A process of the same
// uid that connects first learns nothing of the token: the listener is the
// child end of the handshake, which sends nothing derived from the token
// before the parent has proven it holds it. How the parent learns
// the host's token is up to the caller (for example a 0600 file in the same
// directory).
type Listener struct {
	l    *net.UnixListener
	path string
}

// Listen creates dir if needed (mode 0700), refuses an existing dir that is
// not 0700 or not owned by the current user, removes a stale socket at
// dir/name, and listens there.
func Listen(dir, name string) (*Listener, error) {
	path := filepath.Join(dir, name)
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("ipc: socket path %q is %d bytes, longer than the %d that fit sun_path", path, len(path), maxSocketPath)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("ipc: create socket directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("ipc: socket directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || fi.Mode().Perm() != 0o700 || st.Uid != uint32(os.Geteuid()) {
		return nil, fmt.Errorf("ipc: socket directory %s must be a directory with mode 0700 owned by uid %d (got mode %v)", dir, os.Geteuid(), fi.Mode())
	}
	// A stale socket left by a dead host would make bind fail.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("ipc: remove stale socket: %w", err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("ipc: listen: %w", err)
	}
	return &Listener{l: l, path: path}, nil
}

// Path returns the socket's path.
func (l *Listener) Path() string { return l.path }

// Accept waits for the next parent (bounded by ctx), checks that it runs as
// the current user, and runs the child end of the handshake with tok. A
// rejected connection is closed and reported; the listener stays usable.
func (l *Listener) Accept(ctx context.Context, tok Token, opts ...Option) (*Conn, error) {
	stop := context.AfterFunc(ctx, func() { _ = l.l.SetDeadline(time.Unix(1, 0)) })
	uc, err := l.l.AcceptUnix()
	if !stop() {
		_ = l.l.SetDeadline(time.Time{})
		if err == nil {
			_ = uc.Close()
		}
		return nil, fmt.Errorf("ipc: accept: %w", ctx.Err())
	}
	if err != nil {
		return nil, fmt.Errorf("ipc: accept: %w", err)
	}
	if err := checkPeer(uc, uint32(os.Geteuid())); err != nil {
		_ = uc.Close()
		return nil, err
	}
	return open(ctx, uc, tok, false, TransportUnix, opts)
}

// Close stops listening and removes the socket file. Safe to call more
// than once.
func (l *Listener) Close() error {
	if err := l.l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("ipc: close listener: %w", err)
	}
	return nil
}

// Dial connects to the host listening at path, checks that it runs as the
// current user, and runs the parent end of the handshake with tok.
func Dial(ctx context.Context, path string, tok Token, opts ...Option) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("ipc: dial %s: %w", path, err)
	}
	uc := nc.(*net.UnixConn)
	if err := checkPeer(uc, uint32(os.Geteuid())); err != nil {
		_ = uc.Close()
		return nil, err
	}
	return open(ctx, uc, tok, true, TransportUnix, opts)
}

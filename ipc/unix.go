package ipc

import (
	"context"
	"fmt"
	"net"
	"os"

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

package ipc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// TransportSocketpair is the amdahl.transport attribute value of a
// socketpair connection.
const TransportSocketpair = "socketpair"

// The launch contract: the environment entries Pair.ChildEnv and
// PipePair.ChildEnv give a child, and LookupInherited reads back.
const (
	EnvFD    = "AMDAHL_IPC_FD"    // inherited connection: "3", or "3,4" for pipes
	EnvToken = "AMDAHL_IPC_TOKEN" // per-connection handshake token, hex
)

// ErrNotChild is returned by LookupInherited in a process that was not
// started by an amdahl parent (for example a task host started by hand).
var ErrNotChild = errors.New("ipc: this program is an amdahl task host and is not meant to be started by hand; " +
	"it is started by amdahl, which passes it a connection (" + EnvFD + ") and a handshake token (" + EnvToken + ")")

// Pair is a connected AF_UNIX stream socketpair made by the parent before
// it starts a child: the parent keeps its end and hands ChildFile to the
// child (exec.Cmd.ExtraFiles) together with ChildEnv.
type Pair struct {
	parent *net.UnixConn
	child  *os.File
	token  Token
}

// NewPair creates a socketpair (close-on-exec on both ends; exec.Cmd
// clears the flag on the fds it passes) and a fresh token.
func NewPair() (*Pair, error) {
	tok, err := NewToken()
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ipc: socketpair: %w", err)
	}
	pf := os.NewFile(uintptr(fds[0]), "ipc-parent")
	defer pf.Close()
	fc, err := net.FileConn(pf)
	if err != nil {
		_ = unix.Close(fds[1])
		return nil, fmt.Errorf("ipc: socketpair: parent end: %w", err)
	}
	return &Pair{parent: fc.(*net.UnixConn), child: os.NewFile(uintptr(fds[1]), "ipc-child"), token: tok}, nil
}

// ChildFile returns the child's end, to put in exec.Cmd.ExtraFiles. The
// parent must close it (CloseChild) once the child has started.
func (p *Pair) ChildFile() *os.File { return p.child }

// ChildEnv returns the environment entries that tell the child where its
// end is (fd, its number in the child: 3 + index in ExtraFiles) and the
// token. The token travels in the environment, never in argv.
func (p *Pair) ChildEnv(fd int) []string {
	return []string{EnvFD + "=" + strconv.Itoa(fd), EnvToken + "=" + p.token.String()}
}

// CloseChild closes the parent's copy of the child's end, so that the
// parent sees EOF when the child exits. Safe to call more than once.
func (p *Pair) CloseChild() error {
	if err := p.child.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("ipc: close child end: %w", err)
	}
	return nil
}

// Connect performs the parent's handshake on its end of the pair and
// returns the Conn, which owns the socket from then on. On error the
// socket is closed.
func (p *Pair) Connect(ctx context.Context, opts ...Option) (*Conn, error) {
	return Connect(ctx, p.parent, p.token, opts...)
}

// Close closes both ends if they were not handed over; for error paths
// before Connect.
func (p *Pair) Close() error {
	return errors.Join(p.CloseChild(), ignoreClosed(p.parent.Close()))
}

func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Connect runs the parent end of the handshake on nc (an AF_UNIX stream
// socket) and starts the Conn. The Conn owns nc; on error nc is closed.
func Connect(ctx context.Context, nc *net.UnixConn, tok Token, opts ...Option) (*Conn, error) {
	return open(ctx, nc, tok, true, TransportSocketpair, opts)
}

// Accept runs the child end of the handshake on nc and starts the Conn.
// The Conn owns nc; on error nc is closed.
func Accept(ctx context.Context, nc *net.UnixConn, tok Token, opts ...Option) (*Conn, error) {
	return open(ctx, nc, tok, false, TransportSocketpair, opts)
}

// Inherited names the connection an amdahl parent handed its child at
// launch: the fds the child inherited and the handshake token. The parent
// passes it in the child's environment (Pair.ChildEnv, PipePair.ChildEnv);
// LookupInherited reads it back, and AcceptInherited connects over it.
type Inherited struct {
	// FDs is one AF_UNIX stream socket, or the read then the write end of
	// two pipes; each fd is at least 3 (after stdin, stdout, stderr).
	FDs   []int
	Token Token
}

// LookupInherited reads the launch contract with lookupEnv (os.LookupEnv
// in a task host's main): AMDAHL_IPC_FD, one socket fd ("3") or a pipe read
// and write fd ("3,4"), and AMDAHL_IPC_TOKEN, the hex token. Without
// either it returns ErrNotChild; a malformed value is an error naming the
// variable. It changes no environment: the caller should unset
// AMDAHL_IPC_TOKEN once it is read, so that grandchildren do not inherit
// the token.
func LookupInherited(lookupEnv func(string) (string, bool)) (Inherited, error) {
	fdStr, okFD := lookupEnv(EnvFD)
	tokStr, okTok := lookupEnv(EnvToken)
	if !okFD || !okTok {
		return Inherited{}, ErrNotChild
	}
	tok, err := ParseToken(strings.TrimSpace(tokStr))
	if err != nil {
		return Inherited{}, fmt.Errorf("ipc: %s: %w", EnvToken, err)
	}
	parts := strings.Split(fdStr, ",")
	if len(parts) > 2 {
		return Inherited{}, fmt.Errorf("ipc: %s=%q: want one socket fd or two pipe fds \"R,W\"", EnvFD, fdStr)
	}
	fds := make([]int, len(parts))
	for i, p := range parts {
		fd, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || fd < 3 {
			return Inherited{}, fmt.Errorf("ipc: %s=%q: want inherited fd numbers ≥ 3", EnvFD, fdStr)
		}
		fds[i] = fd
	}
	return Inherited{FDs: fds, Token: tok}, nil
}

// AcceptInherited is Accept for a child started by an amdahl parent: it
// takes the connection from the fds named by inh (a socket, or two pipes)
// and runs the child end of the handshake with inh's token. The Conn owns
// the fds; if the handshake fails they are closed.
func AcceptInherited(ctx context.Context, inh Inherited, opts ...Option) (*Conn, error) {
	for _, fd := range inh.FDs {
		if fd < 3 {
			return nil, fmt.Errorf("ipc: inherited fds %v: want fd numbers ≥ 3", inh.FDs)
		}
	}
	switch len(inh.FDs) {
	case 1:
	case 2:
		r, w, err := inheritedPipes(inh.FDs[0], inh.FDs[1])
		if err != nil {
			return nil, err
		}
		return openPipes(ctx, r, w, inh.Token, false, opts)
	default:
		return nil, fmt.Errorf("ipc: inherited fds %v: want one socket fd or a pipe's read and write fds", inh.FDs)
	}
	fd := inh.FDs[0]
	f := os.NewFile(uintptr(fd), "ipc-inherited")
	defer f.Close()
	fc, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("ipc: inherited fd %d: not a socket: %w", fd, err)
	}
	uc, ok := fc.(*net.UnixConn)
	if !ok {
		_ = fc.Close()
		return nil, fmt.Errorf("ipc: inherited fd %d: not a unix socket", fd)
	}
	return Accept(ctx, uc, inh.Token, opts...)
}

func open(ctx context.Context, nc *net.UnixConn, tok Token, parent bool, transport string, opts []Option) (*Conn, error) {
	return openStream(ctx, nc, func(n int, _ *slog.Logger) (int, error) { return applySendBuffer(nc, n) }, tok, parent, transport, opts)
}

// openStream resolves the options, runs the handshake, sizes the buffer
// with setBuffer and starts the Conn. On error nc is closed.
func openStream(ctx context.Context, nc stream, setBuffer func(int, *slog.Logger) (int, error), tok Token, parent bool, transport string, opts []Option) (_ *Conn, err error) {
	defer func() {
		if err != nil {
			_ = nc.Close()
		}
	}()
	cfg, err := resolve(transport, opts)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.mp, cfg.transport, cfg.comp)
	if err != nil {
		return nil, err
	}
	err = handshake(ctx, nc, tok, parent, cfg.handshakeTimeout, cfg.hello)
	m.handshake(ctx, err)
	if err != nil {
		return nil, err
	}
	eff, err := setBuffer(cfg.buffer, cfg.logger)
	if err != nil {
		return nil, err
	}
	m.bufReq.Record(ctx, int64(cfg.buffer), m.plainRec)
	m.bufEff.Record(ctx, int64(eff), m.plainRec)
	logBuffer(cfg, cfg.buffer, eff)
	return newConn(nc, cfg, m, parent, eff), nil
}

// applySendBuffer sets SO_SNDBUF, the only buffer that limits in-flight
// bytes on an AF_UNIX stream socket (unix(7)), and reads back what the
// kernel granted (doubled, clamped by net.core.wmem_max).
func applySendBuffer(nc *net.UnixConn, n int) (int, error) {
	if err := nc.SetWriteBuffer(n); err != nil {
		return 0, fmt.Errorf("ipc: set SO_SNDBUF %d: %w", n, err)
	}
	return sendBuffer(nc)
}

func sendBuffer(nc syscall.Conn) (int, error) {
	raw, err := nc.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("ipc: read SO_SNDBUF: %w", err)
	}
	var v int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		v, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	}); err != nil {
		return 0, fmt.Errorf("ipc: read SO_SNDBUF: %w", err)
	}
	if serr != nil {
		return 0, fmt.Errorf("ipc: read SO_SNDBUF: %w", serr)
	}
	return v, nil
}

func logBuffer(cfg config, requested, effective int) {
	args := []any{"requested", requested, "effective", effective, "wmem_max", procInt("/proc/sys/net/core/wmem_max"), "transport", cfg.transport}
	want := 2 * requested // the kernel doubles SO_SNDBUF
	if cfg.transport == TransportPipe {
		want = requested // F_SETPIPE_SZ rounds up to a power-of-two number of pages
	}
	if effective < want {
		cfg.logger.Warn("ipc: send buffer below the requested size (clamped by net.core.wmem_max or the pipe limits)", args...)
		return
	}
	cfg.logger.Debug("ipc: send buffer", args...)
}

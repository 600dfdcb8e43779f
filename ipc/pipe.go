package ipc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// TransportPipe is the amdahl.transport attribute value of a connection
// over a pair of anonymous pipes.
const TransportPipe = "pipe"

// PipePair is two anonymous pipes (parent → child and child → parent), the
// literal "pipe" of the seed, made by the parent before it starts a child.
// Linux caps an unprivileged pipe at /proc/sys/fs/pipe-max-size (1 MiB by
// default) and a user's pipes at /proc/sys/fs/pipe-user-pages-soft
// (64 MiB): beyond either, growing a pipe fails with EPERM and the pipe
// keeps its size, which is logged as a warning and shows in the effective
// buffer.
type PipePair struct {
	parentR, parentW *os.File
	childR, childW   *os.File
	token            Token
}

// NewPipePair creates the two pipes (close-on-exec) and a fresh token.
func NewPipePair() (*PipePair, error) {
	tok, err := NewToken()
	if err != nil {
		return nil, err
	}
	p2cR, p2cW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("ipc: pipe: %w", err)
	}
	c2pR, c2pW, err := os.Pipe()
	if err != nil {
		_ = p2cR.Close()
		_ = p2cW.Close()
		return nil, fmt.Errorf("ipc: pipe: %w", err)
	}
	return &PipePair{parentR: c2pR, parentW: p2cW, childR: p2cR, childW: c2pW, token: tok}, nil
}

// ChildFiles returns the child's ends (read, then write), to put in
// exec.Cmd.ExtraFiles in this order.
func (p *PipePair) ChildFiles() []*os.File { return []*os.File{p.childR, p.childW} }

// ChildEnv returns the environment entries for the child: fd is the
// child's number of the read end (3 + its index in ExtraFiles); the write
// end must follow it.
func (p *PipePair) ChildEnv(fd int) []string {
	return []string{EnvFD + "=" + strconv.Itoa(fd) + "," + strconv.Itoa(fd+1), EnvToken + "=" + p.token.String()}
}

// CloseChild closes the parent's copies of the child's ends, so that the
// parent sees EOF and EPIPE when the child exits. Safe to call more than once.
func (p *PipePair) CloseChild() error {
	return errors.Join(closeFile(p.childR), closeFile(p.childW))
}

// Close closes every end not handed over; for error paths before Connect.
func (p *PipePair) Close() error {
	return errors.Join(p.CloseChild(), closeFile(p.parentR), closeFile(p.parentW))
}

func closeFile(f *os.File) error {
	if err := f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("ipc: close %s: %w", f.Name(), err)
	}
	return nil
}

// Connect performs the parent's handshake over the pipes and returns the
// Conn, which owns the parent's ends from then on.
func (p *PipePair) Connect(ctx context.Context, opts ...Option) (*Conn, error) {
	return openPipes(ctx, p.parentR, p.parentW, p.token, true, opts)
}

func openPipes(ctx context.Context, r, w *os.File, tok Token, parent bool, opts []Option) (*Conn, error) {
	ps := &pipeStream{r: r, w: w}
	return openStream(ctx, ps, func(n int, log *slog.Logger) (int, error) { return setPipeSize(w, n, log) }, tok, parent, TransportPipe, opts)
}

// pipeStream is a duplex stream over two pipes.
type pipeStream struct{ r, w *os.File }

func (s *pipeStream) Read(b []byte) (int, error)  { return s.r.Read(b) }
func (s *pipeStream) Write(b []byte) (int, error) { return s.w.Write(b) }
func (s *pipeStream) Close() error                { return errors.Join(closeFile(s.r), closeFile(s.w)) }
func (s *pipeStream) SetDeadline(t time.Time) error {
	return errors.Join(s.r.SetDeadline(t), s.w.SetDeadline(t))
}

// setPipeSize applies F_SETPIPE_SZ to the pipe this end writes (the
// capacity belongs to the pipe, and the sender is the one it throttles) and
// returns F_GETPIPE_SZ. EPERM (above pipe-max-size, or the user's pipe
// budget spent) is a warning, not an error: the pipe keeps working at its
// current size.
func setPipeSize(w *os.File, n int, log *slog.Logger) (int, error) {
	raw, err := w.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("ipc: F_SETPIPE_SZ: %w", err)
	}
	var eff int
	var setErr, getErr error
	if err := raw.Control(func(fd uintptr) {
		_, setErr = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, n)
		eff, getErr = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
	}); err != nil {
		return 0, fmt.Errorf("ipc: F_SETPIPE_SZ: %w", err)
	}
	if getErr != nil {
		return 0, fmt.Errorf("ipc: F_GETPIPE_SZ: %w", getErr)
	}
	if errors.Is(setErr, unix.EPERM) {
		log.Warn("ipc: pipe size refused (EPERM): above /proc/sys/fs/pipe-max-size, or the user's pipe budget /proc/sys/fs/pipe-user-pages-soft is spent; keeping the current size",
			"requested", n, "effective", eff, "pipe_max_size", procInt("/proc/sys/fs/pipe-max-size"))
		return eff, nil
	}
	if setErr != nil {
		return 0, fmt.Errorf("ipc: F_SETPIPE_SZ %d: %w", n, setErr)
	}
	return eff, nil
}

// procInt reads the number in a /proc file, -1 when it cannot.
func procInt(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// inheritedPipes opens the child's inherited pipe ends r and w.
func inheritedPipes(r, w int) (*os.File, *os.File, error) {
	var files [2]*os.File
	for i, fd := range [2]int{r, w} {
		// Non-blocking, so that os.NewFile returns a pollable file whose
		// deadlines work and whose Close unblocks a pending read.
		if err := unix.SetNonblock(fd, true); err != nil {
			if i == 1 {
				_ = files[0].Close()
			}
			return nil, nil, fmt.Errorf("ipc: inherited pipe fd %d: %w", fd, err)
		}
		files[i] = os.NewFile(uintptr(fd), "ipc-pipe-"+strconv.Itoa(fd))
	}
	return files[0], files[1], nil
}

package ipc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// DefaultMaxPendingHandshakes is how many handshakes a Listener runs at
// once by default (WithMaxPendingHandshakes).
const DefaultMaxPendingHandshakes = 64

// ErrListenerClosed is returned by Accept once the Listener is closed.
var ErrListenerClosed = errors.New("ipc: listener closed")

// ListenOption configures a Listener.
type ListenOption func(*listenConfig)

type listenConfig struct{ maxPending int }

// WithMaxPendingHandshakes bounds the connections a Listener handshakes at
// once, counting those whose outcome no Accept has taken yet (default
// DefaultMaxPendingHandshakes). While that many are pending, further
// connections wait in the socket's backlog: a peer that stays silent holds
// one slot for at most the handshake timeout.
func WithMaxPendingHandshakes(n int) ListenOption {
	return func(c *listenConfig) { c.maxPending = n }
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
//
// Each connection is handshaken in a goroutine of its own, under its own
// handshake timeout, up to WithMaxPendingHandshakes at once: a peer that
// connects and stays silent delays no other, so a parent waits for its own
// handshake only, however many silent peers came first (up to the bound).
type Listener struct {
	l    *net.UnixListener
	path string

	conns   chan *net.UnixConn // accepted by the loop, taken by Accept
	slots   chan struct{}      // one per handshake pending or outcome not taken
	results chan accepted      // outcomes of the handshakes, cap(slots)
	done    chan struct{}      // closed by Close
	ctx     context.Context    // of the handshakes; ends at Close
	cancel  context.CancelFunc
	loop    sync.WaitGroup // the accept loop
	shakes  sync.WaitGroup // the handshakes
	once    sync.Once
	err     error

	mu     sync.Mutex // orders shakes.Add against Close's Wait
	closed bool
}

type accepted struct {
	c   *Conn
	err error
}

// Listen creates dir if needed (mode 0700), refuses an existing dir that is
// not 0700 or not owned by the current user, removes a stale socket at
// dir/name, and listens there. The Listener accepts connections on a
// goroutine of its own from now on; Close stops it.
func Listen(dir, name string, opts ...ListenOption) (*Listener, error) {
	cfg := listenConfig{maxPending: DefaultMaxPendingHandshakes}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxPending < 1 {
		return nil, fmt.Errorf("ipc: max pending handshakes %d: want at least 1", cfg.maxPending)
	}
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
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("ipc: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Listener{l: ul, path: path, conns: make(chan *net.UnixConn), slots: make(chan struct{}, cfg.maxPending),
		results: make(chan accepted, cfg.maxPending), done: make(chan struct{}), ctx: ctx, cancel: cancel}
	l.loop.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Path returns the socket's path.
func (l *Listener) Path() string { return l.path }

// acceptLoop accepts connections and hands them to Accept, until Close.
// An error other than the listener's closing (too many open files) is
// waited out with a backoff, as net/http's Serve does.
func (l *Listener) acceptLoop() {
	defer l.loop.Done()
	var backoff time.Duration
	for {
		uc, err := l.l.AcceptUnix()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-l.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		backoff = 0
		select {
		case l.conns <- uc:
		case <-l.done:
			_ = uc.Close()
			return
		}
	}
}

// Accept returns the next connection whose handshake ended: a *Conn, or
// the error that rejected it (the peer runs as another user, or failed the
// handshake with tok; the connection is closed and the listener stays
// usable). Accept blocks until an outcome is ready, ctx ends, or the
// Listener is closed (ErrListenerClosed).
//
// While Accept waits, the connections that arrive are handshaken with
// tok and opts, each in a goroutine of its own under its own handshake
// timeout (WithHandshakeTimeout), at most WithMaxPendingHandshakes at
// once; a handshake still under way when Accept returns goes on, and a
// later Accept returns its outcome. Accept is safe for concurrent use.
func (l *Listener) Accept(ctx context.Context, tok Token, opts ...Option) (*Conn, error) {
	for {
		select {
		case r := <-l.results:
			<-l.slots
			return r.c, r.err
		case <-ctx.Done():
			return nil, fmt.Errorf("ipc: accept: %w", ctx.Err())
		case <-l.done:
			return nil, ErrListenerClosed
		case l.slots <- struct{}{}:
		}
		// A slot is ours: wait for a connection to handshake in it, or
		// for an outcome.
		select {
		case uc := <-l.conns:
			if err := checkPeer(uc, uint32(os.Geteuid())); err != nil {
				_ = uc.Close()
				<-l.slots
				return nil, err
			}
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				_ = uc.Close()
				<-l.slots
				return nil, ErrListenerClosed
			}
			l.shakes.Add(1)
			l.mu.Unlock()
			go func() {
				defer l.shakes.Done()
				c, err := open(l.ctx, uc, tok, false, TransportUnix, opts)
				l.results <- accepted{c, err} // never blocks: one per slot
			}()
		case r := <-l.results:
			<-l.slots
			<-l.slots
			return r.c, r.err
		case <-ctx.Done():
			<-l.slots
			return nil, fmt.Errorf("ipc: accept: %w", ctx.Err())
		case <-l.done:
			<-l.slots
			return nil, ErrListenerClosed
		}
	}
}

// Close stops listening, removes the socket file, ends the handshakes
// under way and closes every connection no Accept has taken. Safe to call
// more than once.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		if err := l.l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			l.err = fmt.Errorf("ipc: close listener: %w", err)
		}
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		l.cancel()
		l.loop.Wait()
		l.shakes.Wait()
		for {
			select {
			case r := <-l.results:
				if r.c != nil {
					_ = r.c.Close()
				}
				continue
			default:
			}
			break
		}
	})
	return l.err
}

package chunking

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Connection and call limits of a Sidecar (SidecarConfig).
const (
	// DefaultMaxConnections is how many client connections a sidecar
	// serves at once (SidecarConfig.MaxConnections).
	DefaultMaxConnections = 64
	// DefaultMaxStreamsPerConnection is how many calls one connection may
	// have open at once (SidecarConfig.MaxStreamsPerConnection); a gRPC
	// client queues the calls over it until one ends.
	DefaultMaxStreamsPerConnection = 256
	// DefaultMaxCalls is how many calls a sidecar has open at once, over
	// every connection (SidecarConfig.MaxCalls).
	DefaultMaxCalls = 1024
	// MaxHeaderBytes bounds the metadata of a call (HTTP/2 header list):
	// a bearer token is at most MaxTokenBytes, trace context a few hundred
	// bytes. A call with more is refused before its headers are kept.
	MaxHeaderBytes = 64 << 10
	// HandshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface: a connection that has not finished them by then is closed,
	// so a silent one holds no connection slot for long.
	HandshakeTimeout = 10 * time.Second
	// connWindow is a connection's HTTP/2 window: gRPC gives it back as
	// the bytes arrive, so it paces a connection, not memory (which the
	// calls' windows and the admission bound).
	connWindow = 16 << 20
)

// limitOptions are the gRPC server options that bound what a client can
// make the server hold before any handler runs: the tap handle (the
// bearer token, checked on the headers, before the body is read), the
// streams of one connection and the size of its headers. The connection
// cap is the listener's (capListener).
func (s *Sidecar) limitOptions(auth *authorizer) []grpc.ServerOption {
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	if s.cfg.TLS != nil {
		creds = credentials.NewTLS(s.cfg.TLS)
	}
	opts := []grpc.ServerOption{
		// The admission reads every connection's frames (admission.go)
		// and needs each call's window to stay what it granted: static
		// windows, no BDP estimation growing them.
		grpc.Creds(admitCreds{TransportCredentials: creds, adm: s.adm}),
		grpc.StaticStreamWindowSize(callAllowance),
		grpc.StaticConnWindowSize(connWindow),
		grpc.MaxConcurrentStreams(uint32(s.cfg.MaxStreamsPerConnection)),
		grpc.MaxHeaderListSize(MaxHeaderBytes),
		grpc.ConnectionTimeout(HandshakeTimeout),
	}
	opts = append(opts, grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
		// The tap runs on a call's headers, before gRPC creates its
		// stream: a refused call's body is never read (the client's
		// stream is reset), so an unauthenticated client costs the
		// headers of its call and nothing more.
		if auth != nil {
			if err := auth.check(ctx, info.Header); err != nil {
				return nil, err
			}
		}
		// Each open call may send its first 64 KiB unasked (its initial
		// window), before the admission reads its size: the calls open
		// at once are bounded apart.
		if n := s.openCalls.Add(1); n > int64(s.cfg.MaxCalls) {
			s.openCalls.Add(-1)
			s.metrics.refused(ctx, ReasonCalls)
			return nil, status.Errorf(codes.ResourceExhausted,
				"sidecar: %d calls are open, the bound MaxCalls = %d (each may send %d bytes before the sidecar reads its size); "+
					"call again once some end, or raise the bound (SidecarConfig.MaxCalls, amdahl sidecar --max-calls)",
				n-1, s.cfg.MaxCalls, callAllowance)
		}
		// The stream's context ends with the call, whichever way.
		context.AfterFunc(ctx, func() { s.openCalls.Add(-1) })
		return ctx, nil
	}))
	return opts
}

// capListener accepts at most max connections open at once; a connection
// over it is closed as soon as it is accepted, and counted.
type capListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused func()
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refused() // counted before the client can see the close
			_ = c.Close()
			continue
		}
		return &capConn{Conn: c, l: l}, nil
	}
}

// capConn gives its slot back when closed (once, whoever closes it).
type capConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

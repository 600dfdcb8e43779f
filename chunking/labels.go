package chunking

import (
	"context"
	"net"
	"runtime/pprof"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/stats"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// serverLabels is the sidecar's stats.Handler that puts the component's
// pprof labels on the goroutines where gRPC does a call's work before and
// around the handler, so that a CPU profile books that work to a phase:
//
//   - a connection's reader goroutine (it reads and parses every frame of
//     the connection for as long as it is open): receive/request, set in
//     TagConn, which gRPC calls on that goroutine;
//   - a call's goroutine from TagRPC on, before gRPC receives and decodes
//     the request: a completion (CompleteOrchestratorTask) runs under
//     deserialize/request, so its decode counts as the sidecar's
//     deserialize (the handler then marks its own deserialize and
//     execute); every other call (StartInstance, GetWorkItems,
//     AbandonTaskOrchestratorWorkItem) under dispatch, the far side of the
//     worker's lease. The labels the call's context already carries
//     (span_id from otel-profiling-go, when a stats handler before this one
//     started a sampled span) are kept. At the call's End the goroutine's
//     labels are cleared: a stream worker goes back to waiting unlabelled.
//
// The goroutines gRPC starts per connection to write (its loopy writer)
// inherit the labels of the goroutine that runs Serve: Sidecar.Serve
// runs the server under send/reply (serveLabelled).
//
// A Sidecar adds it only when its Component sets labels
// (ComponentConfig.PhaseLabels): without a profile to read them, gRPC's
// stats events would cost each call for nothing.
type serverLabels struct {
	comp *telemetry.Component
	recv context.Context // receive/request
}

// newServerLabels returns the handler, or nil when comp sets no labels.
func newServerLabels(comp *telemetry.Component) stats.Handler {
	recv := comp.LabelContext(telemetry.Receive, telemetry.Request)
	if recv == nil {
		return nil
	}
	return serverLabels{comp: comp, recv: recv}
}

// TagConn labels the connection's reader goroutine.
func (h serverLabels) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	pprof.SetGoroutineLabels(h.recv)
	return ctx
}

// HandleConn does nothing.
func (serverLabels) HandleConn(context.Context, stats.ConnStats) {}

// TagRPC labels the call's goroutine before gRPC receives its request.
// The context returned is ctx: a phase body started from it (the
// handler's) sets its own labels without copying these.
func (h serverLabels) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	p, d := telemetry.Dispatch, telemetry.None
	if info.FullMethodName == dtpb.MethodCompleteOrchestratorTask {
		p, d = telemetry.Deserialize, telemetry.Request
	}
	pprof.SetGoroutineLabels(h.comp.WithPhaseLabels(ctx, p, d))
	return ctx
}

// HandleRPC clears the goroutine's labels at the call's end, which gRPC
// reports on the call's goroutine.
func (serverLabels) HandleRPC(_ context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.End); ok {
		pprof.SetGoroutineLabels(context.Background())
	}
}

// serveLabelled runs serve (the gRPC server's Serve) on the calling
// goroutine under send/reply, when the component sets labels: the
// goroutines gRPC starts for each accepted connection inherit them, its
// writer among them (the reader is relabelled by serverLabels.TagConn).
// The calling goroutine's labels are cleared when serve returns.
func (s *Sidecar) serveLabelled(serve func(net.Listener) error, lis net.Listener) error {
	lctx := s.comp.LabelContext(telemetry.Send, telemetry.Reply)
	if lctx == nil {
		return serve(lis)
	}
	pprof.SetGoroutineLabels(lctx)
	defer pprof.SetGoroutineLabels(context.Background())
	return serve(lis)
}

// LabelledCredentials returns creds with the component's pprof labels on
// the goroutines of a client connection's gRPC transport, for a client of
// a sidecar (the runtime's connection): gRPC starts a reader and a writer
// goroutine per connection from its own connecting goroutine, so no label
// of the caller reaches them, and their CPU (reading and parsing every
// frame; framing, writing and flushing every message) would be in no
// phase in Pyroscope. The connection the handshake returns is wrapped:
// its Read sets the goroutine's labels to the component's receive/reply,
// its Write to send/request. The transport's reader goroutine only reads
// and its writer only writes, so each keeps its labels from its first
// call on, and a TLS connection's decryption and encryption, inside
// those calls, count with them. Each call costs one
// pprof.SetGoroutineLabels with a context built once: no allocation.
//
// The handshake itself runs on gRPC's connecting goroutine on the
// connection as dialled, unlabelled. LabelledCredentials returns creds
// unchanged when the component sets no labels
// (telemetry.ComponentConfig.PhaseLabels).
func LabelledCredentials(creds credentials.TransportCredentials, comp *telemetry.Component) credentials.TransportCredentials {
	recv := comp.LabelContext(telemetry.Receive, telemetry.Reply)
	send := comp.LabelContext(telemetry.Send, telemetry.Request)
	if recv == nil || send == nil {
		return creds
	}
	return labelledCreds{TransportCredentials: creds, recv: recv, send: send}
}

type labelledCreds struct {
	credentials.TransportCredentials
	recv, send context.Context
}

// ClientHandshake wraps the connection creds' handshake returns.
func (c labelledCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return conn, info, err
	}
	return &labelledConn{Conn: conn, recv: c.recv, send: c.send}, info, nil
}

// Clone clones the credentials wrapped.
func (c labelledCreds) Clone() credentials.TransportCredentials {
	return labelledCreds{TransportCredentials: c.TransportCredentials.Clone(), recv: c.recv, send: c.send}
}

// labelledConn labels the goroutine that reads it with recv, and the one
// that writes it with send.
type labelledConn struct {
	net.Conn
	recv, send context.Context
}

func (c *labelledConn) Read(b []byte) (int, error) {
	pprof.SetGoroutineLabels(c.recv)
	return c.Conn.Read(b)
}

func (c *labelledConn) Write(b []byte) (int, error) {
	pprof.SetGoroutineLabels(c.send)
	return c.Conn.Write(b)
}

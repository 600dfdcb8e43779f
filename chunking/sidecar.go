package chunking

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/internal/grpctrace"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// Sidecar defaults.
const (
	DefaultBufferTTL         = 5 * time.Minute
	DefaultMaxBufferedBytes  = 256 << 20
	DefaultMaxBufferedChunks = 4096
	// DefaultMaxTotalBufferedBytes is four tokens at DefaultMaxBufferedBytes.
	DefaultMaxTotalBufferedBytes = 1 << 30
	DefaultMaxPendingInstances   = 100_000
	DefaultMaxInstanceIDBytes    = 1024
	// DefaultMaxRecvMsgSize absorbs the framing overshoot of .NET's payload
	// accounting (the newest Durable Task Go SDK uses the same 64 MiB).
	DefaultMaxRecvMsgSize = 64 << 20
	// DefaultMaxKeptCompletions is how many applied completions a sidecar
	// without OnApplied keeps for Completions and DrainCompletions.
	DefaultMaxKeptCompletions = 4096
	// DefaultStreamWorkers is how many goroutines a sidecar keeps to run
	// calls on (SidecarConfig.StreamWorkers).
	DefaultStreamWorkers = 8
	// MaxStreamWorkers bounds SidecarConfig.StreamWorkers: each kept
	// goroutine holds its stack while idle.
	MaxStreamWorkers = 8192
)

// SidecarConfig configures a Sidecar. Zero fields take the defaults.
type SidecarConfig struct {
	// BufferTTL drops a partial completion idle for longer (default 5 min).
	BufferTTL time.Duration
	// MaxBufferedBytes and MaxBufferedChunks cap one token's buffer
	// (default 256 MiB, 4096 chunks). A chunk over either is refused with
	// ResourceExhausted and the token's buffer is dropped: that completion
	// can never fit.
	MaxBufferedBytes  int
	MaxBufferedChunks int
	// MaxTotalBufferedBytes caps the bytes held by the messages being
	// received and by all partial completions together (default 1 GiB).
	// A message reserves three times its size before its body is let in,
	// and waits while that does not fit (see the package doc, "Sidecar
	// bounds"); a buffered chunk counts what it holds decoded, its
	// serialized size and DecodedActionBytes per action. A partial chunk
	// that would take the partial completions over it is refused
	// with ResourceExhausted before it is buffered, and the token's buffer
	// stays as it was, so the same chunk may be sent again once completions,
	// abandons, disconnects or the TTL have released room. A final chunk is
	// never refused for it, since applying it frees its buffer.
	MaxTotalBufferedBytes int
	// MaxPendingInstances caps the instances StartInstance has scheduled
	// and that have not completed, queued or leased (default 100,000): a
	// lease holds its work item until the completion or an abandon, so a
	// worker that leases and never completes must count too. A start over
	// it is refused with ResourceExhausted and nothing is scheduled. There
	// is no TTL: a started orchestration that waits for a worker is not
	// dropped, since StartInstance promised to run it; this bound and
	// MaxInstanceIDBytes are what keep the memory finite. Work items given
	// to Submit are the caller's and not counted.
	MaxPendingInstances int
	// MaxInstanceIDBytes caps the length of an instance id given to
	// StartInstance (default 1024 bytes); a longer one is refused with
	// InvalidArgument.
	MaxInstanceIDBytes int
	// MaxRecvMsgSize is the server's receive limit (default the smaller of
	// 64 MiB and an eighth of MaxTotalBufferedBytes; at most
	// MaxTotalBufferedBytes);
	// gRPC refuses a larger message with ResourceExhausted before reading
	// it. A message being received or handled counts toward
	// MaxTotalBufferedBytes (see the package doc, "Sidecar bounds").
	MaxRecvMsgSize int
	// Now is the clock of the TTL (default time.Now); tests inject one.
	Now func() time.Time
	// OnApplied, if not nil, is called with each completion once it is
	// applied, on the goroutine of the call that applied it and after the
	// sidecar's lock is released (it should not block for long: the
	// worker waits for its reply meanwhile). The sidecar then keeps no
	// completions: Completions and DrainCompletions return none, and the
	// payloads are garbage as soon as OnApplied returns. Applied counts
	// them either way. A service that only counts or forwards completions
	// sets it, so that its memory does not grow with the completions'
	// payloads.
	OnApplied func(Completion)
	// MaxKeptCompletions caps the completions kept for Completions and
	// DrainCompletions when OnApplied is nil (default 4096): over it the
	// oldest kept completion is forgotten, and counted by
	// ForgottenCompletions. Applying is not affected.
	MaxKeptCompletions int
	// Component, if not nil, records chunking.deserialize and
	// chunking.execute on the server.
	Component *telemetry.Component
	// TracerProvider and MeterProvider, if not nil, instrument the gRPC
	// server with otelgrpc (W3C trace context from metadata) and receive the
	// amdahl.sidecar.* metrics. When both are the OTel API's no-ops
	// (trace/noop, metric/noop), nothing would read otelgrpc's spans or
	// metrics: the server then only takes each call's trace context from
	// its metadata, the one thing of otelgrpc's that still mattered.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// StreamWorkers is how many goroutines the gRPC server keeps to run
	// calls on (grpc.NumStreamWorkers; default DefaultStreamWorkers, at
	// most MaxStreamWorkers). A call that finds them all busy runs on a
	// goroutine of its own, as every call would without them; an open
	// GetWorkItems stream holds one for as long as it is open. A kept
	// goroutine keeps the stack a call grew: a goroutine per call grew
	// and copied its stack on nearly every call, about 4 % of the CPU of
	// a process that completes small orchestrations to its in-process
	// sidecar (runtime/README.md). grpc.NumStreamWorkers among
	// ServerOptions overrides it (0 there: a goroutine per call).
	StreamWorkers int
	// TLS, if not nil, makes the sidecar serve TLS with it; without it the
	// sidecar serves plaintext, fit for loopback only (see the package doc,
	// "Sidecar security").
	TLS *tls.Config
	// ServerOptions are added to the gRPC server's options (interceptors,
	// keepalive). Credentials belong in TLS, not here: grpc.Creds among
	// ServerOptions replaces the sidecar's own, which read each message's
	// size before its body is let in, and MaxTotalBufferedBytes then no
	// longer counts the messages being received.
	ServerOptions []grpc.ServerOption
	// Token, if not empty, is the bearer token every call must carry as
	// gRPC metadata "authorization: Bearer <Token>"; a call without it, or
	// with another token, fails with Unauthenticated on its headers, before
	// gRPC reads its body or makes a stream for it, and is counted in
	// amdahl.sidecar.rejections (unauthenticated).
	// The comparison takes constant time. Token must be 1..MaxTokenBytes
	// visible ASCII characters. Over plaintext the token travels in clear:
	// give it with TLS (ServerOptions) unless the sidecar listens on
	// loopback.
	Token string
	// MaxConnections caps the client connections served at once (default
	// DefaultMaxConnections); a connection over it is closed as soon as it
	// is accepted and counted in amdahl.sidecar.rejections (connections).
	MaxConnections int
	// MaxStreamsPerConnection caps the calls one connection may have open
	// at once (default DefaultMaxStreamsPerConnection; HTTP/2
	// SETTINGS_MAX_CONCURRENT_STREAMS): a gRPC client queues its calls over
	// it until one ends.
	MaxStreamsPerConnection int
	// MaxCalls caps the calls open at once over every connection (default
	// DefaultMaxCalls): each may send its first 64 KiB (its initial HTTP/2
	// window) before the sidecar reads the size of its message, so
	// MaxCalls × 64 KiB is what calls can hold beside
	// MaxTotalBufferedBytes. A call over it fails with ResourceExhausted
	// on its headers and is counted in amdahl.sidecar.rejections (calls).
	MaxCalls int
}

// Completion is one applied orchestrator completion, reassembled if it came
// in chunks.
type Completion struct {
	InstanceID      string
	CompletionToken string
	Actions         []*dtpb.OrchestratorAction
	CustomStatus    *wrapperspb.StringValue
	RequiresHistory bool
	// NumEventsProcessed is nil when every event was processed.
	NumEventsProcessed        *wrapperspb.Int32Value
	OrchestrationTraceContext *dtpb.OrchestrationTraceContext
	// Chunks is the number of messages the completion arrived in.
	Chunks int
}

type lease struct {
	req    *dtpb.OrchestratorRequest
	stream uint64
}

// done remembers a completed token for one TTL, so that a final message
// resent after a lost reply is acknowledged instead of rejected.
type done struct {
	last int32 // index of the final chunk (-1: absent)
	at   time.Time
}

type buffer struct {
	// chunks are the accepted chunks by index, kept whole (their actions
	// are kept anyway): chunk 0 carries the chunk-0-only fields, and a
	// chunk sent again is compared with the one accepted.
	chunks  []*dtpb.OrchestratorResponse
	actions int // in chunks
	bytes   int // serialized, bounded by MaxBufferedBytes
	held    int // heldBytes of the chunks, counted toward MaxTotalBufferedBytes
	touched time.Time
}

// next is the index of the chunk expected next.
func (b *buffer) next() int32 { return int32(len(b.chunks)) }

// Sidecar is an in-process TaskHubSidecarService: it serves GetWorkItems
// from work submitted with Submit, reassembles chunked completions keyed by
// completion token, and records every applied completion. Methods are safe
// for concurrent use. Start it with Serve; stop it with Close, which drains
// the calls in flight.
type Sidecar struct {
	cfg     SidecarConfig
	comp    *telemetry.Component
	metrics *sidecarMetrics
	// srvOpts make srv at the first Serve (under mu): its stream workers
	// are goroutines, which a sidecar never served must not hold.
	srvOpts []grpc.ServerOption
	srv     *grpc.Server
	adm     *admission // messages in flight and s.buffered against MaxTotalBufferedBytes

	mu        sync.Mutex
	pending   []*dtpb.OrchestratorRequest
	wake      chan struct{} // closed and replaced when pending grows
	leases    map[string]*lease
	buffers   map[string]*buffer
	buffered  int                 // the sum of the buffers' bytes
	completed map[string]done     // recently completed tokens, for lost final replies
	active    map[string]struct{} // instance ids scheduled by StartInstance, not yet completed
	applied   []Completion        // kept when cfg.OnApplied is nil, at most cfg.MaxKeptCompletions
	forgotten int64               // kept completions forgotten over MaxKeptCompletions
	nApplied  atomic.Int64
	streamSeq uint64
	tokenSeq  uint64
	tokenPfx  uint64

	// stop is closed (under mu) when Close begins: waiting GetWorkItems
	// streams and the janitor end, and Serve starts no janitor.
	stop      chan struct{}
	wg        sync.WaitGroup // the janitor
	calls     atomic.Int64   // RPCs in flight, counted by the interceptors
	openCalls atomic.Int64   // streams open, counted by the tap handle (MaxCalls)
	closeOnce sync.Once
	closed    chan struct{} // closed when the first Close has finished
	closeErr  error
}

// NewSidecar validates cfg and builds a Sidecar.
func NewSidecar(cfg SidecarConfig) (*Sidecar, error) {
	if cfg.BufferTTL < 0 {
		return nil, fmt.Errorf("chunking: sidecar: SidecarConfig.BufferTTL is %v, want ≥ 0 (0 takes the default %v)", cfg.BufferTTL, DefaultBufferTTL)
	}
	for _, f := range []struct {
		name    string
		v, dflt int
	}{
		{"MaxBufferedBytes", cfg.MaxBufferedBytes, DefaultMaxBufferedBytes},
		{"MaxBufferedChunks", cfg.MaxBufferedChunks, DefaultMaxBufferedChunks},
		{"MaxTotalBufferedBytes", cfg.MaxTotalBufferedBytes, DefaultMaxTotalBufferedBytes},
		{"MaxPendingInstances", cfg.MaxPendingInstances, DefaultMaxPendingInstances},
		{"MaxInstanceIDBytes", cfg.MaxInstanceIDBytes, DefaultMaxInstanceIDBytes},
		{"MaxRecvMsgSize", cfg.MaxRecvMsgSize, DefaultMaxRecvMsgSize},
		{"MaxKeptCompletions", cfg.MaxKeptCompletions, DefaultMaxKeptCompletions},
		{"StreamWorkers", cfg.StreamWorkers, DefaultStreamWorkers},
		{"MaxConnections", cfg.MaxConnections, DefaultMaxConnections},
		{"MaxStreamsPerConnection", cfg.MaxStreamsPerConnection, DefaultMaxStreamsPerConnection},
		{"MaxCalls", cfg.MaxCalls, DefaultMaxCalls},
	} {
		if f.v < 0 {
			return nil, fmt.Errorf("chunking: sidecar: SidecarConfig.%s is %d, want ≥ 0 (0 takes the default %d)", f.name, f.v, f.dflt)
		}
	}
	if cfg.StreamWorkers > MaxStreamWorkers {
		return nil, fmt.Errorf("chunking: sidecar: SidecarConfig.StreamWorkers is %d, want at most %d (0 takes the default %d)", cfg.StreamWorkers, MaxStreamWorkers, DefaultStreamWorkers)
	}
	if cfg.Token != "" {
		if err := checkToken(cfg.Token); err != nil {
			return nil, fmt.Errorf("chunking: sidecar: SidecarConfig.Token %w", err)
		}
	}
	if cfg.BufferTTL == 0 {
		cfg.BufferTTL = DefaultBufferTTL
	}
	if cfg.MaxBufferedBytes == 0 {
		cfg.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if cfg.MaxBufferedChunks == 0 {
		cfg.MaxBufferedChunks = DefaultMaxBufferedChunks
	}
	if cfg.MaxTotalBufferedBytes == 0 {
		cfg.MaxTotalBufferedBytes = DefaultMaxTotalBufferedBytes
	}
	if cfg.MaxPendingInstances == 0 {
		cfg.MaxPendingInstances = DefaultMaxPendingInstances
	}
	if cfg.MaxInstanceIDBytes == 0 {
		cfg.MaxInstanceIDBytes = DefaultMaxInstanceIDBytes
	}
	if cfg.MaxRecvMsgSize == 0 {
		cfg.MaxRecvMsgSize = max(1, min(DefaultMaxRecvMsgSize, cfg.MaxTotalBufferedBytes/8))
	}
	if cfg.MaxRecvMsgSize > cfg.MaxTotalBufferedBytes {
		return nil, fmt.Errorf("chunking: sidecar: SidecarConfig.MaxRecvMsgSize is %d, over MaxTotalBufferedBytes = %d: "+
			"a message being received counts toward the total, so one that large could never be let in", cfg.MaxRecvMsgSize, cfg.MaxTotalBufferedBytes)
	}
	if cfg.MaxKeptCompletions == 0 {
		cfg.MaxKeptCompletions = DefaultMaxKeptCompletions
	}
	if cfg.StreamWorkers == 0 {
		cfg.StreamWorkers = DefaultStreamWorkers
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.MaxStreamsPerConnection == 0 {
		cfg.MaxStreamsPerConnection = DefaultMaxStreamsPerConnection
	}
	if cfg.MaxCalls == 0 {
		cfg.MaxCalls = DefaultMaxCalls
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m, err := newSidecarMetrics(cfg.MeterProvider, cfg.Component)
	if err != nil {
		return nil, err
	}
	s := &Sidecar{
		cfg: cfg, comp: cfg.Component, metrics: m,
		adm:       newAdmission(cfg.MaxTotalBufferedBytes, cfg.MaxRecvMsgSize),
		wake:      make(chan struct{}),
		leases:    map[string]*lease{},
		buffers:   map[string]*buffer{},
		completed: map[string]done{},
		active:    map[string]struct{}{},
		tokenPfx:  rand.Uint64(),
		stop:      make(chan struct{}),
		closed:    make(chan struct{}),
	}
	var auth *authorizer
	if cfg.Token != "" {
		auth = &authorizer{want: sha256.Sum256([]byte(cfg.Token)), metrics: m}
	}
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(cfg.MaxRecvMsgSize), grpc.NumStreamWorkers(uint32(cfg.StreamWorkers))}
	opts = append(opts, s.limitOptions(auth)...)
	opts = append(opts, grpc.ChainUnaryInterceptor(s.countUnary), grpc.ChainStreamInterceptor(s.countStream))
	if cfg.TracerProvider != nil && cfg.MeterProvider != nil {
		if grpctrace.Suffices(cfg.TracerProvider, cfg.MeterProvider) {
			// Nothing would read a call's span or its RPC metrics: the
			// trace context is all otelgrpc would carry; interceptors
			// carry it without a stats handler's events.
			opts = append(opts, grpc.ChainUnaryInterceptor(grpctrace.Server{}.Unary()), grpc.ChainStreamInterceptor(grpctrace.Server{}.Stream()))
		} else {
			opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(
				otelgrpc.WithTracerProvider(cfg.TracerProvider), otelgrpc.WithMeterProvider(cfg.MeterProvider),
				otelgrpc.WithPropagators(propagation.TraceContext{}))))
		}
	}
	if h := newServerLabels(cfg.Component); h != nil {
		opts = append(opts, grpc.StatsHandler(h)) // after otelgrpc's: it keeps the span's labels
	}
	s.srvOpts = append(opts, cfg.ServerOptions...)
	return s, nil
}

// Serve serves gRPC on lis until Close, and runs the TTL janitor. It
// blocks; it returns nil once Close has stopped the server (after Close it
// closes lis and returns nil at once).
func (s *Sidecar) Serve(lis net.Listener) error {
	s.mu.Lock()
	select {
	case <-s.stop:
		s.mu.Unlock()
		_ = lis.Close()
		return nil
	default:
	}
	if s.srv == nil {
		s.srv = grpc.NewServer(s.srvOpts...)
		dtpb.RegisterSidecarServer(s.srv, (*sidecarService)(s))
	}
	srv := s.srv
	s.wg.Add(2)
	go s.janitor()
	go func() {
		defer s.wg.Done()
		s.adm.run(s.stop)
	}()
	s.mu.Unlock()
	lis = &capListener{Listener: lis, max: int64(s.cfg.MaxConnections),
		refused: func() { s.metrics.refused(context.Background(), ReasonConnections) }}
	if err := s.serveLabelled(srv.Serve, lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("sidecar: serve: %w", err)
	}
	return nil
}

func (s *Sidecar) janitor() {
	defer s.wg.Done()
	t := time.NewTicker(max(s.cfg.BufferTTL/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.ExpireBuffers()
		}
	}
}

// Close shuts the sidecar down, draining the calls in flight. It stops
// accepting connections and RPCs, ends the open GetWorkItems streams (they
// return Unavailable "sidecar shutting down" and deliver nothing more; the
// work items they delivered stay leased, so completions already under way
// still apply), and waits, as grpc.Server.GracefulStop does, until every
// call in flight has returned. It stops the TTL janitor. It returns nil
// when the drain finished.
//
// If ctx ends first, Close force-stops the server (grpc.Server.Stop: the
// connections are closed and the handlers' contexts cancelled; a call in
// flight fails on the client) and returns an error wrapping ctx.Err() that
// says how many calls were still in flight. A handler (or interceptor from
// ServerOptions) that ignores its context may still be running then; with
// grpc.WaitForHandlers(true) among ServerOptions, Close waits for it.
//
// Close may be called more than once and from concurrent goroutines. Only
// the first call shuts down, bounded by its ctx; the others wait for it to
// finish and return its result, or return an error wrapping their own
// ctx.Err() if their ctx ends first. Serve returns nil after Close. The
// recorded completions (Completions, DrainCompletions) stay readable.
func (s *Sidecar) Close(ctx context.Context) error {
	first := false
	s.closeOnce.Do(func() { first = true })
	if first {
		s.closeErr = s.shutdown(ctx)
		close(s.closed)
		return s.closeErr
	}
	select {
	case <-s.closed:
		return s.closeErr
	case <-ctx.Done():
		return fmt.Errorf("chunking: sidecar: close: waiting for a concurrent Close: %w", ctx.Err())
	}
}

func (s *Sidecar) shutdown(ctx context.Context) error {
	s.mu.Lock()
	close(s.stop) // under mu: a GetWorkItems stream sees it before it delivers again
	srv := s.srv  // nil if never served; a Serve from now on serves nothing
	s.mu.Unlock()
	if srv == nil {
		s.wg.Wait()
		return nil
	}
	// GracefulStop closes the listeners, sends GOAWAY, and waits for every
	// RPC, the ended GetWorkItems streams included.
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		srv.GracefulStop()
	}()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		n := s.calls.Load()
		srv.Stop() // also ends the GracefulStop, once the handlers return
		calls := "calls"
		if n == 1 {
			calls = "call"
		}
		err = fmt.Errorf("chunking: sidecar: close: forced stop with %d %s still in flight: %w", n, calls, ctx.Err())
	}
	s.wg.Wait()
	return err
}

// countUnary and countStream count the RPCs in flight, for Close's error.
func (s *Sidecar) countUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	s.calls.Add(1)
	defer s.calls.Add(-1)
	return h(ctx, req)
}

func (s *Sidecar) countStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	s.calls.Add(1)
	defer s.calls.Add(-1)
	return h(srv, ss)
}

// Submit queues an orchestrator work item for delivery on GetWorkItems.
func (s *Sidecar) Submit(req *dtpb.OrchestratorRequest) {
	s.mu.Lock()
	s.pending = append(s.pending, req)
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()
}

// Applied returns how many completions the sidecar has applied.
func (s *Sidecar) Applied() int64 { return s.nApplied.Load() }

// ForgottenCompletions returns how many applied completions were not kept
// for Completions because MaxKeptCompletions were kept already (0 with
// OnApplied, which keeps none by design).
func (s *Sidecar) ForgottenCompletions() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.forgotten
}

// Completions returns the completions applied so far and kept (the latest
// MaxKeptCompletions; none with OnApplied), in order.
func (s *Sidecar) Completions() []Completion {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Completion(nil), s.applied...)
}

// DrainCompletions returns the completions applied and kept so far, in
// order, and forgets them (the sidecar no longer retains their actions).
func (s *Sidecar) DrainCompletions() []Completion {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.applied
	s.applied = nil
	return out
}

// BufferedTokens returns how many partial completions are buffered.
func (s *Sidecar) BufferedTokens() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buffers)
}

// BufferedBytes returns how many bytes the partial completions hold
// (their serialized size and DecodedActionBytes per action), counted
// toward MaxTotalBufferedBytes.
func (s *Sidecar) BufferedBytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buffered
}

// PendingInstances returns how many instances StartInstance scheduled that
// have not completed (queued or leased), the count bounded by
// MaxPendingInstances.
func (s *Sidecar) PendingInstances() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.active)
}

// ExpireBuffers drops partial completions idle for longer than the TTL,
// and forgets tokens completed longer than a TTL ago, and returns how many
// buffers it dropped. Serve calls it periodically.
func (s *Sidecar) ExpireBuffers() int {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for tok, b := range s.buffers {
		if now.Sub(b.touched) > s.cfg.BufferTTL {
			s.dropLocked(tok)
			n++
		}
	}
	for tok, d := range s.completed {
		if now.Sub(d.at) > s.cfg.BufferTTL {
			delete(s.completed, tok)
		}
	}
	return n
}

func (s *Sidecar) dropLocked(tok string) {
	if b, ok := s.buffers[tok]; ok {
		s.buffered -= b.held
		s.adm.setBuffered(int64(s.buffered))
		delete(s.buffers, tok)
		s.metrics.partial.Add(context.Background(), -1, s.metrics.plain)
	}
}

// sidecarService is the gRPC face of Sidecar.
type sidecarService Sidecar

func (ss *sidecarService) GetWorkItems(_ *dtpb.GetWorkItemsRequest, stream grpc.ServerStreamingServer[dtpb.WorkItem]) error {
	s := (*Sidecar)(ss)
	ctx := stream.Context()
	s.mu.Lock()
	s.streamSeq++
	id := s.streamSeq
	s.mu.Unlock()
	// Ended by Close, the stream keeps its leases: a completion in flight
	// still applies while Close drains.
	closing := false
	defer func() {
		if !closing {
			s.disconnect(id)
		}
	}()
	for {
		s.mu.Lock()
		select {
		case <-s.stop:
			s.mu.Unlock()
			closing = true
			return status.Error(codes.Unavailable, "sidecar shutting down")
		default:
		}
		if len(s.pending) == 0 {
			wake := s.wake
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil
			case <-s.stop:
			case <-wake:
			}
			continue
		}
		req := s.pending[0]
		s.pending = s.pending[1:]
		s.tokenSeq++
		tok := fmt.Sprintf("%016x-%d", s.tokenPfx, s.tokenSeq)
		s.leases[tok] = &lease{req: req, stream: id}
		s.mu.Unlock()
		err := stream.Send(&dtpb.WorkItem{
			Request:         &dtpb.WorkItem_OrchestratorRequest{OrchestratorRequest: req},
			CompletionToken: tok,
		})
		if err != nil {
			return err // disconnect requeues it
		}
	}
}

// disconnect drops the buffers and leases of the work items a stream
// delivered and queues those work items again (redelivery, new token).
func (s *Sidecar) disconnect(stream uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	requeued := false
	for tok, l := range s.leases {
		if l.stream == stream {
			s.dropLocked(tok)
			delete(s.leases, tok)
			s.pending = append(s.pending, l.req)
			requeued = true
		}
	}
	if requeued {
		close(s.wake)
		s.wake = make(chan struct{})
	}
}

func (ss *sidecarService) AbandonTaskOrchestratorWorkItem(ctx context.Context, req *dtpb.AbandonOrchestrationTaskRequest) (*dtpb.AbandonOrchestrationTaskResponse, error) {
	s := (*Sidecar)(ss)
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[req.GetCompletionToken()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "abandon: unknown completion token %q", req.GetCompletionToken())
	}
	s.dropLocked(req.GetCompletionToken())
	delete(s.leases, req.GetCompletionToken())
	s.pending = append(s.pending, l.req)
	close(s.wake)
	s.wake = make(chan struct{})
	return &dtpb.AbandonOrchestrationTaskResponse{}, nil
}

// StartInstance schedules an orchestration: its work item (an
// OrchestratorRequest with the instance id) is queued for GetWorkItems. An
// empty instance id gets a generated one. An id longer than
// MaxInstanceIDBytes is rejected with InvalidArgument; an id that is
// already scheduled and not yet completed with AlreadyExists; a start over
// MaxPendingInstances with ResourceExhausted.
func (ss *sidecarService) StartInstance(ctx context.Context, req *dtpb.CreateInstanceRequest) (*dtpb.CreateInstanceResponse, error) {
	s := (*Sidecar)(ss)
	id := req.GetInstanceId()
	if len(id) > s.cfg.MaxInstanceIDBytes {
		s.metrics.refused(ctx, ReasonInstanceIDBytes)
		return nil, status.Errorf(codes.InvalidArgument,
			"start instance: the instance id is %d bytes, over the bound MaxInstanceIDBytes = %d bytes "+
				"(raise it with SidecarConfig.MaxInstanceIDBytes, amdahl sidecar --max-instance-id-bytes)",
			len(id), s.cfg.MaxInstanceIDBytes)
	}
	s.mu.Lock()
	if _, ok := s.active[id]; ok {
		s.mu.Unlock()
		return nil, status.Errorf(codes.AlreadyExists, "start instance: instance %q is already scheduled and not completed", id)
	}
	if n := len(s.active); n >= s.cfg.MaxPendingInstances {
		s.mu.Unlock()
		s.metrics.refused(ctx, ReasonPendingInstances)
		what := fmt.Sprintf("instance %q", id)
		if id == "" {
			what = "an instance (id to be generated)"
		}
		return nil, status.Errorf(codes.ResourceExhausted,
			"start %s: %d instances are started and not completed, the bound MaxPendingInstances = %d; "+
				"nothing was scheduled: start it again once some complete, or raise the bound "+
				"(SidecarConfig.MaxPendingInstances, amdahl sidecar --max-pending-instances)",
			what, n, s.cfg.MaxPendingInstances)
	}
	if id == "" {
		s.tokenSeq++
		id = fmt.Sprintf("%016x-i%d", s.tokenPfx, s.tokenSeq)
	}
	s.active[id] = struct{}{}
	s.mu.Unlock()
	s.Submit(&dtpb.OrchestratorRequest{InstanceId: id})
	return &dtpb.CreateInstanceResponse{InstanceId: id}, nil
}

func (s *Sidecar) reject(ctx context.Context, reason string, c codes.Code, format string, args ...any) error {
	s.metrics.protocolError(ctx, reason)
	return status.Errorf(c, format, args...)
}

//nolint:staticcheck // SA1019: IsPartial and ChunkIndex are deprecated but they are the protocol.
func (ss *sidecarService) CompleteOrchestratorTask(ctx context.Context, req *dtpb.OrchestratorResponse) (*dtpb.CompleteTaskResponse, error) {
	s := (*Sidecar)(ss)
	// Deserialize and execute are leaves (StartLeaf), siblings under the
	// call's span: no span starts under either, and execute begins when
	// deserialize has ended. (Started under deserialize, execute lay
	// outside its parent, and attribution cut it to nothing.)
	ph := s.comp.StartLeaf(ctx, telemetry.Deserialize, telemetry.Request)
	done, err := s.complete(ctx, req)
	// Attributes only an exporter reads (SpanAttributes): without one
	// they are not built (with the runtime's own tracer their slice
	// reached the heap; on the no-op tracer it did not).
	read := s.comp.SpanAttributes()
	var attrs []attribute.KeyValue
	if read {
		attrs = []attribute.KeyValue{attribute.Bool("amdahl.chunking.partial", req.GetIsPartial()),
			attribute.Int(AttrActions, len(req.GetActions()))}
	}
	if err != nil {
		ph.FailWith(err, attrs...)
		return nil, err
	}
	ph.EndWith(attrs...)
	if done != nil {
		ex := s.comp.StartLeaf(ctx, telemetry.Execute, telemetry.None)
		if s.cfg.OnApplied != nil {
			s.cfg.OnApplied(*done)
		}
		if read {
			ex.EndWith(attribute.Int(AttrActions, len(done.Actions)), attribute.Int(AttrChunks, done.Chunks))
		} else {
			ex.End()
		}
	}
	return &dtpb.CompleteTaskResponse{}, nil
}

// complete validates req against the token's state and applies it
// atomically under s.mu. It returns the applied completion, or nil when
// the chunk was buffered or was a duplicate.
//
//nolint:staticcheck // SA1019
func (s *Sidecar) complete(ctx context.Context, req *dtpb.OrchestratorResponse) (*Completion, error) {
	tok := req.GetCompletionToken()
	var idx int32 = -1
	if req.ChunkIndex != nil {
		idx = req.ChunkIndex.GetValue()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tok == "" {
		return nil, s.reject(ctx, ReasonMissingToken, codes.InvalidArgument, "completion token is empty")
	}
	if d, ok := s.completed[tok]; ok {
		last := d.last
		// The reply to the final message was lost and it was sent again.
		if !req.IsPartial && idx == last {
			s.metrics.dups.Add(ctx, 1, s.metrics.plain)
			return nil, nil
		}
		if req.IsPartial && idx >= 0 && idx < last {
			s.metrics.dups.Add(ctx, 1, s.metrics.plain)
			return nil, nil
		}
		return nil, s.reject(ctx, ReasonCompleted, codes.FailedPrecondition, "completion token %q already completed", tok)
	}
	l, ok := s.leases[tok]
	if !ok {
		return nil, s.reject(ctx, ReasonUnknownToken, codes.NotFound, "unknown completion token %q", tok)
	}
	if req.GetInstanceId() != l.req.GetInstanceId() {
		return nil, s.reject(ctx, ReasonUnknownToken, codes.InvalidArgument,
			"completion token %q belongs to instance %q, not %q", tok, l.req.GetInstanceId(), req.GetInstanceId())
	}
	buf := s.buffers[tok]
	if req.IsPartial {
		if idx < 0 {
			return nil, s.reject(ctx, ReasonMissingIndex, codes.InvalidArgument, "isPartial=true without chunkIndex (token %q)", tok)
		}
		if buf == nil {
			if idx != 0 {
				return nil, s.reject(ctx, ReasonNoBuffer, codes.FailedPrecondition, "chunk %d of token %q without a buffered chunk 0", idx, tok)
			}
		} else {
			if idx < buf.next() {
				// Sent again, after a lost reply: acknowledged if it is
				// the chunk accepted, refused (the buffer kept) if not.
				if !proto.Equal(buf.chunks[idx], req) {
					return nil, s.reject(ctx, ReasonConflict, codes.FailedPrecondition,
						"chunk %d of token %q differs from the chunk %d already accepted; a chunk sent again must be identical "+
							"(the accepted chunks are kept)", idx, tok, idx)
				}
				s.metrics.dups.Add(ctx, 1, s.metrics.plain)
				buf.touched = s.cfg.Now()
				return nil, nil
			}
			if idx > buf.next() {
				s.dropLocked(tok)
				return nil, s.reject(ctx, ReasonGap, codes.FailedPrecondition, "chunk %d of token %q, expected %d", idx, tok, buf.next())
			}
		}
		n := proto.Size(req)
		h := heldBytes(n, len(req.GetActions()))
		if err := s.admitLocked(ctx, tok, buf, idx, n, h, true); err != nil {
			return nil, err
		}
		if buf == nil {
			buf = &buffer{}
			s.buffers[tok] = buf
			s.metrics.partial.Add(ctx, 1, s.metrics.plain)
		}
		s.appendLocked(buf, req, n, h)
		return nil, nil
	}
	c := &Completion{
		InstanceID: req.GetInstanceId(), CompletionToken: tok,
		CustomStatus: req.GetCustomStatus(), RequiresHistory: req.GetRequiresHistory(),
	}
	switch {
	case buf == nil:
		// An ordinary completion; chunkIndex=0 with isPartial=false is the
		// older .NET form of the same thing.
		if idx > 0 {
			return nil, s.reject(ctx, ReasonNoBuffer, codes.FailedPrecondition, "final chunk %d of token %q without buffered chunks", idx, tok)
		}
		c.Actions = req.GetActions()
		c.NumEventsProcessed = req.GetNumEventsProcessed()
		c.OrchestrationTraceContext = req.GetOrchestrationTraceContext()
		c.Chunks = 1
	case idx < 0:
		// A standalone final message over a buffer: the worker replaced the
		// completion (for example by a failure completion after chunk k
		// failed externalization). The buffered chunks are discarded.
		s.dropLocked(tok)
		c.Actions = req.GetActions()
		c.NumEventsProcessed = req.GetNumEventsProcessed()
		c.OrchestrationTraceContext = req.GetOrchestrationTraceContext()
		c.Chunks = 1
	case idx != buf.next():
		s.dropLocked(tok)
		return nil, s.reject(ctx, ReasonGap, codes.FailedPrecondition, "final chunk %d of token %q, expected %d", idx, tok, buf.next())
	default:
		n := proto.Size(req)
		h := heldBytes(n, len(req.GetActions()))
		if err := s.admitLocked(ctx, tok, buf, idx, n, h, false); err != nil {
			return nil, err
		}
		s.appendLocked(buf, req, n, h)
		s.dropLocked(tok)
		c.Actions = make([]*dtpb.OrchestratorAction, 0, buf.actions)
		for _, ch := range buf.chunks {
			c.Actions = append(c.Actions, ch.GetActions()...)
		}
		c.NumEventsProcessed = buf.chunks[0].GetNumEventsProcessed()
		c.OrchestrationTraceContext = buf.chunks[0].GetOrchestrationTraceContext()
		c.Chunks = int(idx) + 1
	}
	delete(s.leases, tok)
	delete(s.active, c.InstanceID)
	s.completed[tok] = done{last: idx, at: s.cfg.Now()}
	s.nApplied.Add(1)
	if s.cfg.OnApplied == nil {
		if len(s.applied) >= s.cfg.MaxKeptCompletions {
			// Forget the oldest; copy down so the backing array does not
			// keep it reachable.
			n := copy(s.applied, s.applied[1:])
			s.applied[n] = Completion{}
			s.applied = s.applied[:n]
			s.forgotten++
		}
		s.applied = append(s.applied, *c)
	}
	return c, nil
}

// admitLocked checks, before anything is buffered for it, that a chunk of
// n bytes with index idx fits the bounds. buf is the token's buffer (nil
// for chunk 0). Over a per-token cap the token's buffer is dropped, since
// that completion can never fit. Over MaxTotalBufferedBytes, checked for
// partial chunks only (applying a final chunk frees its buffer), nothing
// changes and the chunk may be sent again later.
func (s *Sidecar) admitLocked(ctx context.Context, tok string, buf *buffer, idx int32, n, h int, partial bool) error {
	held := 0
	if buf != nil {
		held = buf.bytes
	}
	if held+n > s.cfg.MaxBufferedBytes || int(idx)+1 > s.cfg.MaxBufferedChunks {
		s.dropLocked(tok)
		return s.reject(ctx, ReasonOverCap, codes.ResourceExhausted,
			"token %q: buffer over cap (%d bytes + %d > MaxBufferedBytes = %d bytes, or chunk %d ≥ MaxBufferedChunks = %d chunks); "+
				"the completion is dropped (raise SidecarConfig.MaxBufferedBytes or .MaxBufferedChunks, amdahl sidecar --max-token-bytes or --max-token-chunks)",
			tok, held, n, s.cfg.MaxBufferedBytes, idx, s.cfg.MaxBufferedChunks)
	}
	if partial && s.buffered+h > s.cfg.MaxTotalBufferedBytes {
		s.metrics.refused(ctx, ReasonTotalBufferedBytes)
		return status.Errorf(codes.ResourceExhausted,
			"chunk %d of token %q: its %d bytes held (decoded) would take the partial completions buffered by the sidecar from %d to %d bytes, "+
				"over the bound MaxTotalBufferedBytes = %d bytes; nothing was buffered: send it again once other completions finish, "+
				"or raise the bound (SidecarConfig.MaxTotalBufferedBytes, amdahl sidecar --max-total-buffered-bytes)",
			idx, tok, h, s.buffered, s.buffered+h, s.cfg.MaxTotalBufferedBytes)
	}
	return nil
}

// appendLocked buffers a chunk of n bytes (h held) that admitLocked
// accepted.
func (s *Sidecar) appendLocked(buf *buffer, req *dtpb.OrchestratorResponse, n, h int) {
	buf.bytes += n
	buf.held += h
	s.buffered += h
	s.adm.setBuffered(int64(s.buffered))
	buf.chunks = append(buf.chunks, req)
	buf.actions += len(req.GetActions())
	buf.touched = s.cfg.Now()
}

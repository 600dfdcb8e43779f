package chunking

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/internal/grpctrace"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// Completion is one applied orchestrator completion, reassembled if it came
// in chunks. With SidecarConfig.BorrowPayloads, the Completion handed to
// OnApplied lends its StringValue payloads (the actions' inputs, results,
// details and versions, and CustomStatus): they are valid only until
// OnApplied returns, and what it keeps it must copy (strings.Clone,
// proto.Clone).
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

	bufs []*recvBuf // the buffers its payloads alias (BorrowPayloads)
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
	bufs    []*recvBuf // the buffers the chunks' payloads alias (BorrowPayloads)
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
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
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
	s.srvOpts = append(s.serverOptions(auth), cfg.ServerOptions...)
	return s, nil
}

// serverOptions are the options of s's gRPC server, before the
// configuration's own: message and stream bounds, admission (auth checks
// the token), the call counters, tracing and the phase labels.
func (s *Sidecar) serverOptions(auth *authorizer) []grpc.ServerOption {
	cfg := s.cfg
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(cfg.MaxRecvMsgSize), grpc.NumStreamWorkers(uint32(cfg.StreamWorkers))}
	if cfg.BorrowPayloads {
		opts = append(opts, grpc.ForceServerCodecV2(serverCodec{}))
	}
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
	return opts
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
		desc := dtpb.SidecarServiceDesc
		if s.cfg.BorrowPayloads {
			desc.Methods = slices.Clone(desc.Methods)
			for i := range desc.Methods {
				if desc.Methods[i].MethodName == "CompleteOrchestratorTask" {
					desc.Methods[i].Handler = s.borrowingComplete
				}
			}
		}
		s.srv.RegisterService(&desc, (*sidecarService)(s))
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
	s.queueLocked(req)
	s.mu.Unlock()
}

// queueLocked queues work items for delivery and wakes the streams
// waiting for one. s.mu is held.
func (s *Sidecar) queueLocked(reqs ...*dtpb.OrchestratorRequest) {
	s.pending = append(s.pending, reqs...)
	close(s.wake)
	s.wake = make(chan struct{})
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
// (their serialized size, or with BorrowPayloads the capacity of the
// buffers their payloads alias, and DecodedActionBytes per action), counted
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

package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/internal/grpctrace"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

const defaultSidecarConnectTimeout = 5 * time.Second

// probeSidecar makes one cheap call to addr, waiting for the connection
// for up to timeout (0: the default): abandoning the empty completion
// token, which a sidecar answers NotFound without changing anything. Any
// answer but Unavailable, DeadlineExceeded, Unauthenticated or
// PermissionDenied means the sidecar is reachable and takes the
// credentials. The call goes on a connection of its own, dialled with
// dial (credentials and token) and closed after it: an untraced one, so
// that the probe is no span of the run.
func probeSidecar(ctx context.Context, addr string, dial []grpc.DialOption, timeout time.Duration) error {
	if timeout == 0 {
		timeout = defaultSidecarConnectTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := probeCall(pctx, addr, dial)
	switch status.Code(err) {
	case codes.OK:
		return nil
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled:
		if ctx.Err() != nil {
			return fmt.Errorf("runtime: sidecar %s: %w", addr, ctx.Err())
		}
		return fmt.Errorf("runtime: sidecar %s not reachable within %v (Config.Sidecar.ConnectTimeout): %w", addr, timeout, err)
	case codes.Unauthenticated, codes.PermissionDenied:
		return fmt.Errorf("runtime: sidecar %s refused this client's token: %w", addr, err)
	}
	return fmt.Errorf("runtime: sidecar %s: %w", addr, err)
}

// probeCall makes probeSidecar's call, waiting for the connection until
// ctx ends, and returns nil if the sidecar answered it with anything but
// Unavailable, DeadlineExceeded, Canceled, Unauthenticated or
// PermissionDenied, else the call's error (with its gRPC status).
func probeCall(ctx context.Context, addr string, dial []grpc.DialOption) error {
	cc, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return status.Errorf(codes.Unavailable, "sidecar %s: %v", addr, err)
	}
	defer cc.Close()
	err = cc.Invoke(ctx, dtpb.MethodAbandonTaskOrchestratorWorkItem, &dtpb.AbandonOrchestrationTaskRequest{},
		&dtpb.AbandonOrchestrationTaskResponse{}, grpc.WaitForReady(true))
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled, codes.Unauthenticated, codes.PermissionDenied:
		return err
	}
	return nil
}

// bearer is the per-call credentials of Config.Sidecar.Token.
type bearer struct {
	md map[string]string
	// secure is false only over plaintext to a loopback address, which
	// connect allows on purpose.
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return b.md, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }

// loopbackAddr reports whether addr's host is a loopback IP literal or
// "localhost". A host name is not resolved: what it names may change.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// isLeaseMethod reports whether method (a gRPC method's name) is one of
// the lease's calls: the leaser's, not a unit's work. They get no client
// span. otelgrpc's filter still injects their trace context; grpctrace's
// Skip injects none, which changes no row: the sidecar makes no span for
// them (TestAccountingMatchesSDK runs both).
func isLeaseMethod(method string) bool { return method == "StartInstance" || method == "GetWorkItems" }

// traceparentField is the W3C trace context's header, among the Fields of
// a propagator that carries it (Config.Telemetry.Propagator).
const traceparentField = "traceparent"

// connect starts the in-process sidecar when there is none to complete
// to, then the client, the chunking sender and the work-item stream. An
// external sidecar must answer within SidecarConnectTimeout.
func (r *Runtime) connect(ctx context.Context, cfg Config, tp trace.TracerProvider, mp metric.MeterProvider, chunkComp *telemetry.Component) (err error) {
	// The gRPC calls' own spans (otelgrpc's, client and in-process
	// server): when only the attribution reads the run's spans they are
	// not made. The trace context still crosses each call (a no-op tracer
	// carries its parent's span context, which otelgrpc propagates; with
	// no metrics read either, internal/grpctrace carries it instead of
	// otelgrpc), so the sidecar's phases stay in the unit's trace, under
	// the span that made the call; a gRPC span is no phase, so its time
	// counted toward the phase around it, as it now does without it
	// (TestGRPCSpansChangeNoRow attributes a run's units with and without
	// them).
	rpcTP := tp
	if own, ok := tp.(*spans.TracerProvider); ok && !own.PhaseAttributes() {
		rpcTP = tracenoop.NewTracerProvider()
	}
	// Sidecar: one the caller serves, in-process on loopback, or the one at
	// Sidecar.Addr.
	addr := cfg.Sidecar.Addr
	r.side = cfg.Sidecar.Server
	if r.side != nil && addr == "" {
		return errors.New("runtime: Config.Sidecar.Server without Config.Sidecar.Addr: say where it is served")
	}
	if r.side != nil {
		r.appliedBase = r.side.Applied()
	}
	dial, err := sidecarDialOptions(cfg, addr)
	if err != nil {
		return err
	}
	if addr == "" {
		if addr, err = r.serveOwnSidecar(cfg, chunkComp, rpcTP, mp); err != nil {
			return err
		}
	}
	// The run's connection labels its transport's reader and writer
	// goroutines with the chunking component's receive/reply and
	// send/request (a probe's connection stays unlabelled).
	r.cc, err = grpc.NewClient(addr, append(append(r.tracingOptions(cfg, rpcTP, mp), dial...),
		grpc.WithTransportCredentials(chunking.LabelledCredentials(sidecarCredentials(cfg), chunkComp)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(chunking.DefaultMaxRecvMsgSize)))...)
	if err != nil {
		return fmt.Errorf("runtime: sidecar %s: %w", addr, err)
	}
	if cfg.Sidecar.Addr != "" {
		if err := probeSidecar(ctx, addr, dial, cfg.Sidecar.ConnectTimeout); err != nil {
			return err
		}
	}
	return r.startSender(cfg, addr, dial, chunkComp, mp)
}

// sidecarDialOptions returns the credentials of the connection to an
// external sidecar at addr ("" for the in-process one): TLS when given,
// and the bearer token, which never travels in clear beyond loopback.
func sidecarDialOptions(cfg Config, addr string) ([]grpc.DialOption, error) {
	if addr == "" && (cfg.Sidecar.Credentials != nil || cfg.Sidecar.Token != "") {
		return nil, errors.New("runtime: Config.Sidecar.Credentials or Config.Sidecar.Token without Config.Sidecar.Addr: they are for an external sidecar")
	}
	if cfg.Sidecar.ConnectTimeout < 0 {
		return nil, fmt.Errorf("runtime: Config.Sidecar.ConnectTimeout is %v, want ≥ 0 (0 takes the default %v)", cfg.Sidecar.ConnectTimeout, defaultSidecarConnectTimeout)
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(sidecarCredentials(cfg))}
	if cfg.Sidecar.Token != "" {
		secure := cfg.Sidecar.Credentials != nil
		if !secure && !loopbackAddr(addr) {
			return nil, fmt.Errorf("runtime: sidecar %s: Config.Sidecar.Token would travel in clear to an address that is not loopback; set Config.Sidecar.Credentials (TLS)", addr)
		}
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{md: map[string]string{"authorization": "Bearer " + cfg.Sidecar.Token}, secure: secure}))
	}
	return dial, nil
}

// sidecarCredentials are the transport credentials of the connection to
// the sidecar: Config.Sidecar.Credentials, or none (insecure).
func sidecarCredentials(cfg Config) credentials.TransportCredentials {
	if cfg.Sidecar.Credentials != nil {
		return cfg.Sidecar.Credentials
	}
	return insecure.NewCredentials()
}

// serveOwnSidecar starts the in-process sidecar on a loopback port and
// returns its address.
func (r *Runtime) serveOwnSidecar(cfg Config, chunkComp *telemetry.Component, rpcTP trace.TracerProvider, mp metric.MeterProvider) (string, error) {
	r.ownSide = true
	var err error
	if r.side, err = chunking.NewSidecar(chunking.SidecarConfig{Component: chunkComp, TracerProvider: rpcTP, MeterProvider: mp,
		// A worker goroutine for each unit in flight and one for the
		// work-item stream: no call grows a new goroutine's stack.
		StreamWorkers: min(cfg.Settings.Concurrency+1, chunking.MaxStreamWorkers),
		// Count, keep nothing: the payloads are garbage once applied,
		// and can be lent (their memory reused for later messages).
		OnApplied: func(chunking.Completion) {}, BorrowPayloads: true}); err != nil {
		return "", err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("runtime: in-process sidecar: %w", err)
	}
	r.sideCh = make(chan error, 1)
	go func() { r.sideCh <- r.side.Serve(lis) }()
	return lis.Addr().String(), nil
}

// tracingOptions returns how the sidecar calls carry the trace context:
// not at all (the propagators carry no traceparent), internal/grpctrace's
// interceptors when nothing reads a call's span or RPC metrics, otelgrpc's
// stats handler otherwise.
func (r *Runtime) tracingOptions(cfg Config, rpcTP trace.TracerProvider, mp metric.MeterProvider) []grpc.DialOption {
	traceContext := cfg.Telemetry.Propagator == nil || slices.Contains(cfg.Telemetry.Propagator.Fields(), traceparentField)
	r.untraced = !traceContext
	suffices := grpctrace.Suffices(rpcTP, mp)
	switch {
	case suffices && !traceContext:
		// Nothing reads a call's span or its RPC metrics, and no trace
		// context is to cross: no handler at all.
		return nil
	case suffices:
		// Nothing reads a call's span or its RPC metrics: the trace
		// context is all otelgrpc would carry, and interceptors carry it
		// without a stats handler's events (internal/grpctrace).
		tc := grpctrace.Client{Skip: isLeaseMethod}
		return []grpc.DialOption{grpc.WithChainUnaryInterceptor(tc.Unary()), grpc.WithChainStreamInterceptor(tc.Stream())}
	}
	var prop propagation.TextMapPropagator = propagation.TraceContext{}
	if !traceContext {
		prop = propagation.NewCompositeTextMapPropagator() // carries nothing
	}
	notLease := func(info *stats.RPCTagInfo) bool { return !isLeaseMethod(grpctrace.MethodName(info.FullMethodName)) }
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(rpcTP), otelgrpc.WithMeterProvider(mp),
		otelgrpc.WithPropagators(prop), otelgrpc.WithFilter(notLease)))}
}

// startSender builds the chunk planner, the retrying sender with its
// circuit breaker, and the leaser on the connection r.cc to addr.
func (r *Runtime) startSender(cfg Config, addr string, dial []grpc.DialOption, chunkComp *telemetry.Component, mp metric.MeterProvider) (err error) {
	planner, err := chunking.NewPlanner(chunking.PlannerConfig{
		MaxChunkBytes: cfg.Settings.MaxChunkBytes, Algorithm: cfg.Settings.ChunkAlgorithm,
		Accounting: cfg.Settings.ChunkAccounting, LargePayloads: cfg.Settings.LargePayloads,
		Component: chunkComp, MeterProvider: mp,
	})
	if err != nil {
		return err
	}
	retry := cfg.Sidecar.Retry
	if retry.MaxAttempts == 0 {
		retry.MaxAttempts = cfg.Settings.RetryAttempts
	}
	if retry.BaseDelay == 0 {
		retry.BaseDelay = cfg.Settings.RetryBaseDelay
	}
	if retry.MaxDelay == 0 {
		retry.MaxDelay = cfg.Settings.RetryMaxDelay
	}
	wake := make(chan struct{}, 1) // the breaker closed: the stream reconnects at once
	if cfg.Settings.BreakerOpenAfter > 0 {
		if r.breaker, err = r.newBreaker(addr, dial, cfg.Settings, wake); err != nil {
			return err
		}
	}
	if r.sender, err = chunking.NewSender(r.cc, chunking.SenderConfig{Planner: planner, Retry: retry, Component: chunkComp, MeterProvider: mp, Breaker: r.breaker}); err != nil {
		return err
	}
	r.lease = startLeaser(r.cc, r.sender, r.breaker, wake, r.instancePrefix(), cfg.Sidecar.LeaseTimeout, cfg.Settings.LargePayloads, r.log)
	return nil
}

// newBreaker returns the circuit breaker of the sidecar connection: it
// opens once the sidecar at addr has been unreachable for
// sidecar.breaker.open_after, and then probes it every
// sidecar.breaker.probe_interval on a connection of its own (untraced,
// like New's probe), waking the run's connection to reconnect at once
// each time. When it closes, the work-item stream reconnects at once.
func (r *Runtime) newBreaker(addr string, dial []grpc.DialOption, set Settings, wake chan<- struct{}) (*chunking.Breaker, error) {
	return chunking.NewBreaker(chunking.BreakerConfig{
		OpenAfter: set.BreakerOpenAfter, ProbeInterval: set.BreakerProbe,
		Probe: func(ctx context.Context) error {
			r.cc.ResetConnectBackoff()
			if err := probeCall(ctx, addr, dial); err != nil {
				return fmt.Errorf("probe: %w", err)
			}
			return nil
		},
		OnChange: func(open bool, err error) {
			if open {
				r.log.Warn("runtime: sidecar unreachable; circuit breaker open: units that need it fail at once (class \""+ClassSidecarUnavailable+"\") until a probe reaches it",
					"addr", addr, "open_after", set.BreakerOpenAfter, "probe_interval", set.BreakerProbe, "err", err)
				return
			}
			r.log.Info("runtime: sidecar reachable again; circuit breaker closed", "addr", addr)
			select {
			case wake <- struct{}{}:
			default:
			}
		},
	})
}

// ClassSidecarUnavailable is the class of a unit that failed because the
// sidecar's circuit breaker was open (chunking.ErrSidecarUnavailable).
const ClassSidecarUnavailable = "sidecar unavailable"

// sidecarClass is the class of a unit that failed at the sidecar with
// err: ClassSidecarUnavailable if the breaker refused a call, else class.
func sidecarClass(class string, err error) string {
	if errors.Is(err, chunking.ErrSidecarUnavailable) {
		return ClassSidecarUnavailable
	}
	return class
}

// instancePrefix starts the orchestration instance id of every unit of
// this Runtime: other runs may share an external sidecar.
func (r *Runtime) instancePrefix() string { return "amdahl-" + r.runID + "-" }

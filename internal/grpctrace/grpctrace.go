// Package grpctrace carries the W3C trace context across gRPC calls, and
// does nothing else: the interceptors amdahl installs in place of
// otelgrpc's stats handlers when nothing would read a call's own span or
// its RPC metrics (the tracer and meter providers are no-ops: a run whose
// spans only its attribution reads, or OTEL_SDK_DISABLED=true).
//
// otelgrpc with no-op providers still starts a no-op span per call,
// builds its attribute sets and handles every stats event, for no reader
// (docs/measurements/telemetry-cost.md has its cost per unit of amdahl
// run's mixed scenario). What it did that mattered, the
// trace context crossing the call (so the sidecar's phases stay in the
// unit's trace, under the span that made the call), this package does:
// the client injects the span context of the call's context as
// traceparent and tracestate, the server extracts it as the remote
// parent of what the call does. A context without a valid span context
// injects nothing, as with otelgrpc. Both write and read the headers as
// propagation.TraceContext does, without its carrier: the tests compare
// them with it, header for header (TestInjectMatchesPropagator,
// TestExtractMatchesPropagator, FuzzExtract).
//
// They are interceptors, not stats handlers: with any stats handler
// installed, gRPC copies each call's metadata and allocates an event for
// every header, message and trailer on both sides, whether the handler
// reads them or not: on a loopback unary call, more CPU than the trace
// context itself (BenchmarkCall, handler=stats against
// handler=interceptors).
package grpctrace

import (
	"context"
	"encoding/hex"
	"strings"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Suffices reports whether these handlers do all that otelgrpc's would on
// tp and mp: whether both are the OTel API's no-ops (trace/noop,
// metric/noop), so that nothing reads a call's span or its RPC metrics.
func Suffices(tp trace.TracerProvider, mp metric.MeterProvider) bool {
	_, noSpans := tp.(tracenoop.TracerProvider)
	_, noMetrics := mp.(metricnoop.MeterProvider)
	return noSpans && noMetrics
}

// Client injects the trace context of each call's context into the
// call's metadata: Unary and Stream are its interceptors. Skip, if not
// nil, names the calls that get none: it is given the method's name
// (MethodName), as otelgrpc's filters.MethodName sees it. (otelgrpc's
// filter differs: a call it filters out gets no span, but its trace
// context is still injected.)
type Client struct {
	Skip func(method string) bool
}

// Server gives each call's context the trace context its metadata
// carries, as a remote span context: Unary and Stream are its
// interceptors.
type Server struct{}

// Unary is the client's unary interceptor (grpc.WithChainUnaryInterceptor).
func (h Client) Unary() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoke(h.inject(ctx, method), method, req, reply, cc, opts...)
	}
}

// Stream is the client's stream interceptor (grpc.WithChainStreamInterceptor).
func (h Client) Stream() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(h.inject(ctx, method), desc, cc, method, opts...)
	}
}

// inject returns ctx with the trace context of its span context in its
// outgoing metadata, for a call of fullMethod ("/package.Service/Method").
func (h Client) inject(ctx context.Context, fullMethod string) context.Context {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ctx
	}
	if h.Skip != nil && h.Skip(MethodName(fullMethod)) {
		return ctx
	}
	// What propagation.TraceContext.Inject writes, formatted here: the
	// propagator's carrier and string builder were half of this
	// handler's cost (TestInjectMatchesPropagator).
	if ts := sc.TraceState().String(); ts != "" {
		return metadata.AppendToOutgoingContext(ctx, traceparentKey, traceparent(sc), tracestateKey, ts)
	}
	return metadata.AppendToOutgoingContext(ctx, traceparentKey, traceparent(sc))
}

// The W3C trace context's metadata keys.
const (
	traceparentKey = "traceparent"
	tracestateKey  = "tracestate"
)

// traceparentLen is the length of a version-00 traceparent:
// "00-" 32 hex "-" 16 hex "-" 2 hex.
const traceparentLen = 55

// traceparent formats sc (valid) as a version-00 traceparent, keeping
// only the flags the specification defines (sampled, random), as
// propagation.TraceContext does.
func traceparent(sc trace.SpanContext) string {
	var b [traceparentLen]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	flags := [1]byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))}
	b[0], b[1], b[2], b[35], b[52] = '0', '0', '-', '-', '-'
	hex.Encode(b[3:35], tid[:])
	hex.Encode(b[36:52], sid[:])
	hex.Encode(b[53:55], flags[:])
	return string(b[:])
}

// MethodName is the part of a gRPC full method name
// ("/package.Service/Method") after its last '/'.
func MethodName(full string) string {
	return full[strings.LastIndexByte(full, '/')+1:]
}

// Unary is the server's unary interceptor (grpc.ChainUnaryInterceptor).
func (h Server) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(h.extract(ctx), req)
	}
}

// Stream is the server's stream interceptor (grpc.ChainStreamInterceptor).
func (h Server) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		if got := h.extract(ctx); got != ctx {
			ss = serverStream{ServerStream: ss, ctx: got}
		}
		return handler(srv, ss)
	}
}

// serverStream is a stream whose handler sees ctx.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s serverStream) Context() context.Context { return s.ctx }

// extract returns ctx with the span context of the traceparent (and
// tracestate) in its incoming metadata as its remote span context: what
// propagation.TraceContext.Extract does, with the traceparent parsed here
// (TestExtractMatchesPropagator, FuzzExtract). Without a valid one it
// returns ctx itself.
func (Server) extract(ctx context.Context) context.Context {
	scc, ok := parseTraceparent(incoming(ctx, traceparentKey))
	if !ok {
		return ctx
	}
	// A tracestate that does not parse is dropped, the traceparent kept:
	// the specification's rule, and the propagator's.
	if ts := incoming(ctx, tracestateKey); ts != "" {
		scc.TraceState, _ = trace.ParseTraceState(ts)
	}
	sc := trace.NewSpanContext(scc)
	if !sc.IsValid() {
		return ctx // an all-zero trace or span id
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// parseTraceparent parses a W3C traceparent under the rules
// propagation.TraceContext applies: version, trace id, span id and flags
// of 2, 32, 16 and 2 lower-case hex digits, separated by '-'; version ff
// is invalid; version 00 allows no reserved flag bit and nothing after
// the flags (but a '-'), a later version anything after a '-'. Of the
// flags, sampled and random are kept.
func parseTraceparent(h string) (trace.SpanContextConfig, bool) {
	var scc trace.SpanContextConfig
	if len(h) < traceparentLen || h[2] != '-' || h[35] != '-' || h[52] != '-' ||
		(len(h) > traceparentLen && h[traceparentLen] != '-') {
		return scc, false
	}
	var ver, flags [1]byte
	if !lowerHex(ver[:], h[0:2]) || ver[0] == 0xff || !lowerHex(scc.TraceID[:], h[3:35]) ||
		!lowerHex(scc.SpanID[:], h[36:52]) || !lowerHex(flags[:], h[53:55]) {
		return scc, false
	}
	if ver[0] == 0 && (len(h) > traceparentLen+1 || flags[0] > 3) {
		return scc, false
	}
	scc.TraceFlags = trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	return scc, true
}

// lowerHex decodes src, lower-case hex digits only, into dst
// (len(src)/2 bytes).
func lowerHex(dst []byte, src string) bool {
	for i := range dst {
		hi, lo := unhex(src[2*i]), unhex(src[2*i+1])
		if hi|lo > 0xf {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

// unhex is the value of the lower-case hex digit c, or 0xff.
func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return 0xff
}

// incoming returns the first value of key in the call's metadata, or
// "": read key by key (metadata.ValueFromIncomingContext), not copied
// whole as metadata.FromIncomingContext would (a map of every header,
// made for each call).
func incoming(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

package grpctrace

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// TestPropagation: a call made under a span context reaches the server's
// handler with it as its remote parent (ids, flags, trace state), unary
// and streaming; a call without one, or one the client skips, carries
// none.
func TestPropagation(t *testing.T) {
	seen := make(chan trace.SpanContext, 1)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(Server{}.Unary(), func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			seen <- trace.SpanContextFromContext(ctx)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(Server{}.Stream(), func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			seen <- trace.SpanContextFromContext(ss.Context())
			return h(srv, ss)
		}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	dial := func(skip func(string) bool) healthpb.HealthClient {
		c := Client{Skip: skip}
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithChainUnaryInterceptor(c.Unary()), grpc.WithChainStreamInterceptor(c.Stream()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return healthpb.NewHealthClient(cc)
	}
	state, err := trace.ParseTraceState("vendor=abc,other=x")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5},
		TraceFlags: trace.FlagsSampled, TraceState: state})
	under := trace.ContextWithSpanContext(context.Background(), sc)
	call := func(c healthpb.HealthClient, ctx context.Context) trace.SpanContext {
		t.Helper()
		if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		return <-seen
	}
	watch := func(c healthpb.HealthClient, ctx context.Context) trace.SpanContext {
		t.Helper()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatal(err)
		}
		return <-seen
	}
	want := sc.WithRemote(true)
	c := dial(nil)
	for name, do := range map[string]func(healthpb.HealthClient, context.Context) trace.SpanContext{"unary": call, "stream": watch} {
		if got := do(c, under); !got.Equal(want) || got.TraceState().String() != state.String() {
			t.Errorf("%s: the server saw %v (state %q), want %v (state %q)", name, got, got.TraceState(), want, state)
		}
		if got := do(c, context.Background()); got.IsValid() {
			t.Errorf("%s: a call without a span context carried %v", name, got)
		}
	}
	var asked []string
	skipping := dial(func(m string) bool { asked = append(asked, m); return m == "Check" || m == "Watch" })
	if got := call(skipping, under); got.IsValid() {
		t.Errorf("a skipped call carried %v", got)
	}
	if got := watch(skipping, under); got.IsValid() {
		t.Errorf("a skipped stream carried %v", got)
	}
	if !slices.Equal(asked, []string{"Check", "Watch"}) {
		t.Errorf("Skip was asked about %q, want the methods' names Check, Watch", asked)
	}
}

// TestSuffices: the interceptors stand in for otelgrpc only when both
// providers are no-ops.
func TestSuffices(t *testing.T) {
	sdkTP := sdktrace.NewTracerProvider()
	defer func() { _ = sdkTP.Shutdown(context.Background()) }()
	for _, tc := range []struct {
		name string
		tp   trace.TracerProvider
		mp   metric.MeterProvider
		want bool
	}{
		{"both no-ops", tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider(), true},
		{"spans read", sdkTP, metricnoop.NewMeterProvider(), false},
		{"metrics read", tracenoop.NewTracerProvider(), sdkmetric.NewMeterProvider(), false},
	} {
		if got := Suffices(tc.tp, tc.mp); got != tc.want {
			t.Errorf("%s: Suffices %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestServerBadTraceContext: a traceparent that is not one, or a
// tracestate past the specification's 32 members, from a client is
// ignored: the call goes on with no parent, or with the parent alone.
func TestServerBadTraceContext(t *testing.T) {
	good := "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"
	many := strings.Repeat("k=v,", 40) + "k=v"
	for _, tc := range []struct {
		name, parent, state string
		valid               bool
		wantState           string
	}{
		{"not a traceparent", "garbage", "", false, ""},
		{"an all-zero trace id", "00-00000000000000000000000000000000-0102030405060708-01", "", false, ""},
		{"too long", good + strings.Repeat("0", 1<<16), "", false, ""},
		{"a tracestate of 41 members", good, many, true, ""},
	} {
		md := metadata.Pairs("traceparent", tc.parent)
		if tc.state != "" {
			md.Append("tracestate", tc.state)
		}
		ctx := Server{}.extract(metadata.NewIncomingContext(context.Background(), md))
		sc := trace.SpanContextFromContext(ctx)
		if sc.IsValid() != tc.valid || sc.TraceState().String() != tc.wantState {
			t.Errorf("%s: span context %v (state %q), want valid %v, state %q", tc.name, sc, sc.TraceState(), tc.valid, tc.wantState)
		}
	}
}

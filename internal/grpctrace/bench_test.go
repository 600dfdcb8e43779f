package grpctrace

import (
	"context"
	"net"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // as in amdahl: see BenchmarkCall
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	"github.com/amdahl-rt/amdahl/internal/proccpu"
)

// BenchmarkCall: what one unary call on loopback costs the process (client
// and server in it) in CPU, by how the trace context crosses it:
//
//   - handler=none: nothing carries it (the floor);
//   - handler=otelgrpc: otelgrpc's stats handlers on no-op providers (as
//     amdahl installed them when nothing read their spans or metrics);
//   - handler=stats: this package's propagation as stats handlers, as it
//     was before it became interceptors (statsClient, statsServer);
//   - handler=interceptors: this package's interceptors, as installed;
//
// each with span=no (the call's context has no span context: nothing is
// injected, what a run with OTEL_SDK_DISABLED=true pays) and span=yes (a
// new trace and span id per call, as every unit's completion has). It
// reports cpu-ns/op (the process's user and system CPU per call, from
// getrusage) beside ns/op (a call's latency). Compare handlers within one
// run: the machine's load moves both.
//
// The test binary registers gRPC's gzip compressor, as amdahl's does (the
// OTLP gRPC exporter imports it), so that a call carries the headers it
// carries in amdahl: with a compressor registered every call sends
// grpc-accept-encoding, 8 header fields in all, and the traceparent is
// the 9th. Past 8 the server's HPACK field slice doubles to 16 and its
// metadata map, sized by the field count, outgrows Go's one-group map:
// span=yes allocates about 1.7 KB more than span=no here, against 0.6 KB
// without the compressor (docs/measurements/telemetry-cost.md, "December 5, 06:19").
//
// handler=none/field=constant sends, with no span, one header field of
// the traceparent's size whose value never changes: what a 9th field
// costs through gRPC whatever it carries (HPACK indexes it once), beside
// the trace context's new value on every call.
//
//	go test -run '^$' -bench Call -benchtime 20000x -count 6 ./internal/grpctrace/
func BenchmarkCall(b *testing.B) {
	tp, mp := tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider()
	handlers := []struct {
		name string
		srv  []grpc.ServerOption
		dial []grpc.DialOption
	}{
		{"none", nil, nil},
		{"otelgrpc",
			[]grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithMeterProvider(mp), otelgrpc.WithPropagators(propagation.TraceContext{})))},
			[]grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithMeterProvider(mp), otelgrpc.WithPropagators(propagation.TraceContext{})))}},
		{"stats", []grpc.ServerOption{grpc.StatsHandler(statsServer{})}, []grpc.DialOption{grpc.WithStatsHandler(statsClient{})}},
		{"interceptors",
			[]grpc.ServerOption{grpc.ChainUnaryInterceptor(Server{}.Unary())},
			[]grpc.DialOption{grpc.WithChainUnaryInterceptor(Client{}.Unary())}},
	}
	for _, h := range handlers {
		for _, span := range []bool{false, true} {
			name := "handler=" + h.name + "/span=no"
			if span {
				name = "handler=" + h.name + "/span=yes"
			}
			b.Run(name, func(b *testing.B) { benchCall(b, h.srv, h.dial, span, false) })
		}
		if h.name == "none" {
			b.Run("handler=none/field=constant", func(b *testing.B) { benchCall(b, h.srv, h.dial, false, true) })
		}
	}
}

// constantField is a header field of a traceparent's size whose value
// never changes (BenchmarkCall's field=constant).
var constantField = []string{"x-amdahl-bench", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}

func benchCall(b *testing.B, srvOpts []grpc.ServerOption, dialOpts []grpc.DialOption, span, field bool) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(srvOpts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dialOpts...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	c := healthpb.NewHealthClient(cc)
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil { // connect before timing
		b.Fatal(err)
	}
	var n uint64
	b.ReportAllocs()
	cpu0 := proccpu.Used()
	for b.Loop() {
		ctx := context.Background()
		if span {
			n++
			ctx = trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID{0: 1, 8: byte(n >> 24), 9: byte(n >> 16), 10: byte(n >> 8), 11: byte(n)},
				SpanID:  trace.SpanID{0: 2, 4: byte(n >> 24), 5: byte(n >> 16), 6: byte(n >> 8), 7: byte(n)}, TraceFlags: trace.FlagsSampled}))
		}
		if field {
			ctx = metadata.AppendToOutgoingContext(ctx, constantField...)
		}
		if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(proccpu.Used()-cpu0)/float64(b.N), "cpu-ns/op")
}

// statsClient and statsServer are Client and Server as the stats
// handlers they were, for BenchmarkCall to weigh against.
type (
	statsClient struct{}
	statsServer struct{}
)

func (statsClient) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return Client{}.inject(ctx, info.FullMethodName)
}
func (statsServer) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return Server{}.extract(ctx)
}
func (statsClient) HandleRPC(context.Context, stats.RPCStats)                         {}
func (statsServer) HandleRPC(context.Context, stats.RPCStats)                         {}
func (statsClient) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (statsServer) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (statsClient) HandleConn(context.Context, stats.ConnStats)                       {}
func (statsServer) HandleConn(context.Context, stats.ConnStats)                       {}

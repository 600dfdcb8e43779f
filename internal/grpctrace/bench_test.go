package grpctrace

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// BenchmarkHandlers: what one unary call costs in its stats handlers,
// otelgrpc's on no-op providers (as amdahl installed them when nothing
// read their spans or metrics) against this package's, client and server
// side: TagRPC, then the events grpc hands a unary call's handler.
//
//	go test -run '^$' -bench Handlers -benchmem ./internal/grpctrace/
func BenchmarkHandlers(b *testing.B) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	client := trace.ContextWithSpanContext(context.Background(), sc)
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(client, carrier)
	md := metadata.MD{":authority": {"127.0.0.1"}, "content-type": {"application/grpc"}}
	for k, v := range carrier {
		md.Append(k, v)
	}
	server := metadata.NewIncomingContext(context.Background(), md)
	info := &stats.RPCTagInfo{FullMethodName: "/TaskHubSidecarService/CompleteOrchestratorTask"}
	now := time.Now()
	clientEvents := []stats.RPCStats{&stats.Begin{Client: true, BeginTime: now}, &stats.OutHeader{Client: true},
		&stats.OutPayload{Client: true, Length: 100, WireLength: 105}, &stats.InHeader{Client: true},
		&stats.InPayload{Client: true, Length: 10, WireLength: 15}, &stats.InTrailer{Client: true}, &stats.End{Client: true, EndTime: now}}
	serverEvents := []stats.RPCStats{&stats.InHeader{}, &stats.Begin{BeginTime: now}, &stats.InPayload{Length: 100, WireLength: 105},
		&stats.OutHeader{}, &stats.OutPayload{Length: 10, WireLength: 15}, &stats.OutTrailer{}, &stats.End{EndTime: now}}
	tp, mp := tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider()
	for _, tc := range []struct {
		name   string
		h      stats.Handler
		ctx    context.Context
		events []stats.RPCStats
	}{
		{"side=client/handler=otelgrpc", otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithMeterProvider(mp),
			otelgrpc.WithPropagators(propagation.TraceContext{})), client, clientEvents},
		{"side=client/handler=grpctrace", Client{}, client, clientEvents},
		{"side=server/handler=otelgrpc", otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithMeterProvider(mp),
			otelgrpc.WithPropagators(propagation.TraceContext{})), server, serverEvents},
		{"side=server/handler=grpctrace", Server{}, server, serverEvents},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ctx := tc.h.TagRPC(tc.ctx, info)
				for _, e := range tc.events {
					tc.h.HandleRPC(ctx, e)
				}
			}
		})
	}
}

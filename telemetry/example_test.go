package telemetry_test

import (
	"context"
	"fmt"

	"github.com/amdahl-rt/amdahl/telemetry"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// One unit of work with two phases, instrumented with the providers of the
// program that embeds amdahl (here an SDK recording in memory; nil providers
// mean the otel globals).
func Example() {
	ctx := context.Background()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	mp := sdkmetric.NewMeterProvider()
	defer tp.Shutdown(ctx)
	defer mp.Shutdown(ctx)

	ipc, err := telemetry.NewComponent("ipc", telemetry.ComponentConfig{TracerProvider: tp, MeterProvider: mp,
		Attributes: []attribute.KeyValue{telemetry.AttrTransport.String("ipc")}})
	if err != nil {
		fmt.Println(err)
		return
	}
	wctx, work := ipc.StartWork(ctx)
	_, ph := ipc.Start(wctx, telemetry.Serialize, telemetry.Request)
	ph.End()
	_, ph = ipc.Start(wctx, telemetry.Send, telemetry.Request)
	ph.End()
	work.End(telemetry.OK, nil)

	for _, s := range sr.Ended() {
		fmt.Println(s.Name())
	}
	// Output:
	// ipc.serialize
	// ipc.send
	// amdahl.work
}

package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// Start's and End's options: a leaf (no span starts under it) ended with
// its size, a phase that failed, and a phase begun and ended at instants
// the caller read for its own timing.
func ExampleComponent_Start() {
	ctx := context.Background()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(ctx)
	comp, err := telemetry.NewComponent("ipc", telemetry.ComponentConfig{TracerProvider: tp})
	if err != nil {
		fmt.Println(err)
		return
	}
	wctx, work := comp.StartWork(ctx)

	_, ser := comp.Start(wctx, telemetry.Serialize, telemetry.Request, telemetry.Leaf())
	frame := []byte("payload")
	ser.End(telemetry.WithAttributes(telemetry.AttrBytes.Int(len(frame))))

	_, send := comp.Start(wctx, telemetry.Send, telemetry.Request)
	send.End(telemetry.WithError(errors.New("broken pipe")))

	began := time.Now()
	ended := began.Add(time.Millisecond)
	_, disp := comp.Start(wctx, telemetry.Dispatch, telemetry.None, telemetry.Detached(), telemetry.StartedAt(began))
	fmt.Println(disp.End(telemetry.EndedAt(ended)))
	work.End(telemetry.OK, nil)

	for _, s := range sr.Ended() {
		fmt.Println(s.Name(), s.Status().Code)
	}
	// Output:
	// 1ms
	// ipc.serialize Unset
	// ipc.send Error
	// ipc.dispatch Unset
	// amdahl.work Unset
}

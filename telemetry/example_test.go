package telemetry_test

import (
	"context"
	"fmt"

	"github.com/amdahl-rt/amdahl/telemetry"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// One unit of work with two phases, recorded in memory.
func Example() {
	ctx := context.Background()
	sr := tracetest.NewSpanRecorder()
	tel, err := telemetry.Setup(ctx, telemetry.WithLookupEnv(func(string) (string, bool) { return "", false }),
		telemetry.WithSpanProcessor(sr))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tel.Shutdown(ctx)

	ipc, err := tel.Component("ipc", telemetry.AttrTransport.String("ipc"))
	if err != nil {
		fmt.Println(err)
		return
	}
	wctx, work := ipc.StartWork(ctx)
	_, ph := ipc.StartPhase(wctx, telemetry.Serialize, telemetry.Request)
	ph.End()
	_, ph = ipc.StartPhase(wctx, telemetry.Send, telemetry.Request)
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

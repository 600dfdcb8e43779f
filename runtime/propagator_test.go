package runtime

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
)

// TestPropagators: OTEL_PROPAGATORS decides whether a unit's trace
// context crosses its completion calls. By default every completion
// carries a traceparent and the in-process sidecar's phases are
// attributed to their units; with none, no call carries one, the
// sidecar's phases drop out of the attribution, and every unit is still
// attributed. With metrics read, the calls go through otelgrpc's handler
// instead of internal/grpctrace's interceptors: the same holds.
func TestPropagators(t *testing.T) {
	for _, tc := range []struct {
		value    string
		metrics  bool
		carried  bool
		sideRows bool
	}{
		{"", false, true, true}, {"tracecontext", false, true, true}, {"baggage", false, false, false}, {"none", false, false, false},
		{"", true, true, true}, {"none", true, false, false},
	} {
		name := "OTEL_PROPAGATORS=" + tc.value
		if tc.metrics {
			name += "/otelgrpc"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			opts := []otelsetup.Option{otelsetup.WithLookupEnv(func(k string) (string, bool) {
				if k == otelsetup.EnvPropagators && tc.value != "" {
					return tc.value, true
				}
				return "", false
			})}
			if tc.metrics {
				opts = append(opts, otelsetup.WithMetricsHandler())
			}
			tel, err := otelsetup.Setup(ctx, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tel.Shutdown(ctx) })
			const n = 6

			// A sidecar of the test's: what each completion call carries.
			var mu sync.Mutex
			calls, traced := 0, 0
			note := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				if info.FullMethod == dtpb.MethodCompleteOrchestratorTask {
					md, _ := metadata.FromIncomingContext(ctx)
					mu.Lock()
					calls++
					if len(md.Get(traceparentField)) > 0 {
						traced++
					}
					mu.Unlock()
				}
				return handler(ctx, req)
			}
			side, err := chunking.NewSidecar(chunking.SidecarConfig{ServerOptions: []grpc.ServerOption{grpc.UnaryInterceptor(note)}})
			if err != nil {
				t.Fatal(err)
			}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = side.Serve(lis) }()
			t.Cleanup(func() {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				_ = side.Close(cctx)
			})
			cfg := testConfig(t, testSettings(t), nil)
			cfg.UseTelemetry(tel)
			cfg.Sidecar.Server, cfg.Sidecar.Addr = side, lis.Addr().String()
			if sum := runUnits(t, cfg, n); sum.SidecarUntraced == tc.carried {
				t.Errorf("external sidecar: Summary.SidecarUntraced %v, want %v", sum.SidecarUntraced, !tc.carried)
			}
			if calls != n+1 || (traced == calls) != tc.carried || (traced == 0) == tc.carried {
				t.Errorf("%d of %d completion calls carried a traceparent, want all (%v) or none (%v) of %d",
					traced, calls, tc.carried, !tc.carried, n+1)
			}

			// The in-process sidecar: its phases in the units' traces.
			cfg = testConfig(t, testSettings(t), nil)
			cfg.UseTelemetry(tel)
			sum := runUnits(t, cfg, n)
			if sum.SidecarUntraced == tc.carried {
				t.Errorf("in-process sidecar: Summary.SidecarUntraced %v, want %v", sum.SidecarUntraced, !tc.carried)
			}
			if sum.Attribution.Works != n+1 {
				t.Errorf("attribution covers %d units, want %d", sum.Attribution.Works, n+1)
			}
			seen := map[string]bool{}
			for _, row := range sum.Attribution.Rows {
				seen[row.Name] = true
			}
			for _, name := range []string{"chunking.deserialize/request", "chunking.execute"} {
				if seen[name] != tc.sideRows {
					t.Errorf("row %s in the attribution: %v, want %v; rows: %v", name, seen[name], tc.sideRows, seen)
				}
			}
			if !seen["chunking.send/request"] {
				t.Errorf("no chunking.send/request row: the worker's own phases must stay; rows: %v", seen)
			}
		})
	}
}

// runUnits runs n orchestrated task units and one fanout unit on cfg and
// returns the summary, every unit ok.
func runUnits(t *testing.T, cfg Config, n int) Summary {
	t.Helper()
	ctx := context.Background()
	r, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := r.Submit(ctx, orchestratedUnit(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Submit(ctx, fanoutUnit(n, 4, 1024)); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sum := r.Summary()
	if sum.OK != n+1 {
		t.Fatalf("ok %d of %d: %v", sum.OK, n+1, sum.Examples)
	}
	return sum
}

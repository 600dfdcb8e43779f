package runtime

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// serveSidecarOn serves a new sidecar on lis; stop closes it (a cancelled
// ctx: at once, as a killed process would) and waits for Serve.
func serveSidecarOn(t *testing.T, lis net.Listener) (side *chunking.Sidecar, stop func(ctx context.Context)) {
	t.Helper()
	side, err := chunking.NewSidecar(chunking.SidecarConfig{})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- side.Serve(lis) }()
	var once sync.Once
	stop = func(ctx context.Context) {
		once.Do(func() {
			_ = side.Close(ctx)
			<-served
		})
	}
	t.Cleanup(func() { stop(context.Background()) })
	return side, stop
}

// TestSidecarRestartedMidRun: the sidecar stops partway through a run and a
// new one starts on the same address. Units that needed the old one fail
// with a sidecar class; once the runtime's connection and work-item stream
// have reconnected, units succeed again on the new one.
func TestSidecarRestartedMidRun(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_, stop1 := serveSidecarOn(t, lis)

	var rs results
	var mu sync.Mutex
	okSeen := 0
	killNow := make(chan struct{})
	cfg := testConfig(t, testSettings(t), nil)
	cfg.Sidecar.Addr = addr
	cfg.OnResult = func(r Result) {
		rs.add(r)
		mu.Lock()
		defer mu.Unlock()
		if r.Outcome == telemetry.OK {
			if okSeen++; okSeen == 15 {
				close(killNow)
			}
		}
	}
	r := startRuntime(t, cfg)
	submitUnits(t, r, 0, 9, orchestratedUnit)
	rs.wantOK(t, 0, 9)

	// Units 10..20 run while the kill comes; 21..29 are submitted after it.
	for i := 10; i < 30; i++ {
		if i == 21 {
			<-killNow
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			stop1(ctx)
		}
		if err := r.Submit(context.Background(), orchestratedUnit(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantSidecarFailure := func(seq int, res Result) {
		t.Helper()
		if res.Outcome != telemetry.Failed || (res.Class != "sidecar" && res.Class != "completion") || !strings.Contains(res.Reason, "sidecar") {
			t.Errorf("unit %d: got %v class %q reason %q, want failed with a sidecar class and reason", seq, res.Outcome, res.Class, res.Reason)
		}
	}
	for i := 10; i < 30; i++ {
		res, _ := rs.get(i)
		if i > 20 || res.Outcome != telemetry.OK {
			wantSidecarFailure(i, res)
		}
	}

	lis2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	side2, _ := serveSidecarOn(t, lis2)

	// One unit at a time until one succeeds: the client reconnects with
	// gRPC's backoff and the work-item stream with the leaser's (at most
	// streamBackoffMax); what fails meanwhile must fail as the sidecar's.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seq := 30
	for ; ; seq++ {
		if ctx.Err() != nil {
			t.Fatalf("no unit succeeded within a minute of the restart (%d tried)", seq-30)
		}
		if err := r.Submit(ctx, orchestratedUnit(seq)); err != nil {
			t.Fatal(err)
		}
		if err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		res, _ := rs.get(seq)
		if res.Outcome == telemetry.OK {
			break
		}
		wantSidecarFailure(seq, res)
	}
	first := seq + 1
	submitUnits(t, r, first, first+19, orchestratedUnit)
	rs.wantOK(t, first, first+19)
	if got := len(side2.Completions()); got < 21 {
		t.Errorf("the restarted sidecar applied %d completions, want at least the 21 ok units after the restart", got)
	}
	sum := r.Summary()
	if sum.Submitted != first+20 || sum.OK+sum.Failed+sum.Cancelled != sum.Submitted {
		t.Errorf("summary %d = %d ok + %d failed + %d cancelled, want %d, all accounted", sum.Submitted, sum.OK, sum.Failed, sum.Cancelled, first+20)
	}
	t.Logf("%d units tried before one succeeded after the restart", seq-29)
}

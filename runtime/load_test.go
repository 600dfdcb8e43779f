package runtime

import (
	"context"
	"flag"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry"
)

var loadFull = flag.Bool("load.full", false, "TestLoadWithFaults: run the full size (10,000 tasks and 1,000 fanouts of 64 × 128 KiB)")

// refuser is a server interceptor on the sidecar: it answers every
// every-th completion call Unavailable before the sidecar sees it, and
// records the completions the sidecar accepted as final, per instance.
type refuser struct {
	every   int64
	calls   atomic.Int64
	refused atomic.Int64

	mu      sync.Mutex
	applied map[string]map[string]bool // instance id → completion tokens whose final message was accepted
}

//nolint:staticcheck // SA1019: IsPartial is deprecated but it is the protocol.
func (f *refuser) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	r, ok := req.(*dtpb.OrchestratorResponse)
	if !ok {
		return h(ctx, req)
	}
	if f.calls.Add(1)%f.every == 0 {
		f.refused.Add(1)
		return nil, status.Errorf(codes.Unavailable, "injected Unavailable for instance %s", r.GetInstanceId())
	}
	resp, err := h(ctx, req)
	if err == nil && !r.GetIsPartial() {
		// A final message sent again after a lost reply is acknowledged
		// without being applied: it has the same token, so a set of
		// tokens counts applications.
		f.mu.Lock()
		toks := f.applied[r.GetInstanceId()]
		if toks == nil {
			toks = map[string]bool{}
			f.applied[r.GetInstanceId()] = toks
		}
		toks[r.GetCompletionToken()] = true
		f.mu.Unlock()
	}
	return resp, err
}

// fanoutUnit is an orchestration completion of actions × size bytes.
func fanoutUnit(seq, actions, size int) scenario.Item {
	sizes := make([]int, actions)
	for i := range sizes {
		sizes[i] = size
	}
	return scenario.Item{Seq: seq, Kind: scenario.KindFanout, Shape: fmt.Sprintf("%dx%d", actions, size),
		Fanout: &scenario.FanoutItem{ActionBytes: sizes}}
}

// TestLoadWithFaults runs many small task units through 8 hosts and many
// chunked fanout completions while task hosts are killed (SIGKILL) at a set
// rate and the sidecar refuses completion calls (Unavailable) at a set
// rate. Every unit must be accounted for, failures only of the classes
// these faults cause, no completion applied twice, and no host process
// left after Close (goroutines: goleak in TestMain).
//
// The default size suits CI on 2 cores under -race; -load.full runs
// 10,000 tasks and 1,000 fanouts of 64 actions × 128 KiB.
func TestLoadWithFaults(t *testing.T) {
	tasks, fanouts := 10000, 40
	switch {
	case *loadFull:
		fanouts = 1000
	case testing.Short():
		tasks, fanouts = 1000, 8
	}
	const (
		actions     = 64
		actionSize  = 128 << 10
		killEvery   = 250 // results between two host kills
		refuseEvery = 7   // completion calls between two refusals
	)
	start := time.Now()

	f := &refuser{every: refuseEvery, applied: map[string]map[string]bool{}}
	side, err := chunking.NewSidecar(chunking.SidecarConfig{ServerOptions: []grpc.ServerOption{grpc.UnaryInterceptor(f.intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- side.Serve(lis) }()

	var ended atomic.Int64
	kick := make(chan struct{}, 1)
	var mu sync.Mutex
	classes := map[string]int{}
	cfg := testConfig(t, testSettings(t, "runtime.nodes=8", "runtime.concurrency=16", "runtime.queue=64"), nil)
	cfg.Sidecar.Server, cfg.Sidecar.Addr = side, lis.Addr().String()
	cfg.OnResult = func(r Result) {
		if r.Outcome != telemetry.OK {
			mu.Lock()
			if r.Outcome == telemetry.Failed {
				classes[r.Class]++
			} else {
				classes["not failed but "+r.Reason]++
			}
			mu.Unlock()
		}
		if ended.Add(1)%killEvery == 0 {
			select {
			case kick <- struct{}{}:
			default:
			}
		}
	}
	r, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}

	// The killer: on each kick, SIGKILL the lowest-numbered live host.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var kills atomic.Int64
	allPIDs := map[int]bool{}
	var pidMu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-kick:
			}
			pids := r.HostPIDs()
			victim, low := 0, -1
			for id, pid := range pids {
				if low < 0 || id < low {
					victim, low = pid, id
				}
			}
			if victim != 0 && syscall.Kill(victim, syscall.SIGKILL) == nil {
				kills.Add(1)
			}
			pidMu.Lock()
			for _, pid := range pids {
				allPIDs[pid] = true
			}
			pidMu.Unlock()
		}
	}()

	total := tasks + fanouts
	fanEvery := total / max(fanouts, 1)
	nf := 0
	for seq := range total {
		it := orchestratedUnit(seq)
		if nf < fanouts && seq%fanEvery == fanEvery-1 {
			it = fanoutUnit(seq, actions, actionSize)
			nf++
		}
		if err := r.Submit(context.Background(), it); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	for _, pid := range r.HostPIDs() {
		allPIDs[pid] = true
	}
	sum := r.Summary()
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := side.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}

	t.Logf("%d tasks + %d fanouts of %d × %d B in %v: %d ok, %d failed %v, %d cancelled; %d hosts killed, %d spawned, %d replaced; %d of %d completion calls refused",
		tasks, nf, actions, actionSize, time.Since(start).Round(time.Millisecond), sum.OK, sum.Failed, classes, sum.Cancelled,
		kills.Load(), sum.HostsSpawned, sum.HostsReplaced, f.refused.Load(), f.calls.Load())

	if nf != fanouts {
		t.Fatalf("submitted %d fanouts, want %d", nf, fanouts)
	}
	if sum.Submitted != total || sum.OK+sum.Failed+sum.Cancelled != sum.Submitted {
		t.Errorf("summary %d = %d ok + %d failed + %d cancelled, want %d submitted, all accounted", sum.Submitted, sum.OK, sum.Failed, sum.Cancelled, total)
	}
	if got := ended.Load(); got != int64(total) {
		t.Errorf("got %d results, want %d (one per unit)", got, total)
	}
	if sum.Cancelled != 0 {
		t.Errorf("got %d cancelled, want 0: nothing was closed before Wait returned", sum.Cancelled)
	}
	for c, n := range classes {
		switch c {
		case "task host died", "sidecar", "completion":
		default:
			t.Errorf("%d units ended %q, want failures only from a killed host or a refused completion", n, c)
		}
	}
	if kills.Load() < int64(total/killEvery/2) || sum.HostsReplaced < 1 {
		t.Errorf("killed %d hosts, %d replaced; want about one kill per %d results and the hosts replaced", kills.Load(), sum.HostsReplaced, killEvery)
	}
	if f.refused.Load() == 0 {
		t.Error("no completion call was refused")
	}
	applied := 0
	for id, toks := range f.applied {
		if len(toks) > 1 {
			t.Errorf("instance %s applied %d times (tokens %v), want at most once", id, len(toks), toks)
		}
		applied += len(toks)
	}
	if int64(applied) != sum.SidecarApplied {
		t.Errorf("interceptor saw %d completions applied, the runtime counted %d", applied, sum.SidecarApplied)
	}
	// A unit whose completion failed for good was not applied; every
	// other unit, failed task included, completed its orchestration.
	if applied > total || applied < int(sum.OK) {
		t.Errorf("%d completions applied, want between %d (ok units) and %d (units)", applied, sum.OK, total)
	}
	for pid := range allPIDs {
		if !processGone(pid) {
			t.Errorf("task host pid %d still exists after Close", pid)
		}
	}
}

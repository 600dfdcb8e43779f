package runtime

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// TestSidecarRestartedAfterKill: a sidecar process is SIGKILLed mid-run and
// a new one started on its address 5 s later, while units keep coming,
// with the default retry budget (about a minute a call). The breaker
// opens (units fail at once, class "sidecar unavailable"), a probe finds
// the new sidecar, and the run goes on: units fail only in the window
// from the kill to the first unit that succeeds again (none submitted
// after it fails), every failure has
// a sidecar class, every unit submitted after that window succeeds, and
// the run reconciles. Real processes: the sidecars and the task hosts.
func TestSidecarRestartedAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits 5 s for a sidecar restart")
	}
	addr, side := startSidecarProcess(t)

	type ended struct {
		res Result
		at  time.Time
	}
	var (
		mu        sync.Mutex
		submitted = map[int]time.Time{}
		ends      = map[int]ended{}
		okCount   int
		afterFrom = -1 // units from this seq were submitted after the restart
		first     = -1 // the first of them that succeeded
		firstEnd  time.Time
		limit     = -1 // the submitter stops at this seq
	)
	healthy, recovered := make(chan struct{}), make(chan struct{})
	cfg := testConfig(t, testSettings(t), nil)
	cfg.Sidecar.Retry = chunking.RetryPolicy{} // the settings': sidecar.retry.*
	cfg.Sidecar.Addr = addr
	cfg.OnResult = func(r Result) {
		mu.Lock()
		defer mu.Unlock()
		ends[r.Seq] = ended{r, time.Now()}
		if r.Outcome != telemetry.OK {
			return
		}
		if okCount++; okCount == 200 {
			close(healthy)
		}
		if afterFrom >= 0 && r.Seq >= afterFrom && first < 0 {
			first, firstEnd = r.Seq, time.Now()
			close(recovered)
		}
	}
	r := startRuntime(t, cfg)

	// Units keep coming until limit: Submit blocks while the queue is full.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := 0; ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			if limit >= 0 && seq >= limit {
				mu.Unlock()
				return
			}
			submitted[seq] = time.Now()
			mu.Unlock()
			if err := r.Submit(context.Background(), orchestratedUnit(seq)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	stopSubmitting := func() { close(stop); wg.Wait() }

	<-healthy
	if err := side.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	time.Sleep(5 * time.Second) // the outage the issue describes, not a synchronisation
	startSidecarProcessOn(t, addr)
	restarted := time.Now()
	mu.Lock()
	afterFrom = len(submitted)
	mu.Unlock()
	select {
	case <-recovered:
	case <-time.After(time.Minute):
		stopSubmitting()
		t.Fatalf("no unit submitted after the restart succeeded within a minute of it")
	}
	recoveredAt := time.Now()
	// 300 more units, all after the window.
	mu.Lock()
	last := len(submitted)
	limit = last + 300
	mu.Unlock()
	wg.Wait()
	if err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	sum := r.Summary()
	if sum.Submitted != len(submitted) || sum.OK+sum.Failed+sum.Cancelled != sum.Submitted || len(ends) != len(submitted) {
		t.Fatalf("summary %d = %d ok + %d failed + %d cancelled, %d results, want %d submitted, all accounted",
			sum.Submitted, sum.OK, sum.Failed, sum.Cancelled, len(ends), len(submitted))
	}
	byClass := map[string]int{}
	for seq, e := range ends {
		if e.res.Outcome == telemetry.OK {
			continue
		}
		byClass[e.res.Class]++
		switch {
		case e.at.Before(killed):
			t.Errorf("unit %d failed before the kill: %s", seq, e.res.Reason)
		case submitted[seq].After(firstEnd):
			// Submitted after a unit had succeeded on the new sidecar
			// (a unit that started earlier, by seq or by time, may still
			// have met the open breaker: workers run concurrently).
			t.Errorf("unit %d, submitted after unit %d had succeeded on the new sidecar, failed: class %q, %s", seq, first, e.res.Class, e.res.Reason)
		}
		switch e.res.Class {
		case ClassSidecarUnavailable, "sidecar", "completion":
			if !strings.Contains(e.res.Reason, "sidecar") {
				t.Errorf("unit %d: reason %q, want it to name the sidecar", seq, e.res.Reason)
			}
		default:
			t.Errorf("unit %d failed with class %q (%s), want a sidecar class", seq, e.res.Class, e.res.Reason)
		}
	}
	if byClass[ClassSidecarUnavailable] == 0 {
		t.Errorf("failures by class %v, want units failed at once as %q while the breaker was open", byClass, ClassSidecarUnavailable)
	}
	for seq := last; seq < last+300; seq++ {
		if e := ends[seq]; e.res.Outcome != telemetry.OK {
			t.Errorf("unit %d after the window: got %v (%s), want ok", seq, e.res.Outcome, e.res.Reason)
		}
	}
	t.Logf("%d units, %d ok; failures by class %v; first success after the restart %v after it (%v after the kill)",
		sum.Submitted, sum.OK, byClass, recoveredAt.Sub(restarted).Round(time.Millisecond), recoveredAt.Sub(killed).Round(time.Millisecond))
}

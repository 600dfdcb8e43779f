package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

// leaser is the worker side of the Durable Task work-item stream: it keeps
// one GetWorkItems stream open (reconnecting with backoff) and hands each
// delivered work item's completion token to the unit waiting for its
// instance. A unit leases its orchestration with StartInstance, then waits.
type leaser struct {
	cc      grpc.ClientConnInterface
	sender  *chunking.Sender
	breaker *chunking.Breaker // told how each stream attempt went; may be nil
	wake    <-chan struct{}   // reconnect now: the breaker closed
	log     *slog.Logger
	req     *dtpb.GetWorkItemsRequest
	orphan  sync.WaitGroup // completions of work items nobody waits for
	prefix  string         // instance ids of this runtime's units start with it
	timeout time.Duration  // bound of the wait for a work item

	mu      sync.Mutex
	waiters map[string]chan leaseResult

	cancel context.CancelFunc // ends the stream and the orphan completions
	done   chan struct{}
}

type leaseResult struct {
	token string
	err   error
}

// Backoff of the stream's reconnection.
const (
	streamBackoffMin = 50 * time.Millisecond
	streamBackoffMax = 5 * time.Second
)

func startLeaser(cc grpc.ClientConnInterface, sender *chunking.Sender, breaker *chunking.Breaker, wake <-chan struct{}, prefix string, timeout time.Duration, largePayloads bool, log *slog.Logger) *leaser {
	caps := []dtpb.WorkerCapability{dtpb.WorkerCapability_WORKER_CAPABILITY_HISTORY_STREAMING}
	if largePayloads {
		caps = append(caps, dtpb.WorkerCapability_WORKER_CAPABILITY_LARGE_PAYLOADS)
	}
	l := &leaser{cc: cc, sender: sender, breaker: breaker, wake: wake, prefix: prefix, timeout: timeout, log: log, waiters: map[string]chan leaseResult{}, done: make(chan struct{}),
		req: &dtpb.GetWorkItemsRequest{Capabilities: caps}}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.loop(ctx)
	return l
}

func (l *leaser) loop(ctx context.Context) {
	defer close(l.done)
	backoff := streamBackoffMin
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		delivered, err := l.stream(ctx)
		if delivered {
			backoff = streamBackoffMin // it was healthy: start over
		}
		if ctx.Err() != nil {
			l.failAll(ErrClosed)
			return
		}
		// The sidecar requeues what this stream had leased; the units
		// waiting now cannot know whether it will come back, so they fail
		// with the stream's error rather than wait without bound.
		l.failAll(fmt.Errorf("sidecar work-item stream: %w", err))
		l.log.Warn("runtime: sidecar work-item stream ended; reconnecting", "err", err, "backoff", backoff)
		if timer == nil {
			timer = time.NewTimer(backoff)
		} else {
			timer.Reset(backoff)
		}
		select {
		case <-ctx.Done():
			l.failAll(ErrClosed)
			return
		case <-timer.C:
		case <-l.wake:
			backoff = streamBackoffMin
			continue
		}
		backoff = min(2*backoff, streamBackoffMax)
	}
}

// stream runs one GetWorkItems stream until it fails, and reports
// whether it delivered anything.
func (l *leaser) stream(ctx context.Context) (bool, error) {
	st, err := dtpb.GetWorkItems(ctx, l.cc, l.req)
	if err != nil {
		l.breaker.Record(err)
		return false, err
	}
	delivered := false
	for {
		wi, err := st.Recv()
		if err != nil {
			l.breaker.Record(err)
			return delivered, err
		}
		if !delivered {
			l.breaker.Record(nil)
		}
		delivered = true
		req := wi.GetOrchestratorRequest()
		if req == nil {
			continue // health pings, other kinds
		}
		l.mu.Lock()
		ch, ok := l.waiters[req.GetInstanceId()]
		l.mu.Unlock()
		if !ok {
			if strings.HasPrefix(req.GetInstanceId(), l.prefix) {
				l.orphaned(ctx, req.GetInstanceId(), wi.GetCompletionToken())
			} else {
				l.foreign(ctx, req.GetInstanceId(), wi.GetCompletionToken())
			}
			continue
		}
		select {
		case ch <- leaseResult{token: wi.GetCompletionToken()}:
		default:
		}
	}
}

// orphaned completes, as failed, a work item whose unit no longer waits
// for it (its wait was cancelled, or it was redelivered after a reconnect
// while its unit went on with the old token), so the sidecar does not hold
// its lease forever.
func (l *leaser) orphaned(ctx context.Context, instance, token string) {
	l.log.Debug("runtime: failing a work item nobody waits for", "instance", instance)
	l.orphan.Add(1)
	go func() {
		defer l.orphan.Done()
		resp := &dtpb.OrchestratorResponse{InstanceId: instance, CompletionToken: token, Actions: []*dtpb.OrchestratorAction{{
			OrchestratorActionType: &dtpb.OrchestratorAction_CompleteOrchestration{CompleteOrchestration: &dtpb.CompleteOrchestrationAction{
				OrchestrationStatus: dtpb.OrchestrationStatus_ORCHESTRATION_STATUS_FAILED,
				FailureDetails: &dtpb.TaskFailureDetails{ErrorType: "amdahl.Orphaned",
					ErrorMessage: "the worker no longer waited for this work item (cancelled, or redelivered after a reconnect)"},
			}},
		}}}
		if _, err := l.sender.Complete(ctx, resp); err != nil && ctx.Err() == nil {
			l.log.Warn("runtime: could not fail an orphaned work item", "instance", instance, "err", err)
		}
	}()
}

// foreign hands back a work item of another worker sharing the sidecar
// (another run's instance): abandoning it requeues it for the others.
func (l *leaser) foreign(ctx context.Context, instance, token string) {
	l.log.Debug("runtime: abandoning another worker's work item", "instance", instance)
	l.orphan.Add(1)
	go func() {
		defer l.orphan.Done()
		req := &dtpb.AbandonOrchestrationTaskRequest{CompletionToken: token}
		if err := l.cc.Invoke(ctx, dtpb.MethodAbandonTaskOrchestratorWorkItem, req, &dtpb.AbandonOrchestrationTaskResponse{}); err != nil && ctx.Err() == nil {
			l.log.Warn("runtime: could not abandon another worker's work item", "instance", instance, "err", err)
		}
	}()
}

func (l *leaser) failAll(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ch := range l.waiters {
		select {
		case ch <- leaseResult{err: err}:
		default:
		}
	}
}

// lease schedules the orchestration instance on the sidecar and waits for
// its work item, returning the completion token.
func (l *leaser) lease(ctx context.Context, s *chunking.Sender, instance string) (string, error) {
	ch := make(chan leaseResult, 1)
	l.mu.Lock()
	l.waiters[instance] = ch
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.waiters, instance)
		l.mu.Unlock()
	}()
	if _, err := s.StartInstance(ctx, &dtpb.CreateInstanceRequest{InstanceId: instance, Name: "amdahl"}); err != nil {
		return "", fmt.Errorf("sidecar: %w", err)
	}
	t := time.NewTimer(l.timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.token, r.err
	case <-ctx.Done():
		return "", fmt.Errorf("wait for the work item of %s: %w", instance, ctx.Err())
	case <-t.C:
		return "", fmt.Errorf("sidecar: %w: the work item of %s did not arrive within %v", ErrLeaseTimeout, instance, l.timeout)
	case <-l.done:
		return "", ErrClosed
	}
}

// ErrLeaseTimeout matches the error of a unit whose orchestration work
// item the sidecar did not deliver within Config.Sidecar.LeaseTimeout.
var ErrLeaseTimeout = errors.New("lease timed out")

func (l *leaser) close() {
	l.cancel()
	<-l.done
	l.orphan.Wait()
}

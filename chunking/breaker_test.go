package chunking

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

var errProbe = status.Error(codes.Unavailable, "probe: connection refused")

// TestBreaker: Unavailable for OpenAfter opens it; an answer from the
// sidecar in between starts the clock over; while open every call is
// refused at once and only a probe closes it.
func TestBreaker(t *testing.T) {
	var reachable atomic.Bool
	changes := make(chan bool, 4)
	b, err := NewBreaker(BreakerConfig{OpenAfter: 20 * time.Millisecond, ProbeInterval: 5 * time.Millisecond,
		Probe: func(ctx context.Context) error {
			if reachable.Load() {
				return nil
			}
			return errProbe
		},
		OnChange: func(open bool, err error) { changes <- open }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	unavailable := status.Error(codes.Unavailable, "connection refused")

	b.Record(unavailable)
	b.Record(status.Error(codes.NotFound, "unknown completion token")) // answered
	b.mu.Lock()
	since := b.since
	b.mu.Unlock()
	if !since.IsZero() || b.IsOpen() {
		t.Fatalf("after an answer: since %v, open %v; want the clock stopped and the breaker closed", since, b.IsOpen())
	}
	for _, err := range []error{context.Canceled, status.Error(codes.Canceled, "x"), status.Error(codes.DeadlineExceeded, "x"), errors.New("not a status")} {
		b.Record(err)
		b.mu.Lock()
		since := b.since
		b.mu.Unlock()
		if !since.IsZero() {
			t.Errorf("Record(%v) started the clock; want it to say nothing", err)
		}
	}
	if err := b.Allow(); err != nil {
		t.Fatalf("closed breaker: Allow = %v, want nil", err)
	}

	b.Record(unavailable)
	<-b.Opened()
	if open := <-changes; !open {
		t.Fatal("OnChange(false), want the breaker opened")
	}
	err = b.Allow()
	if !errors.Is(err, ErrSidecarUnavailable) {
		t.Fatalf("open breaker: Allow = %v, want ErrSidecarUnavailable", err)
	}
	t.Logf("refused with: %v", err)
	b.Record(nil) // a call that raced the opening does not close it
	if !b.IsOpen() {
		t.Fatal("a call's success closed the breaker; want only a probe to")
	}

	opened := b.Opened()
	reachable.Store(true)
	if open := <-changes; open {
		t.Fatal("OnChange(true), want the breaker closed by the probe")
	}
	if err := b.Allow(); err != nil {
		t.Fatalf("after a successful probe: Allow = %v, want nil", err)
	}
	select {
	case <-b.Opened():
		t.Fatal("Opened is closed after the breaker closed")
	default:
	}
	select {
	case <-opened:
	default:
		t.Fatal("the channel of the opening was not closed")
	}
}

func TestBreakerConfigInvalid(t *testing.T) {
	probe := func(context.Context) error { return nil }
	for _, cfg := range []BreakerConfig{
		{ProbeInterval: time.Second, Probe: probe},
		{OpenAfter: time.Second, Probe: probe},
		{OpenAfter: time.Second, ProbeInterval: time.Second},
	} {
		if _, err := NewBreaker(cfg); err == nil {
			t.Errorf("NewBreaker(%+v): nil error", cfg)
		}
	}
	var b *Breaker
	if b.Allow() != nil || b.IsOpen() || b.Opened() != nil {
		t.Error("a nil Breaker refuses calls")
	}
	b.Record(errProbe)
	b.Close()
}

// TestSenderStopsWhenBreakerOpens: a sender to an address nobody listens
// on, with a retry budget of an hour between attempts, gives up as soon as
// the breaker opens (not after the hour: the test's context ends long
// before), and later calls fail at once, without an attempt.
func TestSenderStopsWhenBreakerOpens(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	b, err := NewBreaker(BreakerConfig{OpenAfter: 50 * time.Millisecond, ProbeInterval: time.Hour,
		Probe: func(context.Context) error { return errProbe }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := NewSender(cc, SenderConfig{Retry: RetryPolicy{MaxAttempts: 10, BaseDelay: time.Hour, MaxDelay: time.Hour}, Breaker: b})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.Complete(ctx, response(task(0, 100)))
	if !errors.Is(err, ErrSidecarUnavailable) {
		t.Fatalf("Complete: %v, want ErrSidecarUnavailable once the breaker opened", err)
	}
	if res.Attempts != 1 {
		t.Errorf("Complete made %d attempts, want 1 (the second waited out the backoff until the breaker opened)", res.Attempts)
	}
	_, err = s.StartInstance(ctx, &dtpb.CreateInstanceRequest{InstanceId: "i"})
	if !errors.Is(err, ErrSidecarUnavailable) {
		t.Errorf("StartInstance with the breaker open: %v, want ErrSidecarUnavailable", err)
	}
}

package chunking

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestSidecarRestartedBetweenChunks: the sidecar is stopped after it has
// buffered chunks 0 and 1 of a five-chunk completion, and a new one is
// started on the same address before chunk 2 is sent. The new sidecar
// knows neither the token nor the chunks: chunk 2 is refused (NotFound),
// the sender stops there, and neither sidecar applies anything — no
// completion is applied from part of its chunks.
func TestSidecarRestartedBetweenChunks(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	serve := func(lis net.Listener) (*Sidecar, chan error) {
		sc, err := NewSidecar(SidecarConfig{})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- sc.Serve(lis) }()
		return sc, done
	}
	first, firstDone := serve(lis)
	var second *Sidecar
	var secondDone chan error
	var once sync.Once
	restart := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := first.Close(ctx); err != nil {
			t.Errorf("first sidecar: Close: %v", err)
		}
		if err := <-firstDone; err != nil {
			t.Errorf("first sidecar: Serve: %v", err)
		}
		lis2, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listen again on %s: %v", addr, err)
			return
		}
		second, secondDone = serve(lis2)
	}
	// Restart the sidecar just before chunk 2 goes out (the sender sends
	// encoded bytes, so count the completion calls).
	calls := 0
	intercept := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasSuffix(method, "/CompleteOrchestratorTask") {
			if calls++; calls == 3 {
				once.Do(restart)
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(intercept))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		if second != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := second.Close(ctx); err != nil {
				t.Errorf("second sidecar: Close: %v", err)
			}
			<-secondDone
		}
	})
	rg := &rig{sc: first, conn: conn}
	r := fiveChunks(t)
	r.CompletionToken = rg.lease(t, r.InstanceId)
	snd := rg.sender(t, PlannerConfig{MaxChunkBytes: 1 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := snd.Complete(ctx, r)
	if second == nil {
		t.Fatalf("the sidecar was not restarted: no chunk 2 was sent (sent %d, err %v)", res.Sent, err)
	}
	if err == nil || !strings.Contains(err.Error(), "unknown completion token") {
		t.Fatalf("Complete: err %v, want chunk 2 refused as an unknown token", err)
	}
	if res.Sent != 2 {
		t.Errorf("sent %d chunks, want 2 (the ones the first sidecar took)", res.Sent)
	}
	if n := first.Applied() + second.Applied(); n != 0 {
		t.Errorf("%d completions applied, want none", n)
	}
	if n := second.BufferedTokens(); n != 0 {
		t.Errorf("the new sidecar buffers %d tokens, want none", n)
	}
}

// TestSlowSidecar: every reply of the sidecar comes 40 ms after it has
// applied the call. With time to spare the completion is applied once;
// with a deadline shorter than the sequence, Complete returns
// DeadlineExceeded near the deadline (it does not wait for the remaining
// chunks) and nothing is applied: the final chunk never arrived.
func TestSlowSidecar(t *testing.T) {
	slow := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		time.Sleep(40 * time.Millisecond)
		return resp, err
	}
	for _, tc := range []struct {
		name        string
		deadline    time.Duration
		wantApplied int64
	}{
		{"in time", 30 * time.Second, 1},
		{"past the deadline", 100 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg := startRig(t, SidecarConfig{ServerOptions: []grpc.ServerOption{grpc.UnaryInterceptor(slow)}})
			r := fiveChunks(t)
			r.CompletionToken = rg.lease(t, r.InstanceId)
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			start := time.Now()
			res, err := rg.sender(t, PlannerConfig{MaxChunkBytes: 1 << 20}).Complete(ctx, r)
			took := time.Since(start)
			if tc.wantApplied == 1 {
				if err != nil || res.Sent != 5 {
					t.Fatalf("Complete: sent %d, err %v; want 5 chunks, no error", res.Sent, err)
				}
			} else {
				if !errors.Is(err, context.DeadlineExceeded) && status.Code(errors.Unwrap(err)) != codes.DeadlineExceeded {
					t.Fatalf("Complete: err %v, want DeadlineExceeded", err)
				}
				// Liveness, not speed: five slow replies would take 200 ms
				// and more; returning long after the deadline would mean
				// the sender waited them out.
				if took > tc.deadline+2*time.Second {
					t.Errorf("Complete returned %v after a %v deadline", took, tc.deadline)
				}
			}
			// The handler of a call whose caller gave up may still be running.
			time.Sleep(100 * time.Millisecond)
			if n := rg.sc.Applied(); n != tc.wantApplied {
				t.Errorf("applied %d completions, want %d", n, tc.wantApplied)
			}
		})
	}
}

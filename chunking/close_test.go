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

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

// gate holds the calls of one method in the server (in an interceptor,
// before the handler) until released, ignoring their contexts: a stuck
// handler.
type gate struct {
	method  string
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGate(t *testing.T, method string) *gate {
	g := &gate{method: method, entered: make(chan struct{}, 8), release: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

func (g *gate) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if info.FullMethod == g.method {
		g.entered <- struct{}{}
		<-g.release
	}
	return h(ctx, req)
}

// waitEntered waits until a call is held at the gate.
func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the call never reached the handler")
	}
}

// closeRig starts a sidecar like startRig, but leaves Close to the test:
// its cleanup only closes the client, calls Close again (which returns the
// first result, unchecked) and checks that Serve returned nil.
func closeRig(t *testing.T, cfg SidecarConfig) *rig {
	t.Helper()
	sc, err := NewSidecar(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- sc.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sc.Close(ctx)
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return &rig{sc: sc, conn: conn}
}

// closeCtx is the ctx of a Close expected to drain: ample, but a broken
// drain fails the test instead of hanging it.
func closeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// closeAsync calls Close(ctx) in a goroutine; the channel gets its result.
func closeAsync(sc *Sidecar, ctx context.Context) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- sc.Close(ctx) }()
	return ch
}

// openStream opens a GetWorkItems stream and waits until the server runs
// its handler, so that Close finds it in flight: the sidecar then counts
// more calls in flight.
func openStream(t *testing.T, rg *rig, calls int64) grpc.ServerStreamingClient[dtpb.WorkItem] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := dtpb.GetWorkItems(ctx, rg.conn, &dtpb.GetWorkItemsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); rg.sc.calls.Load() != calls; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls in flight, want %d", rg.sc.calls.Load(), calls)
		}
	}
	return st
}

// recvEnd waits, at most 10 s, for the next Recv on st and returns its
// error (nil if a work item arrived instead).
func recvEnd(t *testing.T, st grpc.ServerStreamingClient[dtpb.WorkItem]) error {
	t.Helper()
	ch := make(chan error, 1)
	go func() {
		_, err := st.Recv()
		ch <- err
	}()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the GetWorkItems stream did not end at Close")
		return nil
	}
}

// TestCloseDrainsInFlightCall: a completion held in the handler when Close
// starts is applied and answered OK, and Close returns nil only after it;
// the GetWorkItems stream that leased its work item is ended by Close but
// its lease survives for the completion.
func TestCloseDrainsInFlightCall(t *testing.T) {
	g := newGate(t, dtpb.MethodCompleteOrchestratorTask)
	rg := closeRig(t, SidecarConfig{ServerOptions: []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.unary)}})
	st, err := dtpb.GetWorkItems(context.Background(), rg.conn, &dtpb.GetWorkItemsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rg.sc.Submit(&dtpb.OrchestratorRequest{InstanceId: "drain"})
	wi, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	r := withToken(response(task(0, 100)), wi.GetCompletionToken())
	r.InstanceId = "drain"
	called := make(chan error, 1)
	go func() {
		called <- rg.conn.Invoke(context.Background(), dtpb.MethodCompleteOrchestratorTask, r, &dtpb.CompleteTaskResponse{})
	}()
	g.waitEntered(t)

	closed := closeAsync(rg.sc, closeCtx(t))
	// Close ends the work-item stream at once, while the call is held.
	if err := recvEnd(t, st); status.Code(err) != codes.Unavailable {
		t.Fatalf("GetWorkItems after Close: %v, want Unavailable", err)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while a call was in flight", err)
	case err := <-called:
		t.Fatalf("the held call returned %v before it was released", err)
	case <-time.After(100 * time.Millisecond):
	}
	g.open()
	if err := <-called; err != nil {
		t.Fatalf("the call in flight at Close failed: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if cs := rg.sc.Completions(); len(cs) != 1 || cs[0].InstanceID != "drain" {
		t.Errorf("completions %+v, want the one in flight at Close", cs)
	}
	// New calls are refused once Close has returned.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := dtpb.StartInstance(ctx, rg.conn, &dtpb.CreateInstanceRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("StartInstance after Close: %v, want Unavailable", err)
	}
}

// TestCloseDeadlineForcesStop: a call stuck in its handler (ignoring its
// context) does not hold Close past its ctx: Close force-stops and returns
// an error wrapping context.DeadlineExceeded that counts the call; the
// client's call fails; a second Close returns the same error.
func TestCloseDeadlineForcesStop(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"expired", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}},
		{"short", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate(t, dtpb.MethodStartInstance)
			rg := closeRig(t, SidecarConfig{ServerOptions: []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.unary)}})
			called := make(chan error, 1)
			go func() {
				_, err := dtpb.StartInstance(context.Background(), rg.conn, &dtpb.CreateInstanceRequest{InstanceId: "stuck"})
				called <- err
			}()
			g.waitEntered(t)

			ctx, cancel := tc.ctx()
			defer cancel()
			var err error
			select {
			case err = <-closeAsync(rg.sc, ctx):
			case <-time.After(10 * time.Second):
				t.Fatal("Close hung on a stuck call past its ctx")
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Close: %v, want an error wrapping context.DeadlineExceeded", err)
			}
			if !strings.Contains(err.Error(), "1 call still in flight") {
				t.Errorf("Close: %q does not count the call in flight", err)
			}
			select {
			case err := <-called:
				if status.Code(err) != codes.Unavailable {
					t.Errorf("stuck call after the forced stop: %v, want Unavailable", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("the client's call did not end at the forced stop")
			}
			if again := rg.sc.Close(context.Background()); again != err {
				t.Errorf("second Close: %v, want the first result %v", again, err)
			}
		})
	}
}

// TestCloseEndsWorkItemStreams: GetWorkItems streams waiting for work when
// Close starts end promptly with Unavailable, and Close drains to nil well
// within its ctx (grpc's GracefulStop alone would wait for them forever).
func TestCloseEndsWorkItemStreams(t *testing.T) {
	rg := closeRig(t, SidecarConfig{})
	sts := []grpc.ServerStreamingClient[dtpb.WorkItem]{openStream(t, rg, 1), openStream(t, rg, 2)}
	start := time.Now()
	if err := rg.sc.Close(closeCtx(t)); err != nil {
		t.Fatalf("Close with idle GetWorkItems streams: %v", err)
	}
	t.Logf("Close took %v", time.Since(start))
	for i, st := range sts {
		if err := recvEnd(t, st); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
			t.Errorf("stream %d after Close: %v, want Unavailable sidecar shutting down", i, err)
		}
	}
}

// TestCloseTwice: Close is idempotent, also from concurrent goroutines.
func TestCloseTwice(t *testing.T) {
	t.Run("sequential", func(t *testing.T) {
		rg := closeRig(t, SidecarConfig{})
		openStream(t, rg, 1)
		for i := range 2 {
			if err := rg.sc.Close(closeCtx(t)); err != nil {
				t.Fatalf("Close %d: %v", i+1, err)
			}
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		rg := closeRig(t, SidecarConfig{})
		openStream(t, rg, 1)
		errs := make([]<-chan error, 8)
		for i := range errs {
			errs[i] = closeAsync(rg.sc, closeCtx(t))
		}
		for i, ch := range errs {
			if err := <-ch; err != nil {
				t.Errorf("Close %d: %v", i, err)
			}
		}
	})
	// A Close concurrent with a draining one waits for it, or gives up at
	// its own ctx without forcing the first's drain.
	t.Run("while draining", func(t *testing.T) {
		g := newGate(t, dtpb.MethodStartInstance)
		rg := closeRig(t, SidecarConfig{ServerOptions: []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.unary)}})
		st := openStream(t, rg, 1)
		called := make(chan error, 1)
		go func() {
			_, err := dtpb.StartInstance(context.Background(), rg.conn, &dtpb.CreateInstanceRequest{InstanceId: "held"})
			called <- err
		}()
		g.waitEntered(t)
		first := closeAsync(rg.sc, closeCtx(t))
		if err := recvEnd(t, st); status.Code(err) != codes.Unavailable { // the first Close has begun
			t.Fatalf("GetWorkItems after Close: %v, want Unavailable", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if err := rg.sc.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("concurrent Close with a short ctx: %v, want an error wrapping context.DeadlineExceeded", err)
		}
		g.open()
		if err := <-called; err != nil {
			t.Errorf("held call: %v", err)
		}
		if err := <-first; err != nil {
			t.Errorf("first Close: %v", err)
		}
		if err := rg.sc.Close(closeCtx(t)); err != nil {
			t.Errorf("Close after the drain: %v", err)
		}
	})
}

// TestServeAfterClose: Serve on a closed sidecar returns nil at once and
// closes its listener (and starts no janitor, which goleak would see).
func TestServeAfterClose(t *testing.T) {
	sc, err := NewSidecar(SidecarConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Serve(lis); err != nil {
		t.Errorf("Serve after Close: %v", err)
	}
	if _, err := lis.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("listener after Serve: %v, want closed", err)
	}
}

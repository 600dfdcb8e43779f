package chunking

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

type rig struct {
	sc   *Sidecar
	conn *grpc.ClientConn
}

// startRig starts a sidecar on 127.0.0.1:0 and dials it.
func startRig(t testing.TB, cfg SidecarConfig, dial ...grpc.DialOption) *rig {
	t.Helper()
	sc, err := NewSidecar(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sc.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20))}, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := sc.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &rig{sc: sc, conn: conn}
}

// lease submits a work item for instance and receives it on a new
// GetWorkItems stream, returning its completion token. The stream stays
// open until the test ends (closing it would drop the lease).
func (rg *rig) lease(t *testing.T, instance string) string {
	t.Helper()
	rg.sc.Submit(&dtpb.OrchestratorRequest{InstanceId: instance})
	ctx, cancel := context.WithCancel(context.Background())
	st, err := dtpb.GetWorkItems(ctx, rg.conn, &dtpb.GetWorkItemsRequest{
		Capabilities: []dtpb.WorkerCapability{dtpb.WorkerCapability_WORKER_CAPABILITY_HISTORY_STREAMING}})
	if err != nil {
		t.Fatal(err)
	}
	wi, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		for {
			if _, err := st.Recv(); err != nil {
				return
			}
		}
	})
	if wi.GetOrchestratorRequest().GetInstanceId() != instance || wi.GetCompletionToken() == "" {
		t.Fatalf("work item %v, want instance %q with a token", wi, instance)
	}
	return wi.GetCompletionToken()
}

func (rg *rig) sender(t *testing.T, pcfg PlannerConfig) *Sender {
	t.Helper()
	s, err := NewSender(rg.conn, SenderConfig{Planner: newPlanner(t, pcfg),
		Retry: RetryPolicy{BaseDelay: time.Microsecond, MaxDelay: 10 * time.Microsecond}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func withToken(r *dtpb.OrchestratorResponse, tok string) *dtpb.OrchestratorResponse {
	r.CompletionToken = tok
	return r
}

func sameActions(t *testing.T, got, want []*dtpb.OrchestratorAction) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d actions, want %d", len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("action %d differs", i)
		}
	}
}

// TestVectorsThroughSidecar sends every planner vector through the real
// sidecar on loopback and checks what the sidecar applied.
func TestVectorsThroughSidecar(t *testing.T) {
	rg := startRig(t, SidecarConfig{})
	for _, v := range vectors() {
		for _, m := range allModes() {
			if !v.modes(m) || m.alg == Legacy && m.lp {
				continue
			}
			t.Run(v.name+"/"+m.String(), func(t *testing.T) {
				r, max := v.build(t, m)
				r.InstanceId = t.Name()
				tok := rg.lease(t, r.InstanceId)
				r.CompletionToken = tok
				res, err := rg.sender(t, PlannerConfig{MaxChunkBytes: max, Algorithm: m.alg, Accounting: m.acct, LargePayloads: m.lp}).Complete(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				if res.Sent != len(res.Plan.Chunks) || res.Attempts != res.Sent {
					t.Errorf("sent %d of %d chunks in %d attempts", res.Sent, len(res.Plan.Chunks), res.Attempts)
				}
				var got *Completion
				for _, c := range rg.sc.Completions() {
					if c.CompletionToken == tok {
						got = &c
					}
				}
				if got == nil {
					t.Fatal("no completion applied")
				}
				if got.Chunks != len(res.Plan.Chunks) {
					t.Errorf("applied from %d chunks, want %d", got.Chunks, len(res.Plan.Chunks))
				}
				if res.Plan.Oversized != nil {
					sameActions(t, got.Actions, res.Plan.Chunks[0].Actions)
				} else {
					sameActions(t, got.Actions, r.Actions)
					if !proto.Equal(got.CustomStatus, r.CustomStatus) || got.RequiresHistory != r.RequiresHistory ||
						!proto.Equal(got.OrchestrationTraceContext, r.OrchestrationTraceContext) || got.NumEventsProcessed != nil {
						t.Errorf("envelope not reassembled from chunk 0 and the final chunk: %+v", got)
					}
				}
			})
		}
	}
	if n := rg.sc.BufferedTokens(); n != 0 {
		t.Errorf("%d buffers left after all completions", n)
	}
}

// TestIntegrationAutochunk is reference vector 10.
func TestIntegrationAutochunk(t *testing.T) {
	rg := startRig(t, SidecarConfig{})
	var acts []*dtpb.OrchestratorAction
	for i := range 36 {
		acts = append(acts, task(int32(i), 30<<10))
	}
	var mixed []*dtpb.OrchestratorAction
	rng := newRand()
	for i := range 180 {
		size := 20 << 10
		if i >= 30 {
			size = 100
		}
		mixed = append(mixed, randomAction(rng, int32(i), size))
	}
	for _, tc := range []struct {
		name string
		acts []*dtpb.OrchestratorAction
	}{{"36x30KiB", acts}, {"mixed", mixed}} {
		t.Run(tc.name, func(t *testing.T) {
			r := response(tc.acts...)
			r.InstanceId = tc.name
			r.CompletionToken = rg.lease(t, r.InstanceId)
			if _, err := rg.sender(t, PlannerConfig{MaxChunkBytes: 1 << 20}).Complete(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			cs := rg.sc.Completions()
			sameActions(t, cs[len(cs)-1].Actions, r.Actions)
		})
	}
}

// TestSenderReusesBuffers sends completions one after another through one
// Sender, each of chunks past encodeAhead and of other bytes than the
// last, so that a chunk is encoded into the buffer of one the sidecar
// acknowledged before: every completion arrives as it was sent (under
// -race, gRPC's writer and the next encoding never touch a buffer at once).
func TestSenderReusesBuffers(t *testing.T) {
	rg := startRig(t, SidecarConfig{})
	s := rg.sender(t, PlannerConfig{MaxChunkBytes: 1 << 20})
	toks := rg.leaseN(t, 4)
	for k, tok := range toks {
		var acts []*dtpb.OrchestratorAction
		// 12 actions of 900 KiB: 12 chunks, the last 3 past encodeAhead.
		for i := range 12 {
			a := actionOfSize(t, int32(100*k+i), 900<<10)
			// Each completion's payloads of a letter of their own.
			st := a.GetScheduleTask()
			st.Input = wrapperspb.String(strings.Repeat(string(rune('a'+k)), len(st.GetInput().GetValue())))
			acts = append(acts, a)
		}
		r := response(acts...)
		r.CompletionToken = tok
		if _, err := s.Complete(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		cs := rg.sc.Completions()
		sameActions(t, cs[len(cs)-1].Actions, r.Actions)
	}
}

// faults is a server interceptor that fails chunk calls on cue.
type faults struct {
	mu     sync.Mutex
	calls  map[int32]int
	before map[int32]codes.Code // fail the first call of chunk k before applying
	after  map[int32]codes.Code // apply the first call of chunk k, then fail (lost reply)
	always map[int32]codes.Code // fail every call of chunk k
}

func (f *faults) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	r, ok := req.(*dtpb.OrchestratorResponse)
	if !ok {
		return h(ctx, req)
	}
	k := r.GetChunkIndex().GetValue() //nolint:staticcheck // SA1019
	f.mu.Lock()
	f.calls[k]++
	n := f.calls[k]
	f.mu.Unlock()
	if c, ok := f.always[k]; ok {
		return nil, status.Errorf(c, "injected %v for chunk %d", c, k)
	}
	if c, ok := f.before[k]; ok && n == 1 {
		return nil, status.Errorf(c, "injected %v before chunk %d", c, k)
	}
	resp, err := h(ctx, req)
	if c, ok := f.after[k]; ok && n == 1 && err == nil {
		return nil, status.Errorf(c, "injected %v after chunk %d", c, k)
	}
	return resp, err
}

func fiveChunks(t *testing.T) *dtpb.OrchestratorResponse {
	var acts []*dtpb.OrchestratorAction
	for i := range 5 {
		acts = append(acts, actionOfSize(t, int32(i), 700<<10))
	}
	return response(acts...)
}

func TestRetryWithFaults(t *testing.T) {
	for _, tc := range []struct {
		name          string
		f             *faults
		wantAttempts  int
		wantDuplicate bool
	}{
		{"unavailable before chunk 2, lost reply of chunk 1", &faults{
			before: map[int32]codes.Code{2: codes.Unavailable}, after: map[int32]codes.Code{1: codes.Unknown}}, 7, true},
		{"lost reply of the final chunk", &faults{after: map[int32]codes.Code{4: codes.Internal}}, 6, true},
		{"deadline exceeded before chunk 0", &faults{before: map[int32]codes.Code{0: codes.DeadlineExceeded}}, 6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.calls = map[int32]int{}
			rg := startRig(t, SidecarConfig{ServerOptions: []grpc.ServerOption{grpc.UnaryInterceptor(tc.f.intercept)}})
			r := fiveChunks(t)
			r.CompletionToken = rg.lease(t, r.InstanceId)
			res, err := rg.sender(t, PlannerConfig{MaxChunkBytes: 1 << 20}).Complete(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			if res.Attempts != tc.wantAttempts || res.Sent != 5 || res.Abandoned {
				t.Errorf("attempts %d sent %d abandoned %v, want %d 5 false", res.Attempts, res.Sent, res.Abandoned, tc.wantAttempts)
			}
			cs := rg.sc.Completions()
			if len(cs) != 1 {
				t.Fatalf("%d completions applied, want exactly 1", len(cs))
			}
			sameActions(t, cs[0].Actions, r.Actions)
		})
	}
}

// TestRetryDirect is reference vector 9: the first send fails with
// Unavailable; two attempts, one delivered message.
func TestRetryDirect(t *testing.T) {
	f := &faults{calls: map[int32]int{}, before: map[int32]codes.Code{0: codes.Unavailable}}
	rg := startRig(t, SidecarConfig{ServerOptions: []grpc.ServerOption{grpc.UnaryInterceptor(f.intercept)}})
	r := response(task(0, 10), task(1, 10))
	r.CompletionToken = rg.lease(t, r.InstanceId)
	res, err := rg.sender(t, PlannerConfig{}).Complete(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 || !res.Plan.Direct || len(rg.sc.Completions()) != 1 || f.calls[0] != 2 {
		t.Errorf("attempts %d direct %v completions %d calls %d, want 2 true 1 2", res.Attempts, res.Plan.Direct, len(rg.sc.Completions()), f.calls[0])
	}
	if d := rg.sc.DrainCompletions(); len(d) != 1 || len(rg.sc.Completions()) != 0 {
		t.Errorf("drained %d, %d left; want 1, 0", len(d), len(rg.sc.Completions()))
	}
}

func TestPermanentFailureAbandons(t *testing.T) {
	for _, tc := range []struct {
		name         string
		code         codes.Code
		wantAttempts int // of the failing chunk
	}{
		{"non-retried code", codes.InvalidArgument, 1},
		{"retry budget exhausted", codes.Unavailable, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &faults{calls: map[int32]int{}, always: map[int32]codes.Code{2: tc.code}}
			rg := startRig(t, SidecarConfig{ServerOptions: []grpc.ServerOption{grpc.UnaryInterceptor(f.intercept)}})
			r := fiveChunks(t)
			r.CompletionToken = rg.lease(t, r.InstanceId)
			s, err := NewSender(rg.conn, SenderConfig{Planner: newPlanner(t, PlannerConfig{MaxChunkBytes: 1 << 20}),
				Retry: RetryPolicy{MaxAttempts: 3, BaseDelay: time.Microsecond}})
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.Complete(context.Background(), r)
			if status.Code(err) != tc.code {
				t.Fatalf("error %v, want code %v", err, tc.code)
			}
			if !res.Abandoned || res.Sent != 2 || f.calls[2] != tc.wantAttempts || f.calls[3] != 0 {
				t.Errorf("abandoned %v sent %d, chunk 2 calls %d, chunk 3 calls %d; want true 2 %d 0",
					res.Abandoned, res.Sent, f.calls[2], f.calls[3], tc.wantAttempts)
			}
			if len(rg.sc.Completions()) != 0 || rg.sc.BufferedTokens() != 0 {
				t.Errorf("after abandon: %d completions, %d buffers, want 0 0", len(rg.sc.Completions()), rg.sc.BufferedTokens())
			}
		})
	}
}

func TestSenderHonoursContext(t *testing.T) {
	f := &faults{calls: map[int32]int{}, always: map[int32]codes.Code{0: codes.Unavailable}}
	rg := startRig(t, SidecarConfig{ServerOptions: []grpc.ServerOption{grpc.UnaryInterceptor(f.intercept)}})
	r := response(task(0, 10))
	r.CompletionToken = rg.lease(t, r.InstanceId)
	s, err := NewSender(rg.conn, SenderConfig{Retry: RetryPolicy{BaseDelay: time.Hour, MaxDelay: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	var res Result
	go func() {
		var err error
		res, err = s.Complete(ctx, r)
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) && status.Code(err) != codes.Canceled {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if res.Abandoned {
		t.Errorf("abandoned on cancellation; want the lease left to expire")
	}
}

// TestRetryReportsContextEnd: when the context ends during an attempt,
// the retry loop reports the context's end, whatever the attempt
// returned (a retryable Unavailable here), and tries no more.
// TestSenderHonoursContext meets this only when the cancellation lands
// during the attempt.
func TestRetryReportsContextEnd(t *testing.T) {
	rg := startRig(t, SidecarConfig{})
	s, err := NewSender(rg.conn, SenderConfig{Retry: RetryPolicy{MaxAttempts: 5, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	n, err := s.withRetry(ctx, trace.SpanFromContext(ctx), func(context.Context) error {
		calls++
		cancel()
		return status.Error(codes.Unavailable, "injected")
	})
	if !errors.Is(err, context.Canceled) || n != 1 || calls != 1 {
		t.Fatalf("got %d attempts (%d calls), %v; want 1 and context.Canceled", n, calls, err)
	}
	if !strings.Contains(err.Error(), "injected") {
		t.Errorf("error %q does not say what the attempt returned", err)
	}
}

type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func raw(t *testing.T, rg *rig, r *dtpb.OrchestratorResponse) error {
	t.Helper()
	return rg.conn.Invoke(context.Background(), dtpb.MethodCompleteOrchestratorTask, r, &dtpb.CompleteTaskResponse{})
}

//nolint:staticcheck // SA1019
func chunk(tok string, idx int32, partial bool, ids ...int32) *dtpb.OrchestratorResponse {
	r := &dtpb.OrchestratorResponse{InstanceId: "instance-1", CompletionToken: tok, IsPartial: partial}
	if idx >= 0 {
		r.ChunkIndex = wrapperspb.Int32(idx)
	}
	for _, id := range ids {
		r.Actions = append(r.Actions, task(id, 1000))
	}
	return r
}

func TestSidecarViolations(t *testing.T) {
	type step struct {
		r    func(tok string) *dtpb.OrchestratorResponse
		want codes.Code
	}
	for _, tc := range []struct {
		name    string
		steps   []step
		wantIDs []int32 // nil: nothing applied
	}{
		{"gap", []step{
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 0, true, 0) }, codes.OK},
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 2, true, 2) }, codes.FailedPrecondition},
		}, nil},
		{"final with gap", []step{
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 0, true, 0) }, codes.OK},
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 3, false, 3) }, codes.FailedPrecondition},
		}, nil},
		{"duplicate acknowledged without appending", []step{
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 0, true, 0) }, codes.OK},
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 1, true, 1) }, codes.OK},
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 1, true, 1) }, codes.OK},
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 0, true, 0) }, codes.OK},
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 2, false, 2) }, codes.OK},
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 2, false, 2) }, codes.OK},
		}, []int32{0, 1, 2}},
		{"unknown token", []step{
			{func(string) *dtpb.OrchestratorResponse { return chunk("nope", 0, true, 0) }, codes.NotFound},
			{func(string) *dtpb.OrchestratorResponse { return chunk("nope", -1, false, 0) }, codes.NotFound},
		}, nil},
		{"index without buffer", []step{
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 1, true, 1) }, codes.FailedPrecondition},
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 1, false, 1) }, codes.FailedPrecondition},
		}, nil},
		{"partial without index", []step{
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, -1, true, 0) }, codes.InvalidArgument},
		}, nil},
		{"over cap", []step{
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 0, true, 0) }, codes.OK},
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 1, true, 1) }, codes.OK},
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 2, true, 2) }, codes.ResourceExhausted},
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 3, false, 3) }, codes.FailedPrecondition},
		}, nil},
		{"legacy chunkIndex=0 with isPartial=false", []step{
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 0, false, 7, 8) }, codes.OK},
		}, []int32{7, 8}},
		{"standalone final replaces the buffer", []step{
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 0, true, 0) }, codes.OK},
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, -1, false, 9) }, codes.OK},
		}, []int32{9}},
		{"completed token rejects new chunks", []step{
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, -1, false, 1) }, codes.OK},
			{func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 0, true, 1) }, codes.FailedPrecondition},
		}, []int32{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var clk clock
			maxChunks := 16
			if tc.name == "over cap" {
				maxChunks = 2
			}
			rg := startRig(t, SidecarConfig{Now: clk.now, BufferTTL: time.Minute, MaxBufferedChunks: maxChunks})
			tok := rg.lease(t, "instance-1")
			for i, st := range tc.steps {
				if err := raw(t, rg, st.r(tok)); status.Code(err) != st.want {
					t.Fatalf("step %d: got %v, want %v", i, err, st.want)
				}
			}
			cs := rg.sc.Completions()
			if tc.wantIDs == nil {
				if len(cs) != 0 {
					t.Fatalf("%d completions applied, want none", len(cs))
				}
			} else if len(cs) != 1 || !slices.Equal(ids(cs[0].Actions), tc.wantIDs) {
				t.Fatalf("applied %v, want one completion with %v", cs, tc.wantIDs)
			}
			clk.advance(time.Minute + time.Nanosecond)
			rg.sc.ExpireBuffers()
			if n := rg.sc.BufferedTokens(); n != 0 {
				t.Errorf("%d buffers left after the TTL", n)
			}
		})
	}
}

func TestSidecarTTL(t *testing.T) {
	var clk clock
	rg := startRig(t, SidecarConfig{Now: clk.now, BufferTTL: time.Minute})
	tok := rg.lease(t, "instance-1")
	if err := raw(t, rg, chunk(tok, 0, true, 0)); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Minute)
	if n := rg.sc.ExpireBuffers(); n != 0 || rg.sc.BufferedTokens() != 1 {
		t.Fatalf("expired %d at exactly the TTL, want 0", n)
	}
	clk.advance(time.Nanosecond)
	if n := rg.sc.ExpireBuffers(); n != 1 || rg.sc.BufferedTokens() != 0 {
		t.Fatalf("expired %d after the TTL, want 1", n)
	}
	if err := raw(t, rg, chunk(tok, 1, false, 1)); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("chunk after expiry: got %v, want FailedPrecondition", err)
	}
}

// TestSidecarDisconnect: closing the stream that leased a work item drops
// its buffer and redelivers it under a new token.
func TestSidecarDisconnect(t *testing.T) {
	rg := startRig(t, SidecarConfig{})
	rg.sc.Submit(&dtpb.OrchestratorRequest{InstanceId: "instance-1"})
	ctx, cancel := context.WithCancel(context.Background())
	st, err := dtpb.GetWorkItems(ctx, rg.conn, &dtpb.GetWorkItemsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wi, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := raw(t, rg, chunk(wi.CompletionToken, 0, true, 0)); err != nil {
		t.Fatal(err)
	}
	cancel()
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
	}
	tok := rg.lease(t, "instance-1") // blocks until the disconnect requeued it
	if tok == wi.CompletionToken {
		t.Fatalf("redelivered with the old token")
	}
	if n := rg.sc.BufferedTokens(); n != 0 {
		t.Errorf("%d buffers after disconnect, want 0", n)
	}
	if err := raw(t, rg, chunk(wi.CompletionToken, 1, false, 1)); status.Code(err) != codes.NotFound {
		t.Errorf("old token after disconnect: got %v, want NotFound", err)
	}
}

// TestSidecarForgetsCompletedTokens: a resent final message is acknowledged
// as a duplicate within the TTL, and the token is forgotten after it.
func TestSidecarForgetsCompletedTokens(t *testing.T) {
	var clk clock
	rg := startRig(t, SidecarConfig{Now: clk.now, BufferTTL: time.Minute})
	tok := rg.lease(t, "instance-1")
	final := chunk(tok, -1, false, 1)
	for i := range 2 {
		if err := raw(t, rg, final); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if n := len(rg.sc.Completions()); n != 1 {
		t.Fatalf("%d completions, want 1 (the resend is a duplicate)", n)
	}
	clk.advance(time.Minute + time.Nanosecond)
	rg.sc.ExpireBuffers()
	if err := raw(t, rg, final); status.Code(err) != codes.NotFound {
		t.Fatalf("resend after the TTL: got %v, want NotFound", err)
	}
}

// TestStartInstance: StartInstance queues a work item delivered on
// GetWorkItems; a second start of a running instance is AlreadyExists; once
// completed, the id can be started again; an empty id gets a generated one.
func TestStartInstance(t *testing.T) {
	rg := startRig(t, SidecarConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := dtpb.GetWorkItems(ctx, rg.conn, &dtpb.GetWorkItemsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dtpb.StartInstance(ctx, rg.conn, &dtpb.CreateInstanceRequest{InstanceId: "order-1"}); err != nil {
		t.Fatal(err)
	}
	wi, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := wi.GetOrchestratorRequest().GetInstanceId(); got != "order-1" || wi.GetCompletionToken() == "" {
		t.Fatalf("work item for %q with token %q, want order-1 with a token", got, wi.GetCompletionToken())
	}
	_, err = dtpb.StartInstance(ctx, rg.conn, &dtpb.CreateInstanceRequest{InstanceId: "order-1"})
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second start: got %v, want AlreadyExists", err)
	}
	s := rg.sender(t, PlannerConfig{})
	r := response(task(0, 10))
	r.InstanceId = "order-1"
	if _, err := s.Complete(ctx, withToken(r, wi.GetCompletionToken())); err != nil {
		t.Fatal(err)
	}
	if _, err := dtpb.StartInstance(ctx, rg.conn, &dtpb.CreateInstanceRequest{InstanceId: "order-1"}); err != nil {
		t.Fatalf("start after completion: %v", err)
	}
	got, err := dtpb.StartInstance(ctx, rg.conn, &dtpb.CreateInstanceRequest{})
	if err != nil || got.GetInstanceId() == "" {
		t.Fatalf("start with empty id: got %v, %v; want a generated id", got, err)
	}
}

// TestOnAppliedKeepsNothing: with OnApplied the completion is handed over
// once, counted, and not kept (a standalone sidecar under a flood used to
// hold every second's payloads until it drained them).
func TestOnAppliedKeepsNothing(t *testing.T) {
	var got []Completion
	var mu sync.Mutex
	rg := startRig(t, SidecarConfig{OnApplied: func(c Completion) {
		mu.Lock()
		got = append(got, c)
		mu.Unlock()
	}})
	r := fiveChunks(t)
	r.CompletionToken = rg.lease(t, r.InstanceId)
	if _, err := rg.sender(t, PlannerConfig{MaxChunkBytes: 1 << 20}).Complete(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Chunks != 5 {
		t.Fatalf("OnApplied got %d completions, want 1 of 5 chunks", len(got))
	}
	sameActions(t, got[0].Actions, r.Actions)
	if n := rg.sc.Applied(); n != 1 {
		t.Errorf("Applied() = %d, want 1", n)
	}
	if cs := rg.sc.Completions(); len(cs) != 0 {
		t.Errorf("kept %d completions with OnApplied, want none", len(cs))
	}
}

// TestMaxKeptCompletions: without OnApplied the sidecar keeps the latest
// MaxKeptCompletions and counts the ones it forgot.
func TestMaxKeptCompletions(t *testing.T) {
	rg := startRig(t, SidecarConfig{MaxKeptCompletions: 2})
	snd := rg.sender(t, PlannerConfig{})
	toks := rg.leaseN(t, 5)
	for i, tok := range toks {
		r := response(task(int32(i), 10))
		r.InstanceId, r.CompletionToken = "instance-1", tok
		if _, err := snd.Complete(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	cs := rg.sc.Completions()
	if len(cs) != 2 || cs[0].CompletionToken != toks[3] || cs[1].CompletionToken != toks[4] {
		t.Fatalf("kept %d completions, want the last two of %v", len(cs), toks)
	}
	if n, f := rg.sc.Applied(), rg.sc.ForgottenCompletions(); n != 5 || f != 3 {
		t.Errorf("Applied %d, forgotten %d; want 5, 3", n, f)
	}
	if _, err := NewSidecar(SidecarConfig{MaxKeptCompletions: -1}); err == nil || !strings.Contains(err.Error(), "MaxKeptCompletions") {
		t.Errorf("MaxKeptCompletions -1: err %v, want one naming the field", err)
	}
}

// TestStreamWorkers: the sidecar runs its calls on the goroutines it
// keeps (SidecarConfig.StreamWorkers), whose stacks stay grown, not on a
// new goroutine per call; grpc.NumStreamWorkers(0) among ServerOptions
// overrides it. Each call's goroutine is seen by an interceptor.
func TestStreamWorkers(t *testing.T) {
	const calls = 40
	for _, tc := range []struct {
		name    string
		cfg     SidecarConfig
		atMost  int // distinct goroutines the calls ran on
		atLeast int
	}{
		{name: "default", atMost: DefaultStreamWorkers, atLeast: 1},
		{name: "two", cfg: SidecarConfig{StreamWorkers: 2}, atMost: 2, atLeast: 1},
		{name: "overridden", cfg: SidecarConfig{ServerOptions: []grpc.ServerOption{grpc.NumStreamWorkers(0)}}, atMost: calls, atLeast: calls},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			seen := map[string]int{}
			cfg := tc.cfg
			cfg.ServerOptions = append(cfg.ServerOptions, grpc.ChainUnaryInterceptor(
				func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
					mu.Lock()
					seen[goroutineID(t)]++
					mu.Unlock()
					return handler(ctx, req)
				}))
			rg := startRig(t, cfg)
			for i := range calls {
				if _, err := dtpb.StartInstance(context.Background(), rg.conn, &dtpb.CreateInstanceRequest{InstanceId: fmt.Sprint("i-", i)}); err != nil {
					t.Fatal(err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if n := len(seen); n > tc.atMost || n < tc.atLeast {
				t.Fatalf("%d calls ran on %d goroutines, want %d to %d", calls, n, tc.atLeast, tc.atMost)
			}
		})
	}
}

// goroutineID is the calling goroutine's id, from the first line of its
// stack ("goroutine 42 [running]:").
func goroutineID(t *testing.T) string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	if len(f) < 2 || f[0] != "goroutine" {
		t.Errorf("stack starts %q, want \"goroutine N\"", buf)
		return ""
	}
	return f[1]
}

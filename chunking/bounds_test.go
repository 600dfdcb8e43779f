package chunking

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

// meterRig returns a MeterProvider and a function that collects its
// counters as sums keyed "name" or "name/reason".
func meterRig(t *testing.T) (*sdkmetric.MeterProvider, func() map[string]int64) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, func() map[string]int64 {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		sums := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				d, ok := m.Data.(metricdata.Sum[int64])
				if !ok {
					continue
				}
				for _, p := range d.DataPoints {
					key := m.Name
					if v, ok := p.Attributes.Value(AttrReason); ok {
						key += "/" + v.AsString()
					}
					sums[key] += p.Value
				}
			}
		}
		return sums
	}
}

// wantRejected checks that err has code c and that its message names every
// one of words (the bound, its value, how to raise it).
func wantRejected(t *testing.T, what string, err error, c codes.Code, words ...string) {
	t.Helper()
	if status.Code(err) != c {
		t.Fatalf("%s: got %v, want %v", what, err, c)
	}
	msg := status.Convert(err).Message()
	for _, w := range words {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: message %q does not name %q", what, msg, w)
		}
	}
}

// TestSidecarTokenBounds: a chunk over a token's caps, or a message over
// the gRPC receive limit, is refused with ResourceExhausted and a message
// naming the bound; nothing of it is buffered.
func TestSidecarTokenBounds(t *testing.T) {
	n := proto.Size(chunk("0123456789abcdef-1", 0, true, 0))
	for _, tc := range []struct {
		name  string
		cfg   SidecarConfig
		words []string
	}{
		{"chunks", SidecarConfig{MaxBufferedChunks: 1},
			[]string{"MaxBufferedChunks = 1", "SidecarConfig.MaxBufferedBytes or .MaxBufferedChunks", "--max-token-chunks"}},
		{"bytes", SidecarConfig{MaxBufferedBytes: n + n/2},
			[]string{"MaxBufferedBytes = " + strconv.Itoa(n+n/2), "--max-token-bytes"}},
		{"receive limit", SidecarConfig{MaxRecvMsgSize: n / 2},
			[]string{"larger than max", strconv.Itoa(n / 2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg := startRig(t, tc.cfg)
			tok := rg.lease(t, "instance-1")
			err := raw(t, rg, chunk(tok, 0, true, 0))
			if tc.name == "receive limit" {
				wantRejected(t, "chunk 0", err, codes.ResourceExhausted, tc.words...)
				if got := rg.sc.BufferedTokens(); got != 0 {
					t.Errorf("%d tokens buffered, want 0", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantRejected(t, "chunk 1", raw(t, rg, chunk(tok, 1, true, 1)), codes.ResourceExhausted, tc.words...)
			if got := rg.sc.BufferedTokens(); got != 0 {
				t.Errorf("%d tokens buffered after a chunk over the token's cap, want 0 (dropped)", got)
			}
		})
	}
}

func TestSidecarConfigInvalid(t *testing.T) {
	for _, tc := range []struct {
		cfg  SidecarConfig
		want string
	}{
		{SidecarConfig{BufferTTL: -1}, "SidecarConfig.BufferTTL is -1ns, want ≥ 0"},
		{SidecarConfig{MaxBufferedBytes: -1}, "SidecarConfig.MaxBufferedBytes is -1, want ≥ 0"},
		{SidecarConfig{MaxBufferedChunks: -1}, "SidecarConfig.MaxBufferedChunks is -1, want ≥ 0"},
		{SidecarConfig{MaxRecvMsgSize: -1}, "SidecarConfig.MaxRecvMsgSize is -1, want ≥ 0"},
		{SidecarConfig{MaxTotalBufferedBytes: -1}, "SidecarConfig.MaxTotalBufferedBytes is -1, want ≥ 0"},
		{SidecarConfig{MaxPendingInstances: -1}, "SidecarConfig.MaxPendingInstances is -1, want ≥ 0"},
		{SidecarConfig{MaxInstanceIDBytes: -1}, "SidecarConfig.MaxInstanceIDBytes is -1, want ≥ 0"},
		{SidecarConfig{StreamWorkers: -1}, "SidecarConfig.StreamWorkers is -1, want ≥ 0"},
		{SidecarConfig{StreamWorkers: MaxStreamWorkers + 1}, "SidecarConfig.StreamWorkers is 8193, want at most 8192"},
		{SidecarConfig{MaxTotalBufferedBytes: 1 << 20, MaxRecvMsgSize: 2 << 20}, "SidecarConfig.MaxRecvMsgSize is 2097152, over MaxTotalBufferedBytes = 1048576"},
		{SidecarConfig{MaxConnections: -1}, "SidecarConfig.MaxConnections is -1, want ≥ 0"},
		{SidecarConfig{MaxStreamsPerConnection: -1}, "SidecarConfig.MaxStreamsPerConnection is -1, want ≥ 0"},
		{SidecarConfig{MaxCalls: -1}, "SidecarConfig.MaxCalls is -1, want ≥ 0"},
	} {
		if _, err := NewSidecar(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewSidecar(%+v): got %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
}

// leaseN submits n work items for instance-1 and receives them on one
// GetWorkItems stream (a second stream would race the first for them),
// returning their tokens. The stream stays open until the test ends.
func (rg *rig) leaseN(t *testing.T, n int) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := dtpb.GetWorkItems(ctx, rg.conn, &dtpb.GetWorkItemsRequest{})
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
	var toks []string
	for range n {
		rg.sc.Submit(&dtpb.OrchestratorRequest{InstanceId: "instance-1"})
		wi, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, wi.GetCompletionToken())
	}
	return toks
}

func appliedIDs(sc *Sidecar, tok string) []int32 {
	for _, c := range sc.Completions() {
		if c.CompletionToken == tok {
			return ids(c.Actions)
		}
	}
	return nil
}

// TestSidecarTotalBufferedBytes: the partial completions of all tokens
// together are bounded by MaxTotalBufferedBytes. A partial chunk over it is
// refused with ResourceExhausted before it is buffered, and the token's
// buffer is left as it was, so the same chunk succeeds once a completion,
// an abandon or the TTL has released room. A final chunk is never refused
// for the total: applying it frees its buffer.
func TestSidecarTotalBufferedBytes(t *testing.T) {
	var clk clock
	mp, sums := meterRig(t)
	// Every chunk here holds one action and a token of the same length, so
	// chunks are n bytes give or take a byte: room for two, not three.
	n := proto.Size(chunk("0123456789abcdef-1", 0, true, 0))
	total := 2*n + n/2
	rg := startRig(t, SidecarConfig{Now: clk.now, BufferTTL: time.Minute, MaxTotalBufferedBytes: total, MaxRecvMsgSize: total, MeterProvider: mp})
	toks := rg.leaseN(t, 4)
	a, b, c, d := toks[0], toks[1], toks[2], toks[3]
	send := func(what string, r *dtpb.OrchestratorResponse) {
		t.Helper()
		if err := raw(t, rg, r); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	wantBuffered := func(what string, tokens int, chunks ...*dtpb.OrchestratorResponse) {
		t.Helper()
		want := 0
		for _, c := range chunks {
			want += heldBytes(proto.Size(c), len(c.GetActions()))
		}
		if got := rg.sc.BufferedBytes(); got != want {
			t.Errorf("%s: %d bytes buffered, want %d", what, got, want)
		}
		if got := rg.sc.BufferedTokens(); got != tokens {
			t.Errorf("%s: %d tokens buffered, want %d", what, got, tokens)
		}
	}
	raise := []string{"MaxTotalBufferedBytes", strconv.Itoa(total), "SidecarConfig.MaxTotalBufferedBytes", "--max-total-buffered-bytes"}

	a0, b0 := chunk(a, 0, true, 0), chunk(b, 0, true, 10)
	send("a0", a0)
	send("b0", b0)
	wantBuffered("two chunks", 2, a0, b0)

	// Full: the next chunk of a buffered token, and chunk 0 of a new one,
	// are refused without touching any buffer.
	a1 := chunk(a, 1, true, 1)
	wantRejected(t, "a1 over the total", raw(t, rg, a1), codes.ResourceExhausted, raise...)
	wantRejected(t, "c0 over the total", raw(t, rg, chunk(c, 0, true, 20)), codes.ResourceExhausted, raise...)
	wantBuffered("after the refusals", 2, a0, b0)

	// A final chunk completes even when the total is reached, and frees b's
	// buffer: a's refused chunk now goes through, in order.
	send("b1 (final)", chunk(b, 1, false, 11))
	wantBuffered("b completed", 1, a0)
	send("a1 (retried)", a1)
	send("a2 (final)", chunk(a, 2, false, 2))
	wantBuffered("a completed", 0)
	if got := appliedIDs(rg.sc, a); !slices.Equal(got, []int32{0, 1, 2}) {
		t.Errorf("a applied %v, want [0 1 2]", got)
	}
	if got := appliedIDs(rg.sc, b); !slices.Equal(got, []int32{10, 11}) {
		t.Errorf("b applied %v, want [10 11]", got)
	}

	// An abandon and the TTL release bytes too.
	c0 := chunk(c, 0, true, 20)
	send("c0", c0)
	wantBuffered("c0", 1, c0)
	if err := rg.conn.Invoke(context.Background(), dtpb.MethodAbandonTaskOrchestratorWorkItem,
		&dtpb.AbandonOrchestrationTaskRequest{CompletionToken: c}, &dtpb.AbandonOrchestrationTaskResponse{}); err != nil {
		t.Fatal(err)
	}
	wantBuffered("c abandoned", 0)
	d0, d1 := chunk(d, 0, true, 30), chunk(d, 1, true, 31)
	send("d0", d0)
	send("d1", d1)
	wantBuffered("d0 d1", 1, d0, d1)
	clk.advance(time.Minute + time.Nanosecond)
	if got := rg.sc.ExpireBuffers(); got != 1 {
		t.Errorf("expired %d buffers, want 1", got)
	}
	wantBuffered("d expired", 0)

	if got := sums()[MetricSidecarRejections+"/"+ReasonTotalBufferedBytes]; got != 2 {
		t.Errorf("%s{%s} = %d, want 2", MetricSidecarRejections, ReasonTotalBufferedBytes, got)
	}
}

// TestSidecarPendingInstances: StartInstance refuses an instance over
// MaxPendingInstances (started, not yet completed) with ResourceExhausted,
// and an instance id longer than MaxInstanceIDBytes with InvalidArgument;
// a completion makes room again.
func TestSidecarPendingInstances(t *testing.T) {
	mp, sums := meterRig(t)
	rg := startRig(t, SidecarConfig{MaxPendingInstances: 2, MaxInstanceIDBytes: 8, MeterProvider: mp})
	ctx := context.Background()
	start := func(id string) error {
		_, err := dtpb.StartInstance(ctx, rg.conn, &dtpb.CreateInstanceRequest{InstanceId: id})
		return err
	}
	for _, id := range []string{"order-1", "order-2"} {
		if err := start(id); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
	}
	wantRejected(t, "third instance", start("order-3"), codes.ResourceExhausted,
		"MaxPendingInstances", "2", "SidecarConfig.MaxPendingInstances", "--max-pending-instances")
	wantRejected(t, "generated id over the bound", start(""), codes.ResourceExhausted, "MaxPendingInstances")
	wantRejected(t, "9-byte id", start("order-100"), codes.InvalidArgument,
		"MaxInstanceIDBytes", "8", "SidecarConfig.MaxInstanceIDBytes", "--max-instance-id-bytes")
	if got := rg.sc.PendingInstances(); got != 2 {
		t.Errorf("%d pending instances, want 2", got)
	}

	// Leasing does not make room (the instance is still running); completing does.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := dtpb.GetWorkItems(sctx, rg.conn, &dtpb.GetWorkItemsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wi, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	wantRejected(t, "third instance after a lease", start("order-3"), codes.ResourceExhausted, "MaxPendingInstances")
	r := response(task(0, 10))
	r.InstanceId = wi.GetOrchestratorRequest().GetInstanceId()
	if err := raw(t, rg, withToken(r, wi.GetCompletionToken())); err != nil {
		t.Fatal(err)
	}
	if got := rg.sc.PendingInstances(); got != 1 {
		t.Errorf("%d pending instances after a completion, want 1", got)
	}
	if err := start("order-3"); err != nil {
		t.Fatalf("start after a completion: %v", err)
	}
	s := sums()
	for reason, want := range map[string]int64{ReasonPendingInstances: 3, ReasonInstanceIDBytes: 1} {
		if got := s[MetricSidecarRejections+"/"+reason]; got != want {
			t.Errorf("%s{%s} = %d, want %d", MetricSidecarRejections, reason, got, want)
		}
	}
}

// TestSidecarResendCompared: a chunk sent again with the index of one
// already accepted is acknowledged only if it is identical; one with other
// content is refused with FailedPrecondition, counted as a protocol error,
// and the buffer is left as it was.
func TestSidecarResendCompared(t *testing.T) {
	for _, tc := range []struct {
		name   string
		resend func(tok string) *dtpb.OrchestratorResponse
		want   codes.Code
	}{
		{"identical chunk 1", func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 1, true, 1) }, codes.OK},
		{"identical chunk 0", func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 0, true, 0) }, codes.OK},
		{"chunk 1 with another action", func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 1, true, 5) }, codes.FailedPrecondition},
		{"chunk 1 with an extra action", func(tok string) *dtpb.OrchestratorResponse { return chunk(tok, 1, true, 1, 6) }, codes.FailedPrecondition},
		{"chunk 0 with another payload", func(tok string) *dtpb.OrchestratorResponse {
			r := chunk(tok, 0, true, 0)
			r.Actions[0].GetScheduleTask().Input.Value += "!"
			return r
		}, codes.FailedPrecondition},
		{"chunk 1 with another custom status", func(tok string) *dtpb.OrchestratorResponse {
			r := chunk(tok, 1, true, 1)
			r.CustomStatus = wrapperspb.String("other")
			return r
		}, codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mp, sums := meterRig(t)
			rg := startRig(t, SidecarConfig{MeterProvider: mp})
			tok := rg.lease(t, "instance-1")
			c0, c1 := chunk(tok, 0, true, 0), chunk(tok, 1, true, 1)
			for _, c := range []*dtpb.OrchestratorResponse{c0, c1} {
				if err := raw(t, rg, c); err != nil {
					t.Fatal(err)
				}
			}
			err := raw(t, rg, tc.resend(tok))
			if status.Code(err) != tc.want {
				t.Fatalf("resend: got %v, want %v", err, tc.want)
			}
			want := heldBytes(proto.Size(c0), 1) + heldBytes(proto.Size(c1), 1)
			if got := rg.sc.BufferedBytes(); got != want {
				t.Errorf("%d bytes buffered after the resend, want %d (unchanged)", got, want)
			}
			s := sums()
			wantDups, wantErrs := int64(1), int64(0)
			if tc.want != codes.OK {
				wantDups, wantErrs = 0, 1
				wantRejected(t, "resend", err, tc.want, "differs", "chunk")
			}
			if got := s[MetricDuplicates]; got != wantDups {
				t.Errorf("%s = %d, want %d", MetricDuplicates, got, wantDups)
			}
			if got := s[MetricProtocolErrors+"/"+ReasonConflict]; got != wantErrs {
				t.Errorf("%s{%s} = %d, want %d", MetricProtocolErrors, ReasonConflict, got, wantErrs)
			}
			// The buffer is intact: the completion finishes with what was
			// accepted first.
			if err := raw(t, rg, chunk(tok, 2, false, 2)); err != nil {
				t.Fatal(err)
			}
			if got := appliedIDs(rg.sc, tok); !slices.Equal(got, []int32{0, 1, 2}) {
				t.Errorf("applied %v, want [0 1 2]", got)
			}
			cs := rg.sc.Completions()
			if in := cs[0].Actions[0].GetScheduleTask().GetInput().GetValue(); strings.HasSuffix(in, "!") {
				t.Errorf("chunk 0's payload was replaced by the refused resend")
			}
		})
	}
}

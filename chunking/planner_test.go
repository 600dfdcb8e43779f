package chunking

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

type mode struct {
	alg  Algorithm
	acct Accounting
	lp   bool
}

func (m mode) String() string { return fmt.Sprintf("%v/%v/lp=%v", m.alg, m.acct, m.lp) }

func allModes() []mode {
	var ms []mode
	for _, a := range []Algorithm{Cached, Legacy} {
		for _, ac := range []Accounting{Wire, Payload} {
			for _, lp := range []bool{false, true} {
				ms = append(ms, mode{a, ac, lp})
			}
		}
	}
	return ms
}

func plan(t testing.TB, m mode, max int, r *dtpb.OrchestratorResponse) *Plan {
	t.Helper()
	p := newPlanner(t, PlannerConfig{MaxChunkBytes: max, Algorithm: m.alg, Accounting: m.acct, LargePayloads: m.lp})
	pl, err := p.Plan(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	checkMatrix(t, r, pl)
	if m.alg == Cached {
		for i, c := range pl.Chunks {
			if got := proto.Size(c); got != pl.Sizes[i] {
				t.Errorf("chunk %d: planned size %d, serialized %d", i, pl.Sizes[i], got)
			}
		}
	}
	return pl
}

const half = 600 << 10

// vector is one test vector of reference §2.9 (1–8); want checks the plan.
type vector struct {
	name  string
	modes func(mode) bool
	build func(t testing.TB, m mode) (*dtpb.OrchestratorResponse, int)
	want  func(t *testing.T, m mode, r *dtpb.OrchestratorResponse, max int, pl *Plan)
}

func anyMode(mode) bool { return true }

//nolint:staticcheck // SA1019
func vectors() []vector {
	two := func(t testing.TB) *dtpb.OrchestratorResponse {
		return response(actionOfSize(t, 0, half), actionOfSize(t, 1, half))
	}
	return []vector{
		{"1 max equals response size", anyMode, func(t testing.TB, m mode) (*dtpb.OrchestratorResponse, int) {
			r := two(t)
			return r, proto.Size(r)
		}, func(t *testing.T, m mode, r *dtpb.OrchestratorResponse, max int, pl *Plan) {
			if !pl.Direct || pl.Chunks[0] != r || pl.Chunks[0].IsPartial || pl.Chunks[0].ChunkIndex != nil {
				t.Fatalf("got direct=%v, want the same object, isPartial false, chunkIndex absent", pl.Direct)
			}
		}},
		{"2 max is size-1, actions fit", anyMode, func(t testing.TB, m mode) (*dtpb.OrchestratorResponse, int) {
			r := two(t)
			return r, proto.Size(r) - 1
		}, func(t *testing.T, m mode, r *dtpb.OrchestratorResponse, max int, pl *Plan) {
			if m.acct == Wire {
				// Envelope and framing count: the message no longer fits,
				// so it is split in two, each within the limit.
				if len(pl.Chunks) != 2 {
					t.Fatalf("wire: got %d chunks, want 2", len(pl.Chunks))
				}
				for i, c := range pl.Chunks {
					if s := proto.Size(c); s > max {
						t.Errorf("chunk %d: %d bytes > limit %d", i, s, max)
					}
				}
				return
			}
			if pl.Direct || len(pl.Chunks) != 1 {
				t.Fatalf("got direct=%v chunks=%d, want one rebuilt message", pl.Direct, len(pl.Chunks))
			}
			c := pl.Chunks[0]
			if c.NumEventsProcessed != nil || c.IsPartial || c.ChunkIndex != nil || c.OrchestrationTraceContext.GetSpanID().GetValue() != "span-1" {
				t.Errorf("got nep=%v partial=%v index=%v span=%v", c.NumEventsProcessed, c.IsPartial, c.ChunkIndex, c.OrchestrationTraceContext)
			}
			if got := ids(c.Actions); !slices.Equal(got, []int32{0, 1}) {
				t.Errorf("actions %v, want [0 1]", got)
			}
		}},
		{"3 action sizes sum to max", func(m mode) bool { return m.acct == Payload }, func(t testing.TB, m mode) (*dtpb.OrchestratorResponse, int) {
			r := two(t)
			return r, 2 * half
		}, func(t *testing.T, m mode, r *dtpb.OrchestratorResponse, max int, pl *Plan) {
			if pl.Direct || len(pl.Chunks) != 1 || len(pl.Chunks[0].Actions) != 2 {
				t.Fatalf("got direct=%v chunks=%d, want one chunk with both actions", pl.Direct, len(pl.Chunks))
			}
		}},
		{"4 one byte less splits in two", anyMode, func(t testing.TB, m mode) (*dtpb.OrchestratorResponse, int) {
			r := two(t)
			if m.acct == Wire {
				return r, proto.Size(r) - 1
			}
			return r, 2*half - 1
		}, func(t *testing.T, m mode, r *dtpb.OrchestratorResponse, max int, pl *Plan) {
			if len(pl.Chunks) != 2 {
				t.Fatalf("got %d chunks, want 2", len(pl.Chunks))
			}
			c0, c1 := pl.Chunks[0], pl.Chunks[1]
			if !slices.Equal(ids(c0.Actions), []int32{0}) || !c0.IsPartial || c0.ChunkIndex.GetValue() != 0 || c0.ChunkIndex == nil {
				t.Errorf("chunk 0: ids %v partial %v index %v, want [0] true 0", ids(c0.Actions), c0.IsPartial, c0.ChunkIndex)
			}
			if !slices.Equal(ids(c1.Actions), []int32{1}) || c1.IsPartial || c1.ChunkIndex.GetValue() != 1 {
				t.Errorf("chunk 1: ids %v partial %v index %v, want [1] false 1", ids(c1.Actions), c1.IsPartial, c1.ChunkIndex)
			}
		}},
		{"5 second action oversized", func(m mode) bool { return !m.lp }, func(t testing.TB, m mode) (*dtpb.OrchestratorResponse, int) {
			return response(actionOfSize(t, 0, 1000), actionOfSize(t, 1, 1153434), actionOfSize(t, 2, 1000)), 1 << 20
		}, func(t *testing.T, m mode, r *dtpb.OrchestratorResponse, max int, pl *Plan) {
			const msg = "A single orchestrator action of type ScheduleTask with id 1 exceeds the 1.00MB limit: 1.10MB. Enable large-payload externalization to Azure Blob Storage to support oversized actions."
			checkFailure(t, r, pl, msg)
			if pl.ActionSizings != 2 || pl.ResponseSizings != 0 {
				t.Errorf("sizings: %d actions, %d responses, want 2, 0", pl.ActionSizings, pl.ResponseSizings)
			}
		}},
		{"6 four oversized actions name id 0", func(m mode) bool { return !m.lp }, func(t testing.TB, m mode) (*dtpb.OrchestratorResponse, int) {
			return response(task(0, 4_200_000), task(1, 4_200_000), task(2, 4_200_000), task(3, 4_200_000)), 0
		}, func(t *testing.T, m mode, r *dtpb.OrchestratorResponse, max int, pl *Plan) {
			checkFailure(t, r, pl, "A single orchestrator action of type ScheduleTask with id 0 exceeds the 3.90MB limit: 4.01MB. Enable large-payload externalization to Azure Blob Storage to support oversized actions.")
			if pl.ActionSizings != 1 {
				t.Errorf("sized %d actions, want exactly 1 (first offender)", pl.ActionSizings)
			}
		}},
		{"7 LargePayloads keeps an oversized action", func(m mode) bool { return m.lp }, func(t testing.TB, m mode) (*dtpb.OrchestratorResponse, int) {
			return response(task(0, 1000), task(1, 1_200_000), task(2, 1000)), 1 << 20
		}, func(t *testing.T, m mode, r *dtpb.OrchestratorResponse, max int, pl *Plan) {
			if pl.Oversized != nil || len(pl.Chunks) != 3 {
				t.Fatalf("got oversized=%v chunks=%d, want 3 chunks and no failure", pl.Oversized, len(pl.Chunks))
			}
			if got := ids(pl.Chunks[1].Actions); !slices.Equal(got, []int32{1}) {
				t.Errorf("oversized action's chunk holds %v, want [1] alone", got)
			}
			for _, c := range pl.Chunks {
				for _, a := range c.Actions {
					if a.GetCompleteOrchestration() != nil {
						t.Errorf("a CompleteOrchestration action was synthesised")
					}
				}
			}
		}},
		{"8 three chunks with all envelope fields", anyMode, func(t testing.TB, m mode) (*dtpb.OrchestratorResponse, int) {
			return response(actionOfSize(t, 0, 700<<10), actionOfSize(t, 1, 700<<10), actionOfSize(t, 2, 700<<10)), 1 << 20
		}, func(t *testing.T, m mode, r *dtpb.OrchestratorResponse, max int, pl *Plan) {
			if len(pl.Chunks) != 3 {
				t.Fatalf("got %d chunks, want 3", len(pl.Chunks))
			}
			for i, c := range pl.Chunks {
				if got := ids(c.Actions); !slices.Equal(got, []int32{int32(i)}) {
					t.Errorf("chunk %d: ids %v, want [%d]", i, got, i)
				}
			}
		}},
	}
}

//nolint:staticcheck // SA1019
func checkFailure(t *testing.T, r *dtpb.OrchestratorResponse, pl *Plan, msg string) {
	t.Helper()
	if pl.Oversized == nil || len(pl.Chunks) != 1 {
		t.Fatalf("got oversized=%v chunks=%d, want one failure completion", pl.Oversized, len(pl.Chunks))
	}
	f := pl.Chunks[0]
	if f.InstanceId != r.InstanceId || f.CompletionToken != r.CompletionToken || !proto.Equal(f.OrchestrationTraceContext, r.OrchestrationTraceContext) {
		t.Errorf("failure completion lost instanceId, token or trace context")
	}
	if f.CustomStatus != nil || f.RequiresHistory || f.NumEventsProcessed != nil || f.IsPartial || f.ChunkIndex != nil {
		t.Errorf("failure completion carries customStatus/requiresHistory/nep/isPartial/chunkIndex")
	}
	if len(f.Actions) != 1 || f.Actions[0].Id != 0 {
		t.Fatalf("failure completion has %d actions, want one with id 0", len(f.Actions))
	}
	co := f.Actions[0].GetCompleteOrchestration()
	fd := co.GetFailureDetails()
	if co.GetOrchestrationStatus() != dtpb.OrchestrationStatus_ORCHESTRATION_STATUS_FAILED || fd.GetErrorType() != "System.InvalidOperationException" ||
		!fd.GetIsNonRetriable() || fd.GetStackTrace() != nil || fd.GetInnerFailure() != nil {
		t.Errorf("failure details %v", fd)
	}
	if fd.GetErrorMessage() != msg {
		t.Errorf("message\n got %q\nwant %q", fd.GetErrorMessage(), msg)
	}
	if pl.Oversized.Error() != msg {
		t.Errorf("error %q, want %q", pl.Oversized.Error(), msg)
	}
}

func TestVectors(t *testing.T) {
	for _, v := range vectors() {
		for _, m := range allModes() {
			if !v.modes(m) {
				continue
			}
			t.Run(v.name+"/"+m.String(), func(t *testing.T) {
				r, max := v.build(t, m)
				pl := plan(t, m, max, r)
				v.want(t, m, r, max, pl)
			})
		}
	}
}

func TestNewPlannerRejectsInvalid(t *testing.T) {
	for _, tc := range []struct {
		cfg  PlannerConfig
		want string
	}{
		{PlannerConfig{MaxChunkBytes: MinMaxChunkBytes - 1}, "chunking.max_chunk_bytes: 1048575 is out of range (valid: 1048576..4089446)"},
		{PlannerConfig{MaxChunkBytes: DefaultMaxChunkBytes + 1}, "chunking.max_chunk_bytes: 4089447 is out of range (valid: 1048576..4089446)"},
		{PlannerConfig{Algorithm: 7}, "chunking.algorithm: invalid value algorithm(7) (valid: cached, legacy)"},
		{PlannerConfig{Accounting: 7}, "chunking.accounting: invalid value accounting(7) (valid: wire, payload)"},
	} {
		if _, err := NewPlanner(tc.cfg); err == nil || err.Error() != tc.want {
			t.Errorf("NewPlanner(%+v): got %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := ParseAlgorithm("fast"); err == nil || !strings.Contains(err.Error(), "valid: cached, legacy") {
		t.Errorf("ParseAlgorithm: got %v", err)
	}
	if _, err := ParseAccounting("x"); err == nil || !strings.Contains(err.Error(), "valid: wire, payload") {
		t.Errorf("ParseAccounting: got %v", err)
	}
}

// TestSizingCounts pins the outer sizing calls of the seed's table: N
// actions, C chunks.
func TestSizingCounts(t *testing.T) {
	const n = 64
	acts := make([]*dtpb.OrchestratorAction, n)
	for i := range acts {
		acts[i] = task(int32(i), 128<<10)
	}
	chunked := response(acts...)
	direct := response(acts[:8]...)
	for _, tc := range []struct {
		m                mode
		r                *dtpb.OrchestratorResponse
		actions, respons int
	}{
		{mode{Cached, Payload, false}, direct, 8, 0},
		{mode{Legacy, Payload, false}, direct, 8, 1},
		{mode{Cached, Payload, true}, direct, 0, 1},
		{mode{Legacy, Payload, true}, direct, 0, 1},
		{mode{Cached, Payload, false}, chunked, n, 0},
		{mode{Legacy, Payload, false}, chunked, 2*n + 3 - 1, 1},
		{mode{Cached, Payload, true}, chunked, n, 1},
		{mode{Legacy, Payload, true}, chunked, n + 3 - 1, 1},
	} {
		pl := plan(t, tc.m, 0, tc.r)
		if tc.r == chunked && len(pl.Chunks) != 3 {
			t.Fatalf("%v: %d chunks, want 3", tc.m, len(pl.Chunks))
		}
		if pl.ActionSizings != tc.actions || pl.ResponseSizings != tc.respons {
			t.Errorf("%v, %d actions: sized %d actions and %d responses, want %d and %d",
				tc.m, len(tc.r.Actions), pl.ActionSizings, pl.ResponseSizings, tc.actions, tc.respons)
		}
	}
}

// TestFailFastAllocs: rejecting the first of 10,000 actions costs the same
// allocations as rejecting the first of 10, and sizes one action.
func TestFailFastAllocs(t *testing.T) {
	p := newPlanner(t, PlannerConfig{})
	mk := func(n int) *dtpb.OrchestratorResponse {
		acts := []*dtpb.OrchestratorAction{task(0, DefaultMaxChunkBytes+1)}
		for i := 1; i < n; i++ {
			acts = append(acts, task(int32(i), 10))
		}
		return response(acts...)
	}
	small, large := mk(10), mk(10_000)
	ctx := context.Background()
	allocs := func(r *dtpb.OrchestratorResponse) float64 {
		return testing.AllocsPerRun(50, func() {
			pl, _ := p.Plan(ctx, r)
			if pl.ActionSizings != 1 || pl.Oversized == nil {
				panic(fmt.Sprintf("sized %d actions, oversized %v", pl.ActionSizings, pl.Oversized))
			}
		})
	}
	a10, a10k := allocs(small), allocs(large)
	// The race detector randomly drops sync.Pool items (fmt's printer), so
	// allow a pool miss or two; an O(n) size cache would show in bytes.
	if a10k > a10+2 {
		t.Errorf("allocs: %v for 10,000 actions, %v for 10: want equal (O(1))", a10k, a10)
	}
	bytesPerOp := func(r *dtpb.OrchestratorResponse) int64 {
		return testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = p.Plan(ctx, r)
			}
		}).AllocedBytesPerOp()
	}
	if b10, b10k := bytesPerOp(small), bytesPerOp(large); b10k > b10+512 {
		t.Errorf("bytes: %d per rejection of the first of 10,000 actions, %d of 10: want O(1) (an int per action would add 80,000)", b10k, b10)
	}
	if a10k > 20 {
		t.Errorf("allocs: %v per rejection, want a small constant (≤ 20)", a10k)
	}
}

func randomAction(rng *rand.Rand, id int32, size int) *dtpb.OrchestratorAction {
	s := strings.Repeat("p", size)
	a := &dtpb.OrchestratorAction{Id: id}
	switch rng.IntN(7) {
	case 0:
		a.OrchestratorActionType = &dtpb.OrchestratorAction_ScheduleTask{ScheduleTask: &dtpb.ScheduleTaskAction{
			Name: "t", Input: wrapperspb.String(s), Tags: map[string]string{"k": "v"}}}
	case 1:
		a.OrchestratorActionType = &dtpb.OrchestratorAction_CreateTimer{CreateTimer: &dtpb.CreateTimerAction{FireAt: timestamppb.New(timestamppb.Now().AsTime())}}
	case 2:
		a.OrchestratorActionType = &dtpb.OrchestratorAction_SendEvent{SendEvent: &dtpb.SendEventAction{
			Instance: &dtpb.OrchestrationInstance{InstanceId: "other"}, Name: "e", Data: wrapperspb.String(s)}}
	case 3:
		a.OrchestratorActionType = &dtpb.OrchestratorAction_CreateSubOrchestration{CreateSubOrchestration: &dtpb.CreateSubOrchestrationAction{
			InstanceId: "sub", Name: "o", Input: wrapperspb.String(s)}}
	case 4:
		a.OrchestratorActionType = &dtpb.OrchestratorAction_CompleteOrchestration{CompleteOrchestration: &dtpb.CompleteOrchestrationAction{
			OrchestrationStatus: dtpb.OrchestrationStatus_ORCHESTRATION_STATUS_COMPLETED, Result: wrapperspb.String(s),
			CarryoverEvents: []*dtpb.HistoryEvent{{EventId: 1}}}}
	case 5:
		a.OrchestratorActionType = &dtpb.OrchestratorAction_TerminateOrchestration{TerminateOrchestration: &dtpb.TerminateOrchestrationAction{
			InstanceId: "x", Reason: wrapperspb.String(s), Recurse: true}}
	default:
		a.OrchestratorActionType = &dtpb.OrchestratorAction_SendEntityMessage{SendEntityMessage: &dtpb.SendEntityMessageAction{
			EntityMessageType: &dtpb.SendEntityMessageAction_EntityOperationSignaled{EntityOperationSignaled: &dtpb.EntityOperationSignaledEvent{
				RequestId: "r", Operation: "op", Input: wrapperspb.String(s)}}}}
	}
	return a
}

// randomResponse: 0–20,000 actions of 0–3 MiB, kinds mixed, total payload
// bounded so the test stays in memory.
func randomResponse(rng *rand.Rand) *dtpb.OrchestratorResponse {
	var n, maxSize int
	switch rng.IntN(3) {
	case 0:
		n, maxSize = rng.IntN(20_001), 64
	case 1:
		n, maxSize = rng.IntN(200), 64<<10
	default:
		n, maxSize = rng.IntN(12), 3<<20
	}
	acts := make([]*dtpb.OrchestratorAction, n)
	for i := range acts {
		acts[i] = randomAction(rng, int32(i), rng.IntN(maxSize+1))
	}
	r := response(acts...)
	if rng.IntN(2) == 0 {
		r.CustomStatus = wrapperspb.String(strings.Repeat("s", rng.IntN(4096)))
	}
	return r
}

//nolint:staticcheck // SA1019
func TestPropertyCachedEqualsLegacy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	iters := 40
	if testing.Short() {
		iters = 10
	}
	ctx := context.Background()
	for it := range iters {
		r := randomResponse(rng)
		max := MinMaxChunkBytes + rng.IntN(DefaultMaxChunkBytes-MinMaxChunkBytes+1)
		acct := Accounting(rng.IntN(2))
		lp := rng.IntN(2) == 0
		cached := newPlanner(t, PlannerConfig{MaxChunkBytes: max, Accounting: acct, LargePayloads: lp})
		legacy := newPlanner(t, PlannerConfig{MaxChunkBytes: max, Accounting: acct, LargePayloads: lp, Algorithm: Legacy})
		pc, _ := cached.Plan(ctx, r)
		pg, _ := legacy.Plan(ctx, r)
		name := fmt.Sprintf("iter %d (%d actions, max %d, %v, lp=%v)", it, len(r.Actions), max, acct, lp)
		checkMatrix(t, r, pc)
		if len(pc.Chunks) != len(pg.Chunks) || pc.Direct != pg.Direct || (pc.Oversized == nil) != (pg.Oversized == nil) {
			t.Fatalf("%s: cached %d chunks direct=%v, legacy %d direct=%v", name, len(pc.Chunks), pc.Direct, len(pg.Chunks), pg.Direct)
		}
		for i := range pc.Chunks {
			if !proto.Equal(pc.Chunks[i], pg.Chunks[i]) {
				t.Fatalf("%s: chunk %d differs between cached and legacy", name, i)
			}
			if s := proto.Size(pc.Chunks[i]); s != pc.Sizes[i] {
				t.Fatalf("%s: chunk %d planned %d bytes, serialized %d", name, i, pc.Sizes[i], s)
			}
			if e, err := Encode(pc.Chunks[i], pc.Sizes[i]); err != nil {
				t.Fatalf("%s: chunk %d: %v", name, i, err)
			} else if want, _ := proto.Marshal(pc.Chunks[i]); !bytes.Equal(e.Bytes, want) {
				t.Fatalf("%s: chunk %d: Encode's bytes differ from proto.Marshal's", name, i)
			}
			if acct == Wire && pc.Oversized == nil {
				c := pc.Chunks[i]
				lone := len(c.Actions) == 1 && chunkEnvelopeBound(r, int32(i))+framed(proto.Size(c.Actions[0])) > max
				if s := proto.Size(c); s > max && !lone {
					t.Fatalf("%s: wire chunk %d is %d bytes > limit %d", name, i, s, max)
				}
			}
		}
	}
}

// TestPayloadOvershoot shows the .NET hazard wire accounting fixes: with
// many tiny actions, payload-accounted chunks exceed the limit on the wire.
func TestPayloadOvershoot(t *testing.T) {
	acts := make([]*dtpb.OrchestratorAction, 120_000)
	for i := range acts {
		acts[i] = &dtpb.OrchestratorAction{Id: int32(i), OrchestratorActionType: &dtpb.OrchestratorAction_CreateTimer{
			CreateTimer: &dtpb.CreateTimerAction{FireAt: &timestamppb.Timestamp{Seconds: 1_800_000_000, Nanos: 1}}}}
	}
	r := response(acts...)
	over := func(acct Accounting) int {
		pl := plan(t, mode{Cached, acct, false}, 1<<20, r)
		worst := 0
		for _, c := range pl.Chunks {
			worst = max(worst, proto.Size(c))
		}
		return worst
	}
	if w := over(Payload); w <= 1<<20 {
		t.Errorf("payload accounting: largest chunk %d bytes, want above the 1 MiB limit (the .NET overshoot)", w)
	}
	if w := over(Wire); w > 1<<20 {
		t.Errorf("wire accounting: largest chunk %d bytes > 1 MiB limit", w)
	}
}

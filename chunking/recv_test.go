package chunking

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

// decodeCases are messages for the borrowing decoder, by name; fast says
// whether it must decode them itself (payloads aliased) rather than leave
// them to protobuf-go.
func decodeCases() []struct {
	name string
	b    []byte
	fast bool
} {
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		return b
	}
	complete := &dtpb.OrchestratorAction{Id: 3, OrchestratorActionType: &dtpb.OrchestratorAction_CompleteOrchestration{
		CompleteOrchestration: &dtpb.CompleteOrchestrationAction{OrchestrationStatus: dtpb.OrchestrationStatus(1),
			Result: wrapperspb.String("the result"), Details: wrapperspb.String("details"), NewVersion: wrapperspb.String(""),
			FailureDetails: &dtpb.TaskFailureDetails{ErrorType: "E", ErrorMessage: "m"}, Tags: map[string]string{"k": "v"}}}}
	tagged := task(4, 10)
	tagged.GetScheduleTask().Tags = map[string]string{"a": "b", "c": "d"}
	tagged.GetScheduleTask().Version = wrapperspb.String("v2")
	timer := &dtpb.OrchestratorAction{Id: 5, OrchestratorActionType: &dtpb.OrchestratorAction_CreateTimer{
		CreateTimer: &dtpb.CreateTimerAction{FireAt: timestamppb.New(timestamppb.Now().AsTime().Truncate(1e9))}}}
	event := &dtpb.OrchestratorAction{Id: 6, OrchestratorActionType: &dtpb.OrchestratorAction_SendEvent{
		SendEvent: &dtpb.SendEventAction{Name: "ev", Data: wrapperspb.String("data")}}}
	full := response(task(1, 100), complete, tagged, timer, event, &dtpb.OrchestratorAction{Id: 7})
	full.NumEventsProcessed = wrapperspb.Int32(9)
	full.IsPartial = true                 //nolint:staticcheck // SA1019
	full.ChunkIndex = wrapperspb.Int32(2) //nolint:staticcheck // SA1019
	withUnknown := marshal(response(task(1, 5)))
	withUnknown = protowire.AppendTag(withUnknown, 99, protowire.VarintType)
	withUnknown = protowire.AppendVarint(withUnknown, 7)
	withUnknown = protowire.AppendTag(withUnknown, 98, protowire.Fixed32Type)
	withUnknown = protowire.AppendFixed32(withUnknown, 7)
	// An action with an unknown field in it, and one with two cases.
	act := marshal(task(2, 8))
	act = protowire.AppendTag(act, 50, protowire.BytesType)
	act = protowire.AppendString(act, "unknown")
	unknownInAction := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), act)
	twoCases := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType),
		append(marshal(task(2, 8)), marshal(event)...))
	// A payload message repeated: protobuf-go merges the two.
	twice := marshal(response())
	twice = append(twice, marshal(&dtpb.OrchestratorResponse{CustomStatus: wrapperspb.String("again")})...)
	// Scalars repeated: the last wins.
	last := append(marshal(response(task(1, 3))), marshal(&dtpb.OrchestratorResponse{InstanceId: "other", CompletionToken: "tok-2"})...)
	// An action whose input is "\xff", by hand (protobuf-go would not
	// write it).
	msg := func(num protowire.Number, body []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), body)
	}
	badUTF8 := msg(2, msg(2, msg(3, msg(1, []byte{0xff}))))
	return []struct {
		name string
		b    []byte
		fast bool
	}{
		{"empty", nil, true},
		{"one task", marshal(response(task(1, 1000))), true},
		{"every field", marshal(full), true},
		{"unknown fields", withUnknown, true},
		{"unknown field in an action", unknownInAction, true},
		{"two cases", twoCases, true},
		{"custom status twice", twice, false},
		{"scalars twice", last, true},
		{"invalid UTF-8 in a payload", badUTF8, false},
		{"truncated", marshal(response(task(1, 100)))[:50], false},
	}
}

// TestDecodeResponse holds the borrowing decoder to protobuf-go: the same
// message or the same failure, payloads aliasing the received buffer when
// it decodes them itself, the envelope's strings owned.
func TestDecodeResponse(t *testing.T) {
	for _, tc := range decodeCases() {
		t.Run(tc.name, func(t *testing.T) {
			want := new(dtpb.OrchestratorResponse)
			werr := proto.Unmarshal(tc.b, want)
			if tc.name == "invalid UTF-8 in a payload" && werr == nil {
				t.Fatal("the case lost its invalid UTF-8")
			}
			// Across two buffers, as gRPC hands over a message read in
			// frames.
			h := len(tc.b) / 2
			data := mem.BufferSlice{mem.SliceBuffer(tc.b[:h]), mem.SliceBuffer(tc.b[h:])}
			br := &borrowedResponse{}
			err := serverCodec{}.Unmarshal(data, br)
			if (err != nil) != (werr != nil) {
				t.Fatalf("error %v, protobuf-go's %v", err, werr)
			}
			if err != nil {
				return
			}
			if !proto.Equal(br.msg, want) {
				t.Fatalf("decoded\n%v\nprotobuf-go\n%v", br.msg, want)
			}
			if (br.buf != nil) != tc.fast {
				t.Fatalf("borrowed %v, want %v", br.buf != nil, tc.fast)
			}
			if br.buf == nil {
				return
			}
			in := func(s string) bool {
				p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
				lo := uintptr(unsafe.Pointer(unsafe.SliceData(br.buf.b)))
				return p >= lo && p < lo+uintptr(len(br.buf.b))
			}
			for _, a := range br.msg.GetActions() {
				if s := a.GetScheduleTask().GetInput().GetValue(); s != "" && !in(s) {
					t.Errorf("action %d: input not borrowed", a.GetId())
				}
				if s := a.GetCompleteOrchestration().GetResult().GetValue(); s != "" && !in(s) {
					t.Errorf("action %d: result not borrowed", a.GetId())
				}
				if s := a.GetScheduleTask().GetName(); s != "" && in(s) {
					t.Errorf("action %d: task name borrowed", a.GetId())
				}
			}
			for _, s := range []string{br.msg.GetInstanceId(), br.msg.GetCompletionToken()} {
				if s != "" && in(s) {
					t.Errorf("%q borrowed: it outlives the call", s)
				}
			}
			br.buf.release()
		})
	}
}

// FuzzDecodeResponse: whatever the borrowing decoder accepts, protobuf-go
// decodes to the same message; what protobuf-go refuses, it refuses.
func FuzzDecodeResponse(f *testing.F) {
	for _, tc := range decodeCases() {
		f.Add(tc.b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := new(dtpb.OrchestratorResponse)
		werr := proto.Unmarshal(b, want)
		got, ok := decodeResponse(b)
		if ok && werr != nil {
			t.Fatalf("decoded what protobuf-go refuses (%v)", werr)
		}
		if ok && !proto.Equal(got, want) {
			t.Fatalf("decoded\n%v\nprotobuf-go\n%v", got, want)
		}
	})
}

// TestActionOneofRange holds the decoder's range of OrchestratorAction's
// oneof cases (actionCaseFirst..actionCaseLast) to dtpb's descriptor, and
// to what that range promises: every case, before or after a
// ScheduleTask, decodes as protobuf-go decodes it (the last case wins; a
// case left out of the range would be merged after the ScheduleTask and
// win wrongly), and a field just outside the range (the id below it, an
// unknown field above it) stays on the fast path, the input still
// aliasing the buffer (a range reaching it would send the action to
// protobuf-go, copying).
func TestActionOneofRange(t *testing.T) {
	oneofs := (&dtpb.OrchestratorAction{}).ProtoReflect().Descriptor().Oneofs()
	if oneofs.Len() != 1 {
		t.Fatalf("OrchestratorAction has %d oneofs, want 1", oneofs.Len())
	}
	fields := oneofs.Get(0).Fields()
	var nums []int
	for i := range fields.Len() {
		nums = append(nums, int(fields.Get(i).Number()))
	}
	slices.Sort(nums)
	var want []int
	for n := actionCaseFirst; n <= actionCaseLast; n++ {
		want = append(want, n)
	}
	if !slices.Equal(nums, want) {
		t.Errorf("dtpb's OrchestratorAction oneof has fields %v, the decoder's range is %v", nums, want)
	}

	msg := func(num protowire.Number, body []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), body)
	}
	sched, err := proto.Marshal(task(1, 64))
	if err != nil {
		t.Fatal(err)
	}
	decode := func(t *testing.T, act []byte) (*dtpb.OrchestratorResponse, []byte) {
		t.Helper()
		b := msg(2, act)
		want := new(dtpb.OrchestratorResponse)
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatal(err)
		}
		got, ok := decodeResponse(b)
		if !ok {
			t.Fatal("decodeResponse refused what protobuf-go decodes")
		}
		if !proto.Equal(got, want) {
			t.Fatalf("decoded\n%v\nprotobuf-go\n%v", got, want)
		}
		return got, b
	}
	for _, n := range append(nums, actionCaseFirst-1, actionCaseLast+1, actionCaseLast+2) {
		// An empty message for a case; a length-delimited field for
		// one outside the range (the id is a varint: that is field 1's
		// own case below).
		other := msg(protowire.Number(n), nil)
		if n == actionCaseFirst-1 {
			other = protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 7)
		}
		t.Run(fmt.Sprint("field ", n), func(t *testing.T) {
			decode(t, append(slices.Clone(other), sched...))
			got, b := decode(t, append(slices.Clone(sched), other...))
			if n >= actionCaseFirst && n <= actionCaseLast {
				return
			}
			in := got.GetActions()[0].GetScheduleTask().GetInput().GetValue()
			p, lo := uintptr(unsafe.Pointer(unsafe.StringData(in))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
			if in == "" || p < lo || p >= lo+uintptr(len(b)) {
				t.Fatalf("with field %d beside it, the input (%d bytes) does not alias the message: the action went to protobuf-go", n, len(in))
			}
		})
	}
}

func TestBorrowPayloadsNeedsOnApplied(t *testing.T) {
	if _, err := NewSidecar(SidecarConfig{BorrowPayloads: true}); err == nil || !strings.Contains(err.Error(), "OnApplied") {
		t.Fatalf("error %v, want one naming OnApplied", err)
	}
}

// TestBorrowPayloads sends chunked completions from several workers at
// once, each payload a letter of its own, through a sidecar that lends
// them to OnApplied and reuses the buffers; some chunk replies are lost,
// so chunks arrive twice. Every completion must reach OnApplied exactly as
// sent: a buffer reused while a chunk kept in a token's buffer, or the
// completion being applied, still aliases it shows as another
// completion's letters; and buffers must have been reused.
func TestBorrowPayloads(t *testing.T) { testBorrowPayloads(t) }

// TestBorrowPayloadsHandlerTwice is TestBorrowPayloads with an interceptor
// that calls the handler a second time once the first has succeeded: the
// second call of a chunk the first kept is a duplicate, and must not hand
// back the buffer the kept chunk aliases.
func TestBorrowPayloadsHandlerTwice(t *testing.T) {
	testBorrowPayloads(t, func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if r, err := h(ctx, req); err != nil {
			return r, err
		}
		return h(ctx, req)
	})
}

// TestBorrowPayloadsHandlerLate calls the handler after the call has
// returned, as an interceptor running it on another goroutine might: it
// must fail, not read a buffer that a later message may be reusing.
func TestBorrowPayloadsHandlerLate(t *testing.T) {
	var late func() error
	rg := startRig(t, SidecarConfig{BorrowPayloads: true, OnApplied: func(Completion) {},
		ServerOptions: []grpc.ServerOption{grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if late == nil {
				late = func() error { _, err := h(ctx, req); return err }
			}
			return h(ctx, req)
		})}})
	ctx := context.Background()
	st, err := dtpb.GetWorkItems(ctx, rg.conn, &dtpb.GetWorkItemsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rg.sc.Submit(&dtpb.OrchestratorRequest{InstanceId: "late"})
	wi, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	r := response(actionOfSize(t, 0, 10<<10))
	r.InstanceId, r.CompletionToken = "late", wi.GetCompletionToken()
	if err := rg.conn.Invoke(ctx, dtpb.MethodCompleteOrchestratorTask, r, &dtpb.CompleteTaskResponse{}); err != nil {
		t.Fatal(err)
	}
	if err := late(); status.Code(err) != codes.Internal {
		t.Fatalf("handler called after the call returned: %v, want an Internal error", err)
	}
}

func testBorrowPayloads(t *testing.T, icps ...grpc.UnaryServerInterceptor) {
	const workers, each, chunks = 4, 3, 4
	reused := recvReused.Load()
	var applied, borrowed atomic.Int64
	var mu sync.Mutex
	var bad []string
	// Replies lost: the first calls of chunks 1 and 3 are applied, then
	// fail, and the sender sends them again.
	f := &faults{calls: map[int32]int{}, after: map[int32]codes.Code{1: codes.Unknown, 3: codes.Unavailable}}
	rg := startRig(t, SidecarConfig{BorrowPayloads: true, ServerOptions: []grpc.ServerOption{grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{f.intercept}, icps...)...)},
		OnApplied: func(c Completion) {
			applied.Add(1)
			if len(c.bufs) > 0 {
				borrowed.Add(1)
			}
			var letter byte
			fmt.Sscanf(c.InstanceID, "instance-%c", &letter)
			for _, a := range c.Actions {
				in := a.GetScheduleTask().GetInput().GetValue()
				if strings.Count(in, string(letter)) != len(in) {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%s action %d: %.20q…", c.InstanceID, a.GetId(), in))
					mu.Unlock()
				}
			}
			runtime.Gosched() // let other calls decode meanwhile
		}})
	letterOf := func(w, k int) byte { return byte('a' + w*each + k) }
	toks := map[byte]string{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := dtpb.GetWorkItems(ctx, rg.conn, &dtpb.GetWorkItemsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for w := range workers {
		for k := range each {
			l := letterOf(w, k)
			inst := fmt.Sprintf("instance-%c", l)
			rg.sc.Submit(&dtpb.OrchestratorRequest{InstanceId: inst})
			wi, err := st.Recv()
			if err != nil || wi.GetOrchestratorRequest().GetInstanceId() != inst {
				t.Fatalf("work item %v, %v; want instance %q", wi, err, inst)
			}
			toks[l] = wi.GetCompletionToken()
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := rg.sender(t, PlannerConfig{MaxChunkBytes: 1 << 20})
			for k := range each {
				letter := letterOf(w, k)
				inst := fmt.Sprintf("instance-%c", letter)
				var acts []*dtpb.OrchestratorAction
				for i := range chunks {
					a := actionOfSize(t, int32(i), 700<<10)
					st := a.GetScheduleTask()
					st.Input = wrapperspb.String(strings.Repeat(string(letter), len(st.GetInput().GetValue())))
					acts = append(acts, a)
				}
				r := response(acts...)
				r.InstanceId = inst
				r.CompletionToken = toks[letter]
				if _, err := s.Complete(context.Background(), r); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := applied.Load(); n != workers*each {
		t.Fatalf("%d completions applied, want %d", n, workers*each)
	}
	if b := borrowed.Load(); b != workers*each {
		t.Errorf("%d of %d completions borrowed their payloads", b, workers*each)
	}
	if len(bad) > 0 {
		t.Fatalf("%d actions reached OnApplied altered, e.g. %s", len(bad), bad[0])
	}
	// The check above means something only if buffers were reused: about
	// 70 messages of one size class went through, each buffer released
	// once its completion was applied or the message was a duplicate.
	if n := recvReused.Load() - reused; n == 0 {
		t.Errorf("no message was decoded into a reused buffer")
	} else {
		t.Logf("%d messages decoded into a reused buffer", n)
	}
}

// BenchmarkDecodeCompletion decodes a chunk of 1 MiB (four actions) with
// grpc-go's proto codec and with a borrowing sidecar's codec (its buffer
// released after each, as once OnApplied has returned), in the same run,
// and reports the bytes each allocates per message and their ratio.
func BenchmarkDecodeCompletion(b *testing.B) {
	var acts []*dtpb.OrchestratorAction
	for i := range 4 {
		acts = append(acts, actionOfSize(b, int32(i), 256<<10))
	}
	msg, err := proto.Marshal(response(acts...))
	if err != nil {
		b.Fatal(err)
	}
	data := mem.BufferSlice{mem.SliceBuffer(msg[:len(msg)/2]), mem.SliceBuffer(msg[len(msg)/2:])}
	allocated := func(f func()) float64 {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for range b.N {
			f()
		}
		runtime.ReadMemStats(&m1)
		return float64(m1.TotalAlloc-m0.TotalAlloc) / float64(b.N)
	}
	b.ResetTimer()
	plain := allocated(func() {
		if err := protoCodec.Unmarshal(data, new(dtpb.OrchestratorResponse)); err != nil {
			b.Fatal(err)
		}
	})
	borrowed := allocated(func() {
		br := &borrowedResponse{}
		if err := (serverCodec{}).Unmarshal(data, br); err != nil || br.buf == nil {
			b.Fatal(err, br.buf == nil)
		}
		br.buf.release()
	})
	b.ReportMetric(plain, "proto-B/msg")
	b.ReportMetric(borrowed, "borrowed-B/msg")
	b.ReportMetric(borrowed/plain, "borrowed/proto")
}

// TestBorrowPayloadsBufferedBytes: a buffered chunk whose payloads alias
// a buffer of the sidecar's holds the whole buffer (4 KiB at least), and
// counts it toward MaxTotalBufferedBytes, not its serialized size.
func TestBorrowPayloadsBufferedBytes(t *testing.T) {
	rg := startRig(t, SidecarConfig{BorrowPayloads: true, OnApplied: func(Completion) {}})
	tok := rg.leaseN(t, 1)[0]
	c0 := chunk(tok, 0, true, 0)
	if n := proto.Size(c0); n >= 1<<minRecvClass {
		t.Fatalf("chunk of %d bytes, want one under a buffer of %d", n, 1<<minRecvClass)
	}
	if err := raw(t, rg, c0); err != nil {
		t.Fatal(err)
	}
	if got, want := rg.sc.BufferedBytes(), heldBytes(1<<minRecvClass, 1); got != want {
		t.Errorf("%d bytes buffered, want %d (the chunk's 4 KiB buffer and one action)", got, want)
	}
	if err := raw(t, rg, chunk(tok, 1, false, 1)); err != nil {
		t.Fatal(err)
	}
	if got := rg.sc.BufferedBytes(); got != 0 {
		t.Errorf("%d bytes buffered after the final chunk, want 0", got)
	}
}

package chunking

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

// Bounds of the sidecar under FuzzSidecarReassembly: small, so that the
// fuzzer reaches them.
const (
	fuzzTokens      = 4
	fuzzTokenBytes  = 1500
	fuzzTokenChunks = 5
	fuzzTotalBytes  = 2500
	fuzzTTL         = time.Minute
)

// fuzzChunk builds the chunk an op describes. Each action's name says
// which chunk it belongs to ("tok/index/p|f/i/n"), so that an applied
// completion shows which chunks it was assembled from; the same op always
// builds the same chunk, so that resends are identical.
//
//nolint:staticcheck // SA1019: IsPartial and ChunkIndex are the protocol.
func fuzzChunk(tok int, wrongInstance, partial, hasIndex bool, idx int32, shape byte) *dtpb.OrchestratorResponse {
	n := 1 + int(shape%3)
	pad := int(shape>>2) * 20
	kind := "f"
	if partial {
		kind = "p"
	}
	r := &dtpb.OrchestratorResponse{
		InstanceId:      fmt.Sprintf("instance-%d", tok),
		CompletionToken: fmt.Sprintf("token-%d", tok),
		IsPartial:       partial,
	}
	if wrongInstance {
		r.InstanceId = "intruder"
	}
	if hasIndex {
		r.ChunkIndex = wrapperspb.Int32(idx)
	}
	for i := range n {
		r.Actions = append(r.Actions, &dtpb.OrchestratorAction{Id: int32(i), OrchestratorActionType: &dtpb.OrchestratorAction_ScheduleTask{
			ScheduleTask: &dtpb.ScheduleTaskAction{
				Name:  fmt.Sprintf("%d/%d/%s/%d/%d", tok, idx, kind, i, n),
				Input: wrapperspb.String(strings.Repeat("x", pad)),
			}}})
	}
	return r
}

// checkCompletion checks that an applied completion was assembled from
// whole chunks 0 … Chunks-1 in order, all partial but the last, which is
// final: never a partial completion.
func checkCompletion(t *testing.T, c Completion) {
	t.Helper()
	type mark struct {
		tok, idx, i, n int
		kind           string
	}
	var marks []mark
	for _, a := range c.Actions {
		f := strings.Split(a.GetScheduleTask().GetName(), "/")
		if len(f) != 5 {
			t.Fatalf("completion %s: action %q is not one the fuzzer sent", c.CompletionToken, a.GetScheduleTask().GetName())
		}
		var m mark
		m.tok, _ = strconv.Atoi(f[0])
		m.idx, _ = strconv.Atoi(f[1])
		m.kind = f[2]
		m.i, _ = strconv.Atoi(f[3])
		m.n, _ = strconv.Atoi(f[4])
		if c.CompletionToken != fmt.Sprintf("token-%d", m.tok) {
			t.Fatalf("completion %s holds an action of token %d", c.CompletionToken, m.tok)
		}
		marks = append(marks, m)
	}
	chunk := 0
	for k := 0; k < len(marks); chunk++ {
		m := marks[k]
		last := k+m.n == len(marks)
		if c.Chunks > 1 && m.idx != chunk {
			t.Fatalf("completion %s: chunk %d of %d carries index %d", c.CompletionToken, chunk, c.Chunks, m.idx)
		}
		if want := map[bool]string{true: "f", false: "p"}[last]; m.kind != want {
			t.Fatalf("completion %s: chunk %d (last: %v) is %q, want %q", c.CompletionToken, chunk, last, m.kind, want)
		}
		for i := range m.n {
			if k+i >= len(marks) || marks[k+i].i != i || marks[k+i].idx != m.idx || marks[k+i].n != m.n {
				t.Fatalf("completion %s: chunk %d is not whole", c.CompletionToken, chunk)
			}
		}
		k += m.n
	}
	if chunk != c.Chunks {
		t.Fatalf("completion %s: assembled from %d chunks, says %d", c.CompletionToken, chunk, c.Chunks)
	}
}

// FuzzSidecarReassembly drives the sidecar's reassembly state machine with
// a sequence of operations decoded from the input (chunks with any index,
// flag and content, resends, TTL expiry, stream disconnects, re-leases) and
// checks after each: no panic; an applied completion is made of whole
// chunks 0 … k-1 ending in a final one, and is applied once; the bytes
// buffered match the buffers and stay within every bound.
func FuzzSidecarReassembly(f *testing.F) {
	// More seeds live in testdata/fuzz/FuzzSidecarReassembly. Op bytes:
	// kind|token, index, shape (see below).
	f.Add([]byte{0x0c, 0, 0, 0x0c, 1, 1, 0x08, 2, 2})       // 3 chunks of token 0, applied
	f.Add([]byte{0x0c, 0, 0, 0x0c, 0, 0, 0x08, 1, 0})       // chunk 0 resent, then final
	f.Add([]byte{0x0c, 0, 0, 0x0c, 0, 4, 0x08, 1, 0})       // chunk 0 resent different
	f.Add([]byte{0x0c, 0, 0xfc, 0x0d, 0, 0xfc, 0x0e, 0, 0}) // over the total bound
	f.Add([]byte{0x0c, 0, 0, 0xa0, 0, 0, 0x08, 1, 0})       // expiry between chunks
	f.Add([]byte{0x0c, 0, 0, 0xc0, 0, 0, 0xe0, 0, 0, 0x0c, 0, 0, 0x08, 1, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		now := time.Unix(1_000_000, 0)
		s, err := NewSidecar(SidecarConfig{
			BufferTTL: fuzzTTL, MaxBufferedBytes: fuzzTokenBytes, MaxBufferedChunks: fuzzTokenChunks,
			MaxTotalBufferedBytes: fuzzTotalBytes, Now: func() time.Time { return now },
		})
		if err != nil {
			t.Fatal(err)
		}
		lease := func(tok int) {
			s.leases[fmt.Sprintf("token-%d", tok)] = &lease{
				req: &dtpb.OrchestratorRequest{InstanceId: fmt.Sprintf("instance-%d", tok)}, stream: uint64(1 + tok%2)}
		}
		s.mu.Lock()
		for tok := range fuzzTokens {
			lease(tok)
		}
		s.mu.Unlock()
		svc := (*sidecarService)(s)
		applied := map[string]bool{}
		for len(ops) >= 3 {
			op, idxb, shape := ops[0], ops[1], ops[2]
			ops = ops[3:]
			tok := int(op & 3)
			switch op >> 5 {
			case 5: // the clock moves past half a TTL; expire
				now = now.Add(fuzzTTL/2 + time.Second)
				s.ExpireBuffers()
			case 6: // a stream drops
				s.disconnect(uint64(1 + tok%2))
			case 7: // a token not leased and not completed is leased again
				s.mu.Lock()
				k := fmt.Sprintf("token-%d", tok)
				if _, ok := s.leases[k]; !ok && !applied[k] {
					lease(tok)
				}
				s.mu.Unlock()
			default:
				idx := int32(idxb % 8)
				if idxb&0x80 != 0 {
					idx = int32(int8(idxb)) * 1000
				}
				req := fuzzChunk(tok, op&0x10 != 0, op&4 != 0, op&8 != 0, idx, shape)
				before := len(s.Completions())
				_, err := svc.CompleteOrchestratorTask(context.Background(), req)
				cs := s.Completions()
				if err != nil && len(cs) != before {
					t.Fatalf("a refused chunk applied a completion: %v", err)
				}
				for _, c := range cs[before:] {
					if applied[c.CompletionToken] {
						t.Fatalf("completion %s applied twice", c.CompletionToken)
					}
					applied[c.CompletionToken] = true
					checkCompletion(t, c)
				}
			}
			s.mu.Lock()
			sum := 0
			for k, b := range s.buffers {
				sum += b.held
				if b.bytes > fuzzTokenBytes || len(b.chunks) > fuzzTokenChunks {
					t.Fatalf("buffer %s holds %d bytes in %d chunks, over %d bytes or %d chunks", k, b.bytes, len(b.chunks), fuzzTokenBytes, fuzzTokenChunks)
				}
				if applied[k] {
					t.Fatalf("buffer %s kept after its completion was applied", k)
				}
				for i, c := range b.chunks {
					if !c.GetIsPartial() || c.GetChunkIndex().GetValue() != int32(i) { //nolint:staticcheck // SA1019
						t.Fatalf("buffer %s: chunk %d is partial %v with index %v", k, i, c.GetIsPartial(), c.GetChunkIndex()) //nolint:staticcheck // SA1019
					}
				}
			}
			if sum != s.buffered || s.buffered > fuzzTotalBytes {
				t.Fatalf("buffered %d bytes, buffers hold %d, bound %d", s.buffered, sum, fuzzTotalBytes)
			}
			s.mu.Unlock()
		}
	})
}

package amdahlconnector

import (
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// TestSpanRoomFollowsTraceSize: a trace's span slice, recycled from
// traces released before it, has room for at most twice its spans (or a
// smallest class), however large the traces before it were: recycled
// room must not ratchet up to the largest trace seen, or a steady load
// would hold ever more memory.
func TestSpanRoomFollowsTraceSize(t *testing.T) {
	cfg := createDefaultConfig()
	var pool tracePool
	b := newBuffer(cfg, &pool)
	now := time.Unix(1_800_000_000, 0)
	id := uint32(0)
	addTrace := func(spans int) *traceState {
		id++
		tid := attribution.TraceID{0: byte(id >> 24), 1: byte(id >> 16), 2: byte(id >> 8), 3: byte(id)}
		for k := range spans {
			s := attribution.Span{TraceID: tid, SpanID: attribution.SpanID{0: 1, 7: byte(k), 6: byte(k >> 8)}, Start: 1, End: 2}
			b.add(&s, spanMeta{info: -1}, nil, now)
		}
		return b.traces[tid]
	}
	for round := range 20 {
		big := addTrace(600)
		b.remove(big)
		pool.put(big)
		var small []*traceState
		for range 8 {
			small = append(small, addTrace(3))
		}
		for _, st := range small {
			if room := cap(st.spans); room > max(2*len(st.spans), minClassSpans) {
				t.Fatalf("round %d: a trace of %d spans holds room for %d (a released trace of 600 spans' room reused)", round, len(st.spans), room)
			}
			b.remove(st)
			pool.put(st)
		}
	}
}

package amdahlconnector

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry/spans"
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
	addTrace := func(n int) *traceState {
		id++
		tid := spans.TraceID{0: byte(id >> 24), 1: byte(id >> 16), 2: byte(id >> 8), 3: byte(id)}
		for k := range n {
			s := spans.Span{TraceID: tid, SpanID: spans.SpanID{0: 1, 7: byte(k), 6: byte(k >> 8)}, Start: 1, End: 2}
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

// TestDoneSet: the done set answers as a map of the last n ids added
// would, through churn many times its size (slots shifted back on every
// removal), and its table stays within four slots an id.
func TestDoneSet(t *testing.T) {
	const n = 300
	d := newDoneSet(n)
	want := map[spans.TraceID]bool{}
	var order []spans.TraceID
	rng := rand.New(rand.NewPCG(1, 2))
	id := func() spans.TraceID {
		// Few distinct ids, so that re-adds and lookups of held ids are common.
		v := rng.Uint64N(3 * n)
		return spans.TraceID{0: byte(v), 1: byte(v >> 8), 15: 7}
	}
	for step := range 50_000 {
		x, dropped := id(), rng.IntN(2) == 0
		if _, ok := want[x]; ok {
			want[x] = dropped
		} else {
			if len(order) == n {
				delete(want, order[0])
				order = order[1:]
			}
			order = append(order, x)
			want[x] = dropped
		}
		d.add(x, dropped)
		y := id()
		gd, gok := d.get(y)
		wd, wok := want[y]
		if gd != wd || gok != wok {
			t.Fatalf("step %d: get(%x) = %v, %v; want %v, %v", step, y[:2], gd, gok, wd, wok)
		}
	}
	for x, wd := range want {
		if gd, ok := d.get(x); !ok || gd != wd {
			t.Errorf("get(%x) = %v, %v; want %v, true", x[:2], gd, ok, wd)
		}
	}
	if d.used != len(want) || len(d.slots) > 4*n {
		t.Errorf("%d ids in %d slots, want %d in at most %d", d.used, len(d.slots), len(want), 4*n)
	}
}

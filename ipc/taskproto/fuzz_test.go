package taskproto

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
)

// seedStream returns the frames of msgs as encoded by one task-host codec
// (delta on), concatenated: a stream as it crosses the wire.
func seedStream(tb testing.TB, msgs ...proto.Message) []byte {
	tb.Helper()
	enc := &codec{delta: true}
	var out []byte
	for _, m := range msgs {
		t, err := ipc.TypeOf(m)
		if err != nil {
			tb.Fatal(err)
		}
		start := len(out)
		out = append(out, byte(t), 0, 0, 0, 0)
		if out, err = enc.AppendBody(context.Background(), out, t, m); err != nil {
			tb.Fatal(err)
		}
		n := len(out) - start - ipc.HeaderSize
		out[start+1], out[start+2], out[start+3], out[start+4] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	}
	return out
}

// FuzzDecode feeds a stream of frames to one codec's Decode, as the
// reader goroutine does: the delta baselines carry from packet to packet.
// Whatever decodes must survive a round trip through a fresh pair of
// codecs unchanged, and its timings must place without panicking.
func FuzzDecode(f *testing.F) {
	// More seeds live in testdata/fuzz/FuzzDecode.
	env := map[string]string{"PATH": "/bin", "HOME": "/root"}
	f.Add(seedStream(f,
		&ipcpb.TaskConfiguration{Id: 1, Environment: env, GlobalProperties: map[string]string{"C": "R"}, Payload: []byte("x")},
		&ipcpb.TaskConfiguration{Id: 2, Environment: env, GlobalProperties: map[string]string{"C": "R"}},
		&ipcpb.TaskConfiguration{Id: 3, Environment: map[string]string{"PATH": "/usr/bin"}},
	))
	f.Add(seedStream(f,
		&ipcpb.TaskResult{Id: 1, Environment: env, ReceiveStartUnixNano: 1e18, Timings: []*ipcpb.PhaseTiming{{Phase: ipcpb.Phase_PHASE_EXECUTE, StartOffsetNs: 5, DurationNs: 7}}},
		&ipcpb.TaskResult{Id: 2, Environment: env},
		&ipcpb.LogMessage{TaskId: 2, Text: "done"},
		&ipcpb.Shutdown{},
	))
	f.Fuzz(func(t *testing.T, b []byte) {
		const limit = 1 << 20
		dec := &codec{delta: true}
		rd := ipc.NewReader(bytes.NewReader(b), limit)
		var got []proto.Message
		for {
			typ, n, err := rd.ReadHeader()
			if err != nil {
				break
			}
			body, err := rd.ReadBody(typ, n)
			if err != nil {
				break
			}
			m, err := dec.Decode(typ, body)
			if err != nil {
				var pe *ipc.ProtocolError
				if m != nil || (errors.As(err, &pe) && pe.Kind != KindDelta) {
					t.Fatalf("Decode = %v, %v; want no packet, and kind %s for a protocol error", m, err, KindDelta)
				}
				break
			}
			got = append(got, m)
			if res, ok := m.(*ipcpb.TaskResult); ok {
				lo := time.Unix(0, 1e18)
				tms := AppendTimings(nil, res, lo, lo.Add(time.Second))
				if len(tms) > NumTimings {
					t.Fatalf("%d timings from one result, more than NumTimings (%d)", len(tms), NumTimings)
				}
				for _, tm := range tms {
					if tm.End.Before(tm.Start) && !hasNegativeDuration(res) {
						t.Fatalf("timing %v ends before it starts", tm)
					}
				}
			}
		}
		// Round trip: what decoded, encoded by one codec and decoded by
		// another, comes back equal, identical marks and all restored.
		var clones []proto.Message
		for _, m := range got {
			clones = append(clones, proto.Clone(m))
		}
		stream := seedStream(t, clones...)
		dec2 := &codec{delta: true}
		rd2 := ipc.NewReader(bytes.NewReader(stream), limit)
		for i, want := range got {
			typ, n, err := rd2.ReadHeader()
			if err != nil {
				t.Fatalf("packet %d of the re-encoded stream: %v", i, err)
			}
			body, err := rd2.ReadBody(typ, n)
			if err != nil {
				t.Fatal(err)
			}
			m, err := dec2.Decode(typ, body)
			if err != nil {
				t.Fatalf("decode re-encoded packet %d: %v", i, err)
			}
			normalize(want)
			normalize(m)
			if !proto.Equal(m, want) {
				t.Fatalf("re-encoded packet %d differs:\n got %v\nwant %v", i, m, want)
			}
		}
		if _, _, err := rd2.ReadHeader(); err != io.EOF {
			t.Fatalf("re-encoded stream has more packets: %v", err)
		}
	})
}

func hasNegativeDuration(res *ipcpb.TaskResult) bool {
	for _, t := range res.GetTimings() {
		if t.GetDurationNs() < 0 {
			return true
		}
	}
	return false
}

// normalize clears what encoding rewrites by design: the delta modes (the
// sender decides them) and a configuration's trace context (set from the
// sender's ctx).
func normalize(m proto.Message) {
	switch p := m.(type) {
	case *ipcpb.TaskConfiguration:
		p.EnvironmentMode, p.GlobalPropertiesMode, p.TraceContext = 0, 0, nil
	case *ipcpb.TaskResult:
		p.EnvironmentMode = 0
	}
}

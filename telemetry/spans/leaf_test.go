package spans

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// recordingExporter keeps what it is given.
type recordingExporter struct {
	mu   sync.Mutex
	recs []Record
}

func (e *recordingExporter) Export(r Record) {
	e.mu.Lock()
	r.Attributes = slices.Clone(r.Attributes) // borrowed for the call only
	e.recs = append(e.recs, r)
	e.mu.Unlock()
}

// TestUnitLeaves: the leaves of a tracked unit (RecordPhaseSpan and
// Component.RecordSpans through RecordPhaseSpans, kept compactly) reach the account as the Spans they
// were recorded as: name, component, phase, direction, remote, times,
// parent and trace, each with an id of its own; a leaf whose attributes
// say more than amdahl.remote is kept whole with them; a leaf recorded
// after its unit's root ended reaches nothing; a unit tracked with
// TrackDirect is not filed by trace and is accounted the same; with an
// Exporter each leaf is exported whole, with its phase's attributes.
func TestUnitLeaves(t *testing.T) {
	for _, direct := range []bool{false, true} {
		for _, exporting := range []bool{false, true} {
			t.Run(fmt.Sprintf("direct=%v,export=%v", direct, exporting), func(t *testing.T) {
				testUnitLeaves(t, direct, exporting)
			})
		}
	}
}

func testUnitLeaves(t *testing.T, direct, exporting bool) {
	var mu sync.Mutex
	var got [][]Span
	c := NewCollector(func(sp []Span, _ any) {
		mu.Lock()
		got = append(got, slices.Clone(sp))
		mu.Unlock()
	})
	defer c.Close()
	cfg := TracerConfig{Collector: c}
	exp := &recordingExporter{}
	if exporting {
		cfg.Export = exp
	}
	tp := NewTracerProvider(cfg)
	t0 := time.Unix(1000, 0)
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }

	ctx, root := tp.StartPhaseSpan(context.Background(), telemetry.SpanWork, "", 0, telemetry.None, at(0))
	if direct {
		c.TrackDirect(root, nil)
	} else {
		c.Track(root, nil)
	}
	c.mu.Lock()
	_, filed := c.traces[TraceID(root.SpanContext().TraceID())]
	c.mu.Unlock()
	if filed == direct {
		t.Errorf("unit filed by trace: %v, want %v", filed, !direct)
	}
	hctx, host := tp.StartPhaseSpan(ctx, "runtime.host", "", 0, telemetry.None, at(1))
	tp.RecordPhaseSpan(hctx, "ipc.send", "ipc", telemetry.Send, telemetry.Request, at(2), at(3), nil)
	tp.RecordPhaseSpan(hctx, "ipc.receive", "ipc", telemetry.Receive, telemetry.Reply, at(9), at(10), []attribute.KeyValue{telemetry.AttrBytes.Int(5)})
	taskhost, err := telemetry.NewComponent("taskhost", telemetry.ComponentConfig{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	taskhost.RecordSpans(hctx, []telemetry.Timing{
		{Phase: telemetry.Receive, Direction: telemetry.Request, Start: at(4), End: at(5)},
		{Phase: telemetry.Execute, Start: at(5), End: at(8)},
	}, telemetry.AttrRemote.Bool(true))
	// amdahl.outcome is read by the attribution: this leaf is kept whole.
	tp.RecordPhaseSpan(hctx, "ipc.deserialize", "ipc", telemetry.Deserialize, telemetry.Reply, at(10), at(11),
		[]attribute.KeyValue{telemetry.AttrOutcome.String("failed")})
	tp.EndPhaseSpan(host, at(12))
	tp.EndPhaseSpan(root, at(13))
	tp.RecordPhaseSpan(hctx, "ipc.late", "ipc", telemetry.Send, telemetry.Request, at(14), at(15), nil)
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("%d units accounted, want 1", len(got))
	}
	tid, hid := TraceID(root.SpanContext().TraceID()), SpanID(host.SpanContext().SpanID())
	want := map[string]Span{
		"ipc.send":         {Component: "ipc", Phase: telemetry.Send, Direction: telemetry.Request, ParentID: hid, Start: at(2).UnixNano(), End: at(3).UnixNano()},
		"ipc.receive":      {Component: "ipc", Phase: telemetry.Receive, Direction: telemetry.Reply, ParentID: hid, Start: at(9).UnixNano(), End: at(10).UnixNano()},
		"taskhost.receive": {Component: "taskhost", Phase: telemetry.Receive, Direction: telemetry.Request, Remote: true, ParentID: hid, Start: at(4).UnixNano(), End: at(5).UnixNano()},
		"taskhost.execute": {Component: "taskhost", Phase: telemetry.Execute, Remote: true, ParentID: hid, Start: at(5).UnixNano(), End: at(8).UnixNano()},
		"ipc.deserialize":  {Component: "ipc", Phase: telemetry.Deserialize, Direction: telemetry.Reply, Failed: true, ParentID: hid, Start: at(10).UnixNano(), End: at(11).UnixNano()},
		"runtime.host":     {ParentID: SpanID(root.SpanContext().SpanID()), Start: at(1).UnixNano(), End: at(12).UnixNano()},
		telemetry.SpanWork: {Start: at(0).UnixNano(), End: at(13).UnixNano()},
	}
	ids := map[SpanID]bool{}
	for _, s := range got[0] {
		w, ok := want[s.Name]
		if !ok {
			t.Errorf("span %s accounted: not one of the unit's before its root ended", s.Name)
			continue
		}
		delete(want, s.Name)
		if s.TraceID != tid || s.SpanID.IsZero() || ids[s.SpanID] {
			t.Errorf("span %s: trace %s id %s: want the unit's trace and an id of its own", s.Name, s.TraceID, s.SpanID)
		}
		ids[s.SpanID] = true
		g := s
		g.TraceID, g.SpanID, g.Name = TraceID{}, SpanID{}, ""
		g.flags = 0
		if g.Failed != w.Failed || g.Component != w.Component || g.Phase != w.Phase || g.Direction != w.Direction ||
			g.Remote != w.Remote || g.ParentID != w.ParentID || g.Start != w.Start || g.End != w.End {
			t.Errorf("span %s: %+v, want %+v", s.Name, g, w)
		}
	}
	for name := range want {
		t.Errorf("span %s not accounted", name)
	}
	if got[0][len(got[0])-1].Name != telemetry.SpanWork {
		t.Errorf("the root is not the last span: %s", got[0][len(got[0])-1].Name)
	}

	exp.mu.Lock()
	defer exp.mu.Unlock()
	if !exporting {
		if len(exp.recs) != 0 {
			t.Errorf("%d records exported without an Exporter", len(exp.recs))
		}
		return
	}
	recs := map[string]Record{}
	for _, r := range exp.recs {
		recs[r.Name] = r
	}
	if len(exp.recs) != 8 { // the seven and the late leaf, which is exported though not accounted
		t.Errorf("%d records exported, want 8", len(exp.recs))
	}
	ex, ok := recs["taskhost.execute"]
	if !ok {
		t.Fatal("taskhost.execute not exported")
	}
	attrs := fmt.Sprint(ex.AllAttributes())
	wantAttrs := fmt.Sprint([]attribute.KeyValue{telemetry.AttrComponent.String("taskhost"), telemetry.AttrPhase.String("execute"), telemetry.AttrRemote.Bool(true)})
	if attrs != wantAttrs || ex.Parent.SpanID() != trace.SpanID(hid) || ex.SpanContext.TraceID() != trace.TraceID(tid) ||
		!ex.SpanContext.IsValid() || ex.Start != at(5).UnixNano() || ex.End != at(8).UnixNano() {
		t.Errorf("taskhost.execute exported as %+v (attributes %s), want under the host span at its times with %s", ex, attrs, wantAttrs)
	}
	if r := recs["ipc.receive"]; fmt.Sprint(r.AllAttributes()) != fmt.Sprint([]attribute.KeyValue{telemetry.AttrComponent.String("ipc"),
		telemetry.AttrPhase.String("receive"), telemetry.AttrDirection.String("reply"), telemetry.AttrBytes.Int(5)}) {
		t.Errorf("ipc.receive exported with %v", r.AllAttributes())
	}
}

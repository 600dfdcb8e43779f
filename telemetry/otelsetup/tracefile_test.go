package otelsetup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// TestTraceFileLossless ends spans from several goroutines as fast as they
// can, far faster than any exporter writes them, and checks that the trace
// file holds every one: the file's batch processor must block span ends on a
// full queue, never drop.
func TestTraceFileLossless(t *testing.T) {
	const goroutines, perGoroutine = 4, 12_500
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	ctx := context.Background()
	tel, err := Setup(ctx, WithLookupEnv(noEnv), WithTraceFile(path))
	if err != nil {
		t.Fatal(err)
	}
	tr := tel.TracerProvider().Tracer("lossless")
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range perGoroutine {
				_, s := tr.Start(ctx, "s")
				s.End()
			}
		})
	}
	wg.Wait()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ids := make(map[spans.SpanID]bool, goroutines*perGoroutine)
	if err := spans.ReadOTLPJSON(f, path, spans.Limits{}, nil, nil, func(s spans.Span) error {
		ids[s.SpanID] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, want := len(ids), goroutines*perGoroutine; got != want {
		t.Fatalf("trace file holds %d distinct spans, want %d (%d lost)", got, want, want-got)
	}
}

func traceID(n byte) trace.TraceID { return trace.TraceID{0xab, 15: n} }
func spanID(n byte) trace.SpanID   { return trace.SpanID{0xcd, 7: n} }

// allAttrs has every kind of attribute value, zero and extreme ones, and the
// floats whose JSON form needs care.
var allAttrs = []attribute.KeyValue{
	attribute.Bool("bool.true", true), attribute.Bool("bool.false", false),
	attribute.Int64("int.zero", 0), attribute.Int64("int.max", math.MaxInt64), attribute.Int64("int.min", math.MinInt64),
	attribute.Float64("f.zero", 0), attribute.Float64("f.negzero", math.Copysign(0, -1)), attribute.Float64("f.half", 0.5),
	attribute.Float64("f.1e-7", 1e-7), attribute.Float64("f.1e-6", 1e-6), attribute.Float64("f.1e21", 1e21),
	attribute.Float64("f.below1e21", 999999999999999900000), attribute.Float64("f.neg", -123456.789),
	attribute.Float64("f.min", 5e-324), attribute.Float64("f.max", math.MaxFloat64), attribute.Float64("f.1e-100", -1e-100),
	attribute.Float64("f.nan", math.NaN()), attribute.Float64("f.inf", math.Inf(1)), attribute.Float64("f.-inf", math.Inf(-1)),
	attribute.String("s.empty", ""),
	attribute.String("s.odd", "q\" b\\ n\n r\r t\t bs\b ff\f nul\x00 us\x1f del\x7f <a href='x'>&amp; \u2028\u2029 ☃ 😀 \ufffd é"),
	attribute.String("", "no key"),
	attribute.BoolSlice("bools", []bool{true, false}), attribute.BoolSlice("bools.empty", nil),
	attribute.Int64Slice("ints", []int64{-1, 0, math.MaxInt64}), attribute.Int64Slice("ints.empty", []int64{}),
	attribute.Float64Slice("floats", []float64{1.5, math.NaN(), math.Inf(-1), 1e300}), attribute.Float64Slice("floats.empty", nil),
	attribute.StringSlice("strings", []string{"", "a", `"x"`}), attribute.StringSlice("strings.empty", nil),
	attribute.ByteSlice("bytes", []byte{0, 1, 0xfe, 0xff, '/', '+'}), attribute.ByteSlice("bytes.empty", nil),
	attribute.Slice("slice", attribute.IntValue(1), attribute.StringValue("x"), attribute.SliceValue(),
		attribute.MapValue(attribute.Bool("in", true)), attribute.Value{}),
	attribute.Slice("slice.empty"),
	attribute.Map("map", attribute.String("a", "b"), attribute.Int("n", -3), attribute.Map("nested", attribute.Float64("f", 2.5))),
	attribute.Map("map.empty"),
	{Key: "empty"},
}

// variedBatches returns batches of spans with every attribute kind, events,
// links, statuses, kinds, dropped counts, local and remote parents and trace
// state, over three resources (two of them equal) and three scopes. Every
// batch but the last has one resource; the last has all the spans.
func variedBatches(t testing.TB) [][]sdktrace.ReadOnlySpan {
	t.Helper()
	const schema = "https://opentelemetry.io/schemas/1.26.0"
	t0 := time.Unix(1_700_000_000, 123_456_789)
	state, err := trace.ParseTraceState("vendor=abc,other=x:y")
	if err != nil {
		t.Fatal(err)
	}
	resAttrs := []attribute.KeyValue{attribute.String("service.name", "amdahl"), attribute.Int("process.pid", 42),
		attribute.Bool("r.bool", true), attribute.Float64("r.f", 0.25), attribute.StringSlice("r.ss", []string{"a", "b"})}
	res1 := resource.NewWithAttributes(schema, resAttrs...)
	res1Again := resource.NewWithAttributes(schema, resAttrs...) // another pointer, the same resource
	res2 := resource.NewSchemaless(attribute.String("service.name", "amdahl-worker"), attribute.String("host.name", "h2"))
	scopeA := instrumentation.Scope{Name: "github.com/amdahl-rt/amdahl/telemetry", Version: "v0.1.0", SchemaURL: schema,
		Attributes: attribute.NewSet(attribute.String("scope.k", "v"), attribute.Int("scope.n", 1))}
	scopeB := instrumentation.Scope{Name: "otelgrpc"}
	sc := func(tid trace.TraceID, sid trace.SpanID, flags trace.TraceFlags, remote bool, ts trace.TraceState) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: remote, TraceState: ts})
	}
	root := sc(traceID(1), spanID(1), trace.FlagsSampled, false, state)
	stubs := []tracetest.SpanStub{
		{ // 0: everything
			Name: "amdahl.work", SpanContext: root, SpanKind: trace.SpanKindInternal,
			StartTime: t0, EndTime: t0.Add(5 * time.Millisecond), Attributes: allAttrs,
			Status: sdktrace.Status{Code: codes.Error, Description: "boom \"quoted\"\n"},
			Events: []sdktrace.Event{
				{Name: "exception", Time: t0.Add(time.Millisecond), Attributes: []attribute.KeyValue{attribute.String("exception.message", "boom")}, DroppedAttributeCount: 2},
				{},
			},
			Links: []sdktrace.Link{
				{SpanContext: sc(traceID(2), spanID(9), trace.FlagsSampled, true, trace.TraceState{}),
					Attributes: []attribute.KeyValue{attribute.String("k", "v")}, DroppedAttributeCount: 1},
				{SpanContext: sc(traceID(3), spanID(10), 0, false, trace.TraceState{})},
			},
			DroppedAttributes: 3, DroppedEvents: 4, DroppedLinks: 5,
			Resource: res1, InstrumentationScope: scopeA,
		},
		{ // 1: remote parent, through an equal resource
			Name: "taskhost.execute", SpanContext: sc(traceID(1), spanID(2), trace.FlagsSampled, false, trace.TraceState{}),
			Parent: sc(traceID(1), spanID(1), trace.FlagsSampled, true, trace.TraceState{}), SpanKind: trace.SpanKindServer,
			StartTime: t0.Add(time.Millisecond), EndTime: t0.Add(2 * time.Millisecond),
			Attributes: []attribute.KeyValue{attribute.String("amdahl.phase", "execute"), attribute.Bool("amdahl.remote", true)},
			Status:     sdktrace.Status{Code: codes.Ok}, Resource: res1Again, InstrumentationScope: scopeA,
		},
		{ // 2: local parent, another scope
			Name: "grpc.client", SpanContext: sc(traceID(1), spanID(3), trace.FlagsSampled, false, trace.TraceState{}),
			Parent: root, SpanKind: trace.SpanKindClient, StartTime: t0, EndTime: t0.Add(time.Microsecond),
			Resource: res1, InstrumentationScope: scopeB,
		},
		{ // 3: no name, no scope, dropped counts out of uint32's range
			SpanContext: sc(traceID(1), spanID(4), trace.FlagsSampled, false, trace.TraceState{}), SpanKind: trace.SpanKindProducer,
			StartTime: t0, EndTime: t0, DroppedAttributes: 1 << 40, DroppedEvents: -1, Resource: res1,
		},
		{ // 4: back to the first group
			Name: "ipc.send", SpanContext: sc(traceID(1), spanID(5), trace.FlagsSampled, false, trace.TraceState{}),
			Parent: root, SpanKind: trace.SpanKindInternal, StartTime: t0, EndTime: t0.Add(time.Second),
			Attributes: []attribute.KeyValue{attribute.Int("amdahl.bytes", 4096)}, Resource: res1, InstrumentationScope: scopeA,
		},
		{ // 5: another resource, not sampled, no start time
			Name: "consume", SpanContext: sc(traceID(4), spanID(6), 0, false, trace.TraceState{}), SpanKind: trace.SpanKindConsumer,
			EndTime: t0, Resource: res2, InstrumentationScope: scopeB,
		},
		{ // 6: kind unspecified
			Name: "unspecified", SpanContext: sc(traceID(4), spanID(7), trace.FlagsSampled, false, trace.TraceState{}),
			StartTime: t0, EndTime: t0, Resource: res2, InstrumentationScope: scopeA,
		},
		{ // 7: no resource
			Name: "lone", SpanContext: sc(traceID(5), spanID(8), trace.FlagsSampled, false, trace.TraceState{}),
			SpanKind: trace.SpanKindInternal, StartTime: t0, EndTime: t0, InstrumentationScope: scopeA,
		},
	}
	spans := tracetest.SpanStubs(stubs).Snapshots()
	pick := func(idx ...int) []sdktrace.ReadOnlySpan {
		out := make([]sdktrace.ReadOnlySpan, 0, len(idx))
		for _, i := range idx {
			out = append(out, spans[i])
		}
		return out
	}
	return [][]sdktrace.ReadOnlySpan{pick(0, 1, 2, 3, 4), pick(5, 6), pick(7), pick(4), spans}
}

// exportLines exports batches through exp and returns its lines.
func exportLines(t *testing.T, exp sdktrace.SpanExporter, out *bytes.Buffer, batches [][]sdktrace.ReadOnlySpan) [][]byte {
	t.Helper()
	for _, b := range batches {
		if err := exp.ExportSpans(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(out.Bytes(), []byte("\n"))
	if len(lines) != len(batches)+1 || len(lines[len(batches)]) != 0 {
		t.Fatalf("got %d lines, want %d", len(lines)-1, len(batches))
	}
	return lines[:len(batches)]
}

// sortResourceSpans orders a request's ResourceSpans by resource: the OTLP
// exporter's order comes from ranging over a map.
func sortResourceSpans(t *testing.T, req *coltracepb.ExportTraceServiceRequest) {
	t.Helper()
	key := func(rs *tracepb.ResourceSpans) string {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(rs.GetResource())
		if err != nil {
			t.Fatal(err)
		}
		return rs.GetSchemaUrl() + "\x00" + string(b)
	}
	slices.SortFunc(req.ResourceSpans, func(a, b *tracepb.ResourceSpans) int { return strings.Compare(key(a), key(b)) })
}

// TestTraceFileExporterMatchesProtoJSON checks that TraceFileExporter writes
// what the former exporter (the OTLP transform, protojson, the hex-id
// rewrite) wrote: the same request, and for a batch of one resource, whose
// order does not depend on a map, the same bytes.
func TestTraceFileExporterMatchesProtoJSON(t *testing.T) {
	batches := variedBatches(t)
	var newOut, oldOut bytes.Buffer
	newLines := exportLines(t, newTraceWriter(&newOut, nil), &newOut, batches)
	oldLines := exportLines(t, newProtoJSONExporter(t, &oldOut), &oldOut, batches)
	for i := range batches {
		if !json.Valid(newLines[i]) {
			t.Fatalf("batch %d: line is not valid JSON:\n%s", i, newLines[i])
		}
		got, err := spans.UnmarshalTraceLine(newLines[i])
		if err != nil {
			t.Fatalf("batch %d: %v\n%s", i, err, newLines[i])
		}
		want, err := spans.UnmarshalTraceLine(oldLines[i])
		if err != nil {
			t.Fatal(err)
		}
		if n := len(want.ResourceSpans); n == 1 {
			if !bytes.Equal(newLines[i], oldLines[i]) {
				t.Errorf("batch %d: got line\n%s\nwant\n%s", i, newLines[i], oldLines[i])
			}
		} else if n < 2 {
			t.Fatalf("batch %d: %d resources, want the test to have some", i, n)
		}
		sortResourceSpans(t, got)
		sortResourceSpans(t, want)
		if !proto.Equal(got, want) {
			t.Errorf("batch %d: got request\n%s\nwant\n%s", i, prototext.Format(got), prototext.Format(want))
		}
	}
}

// TestTraceFileExporterLinkTraceState checks the one field the former
// exporter left out: a link's trace state.
func TestTraceFileExporterLinkTraceState(t *testing.T) {
	state, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	span := tracetest.SpanStub{
		Name:        "linked",
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID(1), SpanID: spanID(1)}),
		Links: []sdktrace.Link{{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: traceID(2), SpanID: spanID(2), TraceState: state})}},
	}.Snapshot()
	var out bytes.Buffer
	lines := exportLines(t, newTraceWriter(&out, nil), &out, [][]sdktrace.ReadOnlySpan{{span}})
	req, err := spans.UnmarshalTraceLine(lines[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := req.ResourceSpans[0].ScopeSpans[0].Spans[0].Links[0].TraceState; got != "vendor=abc" {
		t.Errorf("link traceState %q, want vendor=abc", got)
	}
}

// FuzzTraceFileString checks that any string, in every place a span has one,
// is written as encoding/json writes it (HTML characters unescaped), so the
// line is valid JSON and reads back, through UnmarshalTraceLine and
// spans.ReadOTLPJSON, as encoding/json reads it: each byte of invalid
// UTF-8 becomes U+FFFD.
func FuzzTraceFileString(f *testing.F) {
	for _, s := range []string{
		"", "plain", `"quoted"`, `back\slash`, "/slash", "<html> & 'apos'",
		"\x00\x01\x07\b\t\n\v\f\r\x1b\x1f\x7f", "ünïcode ☃ 😀", "\u2028 line \u2029 para", "\ufffd",
		"\xff", "bad \xc3\x28 seq", "cut \xe2\x82", "\xed\xa0\x80 surrogate", "\xf4\x90\x80\x80 above U+10FFFF",
		"overlong \xc0\xaf", strings.Repeat("long ", 1000),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var enc bytes.Buffer
		je := json.NewEncoder(&enc)
		je.SetEscapeHTML(false)
		if err := je.Encode(s); err != nil {
			t.Fatal(err)
		}
		var want string
		if err := json.Unmarshal(enc.Bytes(), &want); err != nil {
			t.Fatal(err)
		}

		span := tracetest.SpanStub{
			Name:                 s,
			SpanContext:          trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID(1), SpanID: spanID(1)}),
			Attributes:           []attribute.KeyValue{attribute.String(s, s), attribute.StringSlice("ss", []string{s})},
			Events:               []sdktrace.Event{{Name: s}},
			Status:               sdktrace.Status{Code: codes.Error, Description: s},
			Resource:             resource.NewSchemaless(attribute.String("service.name", s)),
			InstrumentationScope: instrumentation.Scope{Name: s, Version: s},
		}.Snapshot()
		var out bytes.Buffer
		line := exportLines(t, newTraceWriter(&out, nil), &out, [][]sdktrace.ReadOnlySpan{{span}})[0]
		if !json.Valid(line) {
			t.Fatalf("invalid JSON: %s", line)
		}
		req, err := spans.UnmarshalTraceLine(line)
		if err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		rs := req.GetResourceSpans()[0]
		ss := rs.GetScopeSpans()[0]
		sp := ss.GetSpans()[0]
		for _, got := range []string{
			sp.GetName(), sp.GetAttributes()[0].GetKey(), sp.GetAttributes()[0].GetValue().GetStringValue(),
			sp.GetAttributes()[1].GetValue().GetArrayValue().GetValues()[0].GetStringValue(),
			sp.GetEvents()[0].GetName(), sp.GetStatus().GetMessage(),
			rs.GetResource().GetAttributes()[0].GetValue().GetStringValue(),
			ss.GetScope().GetName(), ss.GetScope().GetVersion(),
		} {
			if got != want {
				t.Errorf("read back %q, want %q", got, want)
			}
		}
		var names []string
		if err := spans.ReadOTLPJSON(bytes.NewReader(line), "line", spans.Limits{}, nil, nil, func(s spans.Span) error {
			names = append(names, s.Name)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(names) != 1 || names[0] != want {
			t.Errorf("attribution read names %q, want [%q]", names, want)
		}
	})
}

// TestTraceFileAttribution checks that attribution reads, from the trace
// file of a real tracer provider, the spans it reads from the SDK.
func TestTraceFileAttribution(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	ctx := context.Background()
	tel, err := Setup(ctx, WithLookupEnv(noEnv), WithTraceFile(path), WithRecorder())
	if err != nil {
		t.Fatal(err)
	}
	c, err := tel.Component("ipc", telemetry.AttrTransport.String("ipc"), telemetry.AttrScenario.String("small"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		wctx, w := c.StartWork(ctx, telemetry.AttrWorkID.Int(i))
		for _, p := range []telemetry.Phase{telemetry.Serialize, telemetry.Send, telemetry.Receive} {
			_, ph := c.Start(wctx, p, telemetry.Request)
			ph.Span().SetAttributes(telemetry.AttrBytes.Int(100 * i))
			ph.End()
		}
		w.End(telemetry.OK, nil)
	}
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	want := SpansOf(tel.Recorder().Spans())
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []spans.Span
	if err := spans.ReadOTLPJSON(f, path, spans.Limits{}, nil, nil, func(s spans.Span) error {
		if s.Process != 1 {
			t.Errorf("span %s: process %d, want 1 (the resource has service.name)", s.Name, s.Process)
		}
		s.Process = 0 // FromSDK: this process
		got = append(got, s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(want) != 80 {
		t.Fatalf("read %d spans, SDK %d, want 80", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("span %d:\ngot  %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// errWriter fails every write after the first n bytes.
type errWriter struct{ n int }

func (w *errWriter) Write(p []byte) (int, error) {
	if len(p) <= w.n {
		w.n -= len(p)
		return len(p), nil
	}
	n := w.n
	w.n = 0
	return n, errors.New("disk full")
}

func TestTraceFileExporterErrors(t *testing.T) {
	ctx := context.Background()
	spans := variedBatches(t)[0]

	e := newTraceWriter(&errWriter{n: 100}, nil)
	err := e.ExportSpans(ctx, spans)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("got %v, want the write error", err)
	}
	if again := e.ExportSpans(ctx, spans); again == nil || again.Error() != err.Error() {
		t.Errorf("after a cut line: got %v, want %v again", again, err)
	}
	if shut := e.Shutdown(ctx); shut == nil || shut.Error() != err.Error() {
		t.Errorf("Shutdown after a cut line: got %v, want %v again (the file is incomplete)", shut, err)
	}
	if shut := e.Shutdown(ctx); shut != nil {
		t.Errorf("second Shutdown: got %v, want nil", shut)
	}

	var out bytes.Buffer
	e = newTraceWriter(&out, nil)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.ExportSpans(cancelled, spans); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: got %v, want context.Canceled", err)
	}
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: got %v, want nil", err)
	}
	if err := e.ExportSpans(ctx, spans); err == nil {
		t.Error("ExportSpans after Shutdown: got nil error")
	}
	if out.Len() != 0 {
		t.Errorf("wrote %d bytes, want none", out.Len())
	}
}

// benchSpans returns n spans of amdahl's shape, from a real tracer provider:
// units of work of one root and nine phases, with their attributes.
func benchSpans(b *testing.B, n int) []sdktrace.ReadOnlySpan {
	b.Helper()
	ctx := context.Background()
	tel, err := Setup(ctx, WithLookupEnv(noEnv), WithRecorder())
	if err != nil {
		b.Fatal(err)
	}
	c, err := tel.Component("ipc", telemetry.AttrTransport.String("ipc"),
		telemetry.AttrScenario.String("small"), telemetry.AttrVariant.String("baseline"))
	if err != nil {
		b.Fatal(err)
	}
	phases := []struct {
		p telemetry.Phase
		d telemetry.Direction
	}{
		{telemetry.Dispatch, telemetry.None}, {telemetry.Serialize, telemetry.Request}, {telemetry.Send, telemetry.Request},
		{telemetry.Receive, telemetry.Request}, {telemetry.Deserialize, telemetry.Request}, {telemetry.Execute, telemetry.None},
		{telemetry.Serialize, telemetry.Reply}, {telemetry.Send, telemetry.Reply}, {telemetry.Receive, telemetry.Reply},
	}
	for i := 0; i < n/(len(phases)+1); i++ {
		wctx, w := c.StartWork(ctx, telemetry.AttrWorkID.Int(i))
		for _, ph := range phases {
			_, s := c.Start(wctx, ph.p, ph.d)
			s.Span().SetAttributes(telemetry.AttrBytes.Int(4096))
			s.End()
		}
		w.End(telemetry.OK, nil)
	}
	if err := tel.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
	spans := tel.Recorder().Spans()
	if len(spans) != n {
		b.Fatalf("got %d spans, want %d", len(spans), n)
	}
	return spans
}

// BenchmarkTraceFile measures the trace file's exporters on one batch of
// 1,000 spans (one line, to io.Discard): the former path (OTLP transform,
// protojson, map[string]any, encoding/json) and TraceFileExporter.
func BenchmarkTraceFile(b *testing.B) {
	const n = 1000
	spans := benchSpans(b, n)
	for _, tc := range []struct {
		name string
		exp  func() sdktrace.SpanExporter
	}{
		{"path=protojson", func() sdktrace.SpanExporter { return newProtoJSONExporter(b, io.Discard) }},
		{"path=direct", func() sdktrace.SpanExporter { return newTraceWriter(io.Discard, nil) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			exp := tc.exp()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := exp.ExportSpans(ctx, spans); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "spans/s")
			if err := exp.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// TestSharedAttributes: a span whose first attributes are shared
// (spans.Record.Leading, encoded once) is written byte for byte as the
// same span with them in its own list, for every split of every varied
// span's attributes.
func TestSharedAttributes(t *testing.T) {
	var all []sdktrace.ReadOnlySpan
	for _, b := range variedBatches(t) {
		all = append(all, b...)
	}
	line := func(r spans.Record) []byte {
		var out bytes.Buffer
		var l spans.Line
		l.Add(&r)
		if err := spans.NewFileWriter(&out, nil).WriteLine(&l); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	splits := 0
	for i, s := range all {
		fs := RecordOf(s)
		attrs := fs.Attributes
		want := line(fs)
		for k := 0; k <= len(attrs); k++ {
			if slices.ContainsFunc(attrs[:k], func(kv attribute.KeyValue) bool { return !kv.Valid() }) {
				break
			}
			split := fs
			split.Leading, split.Attributes = spans.NewSharedAttributes(attrs[:k]...), attrs[k:]
			if got := line(split); !bytes.Equal(got, want) {
				t.Fatalf("span %d, %d shared attributes:\n got %s\nwant %s", i, k, got, want)
			}
			// fmt: a NaN attribute is not == itself.
			if got := split.AllAttributes(); fmt.Sprint(got) != fmt.Sprint(attrs) {
				t.Fatalf("span %d, %d shared: AllAttributes %v, want %v", i, k, got, attrs)
			}
			splits++
		}
	}
	if splits < 20 {
		t.Fatalf("only %d splits tried", splits)
	}
}

// newTraceWriter returns a trace file exporter writing to w; Shutdown
// closes c when it is not nil.
func newTraceWriter(w io.Writer, c io.Closer) *TraceFileExporter {
	return &TraceFileExporter{w: spans.NewFileWriter(w, c)}
}

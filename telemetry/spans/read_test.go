package spans

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"
	"unsafe"

	"github.com/amdahl-rt/amdahl/telemetry"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// readAll reads every span of data.
func readOTLP(r io.Reader, lim Limits) ([]Span, error) {
	var out []Span
	err := ReadOTLPJSON(r, "t.jsonl", lim, new(Interner), nil, func(s Span) error {
		out = append(out, s)
		return nil
	})
	return out, err
}

func otlpStr(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func otlpInt(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func otlpBool(k string, v bool) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v}}}
}

func otlpTraceID(n byte) TraceID { return TraceID{0xab, 15: n} }
func otlpSpanID(n byte) SpanID   { return SpanID{0xcd, 7: n} }

// testRequest is a request with every kind of attribute value, resource
// defaults and identities, and the spans ReadOTLPJSON must return for it.
func otlpTestRequest() (*coltracepb.ExportTraceServiceRequest, []Span) {
	const t0 = 1_700_000_000_123_456_789
	t1, t2, t3 := otlpTraceID(1), otlpTraceID(2), otlpTraceID(3)
	root, send, exec, disp, other, lone, again := otlpSpanID(1), otlpSpanID(2), otlpSpanID(3), otlpSpanID(4), otlpSpanID(5), otlpSpanID(6), otlpSpanID(7)
	skipped := []*commonpb.KeyValue{
		{Key: "d", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 2.5}}},
		{Key: "b", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte("\x00\xff")}}},
		{Key: "a", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{
			Values: []*commonpb.AnyValue{
				{Value: &commonpb.AnyValue_StringValue{StringValue: "x"}},
				{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: []*commonpb.KeyValue{otlpStr("amdahl.phase", "execute")}}}},
			}}}}},
		{Key: "kv", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{
			Values: []*commonpb.KeyValue{otlpStr("amdahl.component", "nested"), otlpInt("n", -3)}}}}},
		otlpBool("amdahl.phase", true), // not a string: ignored
	}
	identityA := []*commonpb.KeyValue{
		otlpStr("service.name", "amdahl"), otlpStr("service.instance.id", "i-1"), otlpInt("process.pid", 1234),
	}
	req := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{
		{
			Resource: &resourcepb.Resource{Attributes: append(identityA[:3:3],
				otlpStr("amdahl.component", "ipc"), otlpStr("amdahl.direction", "request"), otlpStr("telemetry.sdk.language", "go"))},
			ScopeSpans: []*tracepb.ScopeSpans{{
				Scope: &commonpb.InstrumentationScope{Name: telemetry.ScopeName, Version: telemetry.Version},
				Spans: []*tracepb.Span{
					{
						TraceId: t1[:], SpanId: root[:], Name: telemetry.SpanWork, Kind: tracepb.Span_SPAN_KIND_INTERNAL,
						StartTimeUnixNano: t0, EndTimeUnixNano: t0 + 5000,
						Attributes: []*commonpb.KeyValue{otlpStr("amdahl.outcome", "failed"), otlpStr("amdahl.component", "runtime"), otlpInt("amdahl.work.id", 7)},
						Status:     &tracepb.Status{},
						Flags:      256,
					},
					{
						TraceId: t1[:], SpanId: send[:], ParentSpanId: root[:], Name: "ipc.send",
						StartTimeUnixNano: t0 + 100, EndTimeUnixNano: t0 + 900,
						Attributes: append([]*commonpb.KeyValue{
							otlpStr("amdahl.phase", "send"),
							otlpStr("amdahl.direction", "request"), otlpStr("amdahl.transport", "shm"), otlpInt("amdahl.bytes", 1024),
						}, skipped...),
					},
					{
						TraceId: t1[:], SpanId: exec[:], ParentSpanId: root[:], Name: "taskhost.execute",
						StartTimeUnixNano: t0 + 1000, EndTimeUnixNano: t0 + 4000,
						Attributes: []*commonpb.KeyValue{
							otlpStr("amdahl.component", "taskhost"), otlpStr("amdahl.phase", "execute"), otlpBool("amdahl.remote", true),
							otlpStr("amdahl.direction", ""),
						},
						Events: []*tracepb.Span_Event{{Name: "e", TimeUnixNano: t0 + 1500, Attributes: []*commonpb.KeyValue{otlpStr("amdahl.phase", "send")}}},
						Links:  []*tracepb.Span_Link{{TraceId: t2[:], SpanId: other[:], Attributes: []*commonpb.KeyValue{otlpStr("k", "v")}}},
						Status: &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "boom \"quoted\"\n"},
					},
				},
			}},
			SchemaUrl: "https://opentelemetry.io/schemas/1.26.0",
		},
		{
			Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
				otlpStr("host.name", "h2"), otlpStr("service.name", "amdahl-worker"), otlpStr("amdahl.component", "runtime"),
				otlpStr("amdahl.phase", "dispatch"),
			}},
			ScopeSpans: []*tracepb.ScopeSpans{
				{Spans: []*tracepb.Span{{
					TraceId: t2[:], SpanId: disp[:], Name: "runtime.dispatch — ünïcode ☃ 😀",
					StartTimeUnixNano: 10, EndTimeUnixNano: 20,
				}}},
				{Spans: []*tracepb.Span{{
					TraceId: t2[:], SpanId: other[:], ParentSpanId: disp[:], Name: "ipc.receive",
					StartTimeUnixNano: 11, EndTimeUnixNano: 19,
					Attributes: []*commonpb.KeyValue{
						otlpStr("amdahl.component", "ipc"), otlpStr("amdahl.phase", "receive"), otlpStr("amdahl.direction", "reply"),
					},
				}}},
			},
		},
		{ // no resource: process 0
			ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
				TraceId: t3[:], SpanId: lone[:], Name: "lone", EndTimeUnixNano: 1,
				Attributes: []*commonpb.KeyValue{otlpStr("amdahl.phase", "bogus"), otlpStr("amdahl.scenario", "")},
			}}}},
		},
		{ // A again, attributes in another order: process 1
			Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{identityA[2], identityA[0], identityA[1]}},
			ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
				TraceId: t3[:], SpanId: again[:], ParentSpanId: lone[:], Name: "again",
				StartTimeUnixNano: 1 << 62, EndTimeUnixNano: 1<<63 - 1,
			}}}},
		},
		{ // a resource with spans of no interest: it takes no process number
			Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{otlpStr("service.name", "idle")}},
		},
	}}
	want := []Span{
		{TraceID: t1, SpanID: root, Start: t0, End: t0 + 5000, Name: telemetry.SpanWork,
			Component: "runtime", Direction: telemetry.Request, Failed: true, Process: 1, Kind: KindInternal},
		{TraceID: t1, SpanID: send, ParentID: root, Start: t0 + 100, End: t0 + 900, Name: "ipc.send",
			Component: "ipc", Phase: telemetry.Send, Direction: telemetry.Request, Process: 1},
		{TraceID: t1, SpanID: exec, ParentID: root, Start: t0 + 1000, End: t0 + 4000, Name: "taskhost.execute",
			Component: "taskhost", Phase: telemetry.Execute, Remote: true, Process: 1},
		{TraceID: t2, SpanID: disp, Start: 10, End: 20, Name: "runtime.dispatch — ünïcode ☃ 😀",
			Component: "runtime", Phase: telemetry.Dispatch, Process: 2},
		{TraceID: t2, SpanID: other, ParentID: disp, Start: 11, End: 19, Name: "ipc.receive",
			Component: "ipc", Phase: telemetry.Receive, Direction: telemetry.Reply, Process: 2},
		{TraceID: t3, SpanID: lone, End: 1, Name: "lone"},
		{TraceID: t3, SpanID: again, ParentID: lone, Start: 1 << 62, End: 1<<63 - 1, Name: "again", Process: 1},
	}
	return req, want
}

// otlpEncodings are the ways OTLP JSON is written: ours (hex ids, sorted keys)
// and protojson's (base64 ids), with either field names, on one line or
// many.
var otlpEncodings = []struct {
	name    string
	marshal func(*coltracepb.ExportTraceServiceRequest) ([]byte, error)
}{
	{"MarshalTraceLine", MarshalTraceLine},
	{"protojson", protojsonMarshal(protojson.MarshalOptions{})},
	{"protojson UseProtoNames", protojsonMarshal(protojson.MarshalOptions{UseProtoNames: true})},
	{"protojson Multiline", protojsonMarshal(protojson.MarshalOptions{Multiline: true, Indent: "\t"})},
	{"protojson UseProtoNames UseEnumNumbers EmitUnpopulated", protojsonMarshal(protojson.MarshalOptions{
		UseProtoNames: true, UseEnumNumbers: true, EmitUnpopulated: true})},
}

func protojsonMarshal(o protojson.MarshalOptions) func(*coltracepb.ExportTraceServiceRequest) ([]byte, error) {
	return func(req *coltracepb.ExportTraceServiceRequest) ([]byte, error) { return o.Marshal(req) }
}

// otlpReaders read the input whole or a byte at a time, to cross the end of the
// read buffer everywhere.
var otlpReaders = []struct {
	name string
	wrap func([]byte) io.Reader
}{
	{"whole", func(b []byte) io.Reader { return bytes.NewReader(b) }},
	{"one byte", func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) }},
	{"half", func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) }},
}

func diffOTLPSpans(t *testing.T, got, want []Span) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d spans, want %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Errorf("span %d:\ngot  %+v\nwant %+v", i+1, got[i], want[i])
		}
	}
}

func TestReadOTLPJSONEncodings(t *testing.T) {
	req, want := otlpTestRequest()
	for _, enc := range otlpEncodings {
		data, err := enc.marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		for _, rd := range otlpReaders {
			t.Run(enc.name+"/"+rd.name, func(t *testing.T) {
				got, err := readOTLP(rd.wrap(data), Limits{})
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				diffOTLPSpans(t, got, want)
			})
		}
	}
}

// TestReadOTLPJSONLines checks that the spans do not depend on how requests
// are split into lines or objects.
func TestReadOTLPJSONLines(t *testing.T) {
	req, want := otlpTestRequest()
	var lines []byte // one request per ResourceSpans, one per line
	for _, rs := range req.ResourceSpans {
		line, err := MarshalTraceLine(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{rs}})
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line...)
	}
	oneLine, err := MarshalTraceLine(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"one line", oneLine},
		{"one line without newline", bytes.TrimSpace(oneLine)},
		{"many lines", lines},
		{"many lines, CRLF and blank lines", bytes.ReplaceAll(lines, []byte("\n"), []byte("\r\n\r\n"))},
		{"objects back to back", bytes.ReplaceAll(lines, []byte("\n"), nil)},
		{"leading whitespace", append([]byte(" \t\n\n"), lines...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readOTLP(bytes.NewReader(tc.data), Limits{})
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			diffOTLPSpans(t, got, want)
		})
	}
}

// TestReadOTLPJSONForms covers what the encoders above never write but
// otlpReaders of proto JSON accept.
func TestReadOTLPJSONForms(t *testing.T) {
	tid, sid, pid := otlpTraceID(9), otlpSpanID(9), otlpSpanID(8)
	th, sh, ph := hex.EncodeToString(tid[:]), hex.EncodeToString(sid[:]), hex.EncodeToString(pid[:])
	base := Span{TraceID: tid, SpanID: sid, Start: 5, End: 6}
	ugly := TraceID{0xfb, 0xff, 0xbf, 0xfe, 0xff, 0xfb, 0xef, 0xbf, 0xfe, 0xff, 0xfb, 0xef, 0xbf, 0xfe, 0xff, 0xfb} // + and / in base64
	uglySpan := SpanID{0xfb, 0xff, 0xbf, 0xfe, 0xff, 0xfb, 0xef, 0xbf}
	withParent := base
	withParent.ParentID = pid
	span := func(fields string) string {
		return `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"` + th + `","spanId":"` + sh +
			`","startTimeUnixNano":"5","endTimeUnixNano":"6"` + fields + `}]}]}]}`
	}
	for _, tc := range []struct {
		name string
		in   string
		want []Span
	}{
		{"empty input", "", nil},
		{"only whitespace", " \n\t\r\n", nil},
		{"empty request", "{}\n{}", nil},
		{"null lists", `{"resourceSpans":null}{"resourceSpans":[{"resource":null,"scopeSpans":null}]}`, nil},
		{"times as numbers", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"` + th + `","spanId":"` + sh +
			`","startTimeUnixNano":5,"endTimeUnixNano":6}]}]}]}`, []Span{base}},
		{"parent", span(`,"parentSpanId":"` + ph + `"`), []Span{withParent}},
		{"uppercase hex", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"` + strings.ToUpper(th) + `","spanId":"` + strings.ToUpper(sh) +
			`","parentSpanId":"` + strings.ToUpper(ph) + `","startTimeUnixNano":"5","endTimeUnixNano":"6"}]}]}]}`, []Span{withParent}},
		{"empty parent", span(`,"parentSpanId":""`), []Span{base}},
		{"null parent", span(`,"parentSpanId":null`), []Span{base}},
		{"base64 URL", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"trace_id":"` + base64.URLEncoding.EncodeToString(ugly[:]) +
			`","span_id":"` + base64.URLEncoding.EncodeToString(uglySpan[:]) + `"}]}]}]}`, []Span{{TraceID: ugly, SpanID: uglySpan}}},
		{"base64 URL unpadded", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"trace_id":"` + base64.RawURLEncoding.EncodeToString(ugly[:]) +
			`","span_id":"` + base64.RawURLEncoding.EncodeToString(uglySpan[:]) + `"}]}]}]}`, []Span{{TraceID: ugly, SpanID: uglySpan}}},
		{"base64 unpadded", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"trace_id":"` + base64.RawStdEncoding.EncodeToString(ugly[:]) +
			`","span_id":"` + base64.RawStdEncoding.EncodeToString(uglySpan[:]) + `"}]}]}]}`, []Span{{TraceID: ugly, SpanID: uglySpan}}},
		{"unknown fields of every kind", span(`,"x":{"a":[1,-2.5e+3,true,false,null,"s",{},[]],"b":{"c":{"d":"\"}]"}}},"y":[[]]`), []Span{base}},
		{"value before key, snake_case values", span(`,"attributes":[{"value":{"string_value":"ipc"},"key":"amdahl.component"},` +
			`{"value":{"bool_value":true},"key":"amdahl.remote"}]`),
			[]Span{{TraceID: tid, SpanID: sid, Start: 5, End: 6, Component: "ipc", Remote: true}}},
		{"escaped name", span(`,"name":"a\"b\\c\/d\b\f\n\r\t\u00e9\u2603\ud83d\ude00\ud83d\u0041\udc00x"`),
			[]Span{{TraceID: tid, SpanID: sid, Start: 5, End: 6, Name: "a\"b\\c/d\b\f\n\r\té☃😀\uFFFDA\uFFFDx"}}},
		{"resource after scopeSpans", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"` + th + `","spanId":"` + sh +
			`","attributes":[{"key":"amdahl.phase","value":{"stringValue":"bogus"}},{"key":"amdahl.outcome","value":{"stringValue":"ok"}}]}]}],` +
			`"resource":{"attributes":[{"key":"process.pid","value":{"intValue":42}},{"key":"amdahl.phase","value":{"stringValue":"send"}},` +
			`{"key":"amdahl.outcome","value":{"stringValue":"failed"}},{"key":"amdahl.direction","value":{"stringValue":"reply"}},` +
			`{"key":"amdahl.component","value":{"stringValue":"ipc"}}]}}]}`,
			// The span's own attributes win, even a phase that is none.
			[]Span{{TraceID: tid, SpanID: sid, Direction: telemetry.Reply, Component: "ipc", Process: 1}}},
		{"resource between scopeSpans", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"` + th + `","spanId":"` + sh + `"}]}],` +
			`"resource":{"attributes":[{"key":"amdahl.component","value":{"stringValue":"ipc"}}]},` +
			`"scope_spans":[{"spans":[{"traceId":"` + th + `","spanId":"` + ph + `"}]}]}]}`,
			[]Span{{TraceID: tid, SpanID: sid, Component: "ipc"}, {TraceID: tid, SpanID: pid, Component: "ipc"}}},
		{"direction override to none", `{"resourceSpans":[{"resource":{"attributes":[{"key":"amdahl.direction","value":{"stringValue":"reply"}}]},` +
			`"scopeSpans":[{"spans":[{"traceId":"` + th + `","spanId":"` + sh + `","attributes":[{"key":"amdahl.direction","value":{"stringValue":""}}]},` +
			`{"traceId":"` + th + `","spanId":"` + ph + `"}]}]}]}`,
			[]Span{{TraceID: tid, SpanID: sid}, {TraceID: tid, SpanID: pid, Direction: telemetry.Reply}}},
		{"identities: int and string pid differ from none", `{"resource_spans":[` +
			`{"resource":{"attributes":[{"key":"process.pid","value":{"int_value":"42"}}]},"scopeSpans":[{"spans":[{"traceId":"` + th + `","spanId":"` + sh + `"}]}]},` +
			`{"resource":{"attributes":[{"key":"process.pid","value":{"intValue":42}}]},"scopeSpans":[{"spans":[{"traceId":"` + th + `","spanId":"` + sh + `"}]}]},` +
			`{"resource":{"attributes":[{"key":"host.name","value":{"stringValue":"42"}}]},"scopeSpans":[{"spans":[{"traceId":"` + th + `","spanId":"` + sh + `"}]}]},` +
			`{"resource":{"attributes":[{"key":"process.pid","value":{"doubleValue":42}}]},"scopeSpans":[{"spans":[{"traceId":"` + th + `","spanId":"` + sh + `"}]}]}]}`,
			[]Span{{TraceID: tid, SpanID: sid, Process: 1}, {TraceID: tid, SpanID: sid, Process: 1},
				{TraceID: tid, SpanID: sid, Process: 2}, {TraceID: tid, SpanID: sid}}},
	} {
		for _, rd := range otlpReaders {
			t.Run(tc.name+"/"+rd.name, func(t *testing.T) {
				got, err := readOTLP(rd.wrap([]byte(tc.in)), Limits{})
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				diffOTLPSpans(t, got, tc.want)
			})
		}
	}
}

// TestReadOTLPJSONStrings checks string decoding against encoding/json.
func TestReadOTLPJSONStrings(t *testing.T) {
	for _, lit := range []string{
		`""`, `"plain"`, `"\"\\\/\b\f\n\r\t"`, `"\u0000\u001f\u007f\u00e9\uFFFF"`,
		`"\ud83d\ude00"`, `"\ud83d"`, `"\ude00"`, `"\ud83dx"`, `"\ud83d\n"`, `"\ud83d\ud83d\ude00"`, `"\ud83d\u0041"`,
		`"` + strings.Repeat("é", 40000) + `\n"`, "\"\xff\xfe raw bytes\"",
	} {
		t.Run(lit[:min(len(lit), 20)], func(t *testing.T) {
			var want string
			if err := json.Unmarshal([]byte(lit), &want); err != nil {
				t.Fatal(err)
			}
			if !utf8.ValidString(lit) {
				want = lit[1 : len(lit)-1] // passed on as it is, where encoding/json writes U+FFFD
			}
			for _, rd := range otlpReaders {
				in := `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"ab000000000000000000000000000001","spanId":"cd00000000000001","name":` + lit + `}]}]}]}`
				got, err := readOTLP(rd.wrap([]byte(in)), Limits{})
				if err != nil {
					t.Fatalf("%s: got error %v, want none", rd.name, err)
				}
				if len(got) != 1 || got[0].Name != want {
					t.Errorf("%s: got %+v, want name %+q", rd.name, got, want)
				}
			}
		})
	}
}

type nulReader struct{ n int64 }

func (z *nulReader) Read(p []byte) (int, error) {
	clear(p)
	z.n += int64(len(p))
	return len(p), nil
}

var errStopOTLP = errors.New("stop here")

func TestReadOTLPJSONErrors(t *testing.T) {
	const ids = `"traceId":"ab000000000000000000000000000001","spanId":"cd00000000000001"`
	good := `{"resourceSpans":[{"scopeSpans":[{"spans":[{` + ids + `}]}]}]}` + "\n"
	spans := func(n int) string {
		return `{"resourceSpans":[{"scopeSpans":[{"spans":[` + strings.Repeat(`{`+ids+`},`, n-1) + `{` + ids + `}]}]}]}`
	}
	for _, tc := range []struct {
		name string
		in   string
		lim  Limits
		want string
		is   error
	}{
		{name: "truncated", in: good + "{\"resourceSpans\":[{\"scopeSpans\":[\n{\"spans\":[{\"traceId\":\"ab",
			want: "t.jsonl:3:25: unexpected EOF (truncated input)", is: io.ErrUnexpectedEOF},
		{name: "truncated after a value", in: good + `{"resourceSpans":[]`,
			want: "t.jsonl:2:20: unexpected EOF (truncated input)", is: io.ErrUnexpectedEOF},
		{name: "truncated number", in: `{"x":12`, want: "t.jsonl:1:8: unexpected EOF (truncated input)", is: io.ErrUnexpectedEOF},
		{name: "bad hex", in: good + good + `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","spanId":"cd00000000000001"}]}]}]}`,
			want: `t.jsonl:3:55: span 3: traceId: want 32 hex digits, got "zz"`},
		{name: "bad hex digit", in: `{"resourceSpans":[{"scopeSpans":[{"spans":[{"spanId":"cd0000000000000g"}]}]}]}`,
			want: `t.jsonl:1:54: span 1: spanId: want 16 hex digits, got "cd0000000000000g"`},
		{name: "zero trace id", in: `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"00000000000000000000000000000000"}]}]}]}`,
			want: `t.jsonl:1:55: span 1: traceId: want 32 hex digits, got "00000000000000000000000000000000"`},
		{name: "bad parent", in: `{"resourceSpans":[{"scopeSpans":[{"spans":[{"parentSpanId":"cd"}]}]}]}`,
			want: `t.jsonl:1:60: span 1: parentSpanId: want 16 hex digits or "", got "cd"`},
		{name: "missing traceId", in: "{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[\n\n  {\"spanId\":\"cd00000000000001\"}]}]}]}",
			want: "t.jsonl:3:3: span 1: traceId: missing"},
		{name: "missing spanId", in: `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"ab000000000000000000000000000001"}]}]}]}`,
			want: "t.jsonl:1:44: span 1: spanId: missing"},
		{name: "empty span", in: `{"resourceSpans":[{"scopeSpans":[{"spans":[{}]}]}]}`,
			want: "t.jsonl:1:44: span 1: traceId: missing"},
		{name: "fractional time", in: `{"resourceSpans":[{"scopeSpans":[{"spans":[{` + ids + `,"startTimeUnixNano":1.5}]}]}]}`,
			want: `t.jsonl:1:138: span 1: startTimeUnixNano: want an integer of Unix nanoseconds, got "1.5"`},
		{name: "time not digits", in: `{"resourceSpans":[{"scopeSpans":[{"spans":[{"endTimeUnixNano":"soon",` + ids + `}]}]}]}`,
			want: `t.jsonl:1:63: span 1: endTimeUnixNano: want an integer of Unix nanoseconds, got "soon"`},
		{name: "negative time", in: `{"resourceSpans":[{"scopeSpans":[{"spans":[{"endTimeUnixNano":-1}]}]}]}`,
			want: `t.jsonl:1:63: span 1: endTimeUnixNano: want an integer of Unix nanoseconds, got "-1"`},
		{name: "time out of range and not a number", in: `{"resourceSpans":[{"scopeSpans":[{"spans":[{"endTimeUnixNano":"92233720368547758080x"}]}]}]}`,
			want: `t.jsonl:1:63: span 1: endTimeUnixNano: want an integer of Unix nanoseconds, got "92233720368547758080x"`},
		{name: "time as bool", in: `{"resourceSpans":[{"scopeSpans":[{"spans":[{"endTimeUnixNano":true}]}]}]}`,
			want: `t.jsonl:1:63: want a string or a number, got 't'`},
		{name: "garbage", in: "hello", want: "t.jsonl:1:1: want '{' to begin an ExportTraceServiceRequest, got 'h'"},
		{name: "garbage after a request", in: good + good + "]", want: "t.jsonl:3:1: want '{' to begin an ExportTraceServiceRequest, got ']'"},
		{name: "no colon", in: "{\n  \"resourceSpans\" [", want: "t.jsonl:2:19: want ':' after object key, got '['"},
		{name: "no comma", in: `{"a":1 "b":2}`, want: `t.jsonl:1:8: want ',' or '}' after object member, got '"'`},
		{name: "trailing comma", in: `{"a":[1,]}`, want: `t.jsonl:1:9: want a JSON value, got ']'`},
		{name: "bad literal", in: `{"a":nul}`, want: `t.jsonl:1:6: invalid literal, want null`},
		{name: "bad number", in: `{"a":01}`, want: `t.jsonl:1:6: invalid number "01"`},
		{name: "bad escape", in: `{"a":"\x"}`, want: `t.jsonl:1:8: invalid escape in string`},
		{name: "bad unicode escape", in: `{"a":"\u12x4"}`, want: `t.jsonl:1:11: invalid \u escape in string`},
		{name: "raw newline in string", in: "{\"a\":\"x\ny\"}", want: `t.jsonl:1:8: control character 0x0a in string`},
		{name: "span not an object", in: `{"resourceSpans":[{"scopeSpans":[{"spans":[1]}]}]}`, want: `t.jsonl:1:44: want '{' to begin a span, got '1'`},
		{name: "resource twice", in: `{"resourceSpans":[{"resource":{},"resource":{}}]}`, want: `t.jsonl:1:45: resource given twice in one ResourceSpans`},
		{name: "NUL bytes", in: "\x00\x00\x00", want: "t.jsonl:1:1: want '{' to begin an ExportTraceServiceRequest, got byte 0x00"},
		{name: "NUL inside", in: good + `{"resourceSpans":` + "\x00", want: "t.jsonl:2:18: want '[' to begin resourceSpans, got byte 0x00"},
		{name: "depth bomb at the top", in: strings.Repeat("[", 1<<20), want: "t.jsonl:1:1: want '{' to begin an ExportTraceServiceRequest, got '['"},
		{name: "depth bomb", in: `{"x":` + strings.Repeat("[", 1<<20), want: "t.jsonl:1:69: nesting deeper than 64 (Limits.MaxDepth)"},
		{name: "depth bomb of objects", in: strings.Repeat(`{"a":`, 1<<16), want: "t.jsonl:1:321: nesting deeper than 64 (Limits.MaxDepth)"},
		{name: "depth bomb in an attribute", lim: Limits{MaxDepth: 20},
			in:   `{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[{"key":"k","value":{"arrayValue":{"values":[` + strings.Repeat(`{"arrayValue":{"values":[`, 1000),
			want: "t.jsonl:1:177: nesting deeper than 20 (Limits.MaxDepth)"},
		{name: "overlong string", in: `{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"` + strings.Repeat("x", 1<<20+1) + `"}]}]}]}`,
			want: "t.jsonl:1:52: string longer than 1048576 bytes (Limits.MaxString)"},
		{name: "overlong key", lim: Limits{MaxString: 10}, in: `{"abcdefghijk":1}`,
			want: "t.jsonl:1:2: string longer than 10 bytes (Limits.MaxString)"},
		{name: "overlong escaped string", lim: Limits{MaxString: 10}, in: `{"a":"\n\n\n\n\n\n"}`,
			want: "t.jsonl:1:6: string longer than 10 bytes (Limits.MaxString)"},
		{name: "overlong number", lim: Limits{MaxString: 10}, in: `{"a":12345678901}`,
			want: "t.jsonl:1:6: number longer than 10 bytes (Limits.MaxString)"},
		{name: "too many spans", lim: Limits{MaxSpans: 2}, in: spans(3),
			want: "t.jsonl:1:194: more than 2 spans (Limits.MaxSpans; report --max-spans raises it)"},
		{name: "too many spans over lines", lim: Limits{MaxSpans: 2}, in: good + good + good,
			want: "t.jsonl:3:44: more than 2 spans (Limits.MaxSpans; report --max-spans raises it)"},
		{name: "negative limit", lim: Limits{MaxDepth: -1}, in: good, want: "t.jsonl: invalid Limits.MaxDepth -1: want ≥ 0 (0 for the default)"},
	} {
		for _, rd := range otlpReaders {
			t.Run(tc.name+"/"+rd.name, func(t *testing.T) {
				_, err := readOTLP(rd.wrap([]byte(tc.in)), tc.lim)
				if err == nil || err.Error() != tc.want {
					t.Fatalf("got error %v, want %s", err, tc.want)
				}
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Errorf("got error %v, want one that is %v", err, tc.is)
				}
			})
		}
	}
	t.Run("spans at the limit", func(t *testing.T) {
		got, err := readOTLP(strings.NewReader(spans(2)), Limits{MaxSpans: 2})
		if err != nil || len(got) != 2 {
			t.Errorf("got %d spans, error %v; want 2, none", len(got), err)
		}
	})
}

// TestReadOTLPJSONZeros checks that endless NUL bytes (/dev/zero) fail at
// once: one buffer read, nothing allocated for them.
func TestReadOTLPJSONZeros(t *testing.T) {
	for _, prefix := range []string{"", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"`} {
		z := &nulReader{}
		r := io.MultiReader(strings.NewReader(prefix), z)
		_, err := readOTLP(r, Limits{})
		if err == nil {
			t.Fatalf("prefix %q: got no error, want one", prefix)
		}
		if z.n > readBufSize {
			t.Errorf("prefix %q: read %d bytes of zeros, want at most %d", prefix, z.n, readBufSize)
		}
	}
	allocs := testing.AllocsPerRun(10, func() {
		_ = ReadOTLPJSON(&nulReader{}, "zero", Limits{}, nil, nil, nil)
	})
	if allocs > 20 {
		t.Errorf("got %v allocations, want at most 20", allocs)
	}
}

func TestReadOTLPJSONReaderError(t *testing.T) {
	errRead := errors.New("disk on fire")
	r := io.MultiReader(strings.NewReader("{\n\"resourceSpans\":["), iotest.ErrReader(errRead))
	_, err := readOTLP(r, Limits{})
	if want := "t.jsonl:2:18: read: disk on fire"; err == nil || err.Error() != want || !errors.Is(err, errRead) {
		t.Errorf("got error %v, want %s wrapping %v", err, want, errRead)
	}
}

func TestReadOTLPJSONCallbackError(t *testing.T) {
	req, _ := otlpTestRequest()
	for _, enc := range otlpEncodings {
		data, err := enc.marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		for _, stopAt := range []int{1, 4, 7} {
			n := 0
			err = ReadOTLPJSON(bytes.NewReader(data), "t", Limits{}, nil, nil, func(Span) error {
				if n++; n == stopAt {
					return errStopOTLP
				}
				return nil
			})
			if err != errStopOTLP || n != stopAt {
				t.Errorf("%s: stop at %d: got error %v after %d spans, want %v after %d", enc.name, stopAt, err, n, errStopOTLP, stopAt)
			}
		}
	}
}

func TestReadOTLPJSONInterns(t *testing.T) {
	req, _ := otlpTestRequest()
	data, err := MarshalTraceLine(req)
	if err != nil {
		t.Fatal(err)
	}
	in := new(Interner)
	var a, b []Span
	for _, out := range []*[]Span{&a, &b} {
		if err := ReadOTLPJSON(bytes.NewReader(data), "t", Limits{}, in, nil, func(s Span) error {
			*out = append(*out, s)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := in.InternString("ipc.send"), a[1].Name; unsafe.StringData(got) != unsafe.StringData(want) || unsafe.StringData(b[1].Name) != unsafe.StringData(want) {
		t.Errorf("got names not shared through the Interner, want shared")
	}
}

// writeBenchTrace writes units of work as amdahl's trace file exporter does:
// unitsPerLine units of 10 spans per request line, one ResourceSpans per
// request (service.name and the SDK's attributes).
func writeBenchTrace(w io.Writer, units, unitsPerLine int) (int64, error) {
	type child struct{ component, phase, direction string }
	children := [...]child{
		{"runtime", "dispatch", ""},
		{"ipc", "serialize", "request"}, {"ipc", "send", "request"}, {"ipc", "receive", "request"}, {"ipc", "deserialize", "request"},
		{"taskhost", "execute", ""},
		{"ipc", "serialize", "reply"}, {"ipc", "send", "reply"}, {"ipc", "receive", "reply"},
	}
	const t0 = 1_760_000_000_000_000_000
	str := func(b []byte, k, v string) []byte {
		b = append(b, `{"key":"`...)
		b = append(b, k...)
		b = append(b, `","value":{"stringValue":"`...)
		b = append(b, v...)
		return append(b, `"}}`...)
	}
	var total int64
	var b []byte
	flush := func() error {
		n, err := w.Write(b)
		total += int64(n)
		b = b[:0]
		return err
	}
	for u := 0; u < units; {
		b = append(b, `{"resourceSpans":[{"resource":{"attributes":[`...)
		b = str(b, "service.name", "amdahl")
		b = append(b, ',')
		b = str(b, "telemetry.sdk.language", "go")
		b = append(b, ',')
		b = str(b, "telemetry.sdk.name", "opentelemetry")
		b = append(b, ',')
		b = str(b, "telemetry.sdk.version", "1.47.0")
		b = append(b, `]},"scopeSpans":[{"scope":{"name":"github.com/amdahl-rt/amdahl","version":"0.1.0"},"spans":[`...)
		for end := min(u+unitsPerLine, units); u < end; u++ {
			var tid [16]byte
			tid[0], tid[15] = 0x5b, byte(u)
			for i := 0; i < 8; i++ {
				tid[8+i] ^= byte(uint64(u) >> (8 * i))
			}
			th := hex.EncodeToString(tid[:])
			sid := func(i int) string { return fmt.Sprintf("%016x", uint64(u)*16+uint64(i)+1) }
			start := int64(t0 + u*1_000_000)
			span := func(i int, name string, attrs func([]byte) []byte, s, e int64, remote bool) {
				if i > 0 || u%unitsPerLine > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"attributes":[`...)
				b = attrs(b)
				if remote {
					b = append(b, `,{"key":"amdahl.remote","value":{"boolValue":true}}`...)
				}
				b = append(b, `],"endTimeUnixNano":"`...)
				b = strconv.AppendInt(b, e, 10)
				b = append(b, `","flags":256,"kind":1,"name":"`...)
				b = append(b, name...)
				if i > 0 {
					b = append(b, `","parentSpanId":"`...)
					b = append(b, sid(0)...)
				}
				b = append(b, `","spanId":"`...)
				b = append(b, sid(i)...)
				b = append(b, `","startTimeUnixNano":"`...)
				b = strconv.AppendInt(b, s, 10)
				b = append(b, `","status":{},"traceId":"`...)
				b = append(b, th...)
				b = append(b, `"}`...)
			}
			span(0, "amdahl.work", func(b []byte) []byte {
				b = str(b, "amdahl.scenario", "small")
				b = append(b, ',')
				b = str(b, "amdahl.variant", "A")
				b = append(b, ',')
				b = append(b, `{"key":"amdahl.work.id","value":{"intValue":"`...)
				b = strconv.AppendInt(b, int64(u), 10)
				b = append(b, `"}},`...)
				return str(b, "amdahl.outcome", "ok")
			}, start, start+90_000, false)
			for i, c := range children {
				s := start + int64(i)*10_000
				span(i+1, c.component+"."+c.phase, func(b []byte) []byte {
					b = str(b, "amdahl.component", c.component)
					b = append(b, ',')
					b = str(b, "amdahl.phase", c.phase)
					if c.direction != "" {
						b = append(b, ',')
						b = str(b, "amdahl.direction", c.direction)
					}
					b = append(b, ',')
					b = str(b, "amdahl.transport", "shm")
					b = append(b, ',')
					b = str(b, "amdahl.scenario", "small")
					b = append(b, ',')
					return str(b, "amdahl.variant", "A")
				}, s, s+9_000, c.component == "taskhost")
			}
			if len(b) > 1<<20 {
				if err := flush(); err != nil {
					return total, err
				}
			}
		}
		b = append(b, "]}]}]}\n"...)
	}
	return total, flush()
}

// TestWriteBenchTrace checks that the benchmark's input is what amdahl's trace
// exporter writes: a line survives decoding and MarshalTraceLine unchanged.
func TestWriteBenchTrace(t *testing.T) {
	var buf bytes.Buffer
	if _, err := writeBenchTrace(&buf, 6, 3); err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(buf.Bytes(), []byte("\n"))
	if len(lines) != 3 || len(lines[2]) != 0 {
		t.Fatalf("got %d lines, want 2", len(lines)-1)
	}
	for i, line := range lines[:2] {
		req, err := UnmarshalTraceLine(line)
		if err != nil {
			t.Fatal(err)
		}
		again, err := MarshalTraceLine(req)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, line) {
			t.Errorf("line %d:\ngot  %s\nwant %s", i+1, line, again)
		}
	}
	got, err := readOTLP(bytes.NewReader(buf.Bytes()), Limits{})
	if err != nil || len(got) != 60 {
		t.Fatalf("got %d spans, error %v; want 60, none", len(got), err)
	}
	if s := got[16]; s.Component != "taskhost" || s.Phase != telemetry.Execute || !s.Remote || s.ParentID != got[10].SpanID || s.Process != 1 {
		t.Errorf("got %+v, want the remote taskhost.execute child of %v", s, got[10].SpanID)
	}
}

// BenchmarkReadOTLPJSON1M reads 1,000,000 spans (100,000 units of work)
// from a file: all on one line, and on 1,000 lines.
func BenchmarkReadOTLPJSON1M(b *testing.B) {
	const units, spansPerUnit = 100_000, 10
	dir := b.TempDir()
	for _, tc := range []struct {
		name         string
		unitsPerLine int
	}{
		{"one line", units},
		{"1000 lines", units / 1000},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".jsonl")
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		size, err := writeBenchTrace(f, units, tc.unitsPerLine)
		if err := errors.Join(err, f.Close()); err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			in := new(Interner)
			spans := make([]Span, 0, units*spansPerUnit)
			for b.Loop() {
				f, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				spans = spans[:0]
				err = ReadOTLPJSON(f, path, Limits{}, in, nil, func(s Span) error {
					spans = append(spans, s)
					return nil
				})
				f.Close()
				if err != nil {
					b.Fatal(err)
				}
				if len(spans) != units*spansPerUnit {
					b.Fatalf("got %d spans, want %d", len(spans), units*spansPerUnit)
				}
			}
			b.ReportMetric(float64(units*spansPerUnit)*float64(b.N)/b.Elapsed().Seconds(), "spans/s")
		})
	}
}

// FuzzReadOTLPJSON checks that no input panics, that where the read buffer
// ends does not matter, and that what is accepted is JSON.
func FuzzReadOTLPJSON(f *testing.F) {
	// The seeds are in testdata/fuzz/FuzzReadOTLPJSON.
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := Limits{MaxSpans: 100, MaxString: 1 << 10, MaxDepth: 24}
		whole, errWhole := readOTLP(bytes.NewReader(data), lim)
		bytewise, errBytes := readOTLP(iotest.OneByteReader(bytes.NewReader(data)), lim)
		if fmt.Sprint(errWhole) != fmt.Sprint(errBytes) {
			t.Fatalf("read a byte at a time: got error %v, want %v", errBytes, errWhole)
		}
		if !slices.Equal(whole, bytewise) {
			t.Fatalf("read a byte at a time: got %+v, want %+v", bytewise, whole)
		}
		if errWhole != nil {
			if !strings.HasPrefix(errWhole.Error(), "t.jsonl:") {
				t.Fatalf("got error %q, want one that names the input", errWhole)
			}
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		for {
			var v map[string]json.RawMessage
			if err := dec.Decode(&v); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("accepted input that encoding/json rejects: %v", err)
			}
		}
		for _, s := range whole {
			if s.TraceID == (TraceID{}) || s.SpanID.IsZero() {
				t.Fatalf("got span %+v with a zero id", s)
			}
		}
	})
}

// BenchmarkReadOTLPJSONBaseline sets ReadOTLPJSON against the reference
// codec's ReadTraceFile (encoding/json and protojson), on
// 10,000 spans in memory.
func BenchmarkReadOTLPJSONBaseline(b *testing.B) {
	var buf bytes.Buffer
	if _, err := writeBenchTrace(&buf, 1000, 100); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	b.Run("ReadOTLPJSON", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			if err := ReadOTLPJSON(bytes.NewReader(data), "bench", Limits{}, nil, nil, func(Span) error {
				n++
				return nil
			}); err != nil || n != 10_000 {
				b.Fatalf("got %d spans, error %v; want 10000, none", n, err)
			}
		}
	})
	b.Run("ReadTraceFile", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			reqs, err := ReadTraceFile(bytes.NewReader(data))
			if err != nil || len(reqs) != 10 {
				b.Fatalf("got %d requests, error %v; want 10, none", len(reqs), err)
			}
		}
	})
}

func TestAmdahlKey(t *testing.T) {
	for i, k := range amdahlKeys {
		if got := amdahlKey([]byte(k)); got != i {
			t.Errorf("amdahlKey(%q) = %d, want %d", k, got, i)
		}
	}
	if got := amdahlKey([]byte("amdahl.transport")); got != -1 {
		t.Errorf("amdahlKey(amdahl.transport) = %d, want -1", got)
	}
}

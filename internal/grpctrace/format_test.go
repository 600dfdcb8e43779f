package grpctrace

import (
	"context"
	"maps"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// TestInjectMatchesPropagator: the client writes the metadata
// propagation.TraceContext.Inject writes, for every flag byte and with
// and without a trace state.
func TestInjectMatchesPropagator(t *testing.T) {
	state, err := trace.ParseTraceState("vendor=a,other=b-c")
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range []trace.TraceState{{}, state} {
		for f := range 256 {
			sc := trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID{0xde, 0xad, 15: byte(f)}, SpanID: trace.SpanID{0xbe, 0xef, 7: 0x0a},
				TraceFlags: trace.TraceFlags(f), TraceState: ts,
			})
			ctx := trace.ContextWithSpanContext(context.Background(), sc)
			want := propagation.MapCarrier{}
			propagation.TraceContext{}.Inject(ctx, want)
			md, _ := metadata.FromOutgoingContext(Client{}.inject(ctx, "/s/M"))
			got := map[string]string{}
			for k, v := range md {
				if len(v) != 1 {
					t.Fatalf("flags %#x: %s has %d values, want 1", f, k, len(v))
				}
				got[k] = v[0]
			}
			if !maps.Equal(got, map[string]string(want)) {
				t.Fatalf("flags %#x, state %q: metadata %v, want the propagator's %v", f, ts, got, want)
			}
		}
	}
}

// extractBoth returns the span context Server.extract and
// propagation.TraceContext.Extract take from a call's traceparent and
// tracestate ("" for none).
func extractBoth(parent, state string) (got, want trace.SpanContext) {
	md, carrier := metadata.MD{}, propagation.MapCarrier{}
	if parent != "" {
		md.Set(traceparentKey, parent)
		carrier.Set(traceparentKey, parent)
	}
	if state != "" {
		md.Set(tracestateKey, state)
		carrier.Set(tracestateKey, state)
	}
	ctx := metadata.NewIncomingContext(context.Background(), md)
	got = trace.SpanContextFromContext(Server{}.extract(ctx))
	want = trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
	return got, want
}

func sameContext(a, b trace.SpanContext) bool {
	return a.IsValid() == b.IsValid() && a.TraceID() == b.TraceID() && a.SpanID() == b.SpanID() &&
		a.TraceFlags() == b.TraceFlags() && a.IsRemote() == b.IsRemote() && a.TraceState().String() == b.TraceState().String()
}

// traceparentCases are headers at each edge of the parsing rules.
var traceparentCases = []string{
	"00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01",
	"00-0102030405060708090a0b0c0d0e0f10-0102030405060708-00",
	"00-0102030405060708090a0b0c0d0e0f10-0102030405060708-03",
	"00-0102030405060708090a0b0c0d0e0f10-0102030405060708-04", // reserved flag bit in version 00
	"00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01-",
	"00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01-x",
	"00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01x",
	"00-0102030405060708090A0b0c0d0e0f10-0102030405060708-01", // upper case
	"00-0102030405060708090a0b0c0d0e0f1-00102030405060708-01", // '-' misplaced
	"00-00000000000000000000000000000000-0102030405060708-01",
	"00-0102030405060708090a0b0c0d0e0f10-0000000000000000-01",
	"01-0102030405060708090a0b0c0d0e0f10-0102030405060708-ff",
	"01-0102030405060708090a0b0c0d0e0f10-0102030405060708-09-what-ever",
	"01-0102030405060708090a0b0c0d0e0f10-0102030405060708-09what",
	"fe-0102030405060708090a0b0c0d0e0f10-0102030405060708-01",
	"ff-0102030405060708090a0b0c0d0e0f10-0102030405060708-01",
	"0g-0102030405060708090a0b0c0d0e0f10-0102030405060708-01",
	"00-0102030405060708090a0b0c0d0e0f10-0102030405060708",
	"00-0102030405060708090a0b0c0d0e0f10-0102030405060708-1",
	"",
	"garbage",
	"00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01" + strings.Repeat("0", 1<<10),
}

// TestExtractMatchesPropagator: the server takes from a call's metadata
// the span context propagation.TraceContext.Extract takes, at each edge
// of the traceparent's rules and with good, bad and no trace states.
func TestExtractMatchesPropagator(t *testing.T) {
	for _, parent := range traceparentCases {
		for _, state := range []string{"", "vendor=a,other=b", "not a state", strings.Repeat("k=v,", 40) + "k=v"} {
			if got, want := extractBoth(parent, state); !sameContext(got, want) {
				t.Errorf("traceparent %.70q, tracestate %.20q: %v (remote %v, state %q), want the propagator's %v (remote %v, state %q)",
					parent, state, got, got.IsRemote(), got.TraceState(), want, want.IsRemote(), want.TraceState())
			}
		}
	}
}

// FuzzExtract: for any traceparent and tracestate, the server takes the
// span context the propagator takes.
func FuzzExtract(f *testing.F) {
	for _, p := range traceparentCases {
		f.Add(p, "")
		f.Add(p, "vendor=a")
	}
	f.Fuzz(func(t *testing.T, parent, state string) {
		// gRPC metadata values are header values: no control characters
		// reach a handler.
		if strings.ContainsAny(parent+state, "\x00\r\n") {
			t.Skip()
		}
		if got, want := extractBoth(parent, state); !sameContext(got, want) {
			t.Errorf("traceparent %q, tracestate %q: %v, want the propagator's %v", parent, state, got, want)
		}
	})
}

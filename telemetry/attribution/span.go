package attribution

import (
	"encoding/hex"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
)

// Span is the part of a span attribution needs, whatever it was read from.
type Span struct {
	TraceID  string // hex
	SpanID   string // hex
	ParentID string // hex; "" for a root
	Name     string
	Start    time.Time
	End      time.Time
	// Phase is 0 for spans that are not phases (amdahl.work, gRPC spans).
	Phase     telemetry.Phase
	Direction telemetry.Direction
	Scenario  string
	Outcome   string
}

// Duration returns End - Start, never negative.
func (s Span) Duration() time.Duration {
	if s.End.Before(s.Start) {
		return 0
	}
	return s.End.Sub(s.Start)
}

// FromSDK converts spans recorded in process (telemetry.Recorder).
func FromSDK(in []sdktrace.ReadOnlySpan) []Span {
	out := make([]Span, 0, len(in))
	for _, s := range in {
		sp := Span{
			TraceID: s.SpanContext().TraceID().String(),
			SpanID:  s.SpanContext().SpanID().String(),
			Name:    s.Name(),
			// Wall clock only: spans synthesised from another process's
			// timings have no monotonic reading, and mixing the two makes
			// the critical-path times drift from the e2e time by ns.
			Start: s.StartTime().Round(0),
			End:   s.EndTime().Round(0),
		}
		if s.Parent().IsValid() {
			sp.ParentID = s.Parent().SpanID().String()
		}
		for _, kv := range s.Attributes() {
			sp.setAttr(string(kv.Key), kv.Value.Emit())
		}
		out = append(out, sp)
	}
	return out
}

// FromOTLP converts spans read from an OTLP JSON trace file
// (telemetry.ReadTraceFile) or received by a collector.
func FromOTLP(reqs []*coltracepb.ExportTraceServiceRequest) []Span {
	var out []Span
	for _, r := range reqs {
		for _, rs := range r.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					sp := Span{
						TraceID:  hex.EncodeToString(s.TraceId),
						SpanID:   hex.EncodeToString(s.SpanId),
						ParentID: hex.EncodeToString(s.ParentSpanId),
						Name:     s.Name,
						Start:    time.Unix(0, int64(s.StartTimeUnixNano)),
						End:      time.Unix(0, int64(s.EndTimeUnixNano)),
					}
					for _, a := range s.Attributes {
						sp.setAttr(a.Key, a.Value.GetStringValue())
					}
					out = append(out, sp)
				}
			}
		}
	}
	return out
}

func (s *Span) setAttr(k, v string) {
	switch k {
	case string(telemetry.AttrPhase):
		if p, err := telemetry.ParsePhase(v); err == nil {
			s.Phase = p
		}
	case string(telemetry.AttrDirection):
		if d, err := telemetry.ParseDirection(v); err == nil {
			s.Direction = d
		}
	case string(telemetry.AttrScenario):
		s.Scenario = v
	case string(telemetry.AttrOutcome):
		s.Outcome = v
	}
}

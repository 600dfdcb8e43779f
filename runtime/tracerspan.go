package runtime

import (
	goruntime "runtime"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// accountingSpan is a span of the accountingTracer. Like every span, it is
// safe for concurrent use.
type accountingSpan struct {
	embedded.Span
	tracer *accountingTracer
	sc     trace.SpanContext
	// unit is the buffer of the unit the span belongs to, where it is
	// filed when it ends (nil: looked up by trace). Set before the span
	// is shared: inherited from the parent, or, on a unit's root, by
	// setUnit.
	unit *unitBuf
	// urec, instead, is the record of the unit it belongs to (a span
	// started under a record's span that the record has no slot for):
	// it is kept with the record's spans.
	urec *unitRecord

	mu    sync.Mutex
	sp    attribution.Span
	rec   *spanRecord // what only the export reads; nil unless the tracer exports
	ended bool
}

// End hands the span to the collector, once.
func (s *accountingSpan) End(opts ...trace.SpanEndOption) { s.endAt(endTime(opts)) }

// endTime is the end a span's End options give (WithTimestamp), or now.
func endTime(opts []trace.SpanEndOption) time.Time {
	if len(opts) > 0 {
		cfg := trace.NewSpanEndConfig(opts...)
		if ts := cfg.Timestamp(); !ts.IsZero() {
			return ts
		}
	}
	return time.Now()
}

// endAt ends the span at end, once.
func (s *accountingSpan) endAt(end time.Time) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.sp.End = end.UnixNano()
	sp := s.sp
	s.mu.Unlock()
	if s.urec != nil {
		s.urec.addExtra(sp)
	} else {
		s.tracer.col.ended(s.unit, sp)
	}
	if s.rec != nil {
		s.tracer.export.end(s.tracer, s.rec, s.sc, &sp)
	}
}

// setUnit makes span, a unit's root just started and not shared yet,
// carry buf, the buffer the collector keeps the unit's spans in (track):
// the spans started under it inherit it. Nothing for a span of another
// tracer.
func setUnit(span trace.Span, buf *unitBuf) {
	if s, ok := span.(*accountingSpan); ok {
		s.unit = buf
	}
}

// IsRecording reports whether the span has not ended yet.
func (s *accountingSpan) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

// SetAttributes keeps the attributes attribution reads.
func (s *accountingSpan) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	if !s.ended {
		for _, a := range kv {
			s.sp.SetAttribute(a)
		}
		if s.rec != nil {
			s.rec.addAttrs(kv)
		}
	}
	s.mu.Unlock()
}

// SetName renames the span.
func (s *accountingSpan) SetName(name string) {
	s.mu.Lock()
	if !s.ended {
		s.sp.Name = name
	}
	s.mu.Unlock()
}

// SpanContext returns the span's W3C context.
func (s *accountingSpan) SpanContext() trace.SpanContext { return s.sc }

// TracerProvider returns the tracer that made the span.
func (s *accountingSpan) TracerProvider() trace.TracerProvider { return s.tracer.provider }

// Events, links, errors and status reach only exporters: without one
// (no rec) they are dropped; a unit's failure reaches attribution as
// amdahl.outcome.

// AddEvent adds an event, as the SDK would.
func (s *accountingSpan) AddEvent(name string, opts ...trace.EventOption) {
	s.mu.Lock()
	if s.rec != nil && !s.ended {
		s.rec.addEvent(name, trace.NewEventConfig(opts...))
	}
	s.mu.Unlock()
}

// AddLink adds a link, as the SDK would.
func (s *accountingSpan) AddLink(l trace.Link) {
	s.mu.Lock()
	if s.rec != nil && !s.ended {
		s.rec.addLink(l)
	}
	s.mu.Unlock()
}

// RecordError adds err as an exception event, as the SDK would.
func (s *accountingSpan) RecordError(err error, opts ...trace.EventOption) {
	if err == nil || s.rec == nil {
		return // rec is set before the span is shared
	}
	cfg := exceptionEvent(err, opts)
	s.mu.Lock()
	if !s.ended {
		s.rec.addEvent(eventException, cfg)
	}
	s.mu.Unlock()
}

// exceptionEvent is the exception event of RecordError(err, opts...), as
// the SDK records it.
func exceptionEvent(err error, opts []trace.EventOption) trace.EventConfig {
	opts = append(opts, trace.WithAttributes(attribute.String(attrExceptionType, errorType(err)),
		attribute.String(attrExceptionMessage, err.Error())))
	cfg := trace.NewEventConfig(opts...)
	if cfg.StackTrace() {
		buf := make([]byte, 2048)
		buf = buf[:goruntime.Stack(buf, false)]
		cfg = trace.NewEventConfig(append(opts, trace.WithAttributes(attribute.String(attrExceptionStacktrace, string(buf))))...)
	}
	return cfg
}

// SetStatus sets the status as the SDK does (spanRecord.setStatus).
func (s *accountingSpan) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	if s.rec != nil && !s.ended {
		s.rec.setStatus(code, description)
	}
	s.mu.Unlock()
}

// setStatus sets the status as the SDK does: Ok is final, Error beats
// Unset, and only an Error keeps its description.
func (r *spanRecord) setStatus(code codes.Code, description string) {
	if r.status.Code <= code {
		r.status = spans.Status{Code: code}
		if code == codes.Error {
			r.status.Description = description
		}
	}
}

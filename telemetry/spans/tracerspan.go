package spans

import (
	goruntime "runtime"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// tracerSpan is a span of a TracerProvider. Like every span, it is safe
// for concurrent use.
type tracerSpan struct {
	embedded.Span
	tracer *Tracer
	sc     trace.SpanContext
	// unit is the unit the span belongs to, where it is filed when it
	// ends (nil: looked up by trace). Set before the span is shared:
	// inherited from the parent, or, on a unit's root, by
	// Collector.Track.
	unit *unit
	// holder, instead, is the Holder its unit's spans go to (inherited).
	holder Holder
	// replyLeft: ipc leaves the receive and deserialize of replies to
	// requests sent under this span to the span's owner (LeaveReplyPhases).
	replyLeft bool
	// arena is the span's place in its unit's arena, from 1 (0: not
	// in one).
	arena int8
	// ctx is the context the span's children start in (contextWith).
	ctx spanCtx

	mu    sync.Mutex
	sp    Span
	rec   *exportRecord // what only the export reads; nil unless the tracer exports
	ended bool
}

// End hands the span to the collector, once.
func (s *tracerSpan) End(opts ...trace.SpanEndOption) { s.endAt(endTime(opts)) }

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
func (s *tracerSpan) endAt(end time.Time) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.sp.End = end.UnixNano()
	sp := s.sp
	s.mu.Unlock()
	if u := s.unit; s.holder == nil && s.arena > 0 && &u.arena[s.arena-1] == s && s.tracer.p.cfg.Collector != nil {
		s.tracer.p.cfg.Collector.endedOwn(u, s, &sp)
	} else {
		s.tracer.file(&under{unit: s.unit, holder: s.holder}, &sp)
	}
	if s.rec != nil {
		s.tracer.p.export.exp.Export(s.rec.record(s.tracer, s.sc, &sp))
	}
}

// LeaveReplyPhases marks span, one of a TracerProvider's, as one whose
// owner records the receive and deserialize of the replies to requests
// sent under it (taskproto.ReplyPhaseRecorder), on the goroutine that takes
// the reply; it returns false, and marks nothing, for any other span.
// Call it before the span is shared.
func LeaveReplyPhases(span trace.Span) bool {
	s, ok := span.(*tracerSpan)
	if ok {
		s.replyLeft = true
	}
	return ok
}

// RecordsReplyPhases implements taskproto.ReplyPhaseRecorder (LeaveReplyPhases).
func (s *tracerSpan) RecordsReplyPhases() bool { return s.replyLeft }

// IsRecording reports whether the span has not ended yet.
func (s *tracerSpan) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

// SetAttributes keeps the attributes attribution reads.
func (s *tracerSpan) SetAttributes(kv ...attribute.KeyValue) {
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
func (s *tracerSpan) SetName(name string) {
	s.mu.Lock()
	if !s.ended {
		s.sp.Name = name
	}
	s.mu.Unlock()
}

// SpanContext returns the span's W3C context.
func (s *tracerSpan) SpanContext() trace.SpanContext { return s.sc }

// TracerProvider returns the tracer that made the span.
func (s *tracerSpan) TracerProvider() trace.TracerProvider { return s.tracer.p }

// Events, links, errors and status reach only exporters: without one
// (no rec) they are dropped; a unit's failure reaches attribution as
// amdahl.outcome.

// AddEvent adds an event, as the SDK would.
func (s *tracerSpan) AddEvent(name string, opts ...trace.EventOption) {
	s.mu.Lock()
	if s.rec != nil && !s.ended {
		s.rec.addEvent(name, trace.NewEventConfig(opts...))
	}
	s.mu.Unlock()
}

// AddLink adds a link, as the SDK would.
func (s *tracerSpan) AddLink(l trace.Link) {
	s.mu.Lock()
	if s.rec != nil && !s.ended {
		s.rec.addLink(l)
	}
	s.mu.Unlock()
}

// RecordError adds err as an exception event, as the SDK would.
func (s *tracerSpan) RecordError(err error, opts ...trace.EventOption) {
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

// SetStatus sets the status as the SDK does (exportRecord.setStatus).
func (s *tracerSpan) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	if s.rec != nil && !s.ended {
		s.rec.setStatus(code, description)
	}
	s.mu.Unlock()
}

// setStatus sets the status as the SDK does: Ok is final, Error beats
// Unset, and only an Error keeps its description.
func (r *exportRecord) setStatus(code codes.Code, description string) {
	if r.status.Code <= code {
		r.status = Status{Code: code}
		if code == codes.Error {
			r.status.Description = description
		}
	}
}

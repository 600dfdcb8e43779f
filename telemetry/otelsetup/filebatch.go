package otelsetup

import (
	"context"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// fileBatcher is the trace file's span processor. A span is encoded where
// it ends, into the line being filled (spanLine), and nothing else of it
// is kept; a full line (fileBatchSize spans, or fileLineBytes) goes to one
// writer goroutine, which writes it to the file. It never drops a span:
// when fileQueueLines lines wait for the writer, the span end that fills
// the next one waits for room. So it holds at most fileQueueLines+2
// lines, about 3 MB for amdahl's spans.
//
// The SDK's batch span processor, used before, sent every span on a
// channel and kept it, with its attributes, until its batch was encoded:
// on `amdahl run --out` its queue cost the parent about 7 µs of CPU per
// task unit (12 spans), its export loop 4 µs more, and the spans it kept
// the garbage collector (docs/measurements/out-cost.md).
//
// A partial line is written every fileBatchTimeout (the SDK's default
// batch timeout), so a file being written trails its spans by at most
// that; ForceFlush and Shutdown write it at once. Spans not sampled are
// ignored, as the SDK's batch span processor does.
type fileBatcher struct {
	exp   *TraceFileExporter
	size  int           // spans of a full line: fileBatchSize
	every time.Duration // a partial line is written this often: fileBatchTimeout

	mu      sync.Mutex
	line    *spanLine // being filled
	spare   []*spanLine
	closed  bool
	sending sync.WaitGroup // span ends handing a full line to the writer

	queue chan fileBatch // to the writer
	done  chan struct{}  // closed when the writer returns
}

// fileBatch is a line for the writer (or none); with flushed set, the
// writer closes it once every line before has been written.
type fileBatch struct {
	line    *spanLine
	flushed chan struct{}
}

const (
	fileBatchSize    = 1024    // spans of a line: its resource and scope are written once per line
	fileLineBytes    = 4 << 20 // bytes of a line's encoded spans: a line of huge spans is cut sooner
	fileQueueLines   = 4       // full lines waiting for the writer before a span end waits
	fileBatchTimeout = 5 * time.Second
)

var (
	_ sdktrace.SpanProcessor = (*fileBatcher)(nil)
	_ FileSpanWriter         = (*fileBatcher)(nil)
)

// newFileBatcher starts the writer goroutine, which writes to exp; Shutdown
// stops it and shuts exp down.
func newFileBatcher(exp *TraceFileExporter) *fileBatcher {
	return startFileBatcher(exp, fileBatchSize, fileBatchTimeout)
}

// startFileBatcher is newFileBatcher with lines of size spans, a partial
// one written every every.
func startFileBatcher(exp *TraceFileExporter, size int, every time.Duration) *fileBatcher {
	p := &fileBatcher{exp: exp, size: size, every: every, line: new(spanLine),
		queue: make(chan fileBatch, fileQueueLines), done: make(chan struct{})}
	go p.write()
	return p
}

// OnStart implements sdktrace.SpanProcessor.
func (p *fileBatcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd encodes s into the line, and hands the line to the writer when s
// fills it, waiting for room if the writer is behind.
func (p *fileBatcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if s == nil || !s.SpanContext().IsSampled() {
		return
	}
	p.EndFileSpan(FileSpanOf(s))
}

// EndFileSpan implements FileSpanWriter: OnEnd for a span as a FileSpan.
func (p *fileBatcher) EndFileSpan(s FileSpan) {
	if !s.SpanContext.IsSampled() {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.line.add(&s)
	if p.line.n < p.size && p.line.size < fileLineBytes {
		p.mu.Unlock()
		return
	}
	full := p.takeLocked()
	p.sending.Add(1)
	p.mu.Unlock()
	p.queue <- fileBatch{line: full}
	p.sending.Done()
}

// takeLocked returns the line being filled and starts another; nil if it
// is empty. mu is held.
func (p *fileBatcher) takeLocked() *spanLine {
	if p.line.n == 0 {
		return nil
	}
	l := p.line
	if n := len(p.spare); n > 0 {
		p.line, p.spare = p.spare[n-1], p.spare[:n-1]
	} else {
		p.line = new(spanLine)
	}
	return l
}

// write is the writer goroutine: it writes the lines handed to it, and
// the line being filled every fileBatchTimeout, until the queue closes.
// Write errors are kept by the exporter, which returns the first one
// again from ForceFlush and Shutdown.
func (p *fileBatcher) write() {
	defer close(p.done)
	tick := time.NewTicker(p.every)
	defer tick.Stop()
	for {
		select {
		case b, ok := <-p.queue:
			if !ok {
				return
			}
			if b.line != nil {
				p.export(b.line)
			}
			if b.flushed != nil {
				close(b.flushed)
			}
		case <-tick.C:
			p.mu.Lock()
			l := p.takeLocked()
			p.mu.Unlock()
			if l != nil {
				p.export(l)
			}
		}
	}
}

// export writes l and keeps it, emptied, for reuse.
func (p *fileBatcher) export(l *spanLine) {
	_ = p.exp.writeSpanLine(l) // kept by the exporter: ForceFlush and Shutdown report it
	l.reset()
	p.mu.Lock()
	if len(p.spare) < fileQueueLines {
		p.spare = append(p.spare, l)
	}
	p.mu.Unlock()
}

// ForceFlush writes every span ended before the call, then returns the
// exporter's first write error, if any; or ctx's error if ctx ends first.
func (p *fileBatcher) ForceFlush(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	b := fileBatch{line: p.takeLocked(), flushed: make(chan struct{})}
	p.sending.Add(1)
	p.mu.Unlock()
	p.queue <- b // the writer writes to a local file: room comes
	p.sending.Done()
	select {
	case <-b.flushed:
		return p.exp.writeErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown writes every span ended so far, stops the writer and shuts the
// exporter down (closing the file), returning its error. Later calls
// return nil. It does not give up when ctx ends: the file must hold every
// span, and what is left is at most fileQueueLines+1 lines to a local
// file.
func (p *fileBatcher) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	last := p.takeLocked()
	p.mu.Unlock()
	if last != nil {
		p.queue <- fileBatch{line: last}
	}
	p.sending.Wait()
	close(p.queue)
	<-p.done
	return p.exp.Shutdown(ctx)
}

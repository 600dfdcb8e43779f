package otelsetup

import (
	"context"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// fileBatcher is the trace file's span processor: it gathers ended spans
// into batches of fileBatchSize and hands each full batch to one writer
// goroutine, which encodes it as one line of the file. It never drops a
// span: when fileQueueBatches batches wait for the writer, the span end
// that fills the next one waits for room. A span end that does not fill a
// batch only appends to it under a mutex, where the SDK's batch span
// processor sends every span on a channel (and selects on it): on
// `amdahl run --out` that was about 7 µs of the parent's CPU per task unit
// (12 spans), with 4 µs more in its export loop (runtime/README.md, "The
// cost of --out"). A partial batch is written every fileBatchTimeout (the
// SDK's default batch timeout), so a file being written trails its spans
// by at most that; ForceFlush and Shutdown write it at once.
//
// Spans not sampled are ignored, as the SDK's batch span processor does.
type fileBatcher struct {
	exp   *TraceFileExporter
	size  int           // spans of a full batch: fileBatchSize
	every time.Duration // a partial batch is written this often: fileBatchTimeout

	mu      sync.Mutex
	batch   []FileSpan // being filled
	spare   [][]FileSpan
	closed  bool
	sending sync.WaitGroup // span ends sending a full batch

	queue chan fileBatch // to the writer
	done  chan struct{}  // closed when the writer returns
}

// fileBatch is a batch for the writer; with flushed set, the writer
// closes it once every batch before has been written.
type fileBatch struct {
	spans   []FileSpan
	flushed chan struct{}
}

const (
	fileBatchSize    = 1024 // spans of a line: its resource and scope are written once per batch
	fileQueueBatches = 8    // full batches waiting for the writer before a span end waits
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

// startFileBatcher is newFileBatcher with batches of size spans, a partial
// one written every every.
func startFileBatcher(exp *TraceFileExporter, size int, every time.Duration) *fileBatcher {
	p := &fileBatcher{exp: exp, size: size, every: every,
		queue: make(chan fileBatch, fileQueueBatches), done: make(chan struct{})}
	p.batch = make([]FileSpan, 0, size)
	go p.write()
	return p
}

// OnStart implements sdktrace.SpanProcessor.
func (p *fileBatcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd adds s to the batch, and hands the batch to the writer when s
// fills it, waiting for room if the writer is behind.
func (p *fileBatcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	fs := FileSpanOf(s)
	p.EndFileSpan(&fs)
}

// EndFileSpan implements FileSpanWriter: OnEnd for a span as a FileSpan.
func (p *fileBatcher) EndFileSpan(s *FileSpan) {
	if !s.SpanContext.IsSampled() {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.batch = append(p.batch, *s)
	if len(p.batch) < p.size {
		p.mu.Unlock()
		return
	}
	full := p.takeLocked()
	p.sending.Add(1)
	p.mu.Unlock()
	p.queue <- fileBatch{spans: full}
	p.sending.Done()
}

// takeLocked returns the batch being filled and starts another; nil if
// it is empty. mu is held.
func (p *fileBatcher) takeLocked() []FileSpan {
	if len(p.batch) == 0 {
		return nil
	}
	b := p.batch
	if n := len(p.spare); n > 0 {
		p.batch, p.spare = p.spare[n-1], p.spare[:n-1]
	} else {
		p.batch = make([]FileSpan, 0, p.size)
	}
	return b
}

// recycle keeps a written batch's slice for reuse, emptied (its spans'
// attributes and resources dropped).
func (p *fileBatcher) recycle(b []FileSpan) {
	clear(b)
	p.mu.Lock()
	if len(p.spare) < fileQueueBatches {
		p.spare = append(p.spare, b[:0])
	}
	p.mu.Unlock()
}

// write is the writer goroutine: it writes the batches handed to it, and
// the batch being filled every fileBatchTimeout, until the queue closes.
// Write errors are kept by the exporter, which returns the first one
// again from Shutdown.
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
			if b.spans != nil {
				p.export(b.spans)
			}
			if b.flushed != nil {
				close(b.flushed)
			}
		case <-tick.C:
			p.mu.Lock()
			b := p.takeLocked()
			p.mu.Unlock()
			if b != nil {
				p.export(b)
			}
		}
	}
}

func (p *fileBatcher) export(b []FileSpan) {
	_ = p.exp.writeSpans(b) // kept by the exporter: Shutdown reports it
	p.recycle(b)
}

// ForceFlush writes every span ended before the call, or returns ctx's
// error when ctx ends first; then the exporter's first write error, if
// any.
func (p *fileBatcher) ForceFlush(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	b := fileBatch{spans: p.takeLocked(), flushed: make(chan struct{})}
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
// span, and what is left is at most fileQueueBatches+1 batches to a
// local file.
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
		p.queue <- fileBatch{spans: last}
	}
	p.sending.Wait()
	close(p.queue)
	<-p.done // at most fileQueueBatches+1 batches to a local file
	return p.exp.Shutdown(ctx)
}

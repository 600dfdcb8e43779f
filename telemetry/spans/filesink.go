package spans

import (
	"context"
	"sync"
	"time"
)

// FileSink is the trace file's Exporter. A span is encoded where it ends,
// into the line being filled (Line), and nothing else of it is kept; a
// full line (fileBatchSize spans, or fileLineBytes) goes to one writer
// goroutine, which writes it to the file. It never drops a span: when
// fileQueueLines lines wait for the writer, the span end that fills the
// next one waits for room. So it holds at most fileQueueLines+2 lines,
// about 3 MB for amdahl's spans, and keeps no span with its attributes
// as a batch span processor's queue does (BenchmarkTraceFile).
//
// A partial line is written every fileBatchTimeout (the SDK's default
// batch timeout), so a file being written trails its spans by at most
// that; ForceFlush and Shutdown write it at once. Spans not sampled are
// ignored, as the SDK's batch span processor does. Export, ForceFlush and
// Shutdown are safe for concurrent use.
type FileSink struct {
	w     *FileWriter
	size  int           // spans of a full line: fileBatchSize
	every time.Duration // a partial line is written this often: fileBatchTimeout

	mu      sync.Mutex
	line    *Line // being filled
	spare   []*Line
	closed  bool
	sending sync.WaitGroup // span ends handing a full line to the writer

	queue chan fileBatch // to the writer
	done  chan struct{}  // closed when the writer returns
}

// fileBatch is a line for the writer (or none); with flushed set, the
// writer closes it once every line before has been written.
type fileBatch struct {
	line    *Line
	flushed chan struct{}
}

const (
	fileBatchSize    = 1024    // spans of a line: its resource and scope are written once per line
	fileLineBytes    = 4 << 20 // bytes of a line's encoded spans: a line of huge spans is cut sooner
	fileQueueLines   = 4       // full lines waiting for the writer before a span end waits
	fileBatchTimeout = 5 * time.Second
)

var _ Exporter = (*FileSink)(nil)

// NewFileSink starts the writer goroutine, which writes to w; Shutdown
// stops it and shuts w down.
func NewFileSink(w *FileWriter) *FileSink {
	return startFileSink(w, fileBatchSize, fileBatchTimeout)
}

// startFileSink is NewFileSink with lines of size spans, a partial one
// written every every.
func startFileSink(w *FileWriter, size int, every time.Duration) *FileSink {
	p := &FileSink{w: w, size: size, every: every, line: new(Line),
		queue: make(chan fileBatch, fileQueueLines), done: make(chan struct{})}
	go p.write()
	return p
}

// Export encodes s into the line, and hands the line to the writer when s
// fills it, waiting for room if the writer is behind. A span not sampled
// is ignored, and so is every span after Shutdown.
func (p *FileSink) Export(s Record) {
	if !s.SpanContext.IsSampled() {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.line.Add(&s)
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
func (p *FileSink) takeLocked() *Line {
	if p.line.n == 0 {
		return nil
	}
	l := p.line
	if n := len(p.spare); n > 0 {
		p.line, p.spare = p.spare[n-1], p.spare[:n-1]
	} else {
		p.line = new(Line)
	}
	return l
}

// write is the writer goroutine: it writes the lines handed to it, and
// the line being filled every fileBatchTimeout, until the queue closes.
// Write errors are kept by the FileWriter, which returns the first one
// again from ForceFlush and Shutdown.
func (p *FileSink) write() {
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
func (p *FileSink) export(l *Line) {
	_ = p.w.WriteLine(l) // kept by the writer: ForceFlush and Shutdown report it
	l.Reset()
	p.mu.Lock()
	if len(p.spare) < fileQueueLines {
		p.spare = append(p.spare, l)
	}
	p.mu.Unlock()
}

// ForceFlush writes every span ended before the call, then returns the
// writer's first write error, if any; or ctx's error if ctx ends first.
func (p *FileSink) ForceFlush(ctx context.Context) error {
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
		return p.w.writeErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown writes every span ended so far, stops the writer goroutine and
// shuts the FileWriter down (closing the file), returning its error. Later calls
// return nil. It does not give up when ctx ends: the file must hold every
// span, and what is left is at most fileQueueLines+1 lines to a local
// file.
func (p *FileSink) Shutdown(ctx context.Context) error {
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
	return p.w.Shutdown(ctx)
}

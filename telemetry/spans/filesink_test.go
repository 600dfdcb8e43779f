package spans

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// lockedBuffer is a bytes.Buffer safe for the writer goroutine and a test
// reading it; while gate is not nil, a Write waits for it to be closed.
type lockedBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	gate chan struct{}
	err  error
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	gate := b.gate
	b.mu.Unlock()
	if gate != nil {
		<-gate
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return 0, b.err
	}
	return b.buf.Write(p)
}

// names returns the names of the spans written so far, line by line: of
// the whole lines only, since the writer may be in the middle of one (a
// line of 4 MiB reaches the file in several writes).
func (b *lockedBuffer) names(t *testing.T) []string {
	t.Helper()
	b.mu.Lock()
	data := bytes.Clone(b.buf.Bytes())
	b.mu.Unlock()
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	var names []string
	for line := range bytes.Lines(data) {
		var req struct {
			ResourceSpans []struct {
				ScopeSpans []struct {
					Spans []struct{ Name string }
				}
			}
		}
		if err := json.Unmarshal(line, &req); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
				}
			}
		}
	}
	return names
}

func traceID(n byte) trace.TraceID { return trace.TraceID{0xab, 15: n} }
func spanID(n byte) trace.SpanID   { return trace.SpanID{0xcd, 7: n} }

// fileSpan is an ended span named name, sampled or not.
func fileSpan(name string, sampled bool) Record {
	var flags trace.TraceFlags
	if sampled {
		flags = trace.FlagsSampled
	}
	return Record{Name: name, SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID(1), SpanID: spanID(byte(len(name))), TraceFlags: flags})}
}

func TestFileSink(t *testing.T) {
	ctx := context.Background()
	out := &lockedBuffer{}
	p := startFileSink(NewFileWriter(out, nil), 3, time.Hour)
	for _, n := range []string{"a", "b", "c", "d"} {
		p.Export(fileSpan(n, true))
	}
	p.Export(fileSpan("unsampled", false))
	p.Export(Record{}) // not sampled
	p.Export(fileSpan("e", true))
	// The first batch (a, b, c) is full and written in time; d and e wait.
	if err := p.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(out.names(t), ","), "a,b,c,d,e"; got != want {
		t.Fatalf("after ForceFlush the file holds %s, want %s", got, want)
	}
	p.Export(fileSpan("f", true))
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	p.Export(fileSpan("after", true))
	if err := p.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := p.ForceFlush(ctx); err != nil {
		t.Errorf("ForceFlush after Shutdown: %v", err)
	}
	if got, want := strings.Join(out.names(t), ","), "a,b,c,d,e,f"; got != want {
		t.Fatalf("after Shutdown the file holds %s, want %s", got, want)
	}
}

// TestFileSinkTimeout checks that a partial batch is written without a
// flush, after the batcher's interval.
func TestFileSinkTimeout(t *testing.T) {
	out := &lockedBuffer{}
	p := startFileSink(NewFileWriter(out, nil), 100, 10*time.Millisecond)
	defer p.Shutdown(context.Background())
	p.Export(fileSpan("a", true))
	deadline := time.Now().Add(10 * time.Second)
	for len(out.names(t)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the partial batch was not written within 10 s; the interval is 10 ms")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFileSinkWaits stalls the file and checks that span ends wait for
// room once the queue is full, and that every span is written once it
// moves again.
func TestFileSinkWaits(t *testing.T) {
	gate := make(chan struct{})
	out := &lockedBuffer{gate: gate}
	p := startFileSink(NewFileWriter(out, nil), 1, time.Hour)
	// One batch in the writer, fileQueueLines queued: the next end waits.
	const fit = fileQueueLines + 1
	ended := make(chan int, fit+5)
	go func() {
		for i := range fit + 5 {
			p.Export(fileSpan(strings.Repeat("x", i+1), true))
			ended <- i
		}
		close(ended)
	}()
	for range fit {
		<-ended
	}
	select {
	case i := <-ended:
		t.Fatalf("span end %d returned with the file stalled and %d batches waiting: it must wait for room", i, fit)
	case <-time.After(100 * time.Millisecond):
	}
	out.mu.Lock()
	out.gate = nil
	out.mu.Unlock()
	close(gate)
	for range ended {
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(out.names(t)); got != fit+5 {
		t.Fatalf("the file holds %d spans, want %d", got, fit+5)
	}
}

// TestFileSinkWriteError checks that a write error reaches ForceFlush
// and Shutdown.
func TestFileSinkWriteError(t *testing.T) {
	ctx := context.Background()
	out := &lockedBuffer{err: errors.New("disk full")}
	p := startFileSink(NewFileWriter(out, nil), 2, time.Hour)
	p.Export(fileSpan("a", true))
	if err := p.ForceFlush(ctx); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("ForceFlush: got %v, want the write error", err)
	}
	if err := p.Shutdown(ctx); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Shutdown: got %v, want the write error", err)
	}
}

// TestFileSinkLineBytes checks that a line is handed to the writer once
// its spans' encoding reaches fileLineBytes, before it holds its spans'
// count: memory is bounded in bytes too.
func TestFileSinkLineBytes(t *testing.T) {
	out := &lockedBuffer{}
	p := startFileSink(NewFileWriter(out, nil), 1000, time.Hour)
	defer p.Shutdown(context.Background())
	big := strings.Repeat("x", 1<<20)
	for i := range fileLineBytes>>20 + 1 {
		p.Export(Record{Name: fmt.Sprint("big", i), Attributes: []attribute.KeyValue{attribute.String("v", big)},
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID(1), SpanID: spanID(byte(i + 1)), TraceFlags: trace.FlagsSampled})})
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(out.names(t)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no line written after %d MiB of spans; a line is cut at %d bytes", fileLineBytes>>20+1, fileLineBytes)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

package ipc

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// writeLoop is the Conn's writer: one goroutine writes every queued
// packet, in order, and records its send.
func (c *Conn) writeLoop() {
	defer c.wg.Done()
	ctx := context.Background()
	// The writer's own work (framing, flushing) is the send phase's; a
	// packet's send phase ends by clearing the labels, so they are set
	// again after each write. nil when the component sets no labels.
	labels := c.cfg.comp.LabelContext(telemetry.Send, c.role)
	setLabels(labels)
	var werr error
	for {
		it, ok := c.q.pop(c.closing)
		if !ok {
			return
		}
		if it.frame == nil { // flush marker
			it.done <- werr
			continue
		}
		if werr == nil {
			werr = c.write(ctx, it)
			setLabels(labels)
			if werr != nil {
				c.q.fail(werr)
			}
		}
		if it.done != nil {
			it.done <- werr
		}
		c.putBuf(it.buf)
	}
}

func (c *Conn) write(ctx context.Context, it *item) error {
	if c.UsesSpans() && it.parent.SpanContext().IsValid() {
		// Not it.ctx: the phase's End restores the labels of the context
		// it started in, and the writer must not keep the sender's.
		ctx = trace.ContextWithSpan(ctx, it.parent)
	}
	// The send phase and the blocked time share their clock reads: the
	// phase's start (when it reads one) and, for an unstamped frame, the
	// write's end.
	_, ph := c.phases(it.t).Start(ctx, telemetry.Send, c.role, telemetry.Leaf())
	start := ph.Start()
	if start.IsZero() {
		start = time.Now()
	}
	c.writeStart.Store(start.UnixNano())
	if c.cfg.onWrite != nil {
		c.cfg.onWrite(it.t, len(it.frame))
	}
	// A stamped frame's stamp is filled in before its bytes are written,
	// its end no later than the issue of the write that carries them, so
	// the peer has the frame whole only after the send's end it reads
	// from it (SendStamper). A small one (oneWrite) goes in one write(2),
	// stamped just before it: such a write fits in the send buffer, and
	// does not wait for the reader, unless the reader has left the buffer
	// mostly full. A larger one, whose write can wait for the reader, goes
	// in two: all but its stamp, then the stamp with the send's times, so
	// that its send covers that wait.
	attrs := c.phases(it.t).SpanAttributes()
	var (
		end time.Time
		err error
	)
	rest := len(it.frame) - it.stamp
	if it.stamp > 0 && len(it.frame) <= c.oneWrite {
		end = time.Now()
		c.stamp.StampSend(it.frame[rest:], start, end)
		_, err = c.nc.Write(it.frame)
	} else {
		_, err = c.nc.Write(it.frame[:rest])
		end = time.Now()
		if err == nil && it.stamp > 0 {
			c.stamp.StampSend(it.frame[rest:], start, end)
			_, err = c.nc.Write(it.frame[rest:])
		}
	}
	// wrote is when the frame's last write returned: the blocked time
	// ends there, on both paths, whatever end the send names. For a
	// stamped frame it is past end and costs a clock read, taken only when
	// the blocked time is recorded or the send's attributes are read.
	wrote := end
	if it.stamp > 0 && (c.m.live || attrs) {
		wrote = time.Now()
	}
	c.writeStart.Store(0)
	c.m.blocked.Record(ctx, wrote.Sub(start).Seconds(), c.m.blockedOpt[c.role])
	if err != nil {
		err = fmt.Errorf("ipc: write %s packet (%d bytes): %w", it.t, len(it.frame), err)
		ph.End(telemetry.WithError(err))
		return err
	}
	c.m.packet(ctx, opSend, c.role, len(it.frame))
	switch {
	case attrs && it.stamp > 0:
		ph.End(telemetry.EndedAt(end), telemetry.WithAttributes(telemetry.AttrBytes.Int(len(it.frame)), AttrBuffer.Int(c.bufEf), AttrWriteDuration.Float64(wrote.Sub(end).Seconds())))
	case attrs:
		ph.End(telemetry.EndedAt(end), telemetry.WithAttributes(telemetry.AttrBytes.Int(len(it.frame)), AttrBuffer.Int(c.bufEf)))
	default:
		ph.End(telemetry.EndedAt(end))
	}
	return nil
}

// oneWriteMax is the largest stamped frame written in one write(2) on
// any connection (oneWriteLimit).
const oneWriteMax = 16 << 10

// oneWriteLimit returns the largest stamped frame the writer writes in one
// write(2), stamped just before it, on a connection whose send buffer
// (SO_SNDBUF as read back, or the pipe's capacity) is eff bytes: a
// quarter of it, and at most 16 KiB (oneWriteMax). Why one write for a
// small frame and two for a larger one is SendStamper's rule; a quarter
// leaves room for the buffer's overhead (a socket charges it against
// SO_SNDBUF, a pipe counts whole pages). BenchmarkOneWrite measures it.
func oneWriteLimit(eff int) int { return min(oneWriteMax, max(eff, 0)/4) }

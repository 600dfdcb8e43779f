package ipc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// ErrClosed is returned by operations on a closed Conn.
var ErrClosed = errors.New("ipc: connection closed")

// ErrPeerClosed is matched by the error Recv returns when the peer closed
// the connection cleanly between packets.
var ErrPeerClosed = errors.New("ipc: peer closed the connection")

// AttrBuffer is the span attribute carrying the effective send buffer on
// ipc.send spans.
const AttrBuffer attribute.Key = "amdahl.ipc.buffer.effective"

// AttrWriteDuration is the span attribute, in seconds, carrying on the
// ipc.send span of a stamped frame (SendStamper) how long the write(2)
// that carried the stamp took past the span's end: the frame's one write,
// or the stamp's own second write. The span and the stamp end when that
// write is issued, so the write itself (the kernel's copy, a wait for
// the reader) is not in the span's duration; this attribute holds it. It
// is set, as the other send attributes, only when something reads span
// attributes (telemetry.Component.SpanAttributes).
const AttrWriteDuration attribute.Key = "amdahl.ipc.write.duration"

var propagator = propagation.TraceContext{}

// stream is what a Conn runs on: a socket, or a pair of pipes.
type stream interface {
	io.ReadWriteCloser
	SetDeadline(time.Time) error
}

// Incoming is one packet received by a Conn.
type Incoming struct {
	// Type and Msg are the packet: Msg is *ipcpb.TaskConfiguration,
	// *ipcpb.TaskResult, *ipcpb.LogMessage or *ipcpb.Shutdown, as the
	// connection's Codec decoded it, owned by the receiver.
	Type Type
	Msg  proto.Message
	// Size is the frame's body size in bytes.
	Size int
	// ReceiveStart is when the frame's header had arrived; the receive and
	// deserialize durations follow it.
	ReceiveStart        time.Time
	ReceiveDuration     time.Duration
	DeserializeDuration time.Duration
	// PhasesLeft is true for a packet whose receive and deserialize
	// phases the Conn's Codec left to the receiver (PhasePolicy): the
	// Conn recorded neither (no span, no amdahl.phase.duration), and the
	// receiver records them from ReceiveStart, the durations and Size.
	PhasesLeft bool

	remote trace.SpanContext
}

// SpanContext returns the span context the sender put in the packet's W3C
// trace context (see Context), or an invalid one if it put none.
func (in *Incoming) SpanContext() trace.SpanContext { return in.remote }

// Context returns parent carrying the span context the sender put in the
// packet's W3C trace context (its trace_parent and trace_context fields,
// if it has them; which span they name is the Codec's protocol), so
// spans started from it join the sender's trace. Without one it returns
// parent.
func (in *Incoming) Context(parent context.Context) context.Context {
	if !in.remote.IsValid() {
		return parent
	}
	return trace.ContextWithRemoteSpanContext(parent, in.remote)
}

// Conn is one end of an ipc connection after a successful handshake: one
// reader goroutine and one writer goroutine own the socket. Send, Flush and
// Recv are safe for concurrent use; packets are never interleaved.
type Conn struct {
	nc     stream
	cfg    config
	codec  Codec
	stamp  SendStamper // codec, when it stamps packets; else nil
	policy PhasePolicy // codec, when it has one; else nil
	traced uint16      // bit t: packets of type t get phase spans
	m      *metrics
	role   telemetry.Direction // direction of packets this end sends
	peer   telemetry.Direction // direction of packets this end receives
	bufEf  int                 // effective send buffer; the requested one is cfg.buffer
	// oneWrite is the largest stamped frame the writer writes in one
	// write(2): oneWriteLimit of bufEf.
	oneWrite int

	sendMu sync.Mutex // serialize+enqueue in wire order (the Codec relies on it)
	pool   sync.Pool

	q queue

	in       chan *Incoming
	readDone chan struct{}
	readErr  error // set before readDone is closed

	writeStart atomic.Int64 // unix ns when the current write began; 0 when idle

	closing   chan struct{}
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup
}

type item struct {
	frame []byte
	buf   *[]byte
	t     Type
	// parent is the span the packet was sent under (the span in Send's
	// context, a no-op one if none): the send span's parent.
	parent trace.Span
	done   chan error // nil in async mode; flush markers have frame == nil
	// stamp is the size of the stamp that ends frame (SendStamper), which
	// the writer fills in before it writes it (Conn.write). 0: none.
	stamp int
}

// newConn starts the Conn's goroutines on nc, whose effective send
// buffer (SO_SNDBUF as read back, or the pipe's capacity) is eff bytes.
func newConn(nc stream, cfg config, m *metrics, parent bool, eff int) *Conn {
	c := &Conn{
		nc:       nc,
		cfg:      cfg,
		codec:    protoCodec{},
		m:        m,
		bufEf:    eff,
		oneWrite: oneWriteLimit(eff),
		role:     telemetry.Request,
		peer:     telemetry.Reply,
		in:       make(chan *Incoming),
		readDone: make(chan struct{}),
		closing:  make(chan struct{}),
	}
	if !parent {
		c.role, c.peer = telemetry.Reply, telemetry.Request
	}
	if cfg.newCodec != nil {
		c.codec = cfg.newCodec()
	}
	c.stamp, _ = c.codec.(SendStamper)
	c.policy, _ = c.codec.(PhasePolicy)
	for t := range Type(16) {
		if t.valid() && (c.policy == nil || c.policy.Traces(t)) {
			c.traced |= 1 << t
		}
	}
	c.q.init(cfg.queueBytes, cfg.queuePackets, m)
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	if cfg.stall > 0 {
		c.wg.Add(1)
		go c.watchdog()
	}
	return c
}

// BufferSize returns the requested and the effective (read back) SO_SNDBUF
// of this end.
func (c *Conn) BufferSize() (requested, effective int) { return c.cfg.buffer, c.bufEf }

// UsesSpans reports whether anything the Conn records reads the span in
// a Send's context: its phase spans (WithTelemetry with an enabled
// Component) or its metrics (WithMeterProvider with one that records,
// for exemplars). A codec may put that span's trace context in the
// packet either way (taskproto's does). When nothing does, the writer
// makes no context for the span, and a caller need make none
// (taskproto.Reply does not).
func (c *Conn) UsesSpans() bool { return c.cfg.comp.Enabled() || c.m.live }

// Codec returns the connection's Codec (WithCodec), for protocol packages
// that keep per-connection state in it.
func (c *Conn) Codec() Codec { return c.codec }

// Send encodes m (a packet from ipcpb) with the connection's Codec and
// queues it for the writer. In Sync mode it returns once the bytes are
// written (or writing failed); in Async mode once queued, blocking only
// while the queue is full. Send does not retain m, but its Codec may read
// and change m's fields while encoding, so m must not be used concurrently.
//
// If ctx ends while a Sync send waits for the writer, Send returns ctx's
// error; the packet may still be written. An async write error is returned
// by the next Send, Flush or Shutdown.
func (c *Conn) Send(ctx context.Context, m proto.Message) error {
	t, err := TypeOf(m)
	if err != nil {
		return err
	}
	var done chan error
	if c.cfg.mode == Sync {
		done = make(chan error, 1)
	}
	c.sendMu.Lock()
	if err := c.q.err(); err != nil {
		c.sendMu.Unlock()
		return err
	}
	it, err := c.serialize(ctx, t, m)
	if err == nil {
		it.done = done
		if err = c.q.push(ctx, it, c.closing); err != nil {
			c.putBuf(it.buf)
			err = fmt.Errorf("ipc: send %s: %w", t, err)
		}
	}
	if err != nil && c.policy != nil {
		c.policy.Unsent(m)
	}
	c.sendMu.Unlock()
	if err != nil {
		return err
	}
	if done == nil {
		return nil
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("ipc: send %s: %w", t, ctx.Err())
	case <-c.closing:
		return ErrClosed
	}
}

func (c *Conn) getBuf() *[]byte {
	if b, ok := c.pool.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 64<<10)
	return &b
}

func (c *Conn) putBuf(b *[]byte) {
	if b == nil || cap(*b) > bufKeep {
		return
	}
	*b = (*b)[:0]
	c.pool.Put(b)
}

// serialize runs under sendMu: the Codec sees packets in wire order.
func (c *Conn) serialize(ctx context.Context, t Type, m proto.Message) (*item, error) {
	// A leaf: no span starts under serialize or send (the codec's work
	// is theirs), so their spans are made when they end.
	_, ph := c.phases(t).Start(ctx, telemetry.Serialize, c.role, telemetry.Leaf())
	buf := c.getBuf()
	frame, stamp, err := appendFrame(ctx, *buf, c.codec, t, m, c.cfg.maxPacket)
	if err != nil {
		ph.End(telemetry.WithError(err))
		c.m.protocolError(ctx, "encode")
		c.putBuf(buf)
		return nil, err
	}
	*buf = frame
	if c.phases(t).SpanAttributes() {
		ph.End(telemetry.WithAttributes(telemetry.AttrBytes.Int(len(frame) - HeaderSize)))
	} else {
		ph.End() // nothing reads the attributes: building them allocates
	}
	return &item{frame: frame, buf: buf, t: t, parent: trace.SpanFromContext(ctx), stamp: stamp}, nil
}

// Flush blocks until every packet queued before it has been written, and
// returns the first write error.
func (c *Conn) Flush(ctx context.Context) error {
	done := make(chan error, 1)
	c.sendMu.Lock()
	err := c.q.push(ctx, &item{done: done}, c.closing)
	c.sendMu.Unlock()
	if err != nil {
		return fmt.Errorf("ipc: flush: %w", err)
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("ipc: flush: %w", ctx.Err())
	case <-c.closing:
		return ErrClosed
	}
}

// Recv blocks until the next packet arrives, ctx ends or the connection
// fails. After the peer closes cleanly it returns an error matching
// ErrPeerClosed (and io.EOF); a truncated packet matches
// io.ErrUnexpectedEOF.
func (c *Conn) Recv(ctx context.Context) (*Incoming, error) {
	select {
	case in := <-c.in:
		return in, nil
	case <-c.readDone:
		return nil, c.readErr
	case <-ctx.Done():
		return nil, fmt.Errorf("ipc: receive: %w", ctx.Err())
	case <-c.closing:
		return nil, ErrClosed
	}
}

// Shutdown flushes queued packets (bounded by ctx), then closes the
// connection. Safe to call more than once and together with Close.
func (c *Conn) Shutdown(ctx context.Context) error {
	ferr := c.Flush(ctx)
	if errors.Is(ferr, ErrClosed) {
		ferr = nil
	}
	return errors.Join(ferr, c.Close())
}

// Close closes the socket at once and waits for the reader and writer
// goroutines. Queued packets not yet written fail with ErrClosed. Safe to
// call more than once.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closing)
		if err := c.nc.Close(); err != nil {
			c.closeErr = fmt.Errorf("ipc: close: %w", err)
		}
		c.wg.Wait()
		c.q.fail(ErrClosed)
	})
	return c.closeErr
}

// phases returns the component that records the phases of packets of type
// t, nil for a type the codec's PhasePolicy does not trace: those get the
// byte and packet counters only.
func (c *Conn) phases(t Type) *telemetry.Component {
	if c.traced>>t&1 != 0 {
		return c.cfg.comp
	}
	return nil
}

func (c *Conn) readLoop() {
	defer c.wg.Done()
	defer close(c.readDone)
	ctx := context.Background()
	rd := NewReader(c.nc, c.cfg.maxPacket)
	// The reader reads (receive) and decodes (deserialize) every packet
	// the peer sends: readOne moves between the two label sets.
	lbl := readLabels{recv: c.cfg.comp.LabelContext(telemetry.Receive, c.peer),
		dec: c.cfg.comp.LabelContext(telemetry.Deserialize, c.peer)}
	setLabels(lbl.recv)
	for {
		in, err := c.readOne(ctx, rd, lbl)
		if err != nil {
			select {
			case <-c.closing:
				c.readErr = ErrClosed
			default:
				c.readErr = err
				kind := errorKind(err)
				if kind != "eof" {
					c.m.protocolError(ctx, kind)
				}
				if kind != "eof" && kind != "io" {
					// The stream is desynchronised: nothing after this can
					// be trusted, so fail the whole connection.
					_ = c.nc.Close()
				}
			}
			return
		}
		select {
		case c.in <- in:
		case <-c.closing:
			c.readErr = ErrClosed
			return
		}
	}
}

func errorKind(err error) string {
	var (
		ut *UnknownTypeError
		se *PacketSizeError
		de *DecodeError
		pe *ProtocolError
	)
	switch {
	case errors.Is(err, ErrPeerClosed):
		return "eof"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated"
	case errors.As(err, &ut):
		return "unknown_type"
	case errors.As(err, &se):
		return "too_large"
	case errors.As(err, &pe):
		if pe.Kind == "" {
			return "protocol"
		}
		return pe.Kind
	case errors.As(err, &de):
		return "decode"
	}
	return "io"
}

// traceCarrier is a packet with trace_parent and trace_context fields.
type traceCarrier interface {
	GetTraceParent() []byte
	GetTraceContext() map[string]string
}

// readLabels are the reader's pprof label contexts (nil: none).
type readLabels struct{ recv, dec context.Context }

// setLabels sets the goroutine's pprof labels to those ctx carries; a nil
// ctx changes nothing.
func setLabels(ctx context.Context) {
	if ctx != nil {
		pprof.SetGoroutineLabels(ctx)
	}
}

func (c *Conn) readOne(ctx context.Context, rd *Reader, lbl readLabels) (*Incoming, error) {
	t, n, err := rd.ReadHeader()
	if err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("%w: %w", ErrPeerClosed, io.EOF)
		}
		return nil, err
	}
	start := time.Now()
	body, err := rd.ReadBody(t, n)
	if err != nil {
		return nil, err
	}
	recvDone := time.Now()
	setLabels(lbl.dec)
	m, err := c.codec.Decode(t, body)
	setLabels(lbl.recv)
	decDone := time.Now()
	if err != nil {
		return nil, err
	}
	in := &Incoming{Type: t, Msg: m, Size: n, ReceiveStart: start, ReceiveDuration: recvDone.Sub(start), DeserializeDuration: decDone.Sub(recvDone)}
	if p, ok := m.(traceCarrier); ok {
		in.remote = remoteContext(ctx, p.GetTraceParent(), p.GetTraceContext())
	}
	var pctx context.Context
	var left bool
	if c.policy != nil {
		pctx, left = c.policy.Received(in)
	}
	c.m.packet(ctx, opReceive, c.peer, n+HeaderSize)
	if c.phases(t).Enabled() {
		// The packet's trace context is known only after decoding, so the
		// receive and deserialize spans are recorded after the fact: under
		// the span the packet names, or where its codec says.
		if left {
			in.PhasesLeft = true
			return in, nil
		}
		if pctx == nil {
			pctx = in.Context(ctx)
		}
		c.pastPhase(pctx, telemetry.Receive, start, recvDone, n)
		c.pastPhase(pctx, telemetry.Deserialize, recvDone, decDone, n)
	}
	return in, nil
}

// remoteContext returns the span context a packet carries: its binary
// traceparent with the tracestate of the map, or (from a peer that sends
// the text headers) the map's traceparent.
func remoteContext(ctx context.Context, parent []byte, carrier map[string]string) trace.SpanContext {
	if len(parent) > 0 {
		return ParseTraceParent(parent, carrier[tracestateKey])
	}
	if len(carrier) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagator.Extract(ctx, propagation.MapCarrier(carrier)))
}

// tracestateKey is the W3C tracestate header's name, the key of a packet's
// trace_context map that a binary traceparent leaves.
const tracestateKey = "tracestate"

func (c *Conn) pastPhase(ctx context.Context, p telemetry.Phase, start, end time.Time, n int) {
	if !c.cfg.comp.SpanAttributes() {
		c.cfg.comp.RecordSpan(ctx, p, c.peer, start, end) // nothing reads the attributes
		return
	}
	c.cfg.comp.RecordSpan(ctx, p, c.peer, start, end, telemetry.AttrBytes.Int(n))
}

// watchdog reports, once each, a write blocked or a reply awaited (the
// codec's PhasePolicy) for longer than the stall threshold. It only logs
// and counts.
func (c *Conn) watchdog() {
	defer c.wg.Done()
	ctx := context.Background()
	tick := time.NewTicker(max(c.cfg.stall/4, time.Millisecond))
	defer tick.Stop()
	var reportedWrite int64
	var awaited map[uint64]time.Time // when each awaited reply was first seen; zero once reported
	report := func(kind string, args ...any) {
		c.m.stalls.Add(ctx, 1, metric.WithAttributeSet(c.m.set(AttrKind.String(kind))))
		c.cfg.logger.Warn("ipc: stall: "+kind+" outstanding longer than the stall threshold", append(args, "threshold", c.cfg.stall, "transport", c.cfg.transport)...)
		if c.cfg.onStall != nil {
			c.cfg.onStall(kind)
		}
	}
	for {
		select {
		case <-c.closing:
			return
		case now := <-tick.C:
			if ws := c.writeStart.Load(); ws != 0 && ws != reportedWrite && now.Sub(time.Unix(0, ws)) > c.cfg.stall {
				reportedWrite = ws
				report("write", "blocked_for", now.Sub(time.Unix(0, ws)), "queued_packets", c.q.len())
			}
			if c.policy == nil {
				continue
			}
			// Reported once Awaiting returns: f may run under the codec's lock.
			next, late := make(map[uint64]time.Time, len(awaited)), []uint64(nil)
			c.policy.Awaiting(func(id uint64) {
				first, ok := awaited[id]
				switch {
				case !ok:
					first = now
				case !first.IsZero() && now.Sub(first) > c.cfg.stall:
					late, first = append(late, id), time.Time{}
				}
				next[id] = first
			})
			awaited = next
			for _, id := range late {
				report("reply", "id", id)
			}
		}
	}
}

package chunking

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/credentials"
)

// Admission: every gRPC message a client sends reserves its size against
// SidecarConfig.MaxTotalBufferedBytes before its body is let in, so that
// the messages being received, the messages being handled and the partial
// completions buffered are bounded together.
//
// gRPC reads a message's 5-byte prefix (flag, length) and then opens the
// call's HTTP/2 flow-control window for the whole message, so that the
// client can send it at once; it keeps the frames as they arrive. No gRPC
// hook runs between the two. The admission runs below gRPC instead, on
// each connection's bytes (admitConn, installed by admitCreds after the
// TLS handshake): it reads the HTTP/2 frames going in, finds each
// message's prefix in its stream's DATA frames, and reserves the length.
// When the reservation does not fit, it holds back the WINDOW_UPDATE
// frames gRPC writes for that stream until it does: the client can then
// send no more than the stream's initial window (64 KiB; the server's
// windows are static, see admissionOptions), and the other calls of the
// connection go on. A reservation is released when the call ends (the
// server's trailers or a reset, either way) or its connection closes.
//
// Reservations wait in arrival order. One that does not fit is let in
// anyway when nothing else is reserved, so that a final chunk can always
// arrive and free the partial completion it ends: the bound can then be
// passed by one message, MaxRecvMsgSize at most.

// HTTP/2 frame types and flags the admission reads (RFC 9113, section 6).
const (
	h2FrameData         = 0x0
	h2FrameHeaders      = 0x1
	h2FrameRSTStream    = 0x3
	h2FrameWindowUpdate = 0x8
	h2FlagEndStream     = 0x1
	h2FlagPadded        = 0x8
	h2HeaderLen         = 9
	h2ClientPreface     = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

// admission is the byte budget shared by the messages of every connection
// and the sidecar's partial buffers.
type admission struct {
	limit    int64 // MaxTotalBufferedBytes
	maxMsg   int64 // MaxRecvMsgSize: what a compressed message may grow to
	buffered atomic.Int64
	// handshakes counts the connections admitConn wraps.
	handshakes atomic.Int64

	mu       sync.Mutex
	reserved int64 // by messages, granted
	queue    []*reservation
	waited   atomic.Int64 // reservations that had to wait

	// kicks wakes the sidecar's admission goroutine (run), which grants
	// what fits: a grant writes to a connection, which must not happen on
	// a goroutine that holds that connection's write lock or the
	// sidecar's lock, as the releasers do.
	kicks chan struct{}
}

// callAllowance is a stream's initial HTTP/2 window (the sidecar's is
// static, admissionOptions): what a client may send on a call before the
// server asks for more. A message no larger is not reserved: the client
// can send it whole whatever the admission does, and a message of that
// size on a call that stays open (GetWorkItems) would otherwise hold a
// reservation for as long as the stream lives.
const callAllowance = 64 << 10

// DecodedActionBytes is what a decoded action holds beside its payload
// (the structs of the action, its case message and its wrappers): a
// buffered chunk counts its serialized size (or its buffer's capacity,
// with BorrowPayloads) and this much per action
// toward SidecarConfig.MaxTotalBufferedBytes, so that chunks of many
// small actions are not counted at a fraction of their memory.
const DecodedActionBytes = 256

// heldBytes is what a buffered chunk of n serialized bytes (or, when its
// payloads alias a buffer, that buffer's capacity: recvBuf.held) and the
// given actions counts toward MaxTotalBufferedBytes.
func heldBytes(n, actions int) int { return n + DecodedActionBytes*actions }

// messageCost is what a message of n bytes reserves: the frames it
// arrives in, the contiguous copy gRPC's proto codec makes to decode it,
// and the decoded message, all alive while it is decoded.
func messageCost(n int64) int64 { return 3 * n }

func newAdmission(limit, maxMsg int) *admission {
	return &admission{limit: int64(limit), maxMsg: int64(maxMsg), kicks: make(chan struct{}, 1)}
}

// run grants reservations as room frees, until stop is closed.
func (a *admission) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-a.kicks:
			a.kick()
		}
	}
}

func (a *admission) poke() {
	select {
	case a.kicks <- struct{}{}:
	default:
	}
}

type reservation struct {
	n     int64
	grant func() // called once, without locks held, when granted
}

// reserve asks for n bytes. It returns true when they were granted at
// once; otherwise r waits in line and r.grant runs when they are.
func (a *admission) reserve(r *reservation) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.queue) == 0 && a.fitsLocked(r.n) {
		a.reserved += r.n
		return true
	}
	a.queue = append(a.queue, r)
	a.waited.Add(1)
	return false
}

// fitsLocked: n fits beside what is reserved and buffered, or nothing is
// reserved (the bound then passed by one message at most).
func (a *admission) fitsLocked(n int64) bool {
	return a.reserved == 0 || a.reserved+a.buffered.Load()+n <= a.limit
}

// cancel takes r out of the line; it reports false when r was granted
// already (its bytes are then the caller's to release).
func (a *admission) cancel(r *reservation) bool {
	a.mu.Lock()
	for i, q := range a.queue {
		if q == r {
			a.queue = append(a.queue[:i], a.queue[i+1:]...)
			a.mu.Unlock()
			a.poke() // the head may have changed
			return true
		}
	}
	a.mu.Unlock()
	return false
}

// release gives n granted bytes back and lets in whoever now fits.
func (a *admission) release(n int64) {
	if n == 0 {
		return
	}
	a.mu.Lock()
	a.reserved -= n
	a.mu.Unlock()
	a.poke()
}

// setBuffered records the bytes the partial completions hold; when they
// shrank, whoever now fits is let in.
func (a *admission) setBuffered(n int64) {
	if old := a.buffered.Swap(n); n < old {
		a.poke()
	}
}

// kick grants the reservations at the head of the line that fit.
func (a *admission) kick() {
	var granted []*reservation
	a.mu.Lock()
	for len(a.queue) > 0 && a.fitsLocked(a.queue[0].n) {
		r := a.queue[0]
		a.queue[0] = nil
		a.queue = a.queue[1:]
		a.reserved += r.n
		granted = append(granted, r)
	}
	a.mu.Unlock()
	for _, r := range granted {
		r.grant()
	}
}

// admitCreds wraps the server's transport credentials: every connection,
// once through the handshake, is an admitConn.
type admitCreds struct {
	credentials.TransportCredentials
	adm *admission
}

func (c admitCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	c.adm.handshakes.Add(1)
	return newAdmitConn(conn, c.adm), info, nil
}

func (c admitCreds) Clone() credentials.TransportCredentials {
	return admitCreds{TransportCredentials: c.TransportCredentials.Clone(), adm: c.adm}
}

// admitConn is a server connection whose HTTP/2 frames the admission
// reads (going in) and filters (WINDOW_UPDATE frames going out).
type admitConn struct {
	net.Conn
	adm *admission

	// Read side, used by gRPC's one reader goroutine only.
	preface int // bytes of the client preface still to skip
	rh      [h2HeaderLen]byte
	rhn     int      // bytes of rh filled
	rtype   byte     // the current frame's type, flags, stream
	rflags  byte     //
	rstream uint32   //
	rleft   int      // payload bytes of the current frame still to come
	rpad    int      // trailing padding bytes of the current DATA frame
	rpadlen bool     // the current DATA frame's pad length byte is next
	cur     *h2State // the current DATA frame's stream

	mu       sync.Mutex
	streams  map[uint32]*h2State
	lastOpen uint32 // client stream ids only grow (RFC 9113, 5.1.1)
	closed   bool

	// Write side: Write and inject, under wmu.
	wmu     sync.Mutex
	wh      [h2HeaderLen + 4]byte // a frame header, and a WINDOW_UPDATE's increment
	whn     int
	wneed   int // bytes of wh wanted before the frame can be judged
	wleft   int // payload bytes of the current frame to pass through
	out     []byte
	pending []byte // frames to inject at the next frame boundary
}

// h2State is one stream's message framing and reservation.
type h2State struct {
	id       uint32
	prefix   [5]byte
	pn       int   // bytes of prefix filled
	body     int64 // bytes of the current message still to come
	reserved int64 // granted bytes not yet released
	wait     *reservation
	held     uint32 // WINDOW_UPDATE increments held back while wait is pending
}

func newAdmitConn(c net.Conn, adm *admission) *admitConn {
	return &admitConn{Conn: c, adm: adm, preface: len(h2ClientPreface), streams: map[uint32]*h2State{}}
}

func (c *admitConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.scanIn(p[:n])
	return n, err
}

// scanIn follows the frames in b, which gRPC is about to read.
func (c *admitConn) scanIn(b []byte) {
	if c.preface > 0 {
		k := min(c.preface, len(b))
		c.preface -= k
		b = b[k:]
	}
	for len(b) > 0 {
		if c.rleft == 0 && c.rpad == 0 && !c.rpadlen {
			k := copy(c.rh[c.rhn:], b)
			c.rhn += k
			b = b[k:]
			if c.rhn < h2HeaderLen {
				return
			}
			c.rhn = 0
			c.rleft = int(c.rh[0])<<16 | int(c.rh[1])<<8 | int(c.rh[2])
			c.rtype, c.rflags = c.rh[3], c.rh[4]
			c.rstream = binary.BigEndian.Uint32(c.rh[5:9]) & (1<<31 - 1)
			c.cur = nil
			switch c.rtype {
			case h2FrameHeaders:
				c.open(c.rstream)
			case h2FrameData:
				c.cur = c.lookup(c.rstream)
				if c.rflags&h2FlagPadded != 0 && c.rleft > 0 {
					c.rpadlen = true
					c.rleft--
				}
			case h2FrameRSTStream:
				c.end(c.rstream)
			}
			continue
		}
		if c.rpadlen {
			c.rpadlen = false
			pad := int(b[0])
			b = b[1:]
			if pad > c.rleft {
				pad = c.rleft // a protocol error gRPC will end the connection for
			}
			c.rleft -= pad
			c.rpad = pad
			continue
		}
		if c.rleft > 0 {
			k := min(c.rleft, len(b))
			if c.cur != nil {
				c.message(c.cur, b[:k])
			}
			c.rleft -= k
			b = b[k:]
			continue
		}
		k := min(c.rpad, len(b))
		c.rpad -= k
		b = b[k:]
	}
}

// open makes stream id's state at its first HEADERS frame. A stream
// that has ended gets none again: DATA the client sent before it saw the
// end is not followed.
func (c *admitConn) open(id uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id > c.lastOpen && !c.closed {
		c.lastOpen = id
		c.streams[id] = &h2State{id: id}
	}
}

func (c *admitConn) lookup(id uint32) *h2State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

// message follows gRPC's message framing in a stream's DATA bytes and
// reserves each message's size when its prefix is complete.
func (c *admitConn) message(st *h2State, b []byte) {
	for len(b) > 0 {
		if st.body > 0 {
			k := int(min(st.body, int64(len(b))))
			st.body -= int64(k)
			b = b[k:]
			continue
		}
		k := copy(st.prefix[st.pn:], b)
		st.pn += k
		b = b[k:]
		if st.pn < len(st.prefix) {
			return
		}
		st.pn = 0
		st.body = int64(binary.BigEndian.Uint32(st.prefix[1:]))
		if st.body > c.adm.maxMsg {
			continue // gRPC refuses it from its prefix, before reading it
		}
		if st.body <= callAllowance {
			continue // within the call's initial window: see callAllowance
		}
		n := messageCost(st.body)
		if st.prefix[0] != 0 {
			// Compressed: what it decompresses to is bounded by
			// MaxRecvMsgSize only.
			n = st.body + messageCost(c.adm.maxMsg) - c.adm.maxMsg
		}
		c.admit(st, n)
	}
}

func (c *admitConn) admit(st *h2State, n int64) {
	r := &reservation{n: n}
	r.grant = func() { c.granted(st, r) }
	c.mu.Lock()
	if c.closed || st.wait != nil {
		// Closed, or a second message while the first waits (gRPC reads
		// one message of a unary call; the window stays shut meanwhile):
		// nothing more to reserve.
		c.mu.Unlock()
		return
	}
	st.wait = r
	c.mu.Unlock()
	if c.adm.reserve(r) {
		c.granted(st, r)
	}
}

// granted records r's bytes as st's, and lets out the window updates held
// back meanwhile.
func (c *admitConn) granted(st *h2State, r *reservation) {
	c.mu.Lock()
	if st.wait != r || c.streams[st.id] != st {
		// The stream ended (or the connection closed) while r waited and
		// lost the race with the grant.
		c.mu.Unlock()
		c.adm.release(r.n)
		return
	}
	st.wait = nil
	st.reserved += r.n
	held := st.held
	st.held = 0
	c.mu.Unlock()
	if held > 0 {
		var f [h2HeaderLen + 4]byte
		f[2] = 4
		f[3] = h2FrameWindowUpdate
		binary.BigEndian.PutUint32(f[5:], st.id)
		binary.BigEndian.PutUint32(f[9:], held)
		c.inject(f[:])
	}
}

// end releases stream id's reservation: the call is over.
func (c *admitConn) end(id uint32) {
	c.mu.Lock()
	st := c.streams[id]
	delete(c.streams, id)
	wait, reserved := c.forgetLocked(st)
	c.mu.Unlock()
	c.drop(wait, reserved)
}

// forgetLocked takes st's pending and granted reservations (st may be nil).
func (c *admitConn) forgetLocked(st *h2State) (*reservation, int64) {
	if st == nil {
		return nil, 0
	}
	wait, reserved := st.wait, st.reserved
	st.wait, st.reserved = nil, 0
	return wait, reserved
}

// drop gives back what forgetLocked took. A pending reservation granted
// meanwhile is released by granted, which finds its stream gone.
func (c *admitConn) drop(wait *reservation, reserved int64) {
	if wait != nil {
		c.adm.cancel(wait)
	}
	c.adm.release(reserved)
}

// gated reports whether stream id waits for its reservation, and if so
// holds back the window increment inc.
func (c *admitConn) gated(id uint32, inc uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.streams[id]
	if st == nil || st.wait == nil {
		return false
	}
	st.held += inc
	return true
}

func (c *admitConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.out = c.out[:0]
	b := p
	for len(b) > 0 {
		if c.wleft > 0 {
			k := min(c.wleft, len(b))
			c.out = append(c.out, b[:k]...)
			c.wleft -= k
			b = b[k:]
			continue
		}
		if c.wneed == 0 {
			c.wneed = h2HeaderLen
		}
		k := copy(c.wh[c.whn:c.wneed], b)
		c.whn += k
		b = b[k:]
		if c.whn < c.wneed {
			break
		}
		length := int(c.wh[0])<<16 | int(c.wh[1])<<8 | int(c.wh[2])
		typ, flags := c.wh[3], c.wh[4]
		id := binary.BigEndian.Uint32(c.wh[5:9]) & (1<<31 - 1)
		if typ == h2FrameWindowUpdate && id != 0 && length == 4 && c.wneed == h2HeaderLen {
			c.wneed = h2HeaderLen + 4 // judge it with its increment
			continue
		}
		if c.wneed == h2HeaderLen+4 {
			inc := binary.BigEndian.Uint32(c.wh[9:]) & (1<<31 - 1)
			if !c.gated(id, inc) {
				c.out = append(c.out, c.wh[:c.whn]...)
			}
			c.whn, c.wneed = 0, 0
			continue
		}
		c.out = append(c.out, c.wh[:h2HeaderLen]...)
		c.whn, c.wneed = 0, 0
		c.wleft = length
		if id != 0 && (typ == h2FrameRSTStream || typ == h2FrameHeaders && flags&h2FlagEndStream != 0) {
			// The call's trailers (or its reset): its handler is done
			// with the message.
			c.end(id)
		}
	}
	if c.whn == 0 && c.wleft == 0 && len(c.pending) > 0 {
		c.out = append(c.out, c.pending...)
		c.pending = c.pending[:0]
	}
	if len(c.out) > 0 {
		if _, err := c.Conn.Write(c.out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// inject writes frame f between the frames gRPC writes.
func (c *admitConn) inject(f []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.whn == 0 && c.wleft == 0 {
		_, _ = c.Conn.Write(f) // an error is the connection's, and gRPC's next write sees it
		return
	}
	c.pending = append(c.pending, f...)
}

func (c *admitConn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	c.closed = true
	type taken struct {
		wait     *reservation
		reserved int64
	}
	var all []taken
	for id, st := range c.streams {
		w, r := c.forgetLocked(st)
		all = append(all, taken{w, r})
		delete(c.streams, id)
	}
	c.mu.Unlock()
	for _, t := range all {
		c.drop(t.wait, t.reserved)
	}
	return err
}

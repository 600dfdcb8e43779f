package ipc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
)

// Type is a frame's packet type: the first byte of the header.
type Type uint8

// The packet types. 0 and values above TypeShutdown are rejected by the
// decoder as *UnknownTypeError.
const (
	TypeTaskConfiguration Type = 1 // parent → child, *ipcpb.TaskConfiguration
	TypeTaskResult        Type = 2 // child → parent, *ipcpb.TaskResult
	TypeLogMessage        Type = 3 // child → parent, *ipcpb.LogMessage
	TypeShutdown          Type = 4 // either way, *ipcpb.Shutdown
)

// HeaderSize is the size of a frame header: one type byte, then the body
// length as a little-endian uint32.
const HeaderSize = 5

// DefaultMaxPacketSize is the default limit on a frame body: far above the
// 1.5 MB task configurations of the seed, below anything that could exhaust
// memory by accident.
const DefaultMaxPacketSize = 256 << 20

// String returns the packet type's name.
func (t Type) String() string {
	switch t {
	case TypeTaskConfiguration:
		return "task_configuration"
	case TypeTaskResult:
		return "task_result"
	case TypeLogMessage:
		return "log_message"
	case TypeShutdown:
		return "shutdown"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

func (t Type) valid() bool { return t >= TypeTaskConfiguration && t <= TypeShutdown }

// TypeOf returns the packet type of m, or an error for a message that is not
// one of the ipcpb packets.
func TypeOf(m proto.Message) (Type, error) {
	switch m.(type) {
	case *ipcpb.TaskConfiguration:
		return TypeTaskConfiguration, nil
	case *ipcpb.TaskResult:
		return TypeTaskResult, nil
	case *ipcpb.LogMessage:
		return TypeLogMessage, nil
	case *ipcpb.Shutdown:
		return TypeShutdown, nil
	}
	return 0, fmt.Errorf("ipc: %T is not a packet type", m)
}

func newMessage(t Type) proto.Message {
	switch t {
	case TypeTaskConfiguration:
		return new(ipcpb.TaskConfiguration)
	case TypeTaskResult:
		return new(ipcpb.TaskResult)
	case TypeLogMessage:
		return new(ipcpb.LogMessage)
	case TypeShutdown:
		return new(ipcpb.Shutdown)
	}
	return nil
}

// ErrPacketTooLarge is matched (errors.Is) by every *PacketSizeError.
var ErrPacketTooLarge = errors.New("ipc: packet too large")

// PacketSizeError reports a frame whose body length exceeds the limit, on
// either the sending or the receiving side.
type PacketSizeError struct {
	Type  Type
	Size  int64
	Limit int64
}

func (e *PacketSizeError) Error() string {
	return fmt.Sprintf("ipc: %s packet of %d bytes exceeds the maximum packet size of %d bytes (ipc.WithMaxPacketSize raises it)", e.Type, e.Size, e.Limit)
}

// Is reports ErrPacketTooLarge.
func (e *PacketSizeError) Is(target error) bool { return target == ErrPacketTooLarge }

// UnknownTypeError reports a header whose type byte is not a packet type.
type UnknownTypeError struct{ Type byte }

func (e *UnknownTypeError) Error() string {
	return fmt.Sprintf("ipc: unknown packet type byte 0x%02x (valid: 0x01-0x04)", e.Type)
}

// TrailingBytesError reports bytes left over after one complete frame in a
// buffer given to DecodePacket.
type TrailingBytesError struct{ N int }

func (e *TrailingBytesError) Error() string {
	return fmt.Sprintf("ipc: %d trailing bytes after frame", e.N)
}

// DecodeError reports a frame body that is not a valid encoding of its type.
type DecodeError struct {
	Type Type
	Err  error
}

func (e *DecodeError) Error() string { return fmt.Sprintf("ipc: decode %s packet: %v", e.Type, e.Err) }

// Unwrap returns the protobuf error.
func (e *DecodeError) Unwrap() error { return e.Err }

// appendFrame appends the frame of m (header, then the body c appends) to
// dst, and returns it with the size of the stamp that ends it when c is a
// SendStamper (0: none). On error it returns dst unchanged.
func appendFrame(ctx context.Context, dst []byte, c Codec, t Type, m proto.Message, limit int) ([]byte, int, error) {
	start := len(dst)
	var (
		frame []byte
		stamp int
		err   error
	)
	if s, ok := c.(SendStamper); ok {
		frame, stamp, err = s.AppendStampedBody(ctx, append(dst, byte(t), 0, 0, 0, 0), t, m)
	} else {
		frame, err = c.AppendBody(ctx, append(dst, byte(t), 0, 0, 0, 0), t, m)
	}
	if err != nil {
		return dst, 0, err
	}
	if stamp < 0 || stamp > len(frame)-start-HeaderSize {
		return dst, 0, fmt.Errorf("ipc: encode %s packet: a stamp of %d bytes in a body of %d", t, stamp, len(frame)-start-HeaderSize)
	}
	frame, err = finishFrame(frame, start, t, limit)
	if err != nil {
		return frame, 0, err
	}
	return frame, stamp, nil
}

func finishFrame(dst []byte, start int, t Type, limit int) ([]byte, error) {
	n := len(dst) - start - HeaderSize
	if n > limit {
		return dst[:start], &PacketSizeError{Type: t, Size: int64(n), Limit: int64(limit)}
	}
	binary.LittleEndian.PutUint32(dst[start+1:], uint32(n))
	return dst, nil
}

// AppendFrame appends to dst the frame of packet m: header, then m's
// protobuf encoding. It returns the extended slice; on error dst is
// returned unchanged in length. A body above limit is a *PacketSizeError.
func AppendFrame(dst []byte, m proto.Message, limit int) ([]byte, error) {
	t, err := TypeOf(m)
	if err != nil {
		return dst, err
	}
	out, _, err := appendFrame(context.Background(), dst, protoCodec{}, t, m, limit)
	if err != nil {
		return dst, err
	}
	return out, nil
}

// parseHeader validates a header.
func parseHeader(h []byte, limit int) (Type, int, error) {
	t := Type(h[0])
	if !t.valid() {
		return 0, 0, &UnknownTypeError{Type: h[0]}
	}
	n := binary.LittleEndian.Uint32(h[1:])
	if int64(n) > int64(limit) {
		return t, 0, &PacketSizeError{Type: t, Size: int64(n), Limit: int64(limit)}
	}
	return t, int(n), nil
}

// Unmarshal decodes a frame body of type t into a new packet message.
func Unmarshal(t Type, body []byte) (proto.Message, error) {
	m := newMessage(t)
	if m == nil {
		return nil, &UnknownTypeError{Type: byte(t)}
	}
	if err := proto.Unmarshal(body, m); err != nil {
		return nil, &DecodeError{Type: t, Err: err}
	}
	return m, nil
}

// DecodePacket decodes exactly one frame from b. Errors: io.ErrUnexpectedEOF
// when b is truncated (also for an empty b), *UnknownTypeError,
// *PacketSizeError, *TrailingBytesError, *DecodeError.
func DecodePacket(b []byte, limit int) (proto.Message, error) {
	if len(b) < HeaderSize {
		return nil, fmt.Errorf("ipc: decode header: %w", io.ErrUnexpectedEOF)
	}
	t, n, err := parseHeader(b, limit)
	if err != nil {
		return nil, err
	}
	body := b[HeaderSize:]
	if len(body) < n {
		return nil, fmt.Errorf("ipc: decode %s body: %d of %d bytes: %w", t, len(body), n, io.ErrUnexpectedEOF)
	}
	if len(body) > n {
		return nil, &TrailingBytesError{N: len(body) - n}
	}
	return Unmarshal(t, body)
}

// readChunk bounds how much a Reader allocates ahead of the bytes actually
// received, so a lying length costs memory only as the data arrives.
const readChunk = 1 << 20

// bufKeep is the largest body buffer a Reader keeps between frames; a larger
// one is dropped after use (as MSBuild #14505 does).
const bufKeep = 2 << 20

// Reader reads frames from a stream. It is not safe for concurrent use.
type Reader struct {
	r     io.Reader
	limit int
	hdr   [HeaderSize]byte
	buf   []byte
}

// NewReader returns a Reader over r that rejects bodies above limit.
func NewReader(r io.Reader, limit int) *Reader {
	return &Reader{r: r, limit: limit, buf: make([]byte, 0, 128<<10)}
}

// ReadHeader reads the next frame header. It returns io.EOF when the stream
// ends cleanly before a frame, io.ErrUnexpectedEOF (wrapped) inside one.
func (r *Reader) ReadHeader() (Type, int, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		if err == io.EOF {
			return 0, 0, io.EOF
		}
		return 0, 0, fmt.Errorf("ipc: read header: %w", err)
	}
	return parseHeader(r.hdr[:], r.limit)
}

// ReadBody reads the n-byte body announced by the last header. The returned
// slice is valid until the next call to ReadBody.
func (r *Reader) ReadBody(t Type, n int) ([]byte, error) {
	if cap(r.buf) > bufKeep {
		r.buf = make([]byte, 0, 128<<10)
	}
	buf := r.buf[:0]
	for len(buf) < n {
		want := min(n, len(buf)+readChunk)
		if cap(buf) < want {
			nb := make([]byte, len(buf), min(n, max(want, 2*cap(buf))))
			copy(nb, buf)
			buf = nb
		}
		m, err := io.ReadFull(r.r, buf[len(buf):want])
		buf = buf[:len(buf)+m]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			r.buf = buf[:0]
			return nil, fmt.Errorf("ipc: read %s body: %d of %d bytes: %w", t, len(buf), n, err)
		}
	}
	r.buf = buf[:0]
	return buf, nil
}

// ReadPacket reads and decodes one frame.
func (r *Reader) ReadPacket() (proto.Message, error) {
	t, n, err := r.ReadHeader()
	if err != nil {
		return nil, err
	}
	body, err := r.ReadBody(t, n)
	if err != nil {
		return nil, err
	}
	return Unmarshal(t, body)
}

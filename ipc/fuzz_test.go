package ipc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"
	"time"

	"google.golang.org/protobuf/proto"
)

// FuzzReader reads a stream of frames, with a maximum packet size taken
// from the input's first two bytes, and checks every packet and every error
// against a reference walk of the same bytes: the bound is enforced from
// the header alone, the reader's buffer stays within the bound, and a
// clean end is io.EOF only between frames.
func FuzzReader(f *testing.F) {
	// More seeds live in testdata/fuzz/FuzzReader.
	var stream []byte
	for _, m := range samplePackets() {
		stream, _ = AppendFrame(stream, m, DefaultMaxPacketSize)
	}
	f.Add(append([]byte{0x04, 0x00}, stream...))
	f.Add(append([]byte{0x00, 0x10}, stream...)) // bound 16: the first frame is too large
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 2 {
			return
		}
		limit := int(binary.LittleEndian.Uint16(b)) // up to 64 KiB
		in := b[2:]
		var src io.Reader = bytes.NewReader(in)
		if len(in) > 0 && in[0]&1 == 1 {
			src = iotest.OneByteReader(src)
		}
		r := NewReader(src, limit)
		rest := in
		for i := 0; ; i++ {
			m, err := r.ReadPacket()
			if c := cap(r.buf); c > max(128<<10, limit) {
				t.Fatalf("reader buffer grew to %d bytes, over both its initial 128 KiB and the bound %d", c, limit)
			}
			switch {
			case len(rest) == 0:
				if err != io.EOF {
					t.Fatalf("frame %d: at a frame boundary with no bytes left got %v, %v; want io.EOF", i, m, err)
				}
				return
			case len(rest) < HeaderSize:
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("frame %d: %d header bytes: got %v, want io.ErrUnexpectedEOF", i, len(rest), err)
				}
				return
			}
			typ, n := Type(rest[0]), binary.LittleEndian.Uint32(rest[1:])
			var ue *UnknownTypeError
			var pe *PacketSizeError
			switch {
			case !typ.valid():
				if !errors.As(err, &ue) || ue.Type != rest[0] {
					t.Fatalf("frame %d: type byte 0x%02x: got %v, want *UnknownTypeError", i, rest[0], err)
				}
				return
			case int64(n) > int64(limit):
				if !errors.As(err, &pe) || pe.Size != int64(n) || pe.Limit != int64(limit) || !errors.Is(err, ErrPacketTooLarge) {
					t.Fatalf("frame %d: length %d over bound %d: got %v, want *PacketSizeError", i, n, limit, err)
				}
				return
			case len(rest)-HeaderSize < int(n):
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("frame %d: %d of %d body bytes: got %v, want io.ErrUnexpectedEOF", i, len(rest)-HeaderSize, n, err)
				}
				return
			}
			frame := rest[:HeaderSize+int(n)]
			rest = rest[len(frame):]
			want, werr := DecodePacket(frame, limit)
			if (err == nil) != (werr == nil) || (err == nil && !proto.Equal(m, want)) {
				t.Fatalf("frame %d: Reader got %v, %v; DecodePacket got %v, %v", i, m, err, want, werr)
			}
			if err != nil {
				var de *DecodeError
				if !errors.As(err, &de) {
					t.Fatalf("frame %d: complete frame of a valid type: got %v, want *DecodeError", i, err)
				}
				return
			}
		}
	})
}

// fakeStream is a stream over fixed bytes: reads come from in, writes go to
// out, and deadlines are accepted and ignored.
type fakeStream struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (s *fakeStream) Read(p []byte) (int, error)  { return s.in.Read(p) }
func (s *fakeStream) Write(p []byte) (int, error) { return s.out.Write(p) }
func (s *fakeStream) Close() error                { return nil }
func (s *fakeStream) SetDeadline(time.Time) error { return nil }
func fuzzToken() (tok Token)                      { copy(tok[:], "0123456789abcdef0123456789abcdef"); return tok }
func fuzzNonce(b byte) (n [nonceSize]byte)        { n[0] = b; return n }
func fuzzHello(nonce [nonceSize]byte) []byte      { return appendHello(nil, magic, ProtocolVersion, nonce) }
func fuzzProof(parent bool, pn, cn [nonceSize]byte) []byte {
	return proof(fuzzToken(), parent, pn[:], cn[:])
}

// handshakeSeeds are peer transcripts for FuzzHandshake: what a correct
// peer says to an end whose nonce is fuzzNonce(1) (the peer's is
// fuzzNonce(2)), and variations on it.
func handshakeSeeds() []struct {
	peer   []byte
	parent bool
} {
	own, peer := fuzzNonce(1), fuzzNonce(2)
	// To a parent, the child says: hello, verdict, then verdict 0 and its proof.
	toParent := append(append(fuzzHello(peer), 0, 0), fuzzProof(false, own, peer)...)
	// To a child, the parent says: hello, verdict, its proof, a last verdict.
	toChild := append(append(append(fuzzHello(peer), 0), fuzzProof(true, peer, own)...), 0)
	wrongProof := append(append(fuzzHello(peer), 0), make([]byte, proofSize+1)...)
	return []struct {
		peer   []byte
		parent bool
	}{
		{toParent, true},
		{toChild, false},
		{wrongProof, false},
		{append(appendHello(nil, "MSBUILD!", ProtocolVersion, peer), 0), true},
		{append(appendHello(nil, magic, 1, peer), 0), false},
		{toParent[:helloSize+1], true},
		{append(fuzzHello(peer), 3), false},
		{append(fuzzHello(peer), 0, 3), true},
	}
}

// FuzzHandshake plays arbitrary peer bytes against either end of the
// handshake and checks: no panic; success only when the bytes hold the
// correct proof; a failure is a *HandshakeError naming the field or a
// truncation; the token never appears in what this end writes; and a child
// writes its proof only after the parent's proof checked out.
func FuzzHandshake(f *testing.F) {
	for _, s := range handshakeSeeds() {
		f.Add(s.peer, s.parent)
	}
	f.Fuzz(func(t *testing.T, peer []byte, parent bool) {
		tok, own := fuzzToken(), fuzzNonce(1)
		s := &fakeStream{in: bytes.NewReader(peer)}
		err := handshake(context.Background(), s, tok, parent, time.Minute, fuzzHello(own))
		out := s.out.Bytes()
		if bytes.Contains(out, tok[:]) {
			t.Fatalf("the token is in the %d bytes this end wrote", len(out))
		}
		// The reference: what a correct peer's bytes look like from here.
		var pn [nonceSize]byte
		if len(peer) >= helloSize {
			copy(pn[:], peer[len(magic)+2:helloSize])
		}
		helloOK := len(peer) > helloSize && string(peer[:len(magic)]) == magic &&
			binary.BigEndian.Uint16(peer[len(magic):]) == ProtocolVersion && peer[helloSize] == 0
		var proofOK bool
		if parent {
			// hello, verdict, verdict 0, child's proof
			proofOK = helloOK && len(peer) >= helloSize+2+proofSize && peer[helloSize+1] == 0 &&
				bytes.Equal(peer[helloSize+2:helloSize+2+proofSize], fuzzProof(false, own, pn))
		} else {
			// hello, verdict, parent's proof
			proofOK = helloOK && len(peer) >= helloSize+1+proofSize &&
				bytes.Equal(peer[helloSize+1:helloSize+1+proofSize], fuzzProof(true, pn, own))
			if len(out) > helloSize+2 && !proofOK {
				t.Fatalf("the child wrote %d bytes (its proof) to a parent whose proof is wrong", len(out))
			}
		}
		if err == nil {
			if !proofOK {
				t.Fatalf("handshake succeeded on a peer without the correct proof: %x", peer)
			}
			return
		}
		var he *HandshakeError
		switch {
		case errors.As(err, &he):
			if he.Field != "magic" && he.Field != "version" && he.Field != "token" && he.Field != "unknown" {
				t.Fatalf("HandshakeError names field %q", he.Field)
			}
			if he.Field == "token" && !he.Peer && proofOK {
				t.Fatalf("token mismatch on the correct proof")
			}
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		default:
			t.Fatalf("handshake error %v (%T): want a *HandshakeError or a truncation", err, err)
		}
	})
}

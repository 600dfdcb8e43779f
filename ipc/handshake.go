package ipc

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"
)

// magic opens every handshake. A constant, so nothing can change what
// this process expects of its peers.
const magic = "AMDAHLIP"

// ProtocolVersion is the version of the handshake, framing and packets;
// both ends must agree exactly. Version 2 proves the token by HMAC instead
// of sending it.
const ProtocolVersion uint16 = 2

// Token is a random per-connection secret the parent hands to the child by
// environment or inherited fd (never argv); both ends prove they hold it,
// and it never crosses the connection.
type Token [32]byte

// NewToken returns a random token.
func NewToken() (Token, error) {
	var t Token
	if _, err := rand.Read(t[:]); err != nil {
		return t, fmt.Errorf("ipc: generate token: %w", err)
	}
	return t, nil
}

// String returns the token in hex, as passed in AMDAHL_IPC_TOKEN.
func (t Token) String() string { return hex.EncodeToString(t[:]) }

// ParseToken parses the hex form of a token.
func ParseToken(s string) (Token, error) {
	var t Token
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(t) {
		return t, fmt.Errorf("ipc: parse token: want %d hex digits", 2*len(t))
	}
	copy(t[:], b)
	return t, nil
}

// HandshakeError reports a handshake that failed on one field ("magic",
// "version", "token"). Peer is true when the other end rejected ours.
type HandshakeError struct {
	Field string
	Peer  bool
	Got   string
	Want  string
}

func (e *HandshakeError) Error() string {
	if e.Peer {
		return fmt.Sprintf("ipc: handshake rejected by peer: %s mismatch", e.Field)
	}
	if e.Field == "token" {
		// Never print secrets.
		return "ipc: handshake failed: token mismatch"
	}
	return fmt.Sprintf("ipc: handshake failed: %s mismatch: got %s, want %s", e.Field, e.Got, e.Want)
}

// nonceSize is the size of the fresh random challenge each end opens with.
const nonceSize = 32

const (
	helloSize = len(magic) + 2 + nonceSize
	proofSize = sha256.Size
)

var fieldNames = [...]string{"", "magic", "version", "token"}

func appendHello(dst []byte, cookie string, version uint16, nonce [nonceSize]byte) []byte {
	dst = append(dst, cookie...)
	dst = binary.BigEndian.AppendUint16(dst, version)
	return append(dst, nonce[:]...)
}

// Role labels of the proofs, NUL-terminated so that neither is a prefix of
// the other.
const (
	parentRole = "AMDAHLIP parent\x00"
	childRole  = "AMDAHLIP child\x00"
)

// proof is what an end sends to show that it holds tok without sending
// tok: HMAC-SHA256 keyed with the token over the end's role and both
// nonces, the parent's first. The nonces make every proof fresh (no
// replay); the role makes a child's proof worthless as a parent's (no
// reflection).
func proof(tok Token, parent bool, parentNonce, childNonce []byte) []byte {
	m := hmac.New(sha256.New, tok[:])
	if parent {
		m.Write([]byte(parentRole))
	} else {
		m.Write([]byte(childRole))
	}
	m.Write(parentNonce)
	m.Write(childNonce)
	return m.Sum(nil)
}

// checkHello returns the verdict on a peer's hello: 0, or the index of the
// mismatching field in fieldNames with the local error.
func checkHello(peer []byte) (byte, error) {
	switch {
	case string(peer[:len(magic)]) != magic:
		return 1, &HandshakeError{Field: "magic", Got: fmt.Sprintf("%q", peer[:len(magic)]), Want: fmt.Sprintf("%q", magic)}
	case binary.BigEndian.Uint16(peer[len(magic):]) != ProtocolVersion:
		return 2, &HandshakeError{Field: "version", Got: fmt.Sprint(binary.BigEndian.Uint16(peer[len(magic):])), Want: fmt.Sprint(ProtocolVersion)}
	}
	return 0, nil
}

// peerVerdict turns a verdict byte the peer sent into nil or its error.
func peerVerdict(v byte) error {
	if v == 0 {
		return nil
	}
	f := "unknown"
	if int(v) < len(fieldNames) {
		f = fieldNames[v]
	}
	return &HandshakeError{Field: f, Peer: true}
}

// handshake authenticates the two ends of nc to each other. The token
// never crosses the connection, and the child (the end that accepts
// connections, on a named socket the one any same-uid process can reach)
// sends nothing derived from it until the parent has proven it holds it:
//
//  1. both ends at once: hello (magic, version, a fresh nonce), then a
//     verdict byte on the peer's magic and version (0 ok, 1 magic,
//     2 version), so that ends of different versions learn which field;
//  2. the parent sends its proof; the child checks it and answers a verdict
//     byte (0 or 3 token), followed, only when 0, by its own proof;
//  3. the parent checks the child's proof and answers a last verdict.
//
// hello, when not nil, replaces this end's own hello (a test hook:
// config.hello); its nonce is the one this end proves with.
func handshake(ctx context.Context, nc stream, tok Token, parent bool, timeout time.Duration, hello []byte) (err error) {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := nc.SetDeadline(deadline); err != nil {
		return fmt.Errorf("ipc: handshake: set deadline: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() && err != nil && ctx.Err() != nil {
			err = fmt.Errorf("ipc: handshake: %w", ctx.Err())
		}
		if e := nc.SetDeadline(time.Time{}); e != nil && err == nil {
			err = fmt.Errorf("ipc: handshake: clear deadline: %w", e)
		}
	}()
	var own [nonceSize]byte
	if hello == nil {
		if _, err := rand.Read(own[:]); err != nil {
			return fmt.Errorf("ipc: handshake: nonce: %w", err)
		}
		hello = appendHello(nil, magic, ProtocolVersion, own)
	} else {
		copy(own[:], hello[min(len(hello), len(magic)+2):])
	}
	if _, err := nc.Write(hello); err != nil {
		return fmt.Errorf("ipc: handshake: write hello: %w", err)
	}
	var peer [helloSize]byte
	if _, err := io.ReadFull(nc, peer[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("ipc: handshake: peer closed before hello (not an amdahl ipc peer?): %w", err)
		}
		return fmt.Errorf("ipc: handshake: read hello: %w", err)
	}
	if err := exchangeVerdicts(nc, peer[:]); err != nil {
		return err
	}
	pn, cn := own[:], peer[len(magic)+2:]
	if !parent {
		pn, cn = cn, pn
	}
	if parent {
		return proveParent(nc, tok, pn, cn)
	}
	return proveChild(nc, tok, pn, cn)
}

// exchangeVerdicts writes this end's verdict on the peer's hello and,
// unless it is a rejection, reads the peer's verdict on ours.
func exchangeVerdicts(nc stream, peer []byte) error {
	verdict, mine := checkHello(peer)
	_, werr := nc.Write([]byte{verdict})
	if mine != nil {
		return mine
	}
	// Read the peer's verdict even if ours could not be written: a peer
	// that rejected us has written its verdict and closed.
	var v [1]byte
	if _, err := io.ReadFull(nc, v[:]); err != nil {
		if werr != nil {
			return fmt.Errorf("ipc: handshake: write verdict: %w", werr)
		}
		return fmt.Errorf("ipc: handshake: read verdict: %w", err)
	}
	if err := peerVerdict(v[0]); err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("ipc: handshake: write verdict: %w", werr)
	}
	return nil
}

// proveParent sends the parent's proof first, then checks the child's.
func proveParent(nc stream, tok Token, pn, cn []byte) error {
	if _, err := nc.Write(proof(tok, true, pn, cn)); err != nil {
		return fmt.Errorf("ipc: handshake: write proof: %w", err)
	}
	var v [1]byte
	if _, err := io.ReadFull(nc, v[:]); err != nil {
		return fmt.Errorf("ipc: handshake: read verdict: %w", err)
	}
	if err := peerVerdict(v[0]); err != nil {
		return err
	}
	var got [proofSize]byte
	if _, err := io.ReadFull(nc, got[:]); err != nil {
		return fmt.Errorf("ipc: handshake: read proof: %w", err)
	}
	if !hmac.Equal(got[:], proof(tok, false, pn, cn)) {
		_, _ = nc.Write([]byte{3})
		return &HandshakeError{Field: "token"}
	}
	if _, err := nc.Write([]byte{0}); err != nil {
		return fmt.Errorf("ipc: handshake: write verdict: %w", err)
	}
	return nil
}

// proveChild checks the parent's proof and only then sends its own.
func proveChild(nc stream, tok Token, pn, cn []byte) error {
	var got [proofSize]byte
	if _, err := io.ReadFull(nc, got[:]); err != nil {
		return fmt.Errorf("ipc: handshake: read proof: %w", err)
	}
	if !hmac.Equal(got[:], proof(tok, true, pn, cn)) {
		_, _ = nc.Write([]byte{3})
		return &HandshakeError{Field: "token"}
	}
	if _, err := nc.Write(append([]byte{0}, proof(tok, false, pn, cn)...)); err != nil {
		return fmt.Errorf("ipc: handshake: write proof: %w", err)
	}
	var v [1]byte
	if _, err := io.ReadFull(nc, v[:]); err != nil {
		return fmt.Errorf("ipc: handshake: read verdict: %w", err)
	}
	return peerVerdict(v[0])
}

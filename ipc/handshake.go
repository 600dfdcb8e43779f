package ipc

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
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

// ProtocolVersion is the version of the framing and packets; both ends must
// agree exactly.
const ProtocolVersion uint16 = 1

// Token is a random per-connection secret the parent hands to the child by
// environment or inherited fd (never argv); both ends prove they hold it.
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

const helloSize = len(magic) + 2 + len(Token{})

var fieldNames = [...]string{"", "magic", "version", "token"}

func appendHello(dst []byte, cookie string, version uint16, tok Token) []byte {
	dst = append(dst, cookie...)
	dst = binary.BigEndian.AppendUint16(dst, version)
	return append(dst, tok[:]...)
}

// handshake exchanges hellos over nc: each end writes magic, version and
// token, reads the peer's, checks it, then both exchange a one-byte verdict
// (0 ok, else the index of the mismatching field) so that each side knows
// whether the other accepted. hello, when not nil, replaces this end's own
// hello (a test hook: config.hello).
func handshake(ctx context.Context, nc stream, tok Token, timeout time.Duration, hello []byte) (err error) {
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
	if hello == nil {
		hello = appendHello(nil, magic, ProtocolVersion, tok)
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
	var verdict byte
	var mine error
	switch {
	case string(peer[:len(magic)]) != magic:
		verdict, mine = 1, &HandshakeError{Field: "magic", Got: fmt.Sprintf("%q", peer[:len(magic)]), Want: fmt.Sprintf("%q", magic)}
	case binary.BigEndian.Uint16(peer[len(magic):]) != ProtocolVersion:
		verdict, mine = 2, &HandshakeError{Field: "version", Got: fmt.Sprint(binary.BigEndian.Uint16(peer[len(magic):])), Want: fmt.Sprint(ProtocolVersion)}
	case subtle.ConstantTimeCompare(peer[len(magic)+2:], tok[:]) != 1:
		verdict, mine = 3, &HandshakeError{Field: "token"}
	}
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
	if v[0] != 0 {
		f := "unknown"
		if int(v[0]) < len(fieldNames) {
			f = fieldNames[v[0]]
		}
		return &HandshakeError{Field: f, Peer: true}
	}
	if werr != nil {
		return fmt.Errorf("ipc: handshake: write verdict: %w", werr)
	}
	return nil
}

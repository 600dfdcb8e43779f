package ipc

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
)

func rawPair(t *testing.T) (*Pair, *net.UnixConn) {
	t.Helper()
	p, err := NewPair()
	if err != nil {
		t.Fatal(err)
	}
	fc, err := net.FileConn(p.ChildFile())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CloseChild(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(); _ = fc.Close() })
	return p, fc.(*net.UnixConn)
}

// withHello makes an end open its handshake with hello instead of its own.
func withHello(hello []byte) Option { return func(c *config) { c.hello = hello } }

func TestHandshakeMismatch(t *testing.T) {
	other, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		field string
		hello func(tok Token) []byte
	}{
		{"magic", func(tok Token) []byte {
			return appendHello(nil, "MSBUILD!", ProtocolVersion, tok)
		}},
		{"version", func(tok Token) []byte { return appendHello(nil, magic, ProtocolVersion+1, tok) }},
		{"token", func(Token) []byte { return appendHello(nil, magic, ProtocolVersion, other) }},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			p, child := rawPair(t)
			tel := newTel(t)
			ch := make(chan error, 1)
			go func() {
				_, err := Accept(context.Background(), child, p.token, withHello(tt.hello(p.token)))
				ch <- err
			}()
			_, perr := p.Connect(context.Background(), tel.opts()...)
			cerr := <-ch
			var he *HandshakeError
			if !errors.As(perr, &he) || he.Field != tt.field || he.Peer {
				t.Fatalf("parent error = %v, want a %s mismatch detected locally", perr, tt.field)
			}
			if !errors.As(cerr, &he) || he.Field != tt.field || !he.Peer {
				t.Fatalf("child error = %v, want a %s mismatch reported by the peer", cerr, tt.field)
			}
			if got := tel.sum(t, MetricHandshakes, map[string]string{"amdahl.outcome": "failed", string(AttrField): tt.field}); got != 1 {
				t.Fatalf("%s{outcome=failed,field=%s} = %d, want 1", MetricHandshakes, tt.field, got)
			}
		})
	}
}

func TestHandshakePeerNotIPC(t *testing.T) {
	p, child := rawPair(t)
	ch := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(child, make([]byte, helloSize))
		if err == nil {
			err = child.Close()
		}
		ch <- err
	}()
	_, err := p.Connect(context.Background())
	if cerr := <-ch; cerr != nil {
		t.Fatal(cerr)
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("Connect to a peer that closes = %v, want an error wrapping io.EOF", err)
	}
}

func TestHandshakeCancelled(t *testing.T) {
	p, child := rawPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() {
		_, err := p.Connect(ctx)
		ch <- err
	}()
	// The peer reads the hello, so the handshake is known to be in
	// progress, and then says nothing.
	if _, err := io.ReadFull(child, make([]byte, helloSize)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-ch; !errors.Is(err, context.Canceled) {
		t.Fatalf("Connect after cancel = %v, want context.Canceled", err)
	}
}

func TestTokenRoundTrip(t *testing.T) {
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseToken(tok.String())
	if err != nil || got != tok {
		t.Fatalf("ParseToken(String()) = %v, %v; want the token", got, err)
	}
	if _, err := ParseToken("abc"); err == nil {
		t.Fatal("ParseToken(\"abc\") succeeded, want an error")
	}
}

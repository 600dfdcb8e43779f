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
	var nonce [nonceSize]byte
	tests := []struct {
		field string
		hello []byte // the child's hello, nil for its own
		token *Token // the child's token, nil for the parent's
		// byChild: the child detects the mismatch (the parent's proof
		// comes first); otherwise the parent does.
		byChild bool
	}{
		{field: "magic", hello: appendHello(nil, "MSBUILD!", ProtocolVersion, nonce)},
		{field: "version", hello: appendHello(nil, magic, ProtocolVersion+1, nonce)},
		{field: "token", token: &other, byChild: true},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			p, child := rawPair(t)
			tel := newTel(t)
			ctok := p.token
			if tt.token != nil {
				ctok = *tt.token
			}
			var copts []Option
			if tt.hello != nil {
				copts = append(copts, withHello(tt.hello))
			}
			ch := make(chan error, 1)
			go func() {
				_, err := Accept(context.Background(), child, ctok, copts...)
				ch <- err
			}()
			_, perr := p.Connect(context.Background(), tel.opts()...)
			cerr := <-ch
			var he *HandshakeError
			if !errors.As(perr, &he) || he.Field != tt.field || he.Peer != tt.byChild {
				t.Fatalf("parent error = %v, want a %s mismatch (reported by the peer: %v)", perr, tt.field, tt.byChild)
			}
			if !errors.As(cerr, &he) || he.Field != tt.field || he.Peer == tt.byChild {
				t.Fatalf("child error = %v, want a %s mismatch (reported by the peer: %v)", cerr, tt.field, !tt.byChild)
			}
			if got := tel.sum(t, MetricHandshakes, map[string]string{"amdahl.outcome": "failed", string(AttrField): tt.field}); got != 1 {
				t.Fatalf("%s{outcome=failed,field=%s} = %d, want 1", MetricHandshakes, tt.field, got)
			}
		})
	}
}

// A child that accepts the parent's proof unchecked and answers with a
// wrong proof of its own (driven by hand: a real child with another token
// rejects the parent first) is caught by the parent.
func TestHandshakeChildProofChecked(t *testing.T) {
	p, child := rawPair(t)
	ch := make(chan error, 1)
	go func() {
		// A child that accepts any parent and proves with a zero MAC.
		var hello [helloSize]byte
		_, err := io.ReadFull(child, hello[:])
		if err == nil {
			_, err = child.Write(append(appendHello(nil, magic, ProtocolVersion, [nonceSize]byte{}), 0))
		}
		if err == nil {
			_, err = io.ReadFull(child, make([]byte, 1+proofSize))
		}
		if err == nil {
			_, err = child.Write(append([]byte{0}, make([]byte, proofSize)...))
		}
		var v [1]byte
		if err == nil {
			_, err = io.ReadFull(child, v[:])
		}
		if err == nil && v[0] != 3 {
			err = errors.New("parent's last verdict is not 3 (token)")
		}
		ch <- err
	}()
	_, err := p.Connect(context.Background())
	if cerr := <-ch; cerr != nil {
		t.Fatal(cerr)
	}
	var he *HandshakeError
	if !errors.As(err, &he) || he.Field != "token" || he.Peer {
		t.Fatalf("Connect to a child with a wrong proof = %v, want a token mismatch detected locally", err)
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

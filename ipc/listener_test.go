package ipc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// silentPeer connects to the listener at path and says nothing. It
// returns the connection once it has read the listener's hello, which the
// listener sends when it starts the connection's handshake, or an error
// if the hello does not come within wait (a bound, not a
// synchronisation).
func silentPeer(path string, wait time.Duration) (*net.UnixConn, error) {
	nc, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	uc := nc.(*net.UnixConn)
	_ = uc.SetReadDeadline(time.Now().Add(wait))
	hello := make([]byte, helloSize)
	if _, err := io.ReadFull(uc, hello); err != nil {
		return uc, err
	}
	_ = uc.SetReadDeadline(time.Time{})
	return uc, nil
}

// acceptAll runs Accept with tok and opts until the listener closes, and
// sends each accepted Conn to the returned channel; rejected connections
// are counted in rejected.
func acceptAll(t *testing.T, l *Listener, tok Token, opts ...Option) (<-chan *Conn, func() int) {
	conns := make(chan *Conn, 16)
	rejected := make(chan int, 1)
	go func() {
		n := 0
		defer func() { close(conns); rejected <- n }()
		for {
			c, err := l.Accept(context.Background(), tok, opts...)
			switch {
			case errors.Is(err, ErrListenerClosed):
				return
			case err != nil:
				n++
			default:
				conns <- c
			}
		}
	}()
	return conns, func() int { return <-rejected }
}

// TestSilentPeersDoNotDelayTheParent: same-uid peers that connect to the
// named socket and stay silent each hold a handshake of their own, not
// the listener: the parent that connects after them is handshaken at
// once, while theirs, with a listener handshake timeout of a minute, are
// still under way. A listener that handshook one connection at a time
// held the parent behind the first silent peer for that minute, and its
// Dial failed at its own 10 s handshake timeout.
func TestSilentPeersDoNotDelayTheParent(t *testing.T) {
	for _, silent := range []int{1, 2, 5} {
		t.Run(fmt.Sprintf("%d silent", silent), func(t *testing.T) {
			l, err := Listen(filepath.Join(t.TempDir(), "host"), "h.sock")
			if err != nil {
				t.Fatal(err)
			}
			tok, err := NewToken()
			if err != nil {
				t.Fatal(err)
			}
			conns, rejected := acceptAll(t, l, tok, WithHandshakeTimeout(time.Minute))
			for i := range silent {
				uc, err := silentPeer(l.Path(), 10*time.Second)
				if err != nil {
					t.Fatalf("silent peer %d of %d: no hello from the listener (%v): its handshake did not start while the others were pending", i+1, silent, err)
				}
				defer uc.Close()
			}
			start := time.Now()
			parent, err := Dial(context.Background(), l.Path(), tok)
			if err != nil {
				t.Fatalf("the parent's Dial behind %d silent peers: %v", silent, err)
			}
			took := time.Since(start)
			child := <-conns
			if err := parent.Close(); err != nil {
				t.Error(err)
			}
			if err := child.Close(); err != nil {
				t.Error(err)
			}
			if err := l.Close(); err != nil {
				t.Error(err)
			}
			for c := range conns {
				t.Errorf("accepted another connection: %v", c)
			}
			// Close ended the silent peers' handshakes; none was accepted.
			if n := rejected(); n > silent {
				t.Errorf("%d rejected, want at most the %d silent peers", n, silent)
			}
			t.Logf("%d silent peers: the parent's Dial took %v", silent, took.Round(time.Microsecond))
		})
	}
}

// TestPendingHandshakesBounded: at most WithMaxPendingHandshakes
// connections are handshaken at once; the next waits, unanswered, until
// one of them ends, then gets its turn.
func TestPendingHandshakesBounded(t *testing.T) {
	l, err := Listen(filepath.Join(t.TempDir(), "host"), "h.sock", WithMaxPendingHandshakes(2))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	_, rejected := acceptAll(t, l, tok, WithHandshakeTimeout(time.Minute))
	var peers []*net.UnixConn
	for i := range 2 {
		uc, err := silentPeer(l.Path(), 10*time.Second)
		if err != nil {
			t.Fatalf("peer %d: %v", i, err)
		}
		peers = append(peers, uc)
	}
	// The third is accepted by the kernel but not handshaken: no hello.
	// (A short wait for something that must not happen cannot fail a
	// correct listener.)
	third, err := silentPeer(l.Path(), 200*time.Millisecond)
	if err == nil {
		t.Fatal("a third connection was handshaken while 2 were pending, want at most 2")
	}
	defer third.Close()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("third connection: %v, want no hello (a timeout)", err)
	}
	// One pending peer leaves: its handshake fails, its slot frees, and
	// the third gets its hello.
	peers[0].Close()
	_ = third.SetReadDeadline(time.Now().Add(10 * time.Second))
	hello := make([]byte, helloSize)
	if _, err := io.ReadFull(third, hello); err != nil {
		t.Fatalf("third connection after a slot freed: %v, want the listener's hello", err)
	}
	peers[1].Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := rejected(); n < 1 {
		t.Errorf("%d rejected, want at least the peer that left", n)
	}
}

func TestListenInvalidPending(t *testing.T) {
	if _, err := Listen(filepath.Join(t.TempDir(), "host"), "h.sock", WithMaxPendingHandshakes(0)); err == nil {
		t.Fatal("Listen with 0 pending handshakes: nil error")
	}
}

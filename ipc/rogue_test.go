package ipc

import (
	"bytes"
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
)

// recording is a stream that keeps a copy of every byte it reads.
type recording struct {
	*net.UnixConn
	got bytes.Buffer
}

func (r *recording) Read(p []byte) (int, error) {
	n, err := r.UnixConn.Read(p)
	r.got.Write(p[:n])
	return n, err
}

// A same-uid rogue that reaches the named socket before the real parent
// must learn nothing of the listener's token, whatever it sends; the
// listener rejects it and stays usable for the real parent.
func TestNamedSocketRogueLearnsNoToken(t *testing.T) {
	ctx := context.Background()
	l, err := Listen(filepath.Join(t.TempDir(), "host"), "h.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		rogue func(t *testing.T, uc *net.UnixConn) []byte // returns every byte it read
	}{
		{"silent", func(t *testing.T, uc *net.UnixConn) []byte {
			if err := uc.CloseWrite(); err != nil {
				t.Error(err)
			}
			b, _ := io.ReadAll(uc)
			return b
		}},
		{"garbage", func(t *testing.T, uc *net.UnixConn) []byte {
			if _, err := uc.Write(bytes.Repeat([]byte{0xa5}, 2*helloSize)); err != nil {
				t.Error(err)
			}
			b, _ := io.ReadAll(uc)
			return b
		}},
		{"reflect", func(t *testing.T, uc *net.UnixConn) []byte {
			// Send the listener's own hello back to it.
			hello := make([]byte, helloSize)
			n, _ := io.ReadFull(uc, hello)
			if _, err := uc.Write(hello[:n]); err != nil {
				t.Error(err)
			}
			if err := uc.CloseWrite(); err != nil {
				t.Error(err)
			}
			b, _ := io.ReadAll(uc)
			return append(hello[:n], b...)
		}},
		{"wrong token", func(t *testing.T, uc *net.UnixConn) []byte {
			r := &recording{UnixConn: uc}
			if err := handshake(ctx, r, wrong, true, handshakeTimeoutForTest, nil); err == nil {
				t.Error("handshake with the wrong token succeeded")
			}
			b, _ := io.ReadAll(uc)
			return append(r.got.Bytes(), b...)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := make(chan error, 1)
			go func() {
				c, err := l.Accept(ctx, tok)
				if err == nil {
					_ = c.Close()
				}
				ch <- err
			}()
			nc, err := net.Dial("unix", l.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			uc := nc.(*net.UnixConn)
			// A bound, not a synchronisation: the listener closes the
			// connection when it rejects the rogue.
			if err := uc.SetDeadline(time.Now().Add(handshakeTimeoutForTest)); err != nil {
				t.Fatal(err)
			}
			got := tt.rogue(t, uc)
			if err := <-ch; err == nil {
				t.Fatal("listener accepted the rogue, want a handshake error")
			}
			if bytes.Contains(got, tok[:]) {
				t.Fatalf("rogue read the listener's token in the %d bytes it got", len(got))
			}
			// Past its hello, the listener says at most two verdict bytes
			// to a peer that has not proven it holds the token.
			if len(got) > helloSize+2 {
				t.Fatalf("rogue read %d bytes, want ≤ %d (hello and verdicts, nothing derived from the token)", len(got), helloSize+2)
			}
		})
	}
	ch := make(chan *Conn, 1)
	go func() {
		c, err := l.Accept(ctx, tok)
		if err != nil {
			t.Error(err)
		}
		ch <- c
	}()
	parent, err := Dial(ctx, l.Path(), tok)
	if err != nil {
		t.Fatal(err)
	}
	defer parent.Close()
	child := <-ch
	if child == nil {
		t.FailNow()
	}
	defer child.Close()
	if err := parent.Send(ctx, &ipcpb.TaskConfiguration{Id: 1}); err != nil {
		t.Fatal(err)
	}
	if in, err := child.Recv(ctx); err != nil || in.Msg.(*ipcpb.TaskConfiguration).Id != 1 {
		t.Fatalf("Recv after the rogues = %v, %v; want task configuration 1", in, err)
	}
}

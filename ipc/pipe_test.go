package ipc

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
)

func inProcessPipes(t *testing.T, parentOpts, childOpts []Option) (*Conn, *Conn) {
	t.Helper()
	p, err := NewPipePair()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	return handshakeBoth(t,
		func() (*Conn, error) { return p.Connect(ctx, parentOpts...) },
		func() (*Conn, error) { return openPipes(ctx, p.childR, p.childW, p.token, false, childOpts) })
}

func TestPipeRoundTrip(t *testing.T) {
	ctx := context.Background()
	parent, child := inProcessPipes(t, nil, nil)
	for i := range 50 {
		if err := parent.Send(ctx, &ipcpb.TaskConfiguration{Id: uint64(i), Payload: bytes.Repeat([]byte{byte(i)}, 100_000)}); err != nil {
			t.Fatal(err)
		}
		in, err := child.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := in.Msg.(*ipcpb.TaskConfiguration)
		if got.Id != uint64(i) || !bytes.Equal(got.Payload, bytes.Repeat([]byte{byte(i)}, 100_000)) {
			t.Fatalf("packet %d: got id %d, %d payload bytes", i, got.Id, len(got.Payload))
		}
	}
}

func TestPipeSize(t *testing.T) {
	maxSize := procInt("/proc/sys/fs/pipe-max-size")
	if maxSize <= 0 {
		t.Skip("/proc/sys/fs/pipe-max-size not readable")
	}
	tests := []struct{ req, want int }{
		{smallBuffer, smallBuffer},
		{100 << 10, 128 << 10}, // rounded up to a power-of-two number of pages
		{min(DefaultBufferSize, maxSize), min(DefaultBufferSize, maxSize)},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.req), func(t *testing.T) {
			parent, _ := inProcessPipes(t, []Option{WithBufferSize(tt.req)}, nil)
			if _, eff := parent.BufferSize(); eff != tt.want {
				t.Fatalf("effective pipe size %d for %d requested, want %d", eff, tt.req, tt.want)
			}
		})
	}
}

func TestPipeSizeAboveMax(t *testing.T) {
	maxSize := procInt("/proc/sys/fs/pipe-max-size")
	if maxSize <= 0 {
		t.Skip("/proc/sys/fs/pipe-max-size not readable")
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	req := 2 * maxSize
	parent, child := inProcessPipes(t, []Option{WithBufferSize(req), WithLogger(log)}, nil)
	_, eff := parent.BufferSize()
	if eff >= req {
		// CAP_SYS_RESOURCE lifts the limit: then the kernel must grant it.
		if strings.Contains(logs.String(), "EPERM") {
			t.Fatalf("granted %d bytes but logged EPERM: %s", eff, logs.String())
		}
		return
	}
	if !strings.Contains(logs.String(), "EPERM") || !strings.Contains(logs.String(), "pipe-max-size") {
		t.Fatalf("pipe kept %d bytes for %d requested without a warning naming EPERM and pipe-max-size; log: %q", eff, req, logs.String())
	}
	// The connection still works at the old size.
	ctx := context.Background()
	if err := parent.Send(ctx, &ipcpb.LogMessage{Text: "still here"}); err != nil {
		t.Fatal(err)
	}
	if _, err := child.Recv(ctx); err != nil {
		t.Fatal(err)
	}
}

package ipc

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
)

// syncBuffer is a bytes.Buffer safe for the watchdog goroutine to log into.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestStallWatchdog(t *testing.T) {
	ctx := context.Background()
	tel := newTel(t)
	var logs syncBuffer
	stalls := make(chan string, 4)
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	opts := append(tel.opts(),
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		WithStallThreshold(time.Nanosecond), // every write and every reply is "late"
		func(c *config) {
			c.onStall = func(kind string) { stalls <- kind }
			c.onWrite = func(Type, int) {
				once.Do(func() { close(entered); <-release })
			}
		})
	parent, child := inProcessPair(t, opts, []Option{WithStallThreshold(0)})
	sendErr := make(chan error, 1)
	go func() { sendErr <- parent.Send(ctx, &ipcpb.TaskConfiguration{Id: 5}) }()
	<-entered
	seen := map[string]bool{}
	for !seen["write"] || !seen["reply"] {
		seen[<-stalls] = true
	}
	close(release)
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	in, err := child.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Send(ctx, &ipcpb.TaskResult{Id: in.Msg.(*ipcpb.TaskConfiguration).Id}); err != nil {
		t.Fatal(err)
	}
	if _, err := parent.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	parent.outMu.Lock()
	n := len(parent.outstanding)
	parent.outMu.Unlock()
	if n != 0 {
		t.Fatalf("%d results outstanding after the reply, want 0", n)
	}
	if got := tel.sum(t, MetricStalls, map[string]string{string(AttrKind): "write"}); got != 1 {
		t.Fatalf("%s{kind=write} = %d, want 1 (reported once per write)", MetricStalls, got)
	}
	if !strings.Contains(logs.String(), "stall: write") || !strings.Contains(logs.String(), "stall: reply") {
		t.Fatalf("watchdog log %q, want write and reply stalls", logs.String())
	}
}

package ipc

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

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

// awaitCodec is the plain protobuf codec with the PhasePolicy of a
// request/reply protocol: each task configuration awaits the result of
// its id, and only configurations and results are traced.
type awaitCodec struct {
	protoCodec
	mu      sync.Mutex
	awaited map[uint64]bool
}

func (c *awaitCodec) AppendBody(ctx context.Context, dst []byte, t Type, m proto.Message) ([]byte, error) {
	if p, ok := m.(*ipcpb.TaskConfiguration); ok {
		c.mu.Lock()
		c.awaited[p.Id] = true
		c.mu.Unlock()
	}
	return c.protoCodec.AppendBody(ctx, dst, t, m)
}

func (c *awaitCodec) Traces(t Type) bool { return t == TypeTaskConfiguration || t == TypeTaskResult }

func (c *awaitCodec) Received(in *Incoming) (context.Context, bool) {
	if p, ok := in.Msg.(*ipcpb.TaskResult); ok {
		c.mu.Lock()
		delete(c.awaited, p.Id)
		c.mu.Unlock()
	}
	return nil, false
}

func (c *awaitCodec) Awaiting(f func(uint64)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.awaited {
		f(id)
	}
}

func (c *awaitCodec) Unsent(m proto.Message) {
	if p, ok := m.(*ipcpb.TaskConfiguration); ok {
		c.mu.Lock()
		delete(c.awaited, p.Id)
		c.mu.Unlock()
	}
}

func newAwaitCodec() Codec { return &awaitCodec{awaited: map[uint64]bool{}} }

// TestStallWatchdog: a write blocked, and a reply its codec awaits
// (PhasePolicy.Awaiting), for longer than the threshold are each
// reported once.
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
		WithCodec(newAwaitCodec),
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
	if got := tel.sum(t, MetricStalls, map[string]string{string(AttrKind): "write"}); got != 1 {
		t.Fatalf("%s{kind=write} = %d, want 1 (reported once per write)", MetricStalls, got)
	}
	if got := tel.sum(t, MetricStalls, map[string]string{string(AttrKind): "reply"}); got != 1 {
		t.Fatalf("%s{kind=reply} = %d, want 1 (reported once per reply)", MetricStalls, got)
	}
	if !strings.Contains(logs.String(), "stall: write") || !strings.Contains(logs.String(), "stall: reply") {
		t.Fatalf("watchdog log %q, want write and reply stalls", logs.String())
	}
}

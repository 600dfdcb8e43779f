package chunking

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

func labelledComponent(t testing.TB, labels bool) *telemetry.Component {
	t.Helper()
	c, err := telemetry.NewComponent("chunking", telemetry.ComponentConfig{TracerProvider: tracenoop.NewTracerProvider(),
		MeterProvider: metricnoop.NewMeterProvider(), PhaseLabels: labels})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tinyResponse has n CreateTimer actions of a few bytes: sizing them is
// real work (no payload to copy), the legacy planner's worst case.
func tinyResponse(n int) *dtpb.OrchestratorResponse {
	acts := make([]*dtpb.OrchestratorAction, n)
	for i := range acts {
		acts[i] = &dtpb.OrchestratorAction{Id: int32(i), OrchestratorActionType: &dtpb.OrchestratorAction_CreateTimer{
			CreateTimer: &dtpb.CreateTimerAction{FireAt: &timestamppb.Timestamp{Seconds: 1_800_000_000, Nanos: 1}}}}
	}
	return response(acts...)
}

// TestStepLabelsInCPUProfile takes a real CPU profile while the legacy
// planner, with pprof labels on, plans a chunked completion of many small
// actions, and checks that its sizing is one filter away: samples carry
// step=size together with phase=serialize, and every sample inside the
// planner carries a step.
func TestStepLabelsInCPUProfile(t *testing.T) {
	comp := labelledComponent(t, true)
	p := newPlanner(t, PlannerConfig{Algorithm: Legacy, Accounting: Payload, MaxChunkBytes: MinMaxChunkBytes, Component: comp})
	// 20,000 actions of about 66 bytes: two chunks at the 1 MiB limit, and
	// a plan short enough for the loop below to keep its time bound under
	// the race detector.
	acts := make([]*dtpb.OrchestratorAction, 20_000)
	for i := range acts {
		acts[i] = task(int32(i), 48)
	}
	r := response(acts...)
	ctx := context.Background()
	if pl, _ := p.Plan(ctx, r); len(pl.Chunks) < 2 {
		t.Fatalf("%d chunks, want a chunked plan", len(pl.Chunks))
	}

	// Profile in rounds of 500 ms until enough samples, at most 8 rounds:
	// on a loaded machine the planner gets less CPU, not fewer labels.
	steps := map[string]int{}
	sizeWithPhase, inPlanner, unlabelled := 0, 0, 0
	for round := 0; round < 8 && sizeWithPhase < 5; round++ {
		var buf bytes.Buffer
		if err := pprof.StartCPUProfile(&buf); err != nil {
			t.Skipf("CPU profile already running (go test -cpuprofile?): %v", err)
		}
		for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
			if _, err := p.Plan(ctx, r); err != nil {
				pprof.StopCPUProfile()
				t.Fatal(err)
			}
		}
		pprof.StopCPUProfile()
		prof, err := profile.Parse(&buf)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range prof.Sample {
			planner := slices.ContainsFunc(s.Location, func(l *profile.Location) bool {
				return slices.ContainsFunc(l.Line, func(ln profile.Line) bool {
					return ln.Function != nil && ln.Function.Name == "github.com/amdahl-rt/amdahl/chunking.(*Planner).planLegacy"
				})
			})
			if !planner {
				continue
			}
			inPlanner++
			step := s.Label[telemetry.LabelStep]
			if len(step) != 1 || !slices.Equal(s.Label[telemetry.LabelPhase], []string{"serialize"}) {
				unlabelled++
				continue
			}
			steps[step[0]]++
			if step[0] == "size" {
				sizeWithPhase++
			}
		}
	}
	t.Logf("samples in planLegacy: %d, by step %v, without phase and step: %d", inPlanner, steps, unlabelled)
	if sizeWithPhase < 5 {
		t.Errorf("%d samples with step=size and phase=serialize, want ≥ 5", sizeWithPhase)
	}
	// Only a sample taken in the few instructions before the first label
	// change of a plan may lack a step.
	if unlabelled > 2 && unlabelled*20 > inPlanner {
		t.Errorf("%d of %d samples in the planner lack phase=serialize or a step label", unlabelled, inPlanner)
	}
}

// TestSidecarLabelsInCPUProfile takes a real CPU profile while completions
// of 4 MiB reach a sidecar whose Component sets labels, over loopback:
// every sample of gRPC decoding a completion (before the handler runs)
// carries component=chunking, phase=deserialize, direction=request, and
// the connection's reader goroutine's carry receive/request. Without the
// labels, neither carries any.
func TestSidecarLabelsInCPUProfile(t *testing.T) {
	for _, labels := range []bool{true, false} {
		t.Run(fmt.Sprintf("labels=%v", labels), func(t *testing.T) {
			rg := startRig(t, SidecarConfig{OnApplied: func(Completion) {}, Component: labelledComponent(t, labels)})
			acts := make([]*dtpb.OrchestratorAction, 64)
			for i := range acts {
				acts[i] = task(int32(i), 64<<10)
			}
			req := response(acts...) // an unknown token: refused after decoding
			ctx := context.Background()
			var decode, decodeLabelled, reader, readerLabelled int
			for round := 0; round < 8 && (decode < 5 || reader < 3); round++ {
				var buf bytes.Buffer
				if err := pprof.StartCPUProfile(&buf); err != nil {
					t.Skipf("CPU profile already running (go test -cpuprofile?): %v", err)
				}
				for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
					_ = rg.conn.Invoke(ctx, dtpb.MethodCompleteOrchestratorTask, req, &dtpb.CompleteTaskResponse{})
				}
				pprof.StopCPUProfile()
				prof, err := profile.Parse(&buf)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range prof.Sample {
					is := func(k, v string) bool { return slices.Equal(s.Label[k], []string{v}) }
					switch {
					case onStack(s, "google.golang.org/grpc/encoding/proto.(*codecV2).Unmarshal") && onStack(s, "github.com/amdahl-rt/amdahl/chunking/dtpb.completeHandler"):
						decode++
						if is("component", "chunking") && is("phase", "deserialize") && is("direction", "request") {
							decodeLabelled++
						}
					case onStack(s, "google.golang.org/grpc/internal/transport.(*http2Server).HandleStreams"):
						reader++
						if is("component", "chunking") && is("phase", "receive") && is("direction", "request") {
							readerLabelled++
						}
					}
				}
			}
			if decode == 0 || reader == 0 {
				t.Fatalf("%d decode and %d reader samples in 8 rounds, want some of each", decode, reader)
			}
			want := 0
			if labels {
				want = decode
			}
			if decodeLabelled != want {
				t.Errorf("%d of %d decode samples labelled deserialize, want %d", decodeLabelled, decode, want)
			}
			if labels && readerLabelled != reader || !labels && readerLabelled != 0 {
				t.Errorf("%d of %d reader samples labelled receive (labels %v)", readerLabelled, reader, labels)
			}
		})
	}
}

func onStack(s *profile.Sample, fn string) bool {
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			if l.Function != nil && l.Function.Name == fn {
				return true
			}
		}
	}
	return false
}

// TestLabelledCredentials: without labels the credentials are returned as
// they are; with them, the connection a client handshake returns labels
// the goroutine that reads it receive/reply and the one that writes it
// send/request, and a clone does the same.
func TestLabelledCredentials(t *testing.T) {
	creds := insecure.NewCredentials()
	if got := LabelledCredentials(creds, labelledComponent(t, false)); got != creds {
		t.Fatalf("LabelledCredentials without labels: %T, want the credentials given", got)
	}
	lc := LabelledCredentials(creds, labelledComponent(t, true))
	for _, c := range []credentials.TransportCredentials{lc, lc.Clone()} {
		a, b := net.Pipe()
		conn, _, err := c.ClientHandshake(context.Background(), "x", a)
		if err != nil {
			t.Fatal(err)
		}
		labelsOf := func(f func()) string {
			got := make(chan string, 1)
			go func() {
				f()
				got <- inheritedLabels(t)
			}()
			return <-got
		}
		go func() { buf := make([]byte, 1); b.Read(buf); b.Write([]byte{1}) }()
		if got := labelsOf(func() { conn.Write([]byte{1}) }); got != "chunking send request" {
			t.Errorf("after Write: labels %q, want chunking send request", got)
		}
		if got := labelsOf(func() { conn.Read(make([]byte, 1)) }); got != "chunking receive reply" {
			t.Errorf("after Read: labels %q, want chunking receive reply", got)
		}
		conn.Close()
		b.Close()
	}
}

// inheritedLabels returns the pprof labels of the calling goroutine, as
// the goroutine profile prints them ("chunking send request", "" for
// none): a goroutine it starts inherits them, and waits in
// labelsParked while the profile is read.
func inheritedLabels(t *testing.T) string {
	t.Helper()
	parked, release := make(chan struct{}), make(chan struct{})
	go labelsParked(parked, release)
	<-parked
	defer close(release)
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(buf.String(), "\n\n") {
		if !strings.Contains(block, "chunking.labelsParked") {
			continue
		}
		for _, line := range strings.Split(block, "\n") {
			if l, ok := strings.CutPrefix(line, "# labels: "); ok {
				var m map[string]string
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatalf("labels %s: %v", l, err)
				}
				return m[telemetry.LabelComponent] + " " + m[telemetry.LabelPhase] + " " + m[telemetry.LabelDirection]
			}
		}
		return ""
	}
	t.Fatal("no goroutine in labelsParked in the goroutine profile")
	return ""
}

//go:noinline
func labelsParked(parked chan<- struct{}, release <-chan struct{}) {
	close(parked)
	<-release
}

// discardConn is a net.Conn whose writes go nowhere.
type discardConn struct{ net.Conn }

func (discardConn) Write(b []byte) (int, error) { return len(b), nil }

// BenchmarkLabelledConnWrite is the cost LabelledCredentials adds to each
// write of a client connection (one SetGoroutineLabels), against the same
// write unlabelled.
func BenchmarkLabelledConnWrite(b *testing.B) {
	comp := labelledComponent(b, true)
	buf := make([]byte, 64)
	for _, c := range []struct {
		name string
		conn net.Conn
	}{
		{"plain", discardConn{}},
		{"labelled", &labelledConn{Conn: discardConn{}, recv: comp.LabelContext(telemetry.Receive, telemetry.Reply), send: comp.LabelContext(telemetry.Send, telemetry.Request)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.conn.Write(buf)
			}
		})
	}
	pprof.SetGoroutineLabels(context.Background())
}

// Command chunked-completions completes one large orchestration turn twice
// through a chunking.Sender, once with the legacy planner and once with the
// cached one, to a chunking.Sidecar (served in this process on 127.0.0.1:0,
// or the one at --sidecar). For each planner it prints the chunk sequence,
// how many protobuf sizings the planner computed (from the Plan and from
// the amdahl.chunking.sizing.computations counter) and, with the sidecar in
// process, whether the completion the sidecar reassembled is the one sent.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/internal/bytesize"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Bounds of the flags: the turn is built in memory.
const (
	maxActions     = 10_000
	maxActionBytes = chunking.DefaultMaxChunkBytes
)

type options struct {
	sidecar     string // empty: serve one in process
	actions     int
	actionBytes int
	maxChunk    int
}

func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chunked-completions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var actionBytes, maxChunk string
	fs.StringVar(&o.sidecar, "sidecar", "", "address of a running sidecar (amdahl sidecar); empty serves one in this process on 127.0.0.1:0")
	fs.IntVar(&o.actions, "actions", 24, fmt.Sprintf("actions in the turn (1..%d)", maxActions))
	fs.StringVar(&actionBytes, "action-bytes", "160KiB", "input bytes of the smallest action; action i carries (1 + i%4/2) times as many")
	fs.StringVar(&maxChunk, "max-chunk-bytes", "1MiB", fmt.Sprintf("chunk limit (%d..%d bytes)", chunking.MinMaxChunkBytes, chunking.DefaultMaxChunkBytes))
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if o.actionBytes, err = bytesize.Parse(actionBytes); err == nil {
		o.maxChunk, err = bytesize.Parse(maxChunk)
	}
	switch {
	case err != nil:
	case o.actions < 1 || o.actions > maxActions:
		err = fmt.Errorf("--actions: %d is out of range (valid: 1..%d)", o.actions, maxActions)
	case o.maxChunk < chunking.MinMaxChunkBytes || o.maxChunk > chunking.DefaultMaxChunkBytes:
		err = fmt.Errorf("--max-chunk-bytes: %d is out of range (valid: %d..%d)", o.maxChunk, chunking.MinMaxChunkBytes, chunking.DefaultMaxChunkBytes)
	case o.actionBytes < 1 || o.actionBytes > maxActionBytes/2:
		err = fmt.Errorf("--action-bytes: %d is out of range (valid: 1..%d)", o.actionBytes, maxActionBytes/2)
	}
	if err != nil {
		fmt.Fprintln(stderr, "chunked-completions:", err)
		return 2
	}
	if err := run(ctx, o, stdout); err != nil {
		fmt.Fprintln(stderr, "chunked-completions:", err)
		return 1
	}
	return 0
}

// turn is the orchestration turn both planners complete: ScheduleTask
// actions with inputs of deterministic content and uneven sizes, so the
// chunk boundaries fall at different places.
func turn(instance, token string, o options) *dtpb.OrchestratorResponse {
	r := &dtpb.OrchestratorResponse{InstanceId: instance, CompletionToken: token,
		CustomStatus: wrapperspb.String("fan-out of " + fmt.Sprint(o.actions))}
	for i := range o.actions {
		n := o.actionBytes + o.actionBytes*(i%4)/2
		in := strings.Repeat(fmt.Sprintf("order %06d;", i), n/12+1)[:n]
		r.Actions = append(r.Actions, &dtpb.OrchestratorAction{Id: int32(i),
			OrchestratorActionType: &dtpb.OrchestratorAction_ScheduleTask{ScheduleTask: &dtpb.ScheduleTaskAction{
				Name: "ship", Input: wrapperspb.String(in)}}})
	}
	return r
}

// outcome is what one planner did.
type outcome struct {
	alg      chunking.Algorithm
	sent     *dtpb.OrchestratorResponse
	plan     *chunking.Plan
	counted  map[string]int64 // amdahl.chunking.sizing.computations by kind
	applied  *chunking.Completion
	reassure bool // applied is known (the sidecar is in process)
}

func run(ctx context.Context, o options, stdout io.Writer) (err error) {
	addr := o.sidecar
	var sc *chunking.Sidecar
	if addr == "" {
		if sc, err = chunking.NewSidecar(chunking.SidecarConfig{}); err != nil {
			return err
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return errors.Join(err, sc.Close(ctx))
		}
		served := make(chan error, 1)
		go func() { served <- sc.Serve(lis) }()
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			err = errors.Join(err, sc.Close(cctx), <-served)
		}()
		addr = lis.Addr().String()
		fmt.Fprintf(stdout, "sidecar: in process on %s\n", addr)
	} else {
		fmt.Fprintf(stdout, "sidecar: %s\n", addr)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to sidecar %s: %w", addr, err)
	}
	defer func() { err = errors.Join(err, cc.Close()) }()

	// One work-item stream for the whole run, as a worker keeps one.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := dtpb.GetWorkItems(sctx, cc, &dtpb.GetWorkItemsRequest{})
	if err != nil {
		return fmt.Errorf("open work-item stream: %w", err)
	}

	total := proto.Size(turn("", "", o))
	fmt.Fprintf(stdout, "turn: %d ScheduleTask actions, %d bytes; chunk limit %d bytes\n", o.actions, total, o.maxChunk)

	var outs []outcome
	for _, alg := range []chunking.Algorithm{chunking.Legacy, chunking.Cached} {
		out, err := complete(ctx, cc, st, sc, alg, o)
		if err != nil {
			return fmt.Errorf("%v planner: %w", alg, err)
		}
		report(stdout, out)
		outs = append(outs, out)
	}
	return compare(stdout, outs[0], outs[1])
}

// complete leases a work item for a new instance, completes it with a
// Sender whose planner runs alg, and reads back what it did.
func complete(ctx context.Context, cc *grpc.ClientConn, st grpc.ServerStreamingClient[dtpb.WorkItem], sc *chunking.Sidecar, alg chunking.Algorithm, o options) (outcome, error) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck // a manual reader exports nothing
	pl, err := chunking.NewPlanner(chunking.PlannerConfig{MaxChunkBytes: o.maxChunk, Algorithm: alg, MeterProvider: mp})
	if err != nil {
		return outcome{}, err
	}
	snd, err := chunking.NewSender(cc, chunking.SenderConfig{Planner: pl, MeterProvider: mp})
	if err != nil {
		return outcome{}, err
	}
	id, err := snd.StartInstance(ctx, &dtpb.CreateInstanceRequest{
		InstanceId: fmt.Sprintf("chunked-completions-%v", alg)})
	if err != nil {
		return outcome{}, err
	}
	token, err := lease(st, id)
	if err != nil {
		return outcome{}, err
	}
	r := turn(id, token, o)
	res, err := snd.Complete(ctx, r)
	if err != nil {
		return outcome{}, err
	}
	out := outcome{alg: alg, sent: r, plan: res.Plan, counted: map[string]int64{}}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return outcome{}, fmt.Errorf("collect metrics: %w", err)
	}
	for _, s := range rm.ScopeMetrics {
		for _, m := range s.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == chunking.MetricSizingComputations {
				for _, dp := range sum.DataPoints {
					kind, _ := dp.Attributes.Value(chunking.AttrSizingKind)
					out.counted[kind.AsString()] += dp.Value
				}
			}
		}
	}
	if sc != nil {
		for _, c := range sc.Completions() {
			if c.CompletionToken == token {
				out.applied, out.reassure = &c, true
			}
		}
		if !out.reassure {
			return outcome{}, fmt.Errorf("the sidecar applied no completion with token %q", token)
		}
	}
	return out, nil
}

// lease waits on the work-item stream for the work item of instance id and
// returns its completion token.
func lease(st grpc.ServerStreamingClient[dtpb.WorkItem], id string) (string, error) {
	for {
		wi, err := st.Recv()
		if err != nil {
			return "", fmt.Errorf("wait for the work item of %s: %w", id, err)
		}
		if wi.GetOrchestratorRequest().GetInstanceId() == id {
			return wi.GetCompletionToken(), nil
		}
	}
}

func report(w io.Writer, out outcome) {
	pl := out.plan
	fmt.Fprintf(w, "\nplanner %v: %d chunks\n", out.alg, len(pl.Chunks))
	for i, c := range pl.Chunks {
		// Measured here for both planners: the legacy plan carries no sizes.
		n := proto.Size(c)
		fmt.Fprintf(w, "  chunk %d: %2d actions, %7d bytes\n", i, len(c.GetActions()), n)
	}
	fmt.Fprintf(w, "  sizings: %d action + %d response (plan); counter %s: action=%d response=%d\n",
		pl.ActionSizings, pl.ResponseSizings, chunking.MetricSizingComputations, out.counted["action"], out.counted["response"])
	if !out.reassure {
		fmt.Fprintln(w, "  sidecar: all chunks acknowledged (reassembly is visible only with the sidecar in process)")
		return
	}
	same := proto.Equal(&dtpb.OrchestratorResponse{Actions: out.applied.Actions, CustomStatus: out.applied.CustomStatus},
		&dtpb.OrchestratorResponse{Actions: out.sent.Actions, CustomStatus: out.sent.CustomStatus})
	fmt.Fprintf(w, "  sidecar reassembled %d actions from %d chunks; same as sent: %v\n", len(out.applied.Actions), out.applied.Chunks, same)
}

// compare prints what the two planners have in common and where they
// differ; an error if the sidecar applied different completions.
func compare(w io.Writer, legacy, cached outcome) error {
	fmt.Fprintln(w)
	if legacy.reassure && cached.reassure {
		same := proto.Equal(&dtpb.OrchestratorResponse{Actions: legacy.applied.Actions}, &dtpb.OrchestratorResponse{Actions: cached.applied.Actions})
		fmt.Fprintf(w, "legacy and cached: the sidecar reassembled the same completion: %v\n", same)
		if !same {
			return errors.New("the sidecar reassembled different completions")
		}
	}
	ls := legacy.plan.ActionSizings + legacy.plan.ResponseSizings
	cs := cached.plan.ActionSizings + cached.plan.ResponseSizings
	fmt.Fprintf(w, "sizing computations: legacy %d, cached %d (%d fewer)\n", ls, cs, ls-cs)
	return nil
}

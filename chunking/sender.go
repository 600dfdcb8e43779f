package chunking

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// SenderConfig configures a Sender.
type SenderConfig struct {
	// Planner plans each completion; nil means a default Planner.
	Planner *Planner
	// Retry is the per-call retry budget; zero fields take the defaults of
	// DefaultRetryPolicy.
	Retry RetryPolicy
	// Component, if not nil, records the chunking.send phase with one child
	// span per chunk.
	Component *telemetry.Component
	// MeterProvider, if not nil, receives amdahl.chunking.retries.
	MeterProvider metric.MeterProvider
	// Breaker, if not nil, is asked before every call and told its
	// outcome: while it is open a call fails at once with an error
	// matching ErrSidecarUnavailable, without retrying, and a call waiting
	// out a backoff stops when it opens. The Sender does not own it.
	Breaker *Breaker
}

// Sender completes orchestrator work items on a TaskHubSidecarService: it
// plans, encodes each chunk once, and sends the chunks in order, one at a
// time, each with its own retry budget; it holds at most 8 MiB of a
// completion's encoded chunks (at least one) besides the one it sends. A Sender is safe for concurrent use; it does
// not own the connection.
type Sender struct {
	cc      grpc.ClientConnInterface
	planner *Planner
	retry   RetryPolicy
	comp    *telemetry.Component
	steps   *telemetry.Steps
	metrics *metrics
	breaker *Breaker
	// bufs holds encoded chunks' buffers (*[]byte) that the sidecar has
	// acknowledged, for the next chunks' encoding.
	bufs sync.Pool
}

// NewSender returns a Sender calling cc. The connection should be created
// with an otelgrpc client stats handler for the trace context to reach the
// sidecar.
func NewSender(cc grpc.ClientConnInterface, cfg SenderConfig) (*Sender, error) {
	if cc == nil {
		return nil, errors.New("chunking: new sender: nil connection")
	}
	rp, err := cfg.Retry.withDefaults()
	if err != nil {
		return nil, err
	}
	pl := cfg.Planner
	if pl == nil {
		if pl, err = NewPlanner(PlannerConfig{Component: cfg.Component, MeterProvider: cfg.MeterProvider}); err != nil {
			return nil, err
		}
	}
	m, err := newMetrics(cfg.MeterProvider, cfg.Component)
	if err != nil {
		return nil, err
	}
	m.zeroRetries()
	return &Sender{cc: cc, planner: pl, retry: rp, comp: cfg.Component, steps: serializeSteps(cfg.Component), metrics: m, breaker: cfg.Breaker}, nil
}

// retryableCodes are the codes durabletask-dotnet retries.
var retryableCodes = []codes.Code{codes.Unavailable, codes.Unknown, codes.DeadlineExceeded, codes.Internal}

func retryable(c codes.Code) bool { return slices.Contains(retryableCodes, c) }

// Result reports what Complete did.
type Result struct {
	// Plan is the plan that was sent (or partly sent, on error).
	Plan *Plan
	// Sent is the number of chunks acknowledged by the sidecar.
	Sent int
	// Attempts is the number of CompleteOrchestratorTask calls made.
	Attempts int
	// Abandoned reports that the work item was abandoned after a permanent
	// failure.
	Abandoned bool
}

// Complete plans r and sends it. It blocks until the last chunk is
// acknowledged, a chunk fails permanently, or ctx ends. On a permanent
// failure (a non-retried code, or the retry budget exhausted) it abandons
// the work item with r's completion token (itself retried) and returns the
// chunk's error, which carries the gRPC status. When ctx ends it returns
// ctx's error and abandons nothing (the lease simply expires).
func (s *Sender) Complete(ctx context.Context, r *dtpb.OrchestratorResponse) (Result, error) {
	if r == nil {
		return Result{}, errors.New("chunking: complete: nil response")
	}
	// Serialize = plan + the encoding of the chunks up to encodeAhead
	// bytes (every chunk of all but the largest completions): a leaf
	// (Leaf), no span starts under it.
	_, ph := s.comp.Start(ctx, telemetry.Serialize, telemetry.Request, telemetry.Leaf())
	pl := s.planner.plan(r, ph, s.steps)
	res := Result{Plan: pl}
	ph.Step(s.steps, stepEncode)
	enc := make([]Encoded, len(pl.Chunks))
	ahead, encoded := 0, 0
	for ahead < len(enc) && (ahead == 0 || encoded < encodeAhead) {
		var err error
		if enc[ahead], err = s.encode(pl, ahead); err != nil {
			ph.End(telemetry.WithError(err))
			return res, err
		}
		encoded += len(enc[ahead].Bytes)
		ahead++
	}
	ph.Step(s.steps, stepNone)
	ph.End(telemetry.WithAttributes(s.planner.record(ctx, r, pl)...))

	sctx, sp := s.comp.Start(ctx, telemetry.Send, telemetry.Request)
	for i := range enc {
		var err error
		if i >= ahead {
			// Past encodeAhead: encoded as it is sent, in the send phase.
			enc[i], err = s.encode(pl, i)
		}
		if err == nil {
			var n int
			n, err = s.sendChunk(sctx, i, len(enc), &enc[i])
			res.Attempts += n
			if err == nil {
				// Acknowledged: the sidecar has read the whole request,
				// so gRPC's writer has written it and holds no reference
				// to its bytes; they encode a later chunk. (After a
				// failure they are left to the GC: a writer may still
				// hold them.)
				b := enc[i].Bytes
				s.bufs.Put(&b)
			}
		}
		enc[i] = Encoded{} // sent
		if err != nil {
			err = fmt.Errorf("complete %s chunk %d of %d: %w", r.GetInstanceId(), i, len(enc), err)
			if ctx.Err() == nil && status.Code(err) != codes.Canceled {
				if aerr := s.abandon(sctx, r.GetCompletionToken()); aerr != nil {
					err = errors.Join(err, aerr)
				} else {
					res.Abandoned = true
				}
			}
			sp.End(telemetry.WithError(err))
			return res, err
		}
		res.Sent++
	}
	sp.End()
	return res, nil
}

// encodeAhead bounds the bytes of a completion's chunks encoded before
// the first is sent (at least one chunk is): the chunks past it are
// encoded one at a time as they are sent, and a chunk's buffer goes back
// to the Sender once the chunk is acknowledged (Sender.bufs: a later
// chunk, of this completion or another, is encoded into it), so a
// completion of 64 MiB holds about encodeAhead plus one chunk, not all
// 64 MiB, while it is sent (the mixed scenario's 32 × 2 MiB shape;
// TestMixedMemory), and the chunks of a run cost the garbage collector
// next to nothing (BenchmarkEndToEnd's B/op).
const encodeAhead = 8 << 20

// encode encodes chunk i of pl, into a buffer of an acknowledged chunk
// when one is large enough.
func (s *Sender) encode(pl *Plan, i int) (Encoded, error) {
	size := -1
	if pl.Sizes != nil {
		size = pl.Sizes[i]
	}
	var buf []byte
	if b, ok := s.bufs.Get().(*[]byte); ok && cap(*b) >= size {
		buf = (*b)[:0]
	}
	return encodeInto(buf, pl.Chunks[i], size)
}

func (s *Sender) sendChunk(ctx context.Context, i, n int, e *Encoded) (int, error) {
	// The chunk's attributes only an exporter reads; without one they are
	// not built (the options escape into the interface call, an allocation
	// per chunk: BenchmarkOrchestration).
	var opts []trace.SpanStartOption
	if s.comp.SpanAttributes() {
		opts = []trace.SpanStartOption{trace.WithAttributes(
			attribute.Int(AttrChunkIndex, i), attribute.Int(AttrChunks, n), telemetry.AttrBytes.Int(len(e.Bytes)))}
	}
	ctx, span := s.comp.Tracer().Start(ctx, "chunking.send.chunk", opts...)
	defer span.End()
	var reply dtpb.CompleteTaskResponse
	attempts, err := s.withRetry(ctx, span, func(ctx context.Context) error {
		return s.cc.Invoke(ctx, dtpb.MethodCompleteOrchestratorTask, e, &reply, grpc.ForceCodecV2(Codec{}))
	})
	if err != nil {
		span.RecordError(err)
	}
	return attempts, err
}

func (s *Sender) abandon(ctx context.Context, token string) error {
	ctx, span := s.comp.Tracer().Start(ctx, "chunking.abandon")
	defer span.End()
	req := &dtpb.AbandonOrchestrationTaskRequest{CompletionToken: token}
	var reply dtpb.AbandonOrchestrationTaskResponse
	_, err := s.withRetry(ctx, span, func(ctx context.Context) error {
		return s.cc.Invoke(ctx, dtpb.MethodAbandonTaskOrchestratorWorkItem, req, &reply)
	})
	if err != nil {
		return fmt.Errorf("abandon work item: %w", err)
	}
	return nil
}

// withRetry calls f until it succeeds, fails with a non-retried code, the
// budget is spent, the breaker opens, or ctx ends. It returns the number
// of calls made.
func (s *Sender) withRetry(ctx context.Context, span trace.Span, f func(context.Context) error) (int, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for attempt := 1; ; attempt++ {
		if err := s.breaker.Allow(); err != nil {
			return attempt - 1, err
		}
		err := f(ctx)
		s.breaker.Record(err)
		if err == nil {
			return attempt, nil
		}
		if ctx.Err() != nil {
			// The context ended during the attempt: that, not what the
			// attempt made of it (often Unavailable or Canceled), is why
			// it stops.
			return attempt, fmt.Errorf("%w (attempt %d: %v)", ctx.Err(), attempt, err)
		}
		code := status.Code(err)
		if !retryable(code) || attempt >= s.retry.MaxAttempts {
			return attempt, err
		}
		s.metrics.retried(ctx, code)
		d := s.retry.delay(attempt, rand.Float64())
		span.AddEvent("retry", trace.WithAttributes(
			attribute.String(AttrCode, code.String()), attribute.Int(AttrAttempt, attempt),
			attribute.Int64("amdahl.chunking.backoff_ns", d.Nanoseconds())))
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return attempt, ctx.Err()
		case <-s.breaker.Opened():
			// Allow, at the top of the loop, returns the breaker's error.
		case <-timer.C:
		}
	}
}

// StartInstance schedules an orchestration on the sidecar
// (TaskHubSidecarService.StartInstance) with the sender's retry policy:
// Unavailable, Unknown, DeadlineExceeded and Internal are retried with
// backoff; any other code, an exhausted budget or the end of ctx is
// returned. It returns the scheduled instance id.
//
// StartInstance is not idempotent: when an attempt whose reply was lost
// did schedule the instance, the retry gets AlreadyExists, which is then
// taken as success (for a non-empty instance id).
func (s *Sender) StartInstance(ctx context.Context, req *dtpb.CreateInstanceRequest) (string, error) {
	var resp *dtpb.CreateInstanceResponse
	span := trace.SpanFromContext(ctx)
	attempt := 0
	_, err := s.withRetry(ctx, span, func(ctx context.Context) error {
		attempt++
		var err error
		resp, err = dtpb.StartInstance(ctx, s.cc, req)
		if attempt > 1 && req.GetInstanceId() != "" && status.Code(err) == codes.AlreadyExists {
			resp, err = &dtpb.CreateInstanceResponse{InstanceId: req.GetInstanceId()}, nil
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("start instance %q: %w", req.GetInstanceId(), err)
	}
	return resp.GetInstanceId(), nil
}

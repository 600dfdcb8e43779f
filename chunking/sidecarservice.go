package chunking

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// sidecarService is the gRPC face of Sidecar.
type sidecarService Sidecar

func (ss *sidecarService) GetWorkItems(_ *dtpb.GetWorkItemsRequest, stream grpc.ServerStreamingServer[dtpb.WorkItem]) error {
	s := (*Sidecar)(ss)
	ctx := stream.Context()
	s.mu.Lock()
	s.streamSeq++
	id := s.streamSeq
	s.mu.Unlock()
	// Ended by Close, the stream keeps its leases: a completion in flight
	// still applies while Close drains.
	closing := false
	defer func() {
		if !closing {
			s.disconnect(id)
		}
	}()
	for {
		s.mu.Lock()
		select {
		case <-s.stop:
			s.mu.Unlock()
			closing = true
			return status.Error(codes.Unavailable, "sidecar shutting down")
		default:
		}
		if len(s.pending) == 0 {
			wake := s.wake
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil
			case <-s.stop:
			case <-wake:
			}
			continue
		}
		req := s.pending[0]
		s.pending = s.pending[1:]
		s.tokenSeq++
		tok := fmt.Sprintf("%016x-%d", s.tokenPfx, s.tokenSeq)
		s.leases[tok] = &lease{req: req, stream: id}
		s.mu.Unlock()
		err := stream.Send(&dtpb.WorkItem{
			Request:         &dtpb.WorkItem_OrchestratorRequest{OrchestratorRequest: req},
			CompletionToken: tok,
		})
		if err != nil {
			return err // disconnect requeues it
		}
	}
}

// disconnect drops the buffers and leases of the work items a stream
// delivered and queues those work items again (redelivery, new token).
func (s *Sidecar) disconnect(stream uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var requeued []*dtpb.OrchestratorRequest
	for tok, l := range s.leases {
		if l.stream == stream {
			s.dropLocked(tok)
			delete(s.leases, tok)
			requeued = append(requeued, l.req)
		}
	}
	if len(requeued) > 0 {
		s.queueLocked(requeued...)
	}
}

func (ss *sidecarService) AbandonTaskOrchestratorWorkItem(ctx context.Context, req *dtpb.AbandonOrchestrationTaskRequest) (*dtpb.AbandonOrchestrationTaskResponse, error) {
	s := (*Sidecar)(ss)
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[req.GetCompletionToken()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "abandon: unknown completion token %q", req.GetCompletionToken())
	}
	s.dropLocked(req.GetCompletionToken())
	delete(s.leases, req.GetCompletionToken())
	s.queueLocked(l.req)
	return &dtpb.AbandonOrchestrationTaskResponse{}, nil
}

// StartInstance schedules an orchestration: its work item (an
// OrchestratorRequest with the instance id) is queued for GetWorkItems. An
// empty instance id gets a generated one. An id longer than
// MaxInstanceIDBytes is rejected with InvalidArgument; an id that is
// already scheduled and not yet completed with AlreadyExists; a start over
// MaxPendingInstances with ResourceExhausted.
func (ss *sidecarService) StartInstance(ctx context.Context, req *dtpb.CreateInstanceRequest) (*dtpb.CreateInstanceResponse, error) {
	s := (*Sidecar)(ss)
	id := req.GetInstanceId()
	if len(id) > s.cfg.MaxInstanceIDBytes {
		s.metrics.refused(ctx, ReasonInstanceIDBytes)
		return nil, status.Errorf(codes.InvalidArgument,
			"start instance: the instance id is %d bytes, over the bound MaxInstanceIDBytes = %d bytes "+
				"(raise it with SidecarConfig.MaxInstanceIDBytes, amdahl sidecar --max-instance-id-bytes)",
			len(id), s.cfg.MaxInstanceIDBytes)
	}
	s.mu.Lock()
	if _, ok := s.active[id]; ok {
		s.mu.Unlock()
		return nil, status.Errorf(codes.AlreadyExists, "start instance: instance %q is already scheduled and not completed", id)
	}
	if n := len(s.active); n >= s.cfg.MaxPendingInstances {
		s.mu.Unlock()
		s.metrics.refused(ctx, ReasonPendingInstances)
		what := fmt.Sprintf("instance %q", id)
		if id == "" {
			what = "an instance (id to be generated)"
		}
		return nil, status.Errorf(codes.ResourceExhausted,
			"start %s: %d instances are started and not completed, the bound MaxPendingInstances = %d; "+
				"nothing was scheduled: start it again once some complete, or raise the bound "+
				"(SidecarConfig.MaxPendingInstances, amdahl sidecar --max-pending-instances)",
			what, n, s.cfg.MaxPendingInstances)
	}
	if id == "" {
		s.tokenSeq++
		id = fmt.Sprintf("%016x-i%d", s.tokenPfx, s.tokenSeq)
	}
	s.active[id] = struct{}{}
	s.mu.Unlock()
	s.Submit(&dtpb.OrchestratorRequest{InstanceId: id})
	return &dtpb.CreateInstanceResponse{InstanceId: id}, nil
}

func (s *Sidecar) reject(ctx context.Context, reason string, c codes.Code, format string, args ...any) error {
	s.metrics.protocolError(ctx, reason)
	return status.Errorf(c, format, args...)
}

//nolint:staticcheck // SA1019: IsPartial and ChunkIndex are deprecated but they are the protocol.
func (ss *sidecarService) CompleteOrchestratorTask(ctx context.Context, req *dtpb.OrchestratorResponse) (*dtpb.CompleteTaskResponse, error) {
	r, _, err := (*Sidecar)(ss).completeTask(ctx, req, nil)
	return r, err
}

// borrowingComplete is the CompleteOrchestratorTask handler of a sidecar
// with BorrowPayloads: the message is decoded by serverCodec, its
// payloads aliasing a buffer of the sidecar's. The call holds a reference
// to the buffer until the handler and every interceptor have returned;
// each handler call takes one of its own, which the sidecar keeps with
// the message (buffered or applied) or lets go of. So an interceptor that
// calls the handler twice cannot release a buffer a kept chunk aliases,
// and a handler called after the call has returned fails instead of
// reading a buffer that may be reused.
func (s *Sidecar) borrowingComplete(srv any, ctx context.Context, dec func(any) error, icp grpc.UnaryServerInterceptor) (any, error) {
	br := &borrowedResponse{}
	if err := dec(br); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	returned := false
	defer func() {
		mu.Lock()
		returned = true
		mu.Unlock()
		br.buf.release()
	}()
	call := func(ctx context.Context, req any) (any, error) {
		if br.buf != nil {
			mu.Lock()
			if returned {
				mu.Unlock()
				return nil, status.Errorf(codes.Internal, "%s: the handler was called after its call had returned "+
					"(an interceptor must call it synchronously when SidecarConfig.BorrowPayloads is set)",
					dtpb.MethodCompleteOrchestratorTask)
			}
			br.buf.refs.Add(1)
			mu.Unlock()
		}
		r, free, err := s.completeTask(ctx, req.(*dtpb.OrchestratorResponse), br.buf)
		for _, b := range free {
			b.release()
		}
		return r, err
	}
	if icp == nil {
		return call(ctx, br.msg)
	}
	return icp(ctx, br.msg, &grpc.UnaryServerInfo{Server: srv, FullMethod: dtpb.MethodCompleteOrchestratorTask}, call)
}

// completeTask serves CompleteOrchestratorTask for req, whose payloads
// alias rb (nil: req owns them). It returns the buffers that nothing
// aliases any longer once it has returned: rb when the sidecar did not
// keep req, and the buffers of a completion OnApplied has had.
//
//nolint:staticcheck // SA1019
func (s *Sidecar) completeTask(ctx context.Context, req *dtpb.OrchestratorResponse, rb *recvBuf) (*dtpb.CompleteTaskResponse, []*recvBuf, error) {
	var free []*recvBuf
	// Deserialize and execute are leaves (Leaf), siblings under the
	// call's span: no span starts under either, and execute begins when
	// deserialize has ended. (Started under deserialize, execute lay
	// outside its parent, and attribution cut it to nothing.)
	_, ph := s.comp.Start(ctx, telemetry.Deserialize, telemetry.Request, telemetry.Leaf())
	done, kept, err := s.complete(ctx, req, rb)
	if !kept && rb != nil {
		free = append(free, rb)
	}
	// Attributes only an exporter reads (SpanAttributes): without one
	// they are not built (with the runtime's own tracer their slice
	// reached the heap; on the no-op tracer it did not).
	read := s.comp.SpanAttributes()
	var attrs []attribute.KeyValue
	if read {
		attrs = []attribute.KeyValue{attribute.Bool("amdahl.chunking.partial", req.GetIsPartial()),
			attribute.Int(AttrActions, len(req.GetActions()))}
	}
	if err != nil {
		ph.End(telemetry.WithError(err), telemetry.WithAttributes(attrs...))
		return nil, free, err
	}
	ph.End(telemetry.WithAttributes(attrs...))
	if done != nil {
		_, ex := s.comp.Start(ctx, telemetry.Execute, telemetry.None, telemetry.Leaf())
		if s.cfg.OnApplied != nil {
			s.cfg.OnApplied(*done)
		}
		if read {
			ex.End(telemetry.WithAttributes(attribute.Int(AttrActions, len(done.Actions)), attribute.Int(AttrChunks, done.Chunks)))
		} else {
			ex.End()
		}
		if s.cfg.BorrowPayloads {
			free = append(free, done.bufs...)
		}
	}
	return &dtpb.CompleteTaskResponse{}, free, nil
}

// complete validates req (its payloads aliasing rb, if not nil) against
// the token's state and applies it atomically under s.mu. It returns the
// applied completion, or nil when the chunk was buffered or was a
// duplicate; kept tells whether req is held (buffered or applied), and
// with it rb.
//
//nolint:staticcheck // SA1019
func (s *Sidecar) complete(ctx context.Context, req *dtpb.OrchestratorResponse, rb *recvBuf) (c *Completion, kept bool, err error) {
	tok := req.GetCompletionToken()
	var idx int32 = -1
	if req.ChunkIndex != nil {
		idx = req.ChunkIndex.GetValue()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tok == "" {
		return nil, false, s.reject(ctx, ReasonMissingToken, codes.InvalidArgument, "completion token is empty")
	}
	if d, ok := s.completed[tok]; ok {
		return nil, false, s.resentLocked(ctx, tok, d, idx, req.IsPartial)
	}
	l, ok := s.leases[tok]
	if !ok {
		return nil, false, s.reject(ctx, ReasonUnknownToken, codes.NotFound, "unknown completion token %q", tok)
	}
	if req.GetInstanceId() != l.req.GetInstanceId() {
		return nil, false, s.reject(ctx, ReasonUnknownToken, codes.InvalidArgument,
			"completion token %q belongs to instance %q, not %q", tok, l.req.GetInstanceId(), req.GetInstanceId())
	}
	buf := s.buffers[tok]
	if req.IsPartial {
		kept, err = s.partialLocked(ctx, tok, idx, buf, req, rb)
		return nil, kept, err
	}
	c, err = s.finalLocked(ctx, tok, idx, buf, req, rb)
	if err != nil {
		return nil, false, err
	}
	s.appliedLocked(tok, idx, c)
	return c, true, nil
}

// resentLocked answers a message for a token already completed (d): a
// final message, or a partial chunk before it, sent again after its reply
// was lost is a duplicate (nil); anything else is refused.
func (s *Sidecar) resentLocked(ctx context.Context, tok string, d done, idx int32, partial bool) error {
	if !partial && idx == d.last || partial && idx >= 0 && idx < d.last {
		s.metrics.dups.Add(ctx, 1, s.metrics.plain)
		return nil
	}
	return s.reject(ctx, ReasonCompleted, codes.FailedPrecondition, "completion token %q already completed", tok)
}

// partialLocked buffers the partial chunk idx of token tok (buf: its
// buffer, nil before chunk 0), acknowledges an identical chunk sent again,
// and refuses a missing index, a gap, a conflicting resend or a chunk over
// a bound.
//
//nolint:staticcheck // SA1019
func (s *Sidecar) partialLocked(ctx context.Context, tok string, idx int32, buf *buffer, req *dtpb.OrchestratorResponse, rb *recvBuf) (kept bool, err error) {
	if idx < 0 {
		return false, s.reject(ctx, ReasonMissingIndex, codes.InvalidArgument, "isPartial=true without chunkIndex (token %q)", tok)
	}
	if buf == nil {
		if idx != 0 {
			return false, s.reject(ctx, ReasonNoBuffer, codes.FailedPrecondition, "chunk %d of token %q without a buffered chunk 0", idx, tok)
		}
	} else {
		if idx < buf.next() {
			// Sent again, after a lost reply: acknowledged if it is
			// the chunk accepted, refused (the buffer kept) if not.
			if !proto.Equal(buf.chunks[idx], req) {
				return false, s.reject(ctx, ReasonConflict, codes.FailedPrecondition,
					"chunk %d of token %q differs from the chunk %d already accepted; a chunk sent again must be identical "+
						"(the accepted chunks are kept)", idx, tok, idx)
			}
			s.metrics.dups.Add(ctx, 1, s.metrics.plain)
			buf.touched = s.cfg.Now()
			return false, nil
		}
		if idx > buf.next() {
			s.dropLocked(tok)
			return false, s.reject(ctx, ReasonGap, codes.FailedPrecondition, "chunk %d of token %q, expected %d", idx, tok, buf.next())
		}
	}
	n := proto.Size(req)
	h := heldBytes(rb.held(n), len(req.GetActions()))
	if err := s.admitLocked(ctx, tok, buf, idx, n, h, true); err != nil {
		return false, err
	}
	if buf == nil {
		buf = &buffer{}
		s.buffers[tok] = buf
		s.metrics.partial.Add(ctx, 1, s.metrics.plain)
	}
	s.appendLocked(buf, req, rb, n, h)
	return true, nil
}

// finalLocked builds the completion that the final message req (index idx,
// -1 when absent) of token tok makes: req alone, or req after the chunks
// in buf, which it drops. It refuses a final chunk that does not follow
// the buffered ones, or one over a bound.
func (s *Sidecar) finalLocked(ctx context.Context, tok string, idx int32, buf *buffer, req *dtpb.OrchestratorResponse, rb *recvBuf) (*Completion, error) {
	c := &Completion{
		InstanceID: req.GetInstanceId(), CompletionToken: tok,
		CustomStatus: req.GetCustomStatus(), RequiresHistory: req.GetRequiresHistory(),
	}
	switch {
	case buf == nil && idx > 0:
		return nil, s.reject(ctx, ReasonNoBuffer, codes.FailedPrecondition, "final chunk %d of token %q without buffered chunks", idx, tok)
	case buf == nil || idx < 0:
		// An ordinary completion (chunkIndex=0 with isPartial=false is the
		// older .NET form of the same thing), or a standalone final message
		// over a buffer: the worker replaced the completion (for example by
		// a failure completion after chunk k failed externalization), and
		// the buffered chunks are discarded (their buffers left to the GC).
		if buf != nil {
			s.dropLocked(tok)
		}
		c.Actions = req.GetActions()
		c.NumEventsProcessed = req.GetNumEventsProcessed()
		c.OrchestrationTraceContext = req.GetOrchestrationTraceContext()
		c.Chunks = 1
		if rb != nil {
			c.bufs = []*recvBuf{rb}
		}
	case idx != buf.next():
		s.dropLocked(tok)
		return nil, s.reject(ctx, ReasonGap, codes.FailedPrecondition, "final chunk %d of token %q, expected %d", idx, tok, buf.next())
	default:
		n := proto.Size(req)
		h := heldBytes(rb.held(n), len(req.GetActions()))
		if err := s.admitLocked(ctx, tok, buf, idx, n, h, false); err != nil {
			return nil, err
		}
		s.appendLocked(buf, req, rb, n, h)
		s.dropLocked(tok)
		c.bufs = buf.bufs
		c.Actions = make([]*dtpb.OrchestratorAction, 0, buf.actions)
		for _, ch := range buf.chunks {
			c.Actions = append(c.Actions, ch.GetActions()...)
		}
		c.NumEventsProcessed = buf.chunks[0].GetNumEventsProcessed()
		c.OrchestrationTraceContext = buf.chunks[0].GetOrchestrationTraceContext()
		c.Chunks = int(idx) + 1
	}
	return c, nil
}

// appliedLocked records the completion c of token tok (final index idx) as
// applied: the token's lease and instance end, the token is remembered for
// resends, and c is kept (when no OnApplied takes it; the oldest
// forgotten over MaxKeptCompletions).
func (s *Sidecar) appliedLocked(tok string, idx int32, c *Completion) {
	delete(s.leases, tok)
	delete(s.active, c.InstanceID)
	s.completed[tok] = done{last: idx, at: s.cfg.Now()}
	s.nApplied.Add(1)
	if s.cfg.OnApplied == nil {
		if len(s.applied) >= s.cfg.MaxKeptCompletions {
			// Forget the oldest; copy down so the backing array does not
			// keep it reachable.
			n := copy(s.applied, s.applied[1:])
			s.applied[n] = Completion{}
			s.applied = s.applied[:n]
			s.forgotten++
		}
		s.applied = append(s.applied, *c)
	}
}

// admitLocked checks, before anything is buffered for it, that a chunk of
// n bytes with index idx fits the bounds. buf is the token's buffer (nil
// for chunk 0). Over a per-token cap the token's buffer is dropped, since
// that completion can never fit. Over MaxTotalBufferedBytes, checked for
// partial chunks only (applying a final chunk frees its buffer), nothing
// changes and the chunk may be sent again later.
func (s *Sidecar) admitLocked(ctx context.Context, tok string, buf *buffer, idx int32, n, h int, partial bool) error {
	held := 0
	if buf != nil {
		held = buf.bytes
	}
	if held+n > s.cfg.MaxBufferedBytes || int(idx)+1 > s.cfg.MaxBufferedChunks {
		s.dropLocked(tok)
		return s.reject(ctx, ReasonOverCap, codes.ResourceExhausted,
			"token %q: buffer over cap (%d bytes + %d > MaxBufferedBytes = %d bytes, or chunk %d ≥ MaxBufferedChunks = %d chunks); "+
				"the completion is dropped (raise SidecarConfig.MaxBufferedBytes or .MaxBufferedChunks, amdahl sidecar --max-token-bytes or --max-token-chunks)",
			tok, held, n, s.cfg.MaxBufferedBytes, idx, s.cfg.MaxBufferedChunks)
	}
	if partial && s.buffered+h > s.cfg.MaxTotalBufferedBytes {
		s.metrics.refused(ctx, ReasonTotalBufferedBytes)
		return status.Errorf(codes.ResourceExhausted,
			"chunk %d of token %q: its %d bytes held (decoded) would take the partial completions buffered by the sidecar from %d to %d bytes, "+
				"over the bound MaxTotalBufferedBytes = %d bytes; nothing was buffered: send it again once other completions finish, "+
				"or raise the bound (SidecarConfig.MaxTotalBufferedBytes, amdahl sidecar --max-total-buffered-bytes)",
			idx, tok, h, s.buffered, s.buffered+h, s.cfg.MaxTotalBufferedBytes)
	}
	return nil
}

// appendLocked buffers a chunk of n bytes (h held) that admitLocked
// accepted, its payloads aliasing rb (if not nil).
func (s *Sidecar) appendLocked(buf *buffer, req *dtpb.OrchestratorResponse, rb *recvBuf, n, h int) {
	if rb != nil {
		buf.bufs = append(buf.bufs, rb)
	}
	buf.bytes += n
	buf.held += h
	s.buffered += h
	s.adm.setBuffered(int64(s.buffered))
	buf.chunks = append(buf.chunks, req)
	buf.actions += len(req.GetActions())
	buf.touched = s.cfg.Now()
}

package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/ipc/taskproto"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// runTask: acquire a host and run the task there; with an orchestration
// (scenario.TaskItem.Orchestration), lease it first and complete it with
// the task's outputs (or as failed) after.
func (r *Runtime) runTask(ctx context.Context, u *unit) (string, error) {
	dctx := trace.ContextWithSpan(ctx, u.dispSpan())
	task := u.item.Task
	orch := task.Orchestration
	var token string
	if orch {
		var err error
		if token, err = r.lease.lease(dctx, r.sender, u.id); err != nil {
			r.endDispatch(u)
			return sidecarClass("sidecar", err), err
		}
	}
	h, err := r.pool.acquire(dctx)
	if err != nil {
		r.endDispatch(u)
		if !orch {
			return "task host start", err
		}
		return "task host start", r.failOrchestration(ctx, u, token, err)
	}
	name, cfg := taskConfiguration(u)
	// Dispatch ends once the host is ours and the task's configuration
	// built; the round trip on the host is its own span beside it, so the
	// gaps between the ipc phases of both processes (kernel transit,
	// wake-ups) are not charged to dispatch. One clock read for
	// dispatch's end, the host span's start and the send's: they are the
	// same instant (a clock read is 0.1–0.25 µs on the 2-vCPU VM).
	sendStart := time.Now()
	u.endDispatchAt(sendStart)
	var hctx context.Context
	var hs trace.Span
	if u.rec != nil {
		hctx, hs = u.rec.startHost(ctx, sendStart, h.id, h.pid)
	} else {
		hctx, hs = startHostSpan(ctx, r.phaseTP, r.tracer, h.id, h.pid, sendStart)
	}
	in, err := h.run(hctx, cfg, r.set.TaskTimeout)
	r.pool.release(h)
	if err != nil {
		hs.RecordError(err)
		r.endHostSpan(hs, u)
		class := "task host died"
		switch {
		case errors.Is(err, ErrTaskTimeout):
			class = "task timed out"
		case errors.Is(err, context.Canceled):
			class = "cancelled"
		}
		if !orch {
			return class, err
		}
		return class, r.failOrchestration(ctx, u, token, err)
	}
	res := in.Msg.(*ipcpb.TaskResult)
	u.outputs = res.GetOutputs()
	if in.ReplyPhasesLeft && u.rec != nil {
		u.rec.replyPhases(hctx, in)
	}
	r.childSpans(hctx, res, sendStart, in.ReceiveStart)
	r.endHostSpan(hs, u)

	status := dtpb.OrchestrationStatus_ORCHESTRATION_STATUS_COMPLETED
	var taskErr error
	if res.GetStatus() != ipcpb.Status_STATUS_SUCCESS {
		status = dtpb.OrchestrationStatus_ORCHESTRATION_STATUS_FAILED
		taskErr = fmt.Errorf("task %s failed in host %d: %s", name, h.id, res.GetError())
	}
	if !orch {
		if taskErr != nil {
			return "task failed", taskErr
		}
		return "", nil
	}
	resp := taskCompletion(u.id, token, status, res.GetOutputs())
	if _, err := r.complete(ctx, resp); err != nil {
		return sidecarClass("completion", err), err
	}
	if taskErr != nil {
		return "task failed", taskErr
	}
	return "", nil
}

// startHostSpan starts, at start, the runtime.host span of a round trip
// on the host with id and pid: through the run's PhaseTracer (own: the
// runtime's own tracer, or the no-op provider's) if it has one, else with
// tracer. Through own it is started without options (they allocate), and
// the host's attributes are set only if own's spans are exported (nothing
// else reads them).
func startHostSpan(ctx context.Context, own telemetry.PhaseTracer, tracer trace.Tracer, id, pid int, start time.Time) (context.Context, trace.Span) {
	if own != nil {
		ctx, s := own.StartPhaseSpan(ctx, SpanHost, "", 0, telemetry.None, start)
		if own.PhaseAttributes() {
			s.SetAttributes(AttrHostID.Int(id), AttrHostPID.Int(pid))
		}
		return ctx, s
	}
	return tracer.Start(ctx, SpanHost, trace.WithTimestamp(start), trace.WithAttributes(AttrHostID.Int(id), AttrHostPID.Int(pid)))
}

// endHostSpan ends u's runtime.host span now. An SDK span ended without
// a time ends at its start plus the monotonic time since, but the unit's
// root ends at a reading of the wall clock (telemetry.WorkSpan.End): a
// step of the wall clock in between could end the host span after its
// root. So the SDK's is ended at a wall-clock reading too; the runtime's
// own spans read the wall clock when they end.
func (r *Runtime) endHostSpan(hs trace.Span, u *unit) {
	if u.rec == nil && r.phaseTP == nil {
		hs.End(trace.WithTimestamp(time.Now()))
		return
	}
	hs.End()
}

// failOrchestration completes the orchestration as failed with cause (so
// the sidecar's lease is not left dangling) and returns cause, joined with
// the completion's error if that failed too. ctx is the unit's: it ends
// only with the drain.
func (r *Runtime) failOrchestration(ctx context.Context, u *unit, token string, cause error) error {
	resp := &dtpb.OrchestratorResponse{InstanceId: u.id, CompletionToken: token, Actions: []*dtpb.OrchestratorAction{{
		Id: 0, OrchestratorActionType: &dtpb.OrchestratorAction_CompleteOrchestration{CompleteOrchestration: &dtpb.CompleteOrchestrationAction{
			OrchestrationStatus: dtpb.OrchestrationStatus_ORCHESTRATION_STATUS_FAILED,
			FailureDetails:      &dtpb.TaskFailureDetails{ErrorType: "amdahl.TaskHostError", ErrorMessage: cause.Error()},
		}},
	}}}
	// Not cut off by the unit's own failure, but bounded, and by the drain.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := r.complete(ctx, resp); err != nil {
		return errors.Join(cause, fmt.Errorf("and completing the orchestration as failed: %w", err))
	}
	return cause
}

// complete sends a completion; a caller's sidecar is drained, so that it
// keeps no payloads (the in-process one keeps none).
func (r *Runtime) complete(ctx context.Context, resp *dtpb.OrchestratorResponse) (chunking.Result, error) {
	if !r.completed.Load() {
		r.completed.Store(true)
	}
	res, err := r.sender.Complete(ctx, resp)
	if r.side != nil && !r.ownSide {
		r.side.DrainCompletions()
	}
	if err != nil {
		return res, fmt.Errorf("sidecar: %w", err)
	}
	return res, nil
}

// runFanout: lease the orchestration, then complete it with the item's
// actions, chunked.
//
// The completion's payload bytes are admitted first, in dispatch
// (runtime.completion_bytes): the sender encodes and the in-process
// sidecar reassembles a completion whole, so the completions in flight
// at once, not their number, are what a run holds in memory.
func (r *Runtime) runFanout(ctx context.Context, u *unit) (string, error) {
	dctx := trace.ContextWithSpan(ctx, u.dispSpan())
	fo := u.item.Fanout
	var size int64
	for _, n := range fo.ActionBytes {
		size += int64(n)
	}
	if err := r.payloads.acquire(dctx, size); err != nil {
		r.endDispatch(u)
		return "cancelled", fmt.Errorf("wait for %d bytes of runtime.completion_bytes: %w", size, err)
	}
	defer r.payloads.release(r.payloads.take(size))
	token, err := r.lease.lease(dctx, r.sender, u.id)
	r.endDispatch(u)
	if err != nil {
		return sidecarClass("sidecar", err), err
	}
	resp := &dtpb.OrchestratorResponse{InstanceId: u.id, CompletionToken: token, Actions: make([]*dtpb.OrchestratorAction, len(fo.ActionBytes))}
	for i := range fo.ActionBytes {
		resp.Actions[i] = &dtpb.OrchestratorAction{Id: int32(i), OrchestratorActionType: &dtpb.OrchestratorAction_ScheduleTask{
			ScheduleTask: &dtpb.ScheduleTaskAction{Name: "amdahl.fanout", Input: wrapperspb.String(fo.Payload(i))}}}
	}
	res, err := r.complete(ctx, resp)
	if err != nil {
		return sidecarClass("completion", err), err
	}
	if res.Plan != nil && res.Plan.Oversized != nil {
		return "oversized action", fmt.Errorf("orchestration failed: %w", res.Plan.Oversized)
	}
	return "", nil
}

// childSpans records the task host's phases, returned in its reply, as
// spans of the parent's trace (amdahl.remote=true) under the host span,
// placed in the parent's clock within [sendStart, replyStart] (package
// taskproto decodes and places them).
//
// With Config.Telemetry.AccountRemoteDirectly the phases go to the collector as the
// spans attribution would have read from the SDK's (the same names,
// component, phase, direction and times, parented to the host span), and
// to amdahl.phase.duration, without SDK spans. Under the host span of a
// unit's record (record.go) they fill the record's slots.
func (r *Runtime) childSpans(ctx context.Context, res *ipcpb.TaskResult, sendStart, replyStart time.Time) {
	var buf [taskproto.NumTimings]taskproto.Timing
	_, unit, rec, rs := parentOf(ctx)
	if rs != nil && rs == &rec.host {
		// The host span of a unit's record: the phases go to its slots.
		timings := taskproto.AppendTimings(buf[:0], res, sendStart, replyStart)
		if r.hostComp.RecordsMetrics() {
			for _, t := range timings {
				r.hostComp.RecordPhase(ctx, t.Phase, t.Direction, t.End.Sub(t.Start))
			}
		}
		rec.hostPhases(r.hostComp, timings)
		return
	}
	if !r.hostComp.Records(ctx) {
		return // nothing would record them (OTEL_SDK_DISABLED=true, or the unit's trace sampled out)
	}
	timings := taskproto.AppendTimings(buf[:0], res, sendStart, replyStart)
	host := trace.SpanContextFromContext(ctx)
	if !r.cfg.Telemetry.AccountRemoteDirectly || !host.IsSampled() || r.hostComp == nil {
		for _, t := range timings {
			r.hostComp.RecordSpan(ctx, t.Phase, t.Direction, t.Start, t.End, telemetry.AttrRemote.Bool(true))
		}
		return
	}
	var spans [taskproto.NumTimings]attribution.Span
	n := 0
	for _, t := range timings {
		if !t.Phase.Valid() || t.Direction > telemetry.Reply {
			continue // as RecordSpan: what another process sent
		}
		r.hostComp.RecordPhase(ctx, t.Phase, t.Direction, t.End.Sub(t.Start))
		spans[n] = remoteSpan(r.hostComp, host, r.col.newSpanID(), t)
		n++
	}
	if rec != nil {
		// A second host span of a unit's record: kept beside its slots.
		for _, sp := range spans[:n] {
			rec.addExtra(sp)
		}
		return
	}
	r.col.add(unit, host.TraceID(), spans[:n])
}

// remoteSpan is the span of a task host's phase t (from its reply, placed
// in the parent's clock), id under the host span host, as comp's.
func remoteSpan(comp *telemetry.Component, host trace.SpanContext, id attribution.SpanID, t taskproto.Timing) attribution.Span {
	return attribution.Span{TraceID: attribution.TraceID(host.TraceID()), SpanID: id, ParentID: attribution.SpanID(host.SpanID()),
		Name: comp.SpanName(t.Phase, t.Direction), Component: comp.Name(),
		Start: t.Start.UnixNano(), End: t.End.UnixNano(), Phase: t.Phase, Direction: t.Direction, Remote: true}
}

// taskConfiguration builds the configuration packet of task unit u and
// returns its task name (TaskHash unless the item names one).
func taskConfiguration(u *unit) (string, *ipcpb.TaskConfiguration) {
	task := u.item.Task
	params := task.Parameters
	if task.ExecutePasses != 1 {
		params = make(map[string]string, len(task.Parameters)+1)
		for k, v := range task.Parameters {
			params[k] = v
		}
		params[ParamPasses] = strconv.Itoa(task.ExecutePasses)
	}
	name := task.TaskName
	if name == "" {
		name = TaskHash
	}
	cfg := &ipcpb.TaskConfiguration{
		Id: uint64(u.item.Seq) + 1, TaskName: name, TaskLocation: "amdahl", ProjectFile: u.id,
		Parameters: params, Environment: task.Environment,
	}
	return name, cfg
}

// taskCompletion is the orchestration's completion with the task's outputs.
func taskCompletion(instance, token string, status dtpb.OrchestrationStatus, outputs map[string]string) *dtpb.OrchestratorResponse {
	out, _ := json.Marshal(outputs)
	resp := &dtpb.OrchestratorResponse{InstanceId: instance, CompletionToken: token, Actions: []*dtpb.OrchestratorAction{{
		Id: 0, OrchestratorActionType: &dtpb.OrchestratorAction_CompleteOrchestration{CompleteOrchestration: &dtpb.CompleteOrchestrationAction{
			OrchestrationStatus: status, Result: wrapperspb.String(string(out)),
		}},
	}}}
	return resp
}

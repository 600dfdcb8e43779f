package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
	"github.com/amdahl-rt/amdahl/ipc/taskproto"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
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
		hctx, hs = u.rec.startHost(ctx, sendStart)
	} else {
		hctx, hs = r.startHostSpan(ctx, h.id, h.pid, sendStart)
	}
	in, err := h.run(hctx, cfg, r.set.TaskTimeout)
	r.pool.release(h)
	if err != nil {
		hs.RecordError(err)
		r.endHostSpan(hs)
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
	if in.PhasesLeft {
		r.replyPhases(hctx, in)
	}
	r.childSpans(hctx, u, res, sendStart, in.ReceiveStart)
	r.endHostSpan(hs)

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
// on the host with id and pid: through the run's PhaseTracer if it has
// one (without options, which allocate; the host's attributes only if
// its spans' attributes are read), else with the OTel API. ipc leaves the
// reply's receive and deserialize to the worker (replyPhases) when the
// span is the runtime's tracer's.
func (r *Runtime) startHostSpan(ctx context.Context, id, pid int, start time.Time) (context.Context, trace.Span) {
	pt := r.phaseTP
	if pt == nil {
		return r.tracer.Start(ctx, SpanHost, trace.WithTimestamp(start), trace.WithAttributes(AttrHostID.Int(id), AttrHostPID.Int(pid)))
	}
	ctx, s := pt.StartPhaseSpan(ctx, SpanHost, "", 0, telemetry.None, start)
	if pt.PhaseAttributes() {
		s.SetAttributes(AttrHostID.Int(id), AttrHostPID.Int(pid))
	}
	spans.LeaveReplyPhases(s)
	return ctx, s
}

// endHostSpan ends the runtime.host span hs at a reading of the wall
// clock, as the unit's root ends (telemetry.WorkSpan.End): an SDK span
// ended without a time ends at its start plus the monotonic time since,
// which a step of the wall clock in between could put after its root's.
func (r *Runtime) endHostSpan(hs trace.Span) {
	if _, ok := hs.(*recSpan); ok {
		hs.End()
		return
	}
	if r.phaseTP != nil {
		r.phaseTP.EndPhaseSpan(hs, time.Now())
		return
	}
	hs.End(trace.WithTimestamp(time.Now()))
}

// replyPhases records the receive and deserialize of the task's result
// in, which ipc left to the worker (in.PhasesLeft: the host span is
// the runtime's tracer's), as ipc records them: their spans under the
// host span in ctx (amdahl.bytes on them when the spans' attributes are
// read) and their durations. Recorded here, they are written on the
// worker's core with the rest of the unit's spans, not by ipc's reader
// goroutine on another (docs/measurements/telemetry-cost.md).
func (r *Runtime) replyPhases(ctx context.Context, in *ipc.Incoming) {
	var attrs []attribute.KeyValue
	if r.ipcComp.SpanAttributes() {
		attrs = []attribute.KeyValue{telemetry.AttrBytes.Int(in.Size)}
	}
	recvEnd := in.ReceiveStart.Add(in.ReceiveDuration)
	r.ipcComp.RecordSpan(ctx, telemetry.Receive, telemetry.Reply, in.ReceiveStart, recvEnd, attrs...)
	r.ipcComp.RecordSpan(ctx, telemetry.Deserialize, telemetry.Reply, recvEnd, recvEnd.Add(in.DeserializeDuration), attrs...)
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
// spans of the parent's trace (amdahl.remote=true) under the host span in
// ctx, placed in the parent's clock within [sendStart, replyStart]
// (package taskproto decodes and places them), and their durations. Under
// the host span of u's record they fill its slots (the record is kept
// only when no metric is recorded). With a TracerProvider and
// Config.Telemetry.AccountRemoteDirectly they go to the collector as the
// spans attribution would have read from the SDK's, and to
// amdahl.phase.duration, without SDK spans.
func (r *Runtime) childSpans(ctx context.Context, u *unit, res *ipcpb.TaskResult, sendStart, replyStart time.Time) {
	var buf [taskproto.NumTimings]taskproto.Timing
	if rec := u.rec; rec != nil && trace.SpanFromContext(ctx) == trace.Span(&rec.host) {
		rec.hostPhases(r.hostComp, taskproto.AppendTimings(buf[:0], res, sendStart, replyStart))
		return
	}
	if !r.hostComp.Records(ctx) {
		return // nothing would record them (OTEL_SDK_DISABLED=true, or the unit's trace sampled out)
	}
	timings := taskproto.AppendTimings(buf[:0], res, sendStart, replyStart)
	host := trace.SpanContextFromContext(ctx)
	if !r.cfg.Telemetry.AccountRemoteDirectly || r.cfg.Telemetry.TracerProvider == nil || !host.IsSampled() {
		r.hostComp.RecordSpans(ctx, timings, remoteAttrs...)
		return
	}
	// The spans attribution would have read from the SDK's, without them.
	for _, t := range timings {
		if t.Phase.Valid() && t.Direction <= telemetry.Reply { // as RecordSpan: what another process sent
			r.hostComp.RecordPhase(ctx, t.Phase, t.Direction, t.End.Sub(t.Start))
			r.col.Ended(remoteSpan(r.hostComp, host, t))
		}
	}
}

// remoteAttrs are the attributes of a task host's phase's span in the
// parent's trace: amdahl.remote=true. Not written to.
var remoteAttrs = []attribute.KeyValue{telemetry.AttrRemote.Bool(true)}

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

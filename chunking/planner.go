package chunking

import (
	"cmp"
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// PlannerConfig configures a Planner. The zero value is the default: cached
// algorithm, wire accounting, 4,089,446-byte limit, no LargePayloads.
type PlannerConfig struct {
	// MaxChunkBytes is the chunk size limit; 0 means DefaultMaxChunkBytes.
	// Valid values are MinMaxChunkBytes..DefaultMaxChunkBytes.
	MaxChunkBytes int
	// Algorithm is Cached (default) or Legacy.
	Algorithm Algorithm
	// Accounting is Wire (default) or Payload.
	Accounting Accounting
	// LargePayloads reports that the worker announced
	// WORKER_CAPABILITY_LARGE_PAYLOADS: oversized actions are not rejected
	// but sent alone in their own chunk.
	LargePayloads bool
	// Component, if not nil, records the chunking.serialize phase.
	Component *telemetry.Component
	// MeterProvider, if not nil, receives the amdahl.chunking.* metrics.
	MeterProvider metric.MeterProvider
}

// Planner splits an OrchestratorResponse into the completions a Durable
// Task worker sends (durabletask-dotnet CompleteOrchestratorTaskWithChunkingAsync).
// A Planner is immutable and safe for concurrent use.
type Planner struct {
	max     int
	alg     Algorithm
	acct    Accounting
	lp      bool
	comp    *telemetry.Component
	steps   *telemetry.Steps
	metrics *metrics
}

// The steps of chunking.serialize, as pprof labels step=<name> inside
// phase=serialize when the component sets pprof labels. validate is the
// fail-fast pass that sizes each action once and checks it against the
// limit (without LargePayloads); size is every other sizing: the whole
// response, the envelope, the sizes packing reads, and the legacy
// planner's sizing again while packing; pack builds the chunks; encode
// marshals them (Sender.Complete). So the legacy planner's repeated sizing
// is the samples with step=size.
const (
	stepSize = iota
	stepValidate
	stepPack
	stepEncode
	stepNone = -1 // back to the phase label alone
)

// SerializeSteps returns the values of the step pprof label inside
// chunking's serialize phase, in the order of the step constants: size,
// validate, pack, encode (for dashboards and profile queries).
func SerializeSteps() []string { return []string{"size", "validate", "pack", "encode"} }

func serializeSteps(c *telemetry.Component) *telemetry.Steps {
	return c.Steps(telemetry.Serialize, SerializeSteps()...)
}

// NewPlanner validates cfg and returns a Planner. An out-of-range limit or
// an unknown algorithm or accounting mode is an error naming the setting.
func NewPlanner(cfg PlannerConfig) (*Planner, error) {
	max := cmp.Or(cfg.MaxChunkBytes, DefaultMaxChunkBytes)
	if max < MinMaxChunkBytes || max > DefaultMaxChunkBytes {
		return nil, fmt.Errorf("chunking.max_chunk_bytes: %d is out of range (valid: %d..%d)", max, MinMaxChunkBytes, DefaultMaxChunkBytes)
	}
	if cfg.Algorithm > Legacy {
		return nil, fmt.Errorf("chunking.algorithm: invalid value %v (valid: cached, legacy)", cfg.Algorithm)
	}
	if cfg.Accounting > Payload {
		return nil, fmt.Errorf("chunking.accounting: invalid value %v (valid: wire, payload)", cfg.Accounting)
	}
	m, err := newMetrics(cfg.MeterProvider, cfg.Component)
	if err != nil {
		return nil, err
	}
	return &Planner{max: max, alg: cfg.Algorithm, acct: cfg.Accounting, lp: cfg.LargePayloads, comp: cfg.Component,
		steps: serializeSteps(cfg.Component), metrics: m}, nil
}

// Plan is the result of planning one response.
type Plan struct {
	// Chunks are the messages to send, in order. For a direct send Chunks[0]
	// is the original response itself. Chunks share the original's action
	// messages; neither may be modified until the plan has been sent.
	Chunks []*dtpb.OrchestratorResponse
	// Sizes holds the serialized size of each chunk as computed by the
	// planner (cached algorithm only; nil for legacy, which leaves sizing
	// to the encoder).
	Sizes []int
	// Direct reports that the response was sent unchanged.
	Direct bool
	// Oversized is set when the response was replaced by the failure
	// completion because an action exceeded the limit.
	Oversized *OversizedActionError
	// ActionSizings and ResponseSizings count the outer sizing calls
	// (proto.Size of one action, of a whole response) the plan took.
	ActionSizings, ResponseSizings int
}

// OversizedActionError describes the first action that exceeded the limit
// without LargePayloads. Its message is the reference failure text.
type OversizedActionError struct {
	ActionID int32
	Kind     string // PascalCase oneof case, e.g. "ScheduleTask"
	Size     int
	Limit    int
}

// Error returns the durabletask-dotnet failure message, with invariant
// number formatting (always a '.' decimal separator).
func (e *OversizedActionError) Error() string {
	return fmt.Sprintf("A single orchestrator action of type %s with id %d exceeds the %.2fMB limit: %.2fMB. Enable large-payload externalization to Azure Blob Storage to support oversized actions.",
		e.Kind, e.ActionID, float64(e.Limit)/1048576, float64(e.Size)/1048576)
}

// FailureErrorType is the errorType of the failure completion (.NET's).
const FailureErrorType = "System.InvalidOperationException"

// ActionKind returns the PascalCase name of an action's oneof case as .NET
// prints it ("ScheduleTask"), or "None" when no case is set.
func ActionKind(a *dtpb.OrchestratorAction) string {
	switch a.GetOrchestratorActionType().(type) {
	case *dtpb.OrchestratorAction_ScheduleTask:
		return "ScheduleTask"
	case *dtpb.OrchestratorAction_CreateSubOrchestration:
		return "CreateSubOrchestration"
	case *dtpb.OrchestratorAction_CreateTimer:
		return "CreateTimer"
	case *dtpb.OrchestratorAction_SendEvent:
		return "SendEvent"
	case *dtpb.OrchestratorAction_CompleteOrchestration:
		return "CompleteOrchestration"
	case *dtpb.OrchestratorAction_TerminateOrchestration:
		return "TerminateOrchestration"
	case *dtpb.OrchestratorAction_SendEntityMessage:
		return "SendEntityMessage"
	case *dtpb.OrchestratorAction_RewindOrchestration:
		return "RewindOrchestration"
	}
	return "None"
}

// Plan splits r. It never modifies r. ctx only carries the parent span.
// Plan fails only for a nil response; an oversized action is not an error
// but a plan whose single chunk is the failure completion (Plan.Oversized).
func (p *Planner) Plan(ctx context.Context, r *dtpb.OrchestratorResponse) (*Plan, error) {
	if r == nil {
		return nil, fmt.Errorf("chunking: plan: nil response")
	}
	// A leaf of the unit's tree: no span starts under serialize, so its
	// span is made when it ends (Leaf), with no span object and no
	// context through the runtime's own tracer.
	_, ph := p.comp.Start(ctx, telemetry.Serialize, telemetry.Request, telemetry.Leaf())
	pl := p.plan(r, ph, p.steps)
	ph.Step(p.steps, stepNone)
	ph.End(telemetry.WithAttributes(p.record(ctx, r, pl)...))
	return pl, nil
}

// plan plans r inside the serialize phase ph, labelling its steps with st
// (nil: no labels).
func (p *Planner) plan(r *dtpb.OrchestratorResponse, ph telemetry.PhaseSpan, st *telemetry.Steps) *Plan {
	if p.alg == Legacy {
		return p.planLegacy(r, ph, st)
	}
	return p.planCached(r, ph, st)
}

// record records the plan's metrics and returns the attributes of its
// serialize phase, for the phase's End (WithAttributes): nil when nothing reads them
// (Component.SpanAttributes): building them allocates, since their
// slice escapes into the interface call.
func (p *Planner) record(ctx context.Context, r *dtpb.OrchestratorResponse, pl *Plan) []attribute.KeyValue {
	bytes := 0
	for _, s := range pl.Sizes {
		bytes += s
	}
	p.metrics.planned(ctx, pl, bytes)
	if !p.comp.SpanAttributes() {
		return nil
	}
	attrs := []attribute.KeyValue{
		attribute.Int(AttrActions, len(r.GetActions())),
		attribute.Int(AttrChunks, len(pl.Chunks)),
		attribute.Int(AttrActionSizings, pl.ActionSizings),
		attribute.Int(AttrResponseSizings, pl.ResponseSizings),
		attribute.String(AttrAlgorithm, p.alg.String()),
	}
	if pl.Sizes != nil {
		attrs = append(attrs, telemetry.AttrBytes.Int(bytes))
	}
	if pl.Oversized != nil {
		attrs = append(attrs, attribute.Bool(AttrOversized, true))
	}
	return attrs
}

// cachedSize reads sizes left in the size caches by an earlier proto.Size;
// fullSize computes them (and fills the caches).
var (
	cachedSize = proto.MarshalOptions{UseCachedSize: true}
	fullSize   = proto.MarshalOptions{}
)

// framed is the size of an action of size s inside its parent: tag byte,
// length varint, body.
func framed(s int) int { return 1 + protowire.SizeBytes(s) }

func msgField(m proto.Message) int { return 1 + protowire.SizeBytes(proto.Size(m)) }

// sharedEnvelopeSize is the size of the fields of r that every chunk
// carries as r does: instanceId, customStatus, completionToken and
// requiresHistory.
func sharedEnvelopeSize(r *dtpb.OrchestratorResponse) int {
	n := 0
	if l := len(r.GetInstanceId()); l > 0 {
		n += 1 + protowire.SizeBytes(l)
	}
	if r.CustomStatus != nil {
		n += msgField(r.CustomStatus)
	}
	if l := len(r.GetCompletionToken()); l > 0 {
		n += 1 + protowire.SizeBytes(l)
	}
	if r.RequiresHistory {
		n += 2
	}
	return n
}

// envelopeSize is the serialized size of r without its actions.
func envelopeSize(r *dtpb.OrchestratorResponse) int {
	n := len(r.ProtoReflect().GetUnknown()) + sharedEnvelopeSize(r)
	if r.NumEventsProcessed != nil {
		n += msgField(r.NumEventsProcessed)
	}
	if r.OrchestrationTraceContext != nil {
		n += msgField(r.OrchestrationTraceContext)
	}
	//nolint:staticcheck // SA1019: the deprecated chunk fields are the protocol.
	if r.IsPartial {
		n += 2
	}
	//nolint:staticcheck // SA1019
	if r.ChunkIndex != nil {
		n += msgField(r.ChunkIndex) //nolint:staticcheck // SA1019
	}
	return n
}

// chunkEnvelopeBound is the largest envelope chunk idx can have: it counts
// isPartial and chunkIndex as present, whether or not they end up set.
func chunkEnvelopeBound(r *dtpb.OrchestratorResponse, idx int32) int {
	n := sharedEnvelopeSize(r)
	if idx == 0 {
		if r.OrchestrationTraceContext != nil {
			n += msgField(r.OrchestrationTraceContext)
		}
	} else {
		n += 2 // numEventsProcessed present with 0: 2A 00
	}
	n += 2 // isPartial: 40 01
	if idx == 0 {
		n += 2 // chunkIndex 0: 4A 00
	} else {
		n += 1 + protowire.SizeBytes(1+protowire.SizeVarint(uint64(idx)))
	}
	return n
}

func failure(r *dtpb.OrchestratorResponse, a *dtpb.OrchestratorAction, size, limit int) (*dtpb.OrchestratorResponse, *OversizedActionError) {
	e := &OversizedActionError{ActionID: a.GetId(), Kind: ActionKind(a), Size: size, Limit: limit}
	return &dtpb.OrchestratorResponse{
		InstanceId:                r.GetInstanceId(),
		CompletionToken:           r.GetCompletionToken(),
		OrchestrationTraceContext: r.GetOrchestrationTraceContext(),
		Actions: []*dtpb.OrchestratorAction{{
			OrchestratorActionType: &dtpb.OrchestratorAction_CompleteOrchestration{
				CompleteOrchestration: &dtpb.CompleteOrchestrationAction{
					OrchestrationStatus: dtpb.OrchestrationStatus_ORCHESTRATION_STATUS_FAILED,
					FailureDetails: &dtpb.TaskFailureDetails{
						ErrorType:      FailureErrorType,
						ErrorMessage:   e.Error(),
						IsNonRetriable: true,
					},
				},
			},
		}},
	}, e
}

// newChunk starts chunk idx of r with the fields of the reference's field
// matrix that do not depend on the chunk's position in the sequence.
func newChunk(r *dtpb.OrchestratorResponse, idx int32) *dtpb.OrchestratorResponse {
	c := &dtpb.OrchestratorResponse{
		InstanceId:      r.GetInstanceId(),
		CustomStatus:    r.GetCustomStatus(),
		CompletionToken: r.GetCompletionToken(),
		RequiresHistory: r.GetRequiresHistory(),
	}
	if idx == 0 {
		c.OrchestrationTraceContext = r.GetOrchestrationTraceContext()
	} else {
		c.NumEventsProcessed = wrapperspb.Int32(0)
	}
	return c
}

// finishChunk sets isPartial and chunkIndex; chunked reports whether the
// sequence has more than one chunk (known once the first chunk is partial).
func finishChunk(c *dtpb.OrchestratorResponse, idx int32, partial, chunked bool) {
	//nolint:staticcheck // SA1019: the deprecated chunk fields are the protocol.
	c.IsPartial = partial
	if chunked {
		//nolint:staticcheck // SA1019
		c.ChunkIndex = wrapperspb.Int32(idx)
	}
}

func (p *Planner) cost(s int) int {
	if p.acct == Wire {
		return framed(s)
	}
	return s
}

func (p *Planner) planCached(r *dtpb.OrchestratorResponse, ph telemetry.PhaseSpan, st *telemetry.Steps) *Plan {
	acts := r.GetActions()
	pl := &Plan{}
	var sizes []int
	total := 0
	if !p.lp {
		ph.Step(st, stepValidate)
		// Grow as actions pass, so rejecting an early action allocates
		// nothing proportional to the response.
		for _, a := range acts {
			s := actionSize(fullSize, a)
			pl.ActionSizings++
			if s > p.max {
				f, e := failure(r, a, s, p.max)
				pl.Chunks, pl.Sizes, pl.Oversized = []*dtpb.OrchestratorResponse{f}, []int{proto.Size(f)}, e
				return pl
			}
			sizes = append(sizes, s)
		}
		ph.Step(st, stepSize)
		total = envelopeSize(r)
		for _, s := range sizes {
			total += framed(s)
		}
	} else {
		// The whole response's size, as proto.Size(r) would compute it,
		// one action at a time (actionSize: no reflection on the oneof).
		ph.Step(st, stepSize)
		total = envelopeSize(r)
		for _, a := range acts {
			total += framed(actionSize(fullSize, a))
		}
		pl.ResponseSizings++
	}
	if total <= p.max {
		pl.Chunks, pl.Sizes, pl.Direct = []*dtpb.OrchestratorResponse{r}, []int{total}, true
		return pl
	}
	if sizes == nil {
		// LargePayloads: the sizing above left every case message's size
		// in its size cache, so these calls do not walk the payloads again.
		sizes = make([]int, len(acts))
		for i, a := range acts {
			sizes[i] = actionSize(cachedSize, a)
			pl.ActionSizings++
		}
	}
	ph.Step(st, stepPack)
	chunked := false
	for i, idx := 0, int32(0); ; idx++ {
		c := newChunk(r, idx)
		s := 0
		if p.acct == Wire {
			s = chunkEnvelopeBound(r, idx)
		}
		start, body := i, 0
		for i < len(acts) {
			a := p.cost(sizes[i])
			if s+a > p.max && i > start {
				break
			}
			s += a
			body += framed(sizes[i])
			i++
		}
		c.Actions = acts[start:i:i]
		partial := i < len(acts)
		chunked = chunked || partial
		finishChunk(c, idx, partial, chunked)
		pl.Chunks = append(pl.Chunks, c)
		pl.Sizes = append(pl.Sizes, envelopeSize(c)+body)
		if !partial {
			return pl
		}
	}
}

// planLegacy is the pre-optimisation .NET algorithm, kept faithful in its
// sizing work: per-action validation sizing, whole-response sizing, a copy
// of the action list, and sizing every action again while packing, the
// boundary action once in each of the two chunks it is tried in.
//
// .NET sizes each action inside its packing loop (TryAddAction); here each
// chunk is first sized ahead, action by action up to the one that does not
// fit (the same proto.Size calls, in the same order), then packed, so that
// the sizing runs under step=size and the packing under step=pack with two
// label changes per chunk rather than two per action.
func (p *Planner) planLegacy(r *dtpb.OrchestratorResponse, ph telemetry.PhaseSpan, st *telemetry.Steps) *Plan {
	pl := &Plan{}
	if !p.lp {
		ph.Step(st, stepValidate)
		for _, a := range r.GetActions() {
			s := proto.Size(a)
			pl.ActionSizings++
			if s > p.max {
				f, e := failure(r, a, s, p.max)
				pl.Chunks, pl.Oversized = []*dtpb.OrchestratorResponse{f}, e
				return pl
			}
		}
	}
	ph.Step(st, stepSize)
	total := proto.Size(r)
	pl.ResponseSizings++
	if total <= p.max {
		pl.Chunks, pl.Direct = []*dtpb.OrchestratorResponse{r}, true
		return pl
	}
	ph.Step(st, stepPack)
	all := append([]*dtpb.OrchestratorAction(nil), r.GetActions()...) // .ToList()
	chunked := false
	for i, idx := 0, int32(0); ; idx++ {
		c := newChunk(r, idx)
		s := 0
		if p.acct == Wire {
			s = chunkEnvelopeBound(r, idx)
		}
		// TryAddAction's sizing: up to and including the first action
		// that does not fit (the boundary, sized again in the next chunk).
		ph.Step(st, stepSize)
		end := i
		for end < len(all) {
			a := p.cost(proto.Size(all[end]))
			pl.ActionSizings++
			if s+a > p.max && end > i {
				break
			}
			s += a
			end++
		}
		ph.Step(st, stepPack)
		var part []*dtpb.OrchestratorAction
		for ; i < end; i++ {
			part = append(part, all[i])
		}
		c.Actions = part
		partial := i < len(all)
		chunked = chunked || partial
		finishChunk(c, idx, partial, chunked)
		pl.Chunks = append(pl.Chunks, c)
		if !partial {
			return pl
		}
	}
}

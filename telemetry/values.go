package telemetry

import (
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/attribute"
)

// Phase is one step of a unit of work (DESIGN.md, "The unit of work and its
// phases"). The zero value is not a phase.
type Phase uint8

// The phases of a unit of work, in pipeline order.
const (
	// Queue is a unit's wait in its runtime's queue for a worker: load,
	// not code. It sits inside dispatch (runtime.queue is a child of
	// runtime.dispatch), so the two are separate rows.
	Queue Phase = iota + 1
	Dispatch
	Serialize
	Send
	Receive
	Deserialize
	Execute
)

// NumPhases is the number of defined phases; valid phases are 1..NumPhases.
const NumPhases = int(Execute)

var phaseNames = [...]string{"", "queue", "dispatch", "serialize", "send", "receive", "deserialize", "execute"}

// Phases lists every phase in pipeline order.
func Phases() []Phase {
	return []Phase{Queue, Dispatch, Serialize, Send, Receive, Deserialize, Execute}
}

// String returns the phase's name as it appears in telemetry ("serialize").
func (p Phase) String() string {
	if p.Valid() {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// Valid reports whether p is one of the defined phases.
func (p Phase) Valid() bool { return p >= Queue && p <= Execute }

// ParsePhase returns the phase named s, or an error listing the valid names.
func ParsePhase(s string) (Phase, error) {
	if i := slices.Index(phaseNames[:], s); i > 0 { // phaseNames[0] is no phase
		return Phase(i), nil
	}
	return 0, fmt.Errorf("unknown phase %q (valid: queue, dispatch, serialize, send, receive, deserialize, execute)", s)
}

// Direction separates the two legs of serialize/send/receive/deserialize.
// None is used for phases that have no direction (dispatch, execute).
type Direction uint8

// The directions of a phase.
const (
	None Direction = iota
	Request
	Reply
)

// NumDirections is the number of directions including None.
const NumDirections = int(Reply) + 1

var directionNames = [...]string{"", "request", "reply"}

// String returns "request", "reply", or "" for None.
func (d Direction) String() string {
	if d <= Reply {
		return directionNames[d]
	}
	return fmt.Sprintf("direction(%d)", uint8(d))
}

// ParseDirection returns the direction named s ("" is None).
func ParseDirection(s string) (Direction, error) {
	if i := slices.Index(directionNames[:], s); i >= 0 {
		return Direction(i), nil
	}
	return 0, fmt.Errorf("unknown direction %q (valid: request, reply, or empty)", s)
}

// Outcome is how a unit of work ended.
type Outcome uint8

// The outcomes of a unit of work.
const (
	OK Outcome = iota
	Failed
	Cancelled
)

var outcomeNames = [...]string{"ok", "failed", "cancelled"}

// outcomeAttrs holds each outcome's amdahl.outcome attribute as a slice
// of one: WorkSpan.End hands it to SetAttributes as it is (a slice made
// at the call would be allocated, since the span is an interface).
var outcomeAttrs = func() (a [len(outcomeNames)][]attribute.KeyValue) {
	for o, name := range outcomeNames {
		a[o] = []attribute.KeyValue{AttrOutcome.String(name)}
	}
	return a
}()

// String returns "ok", "failed" or "cancelled".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

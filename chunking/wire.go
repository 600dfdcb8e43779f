package chunking

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

// The two outer levels of a completion, OrchestratorResponse and
// OrchestratorAction, are sized and written here field by field with
// protowire; everything below them (each action's case message, the
// envelope's wrapper messages) goes through protobuf-go. protobuf-go
// reaches an action's oneof case by reflection and a map lookup, which is
// most of the cost of sizing or writing a small action; a type switch is
// not. The bytes are protobuf-go's: fields in number order, zero scalars
// and nil messages omitted, unknown fields last (TestWireMatchesMarshal
// compares them with proto.Marshal for every action case).

// actionParts is an action broken into what its encoding needs.
type actionParts struct {
	m       proto.Message    // the oneof case's message (may be a typed nil)
	num     protowire.Number // its field number; 0: no case set
	generic bool             // a case this file does not know: use protobuf-go for the whole action
}

// partsOf returns a's oneof case. A case missing from the switch (a field
// added to the proto and not here) is handled generically, which is
// correct, only slower.
func partsOf(a *dtpb.OrchestratorAction) actionParts {
	switch t := a.GetOrchestratorActionType().(type) {
	case nil:
		return actionParts{}
	case *dtpb.OrchestratorAction_ScheduleTask:
		if t != nil {
			return actionParts{m: t.ScheduleTask, num: 2}
		}
	case *dtpb.OrchestratorAction_CreateSubOrchestration:
		if t != nil {
			return actionParts{m: t.CreateSubOrchestration, num: 3}
		}
	case *dtpb.OrchestratorAction_CreateTimer:
		if t != nil {
			return actionParts{m: t.CreateTimer, num: 4}
		}
	case *dtpb.OrchestratorAction_SendEvent:
		if t != nil {
			return actionParts{m: t.SendEvent, num: 5}
		}
	case *dtpb.OrchestratorAction_CompleteOrchestration:
		if t != nil {
			return actionParts{m: t.CompleteOrchestration, num: 6}
		}
	case *dtpb.OrchestratorAction_TerminateOrchestration:
		if t != nil {
			return actionParts{m: t.TerminateOrchestration, num: 7}
		}
	case *dtpb.OrchestratorAction_SendEntityMessage:
		if t != nil {
			return actionParts{m: t.SendEntityMessage, num: 8}
		}
	case *dtpb.OrchestratorAction_RewindOrchestration:
		if t != nil {
			return actionParts{m: t.RewindOrchestration, num: 9}
		}
	default:
		return actionParts{generic: true}
	}
	return actionParts{} // a typed nil wrapper: protobuf-go treats it as unset
}

// idSize is the size of field 1 (int32 id): a negative id is a 10-byte
// varint, as protobuf-go writes it (sign-extended).
func idSize(id int32) int {
	if id == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(uint64(id))
}

// actionSize returns the serialized size of a, as proto.Size would. With
// o.UseCachedSize it reads the case message's size from the cache an
// earlier sizing left (constant time); otherwise it walks the case
// message, filling its size caches.
func actionSize(o proto.MarshalOptions, a *dtpb.OrchestratorAction) int {
	if a == nil {
		return 0
	}
	ap := partsOf(a)
	if ap.generic {
		return o.Size(a)
	}
	n := idSize(a.Id) + len(a.ProtoReflect().GetUnknown())
	if ap.num != 0 {
		n += protowire.SizeTag(ap.num) + protowire.SizeBytes(o.Size(ap.m))
	}
	return n
}

var errUTF8 = errors.New("string field contains invalid UTF-8")

// appendAction appends a as an element of OrchestratorResponse.actions
// (tag, length, body), reading the case message's size from its cache.
func appendAction(b []byte, a *dtpb.OrchestratorAction) ([]byte, error) {
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	if a == nil {
		return protowire.AppendVarint(b, 0), nil
	}
	ap := partsOf(a)
	if ap.generic {
		b = protowire.AppendVarint(b, uint64(cachedSize.Size(a)))
		return cachedSize.MarshalAppend(b, a)
	}
	unknown := a.ProtoReflect().GetUnknown()
	inner := 0
	n := idSize(a.Id) + len(unknown)
	if ap.num != 0 {
		inner = cachedSize.Size(ap.m)
		n += protowire.SizeTag(ap.num) + protowire.SizeBytes(inner)
	}
	b = protowire.AppendVarint(b, uint64(n))
	if a.Id != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.Id))
	}
	if ap.num != 0 {
		b = protowire.AppendTag(b, ap.num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(inner))
		var err error
		if b, err = cachedSize.MarshalAppend(b, ap.m); err != nil {
			return b, err
		}
	}
	return append(b, unknown...), nil
}

func appendString(b []byte, num protowire.Number, s string) ([]byte, error) {
	if s == "" {
		return b, nil
	}
	if !utf8.ValidString(s) {
		return b, errUTF8
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s), nil
}

// appendMessage appends a message field; m's size is computed here, so the
// envelope's small messages do not depend on size caches.
func appendMessage(b []byte, num protowire.Number, m proto.Message) ([]byte, error) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(proto.Size(m)))
	return cachedSize.MarshalAppend(b, m)
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return append(protowire.AppendTag(b, num, protowire.VarintType), 1)
}

// appendResponse appends r as proto.Marshal would write it. The size
// caches of the actions' case messages must hold their current sizes (the
// planner has just filled them).
//
//nolint:staticcheck // SA1019: the deprecated chunk fields are the protocol.
func appendResponse(b []byte, r *dtpb.OrchestratorResponse) ([]byte, error) {
	var err error
	if b, err = appendString(b, 1, r.InstanceId); err != nil {
		return b, err
	}
	for _, a := range r.Actions {
		if b, err = appendAction(b, a); err != nil {
			return b, err
		}
	}
	if r.CustomStatus != nil {
		if b, err = appendMessage(b, 3, r.CustomStatus); err != nil {
			return b, err
		}
	}
	if b, err = appendString(b, 4, r.CompletionToken); err != nil {
		return b, err
	}
	if r.NumEventsProcessed != nil {
		if b, err = appendMessage(b, 5, r.NumEventsProcessed); err != nil {
			return b, err
		}
	}
	if r.OrchestrationTraceContext != nil {
		if b, err = appendMessage(b, 6, r.OrchestrationTraceContext); err != nil {
			return b, err
		}
	}
	b = appendBool(b, 7, r.RequiresHistory)
	b = appendBool(b, 8, r.IsPartial)
	if r.ChunkIndex != nil {
		if b, err = appendMessage(b, 9, r.ChunkIndex); err != nil {
			return b, err
		}
	}
	return append(b, r.ProtoReflect().GetUnknown()...), nil
}

package chunking

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

// A sidecar that borrows payloads (SidecarConfig.BorrowPayloads) decodes
// each CompleteOrchestratorTask message from one buffer of its own and
// lets the payload strings of the actions (the StringValue inputs,
// results, details, versions and the custom status) alias that buffer
// instead of copying each into a new string, as protobuf-go does. Once the
// completion the message belongs to has been given to OnApplied, or the
// message was not kept (a duplicate, a refusal), the buffer is reused for
// a later message. The envelope's strings (instance id, completion token,
// task names) are copied: they outlive the call as map keys and in
// errors. A message the decoder here does not fully know (a field or wire
// type outside the subset below, a repeated message field, invalid input)
// is decoded by protobuf-go, copying, and its buffer is reused at once.

// recvBuf is the buffer a received message was decoded from.
type recvBuf struct {
	b     []byte
	class int // index into recvPools; -1: not pooled
	// refs counts the holders of b (the call, each handler call's
	// message, a token's buffer, a completion): release returns b to its
	// pool when the last lets go.
	refs atomic.Int32
}

// recvPools hold buffers of 2^(minRecvClass+i) bytes.
var recvPools [28]sync.Pool

// recvReused counts the messages decoded into a buffer an earlier message
// released (a pool hit), for tests to tell that buffers are reused.
var recvReused atomic.Int64

const minRecvClass = 12 // 4 KiB

func getRecvBuf(n int) *recvBuf {
	c := 0
	if n > 1<<minRecvClass {
		c = bits.Len(uint(n-1)) - minRecvClass
	}
	if c >= len(recvPools) {
		return &recvBuf{b: make([]byte, n), class: -1}
	}
	rb, ok := recvPools[c].Get().(*recvBuf)
	if ok {
		rb.b = rb.b[:n]
		recvReused.Add(1)
	} else {
		rb = &recvBuf{b: make([]byte, n, 1<<(minRecvClass+c)), class: c}
	}
	rb.refs.Store(1)
	return rb
}

// held is the memory a kept message of n serialized bytes decoded from
// rb holds: the whole buffer, or n when rb is nil (the message owns its
// payloads).
func (rb *recvBuf) held(n int) int {
	if rb == nil {
		return n
	}
	return max(n, cap(rb.b))
}

// release lets go of one reference to rb; the last makes its buffer
// available to a later message: nothing may read a string decoded from it
// afterwards.
func (rb *recvBuf) release() {
	if rb == nil || rb.class < 0 || rb.refs.Add(-1) > 0 {
		return
	}
	recvPools[rb.class].Put(rb)
}

// borrowedResponse is the decode target of a borrowing sidecar's
// CompleteOrchestratorTask: msg, and the buffer its payloads alias (nil
// when msg owns them).
type borrowedResponse struct {
	msg *dtpb.OrchestratorResponse
	buf *recvBuf
}

// serverCodec is a borrowing sidecar's server codec: grpc-go's proto codec,
// except for a *borrowedResponse.
type serverCodec struct{}

var _ encoding.CodecV2 = serverCodec{}

func (serverCodec) Marshal(v any) (mem.BufferSlice, error) { return protoCodec.Marshal(v) }
func (serverCodec) Name() string                           { return protoCodec.Name() }

func (serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	br, ok := v.(*borrowedResponse)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	rb := getRecvBuf(data.Len())
	data.CopyTo(rb.b)
	if m, ok := decodeResponse(rb.b); ok {
		br.msg, br.buf = m, rb
		return nil
	}
	br.msg = new(dtpb.OrchestratorResponse)
	err := proto.Unmarshal(rb.b, br.msg)
	rb.release()
	return err
}

// alias returns b as a string sharing b's memory.
func alias(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// field reads one field of b: its number, type, value (for a varint, or
// the bytes of a length-delimited field), its raw bytes and the rest of b.
// ok is false for a malformed field.
func field(b []byte) (num protowire.Number, typ protowire.Type, v uint64, val, raw, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, 0, nil, nil, nil, false
	}
	m := protowire.ConsumeFieldValue(num, typ, b[n:])
	if m < 0 {
		return 0, 0, 0, nil, nil, nil, false
	}
	switch typ {
	case protowire.VarintType:
		v, _ = protowire.ConsumeVarint(b[n:])
	case protowire.BytesType:
		val, _ = protowire.ConsumeBytes(b[n:])
	}
	return num, typ, v, val, b[:n+m], b[n+m:], true
}

// mergeOther decodes into m, with protobuf-go (copying), the fields of m
// the decoder here leaves to it (unknown fields too), collected in other
// in the order they came.
func mergeOther(other []byte, m proto.Message) bool {
	return len(other) == 0 || proto.UnmarshalOptions{Merge: true}.Unmarshal(other, m) == nil
}

// decodeResponse decodes b as an OrchestratorResponse whose payload
// strings alias b. Its fields and those of its actions that carry no
// payload are left to protobuf-go; ok is false when b holds what only
// protobuf-go decodes right (a payload message field repeated, which
// merges; invalid input), and the caller must decode all of b with it.
func decodeResponse(b []byte) (m *dtpb.OrchestratorResponse, ok bool) {
	m = new(dtpb.OrchestratorResponse)
	var other []byte
	for len(b) > 0 {
		num, typ, _, val, raw, rest, ok := field(b)
		if !ok {
			return nil, false
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.BytesType:
			if !utf8.Valid(val) {
				return nil, false
			}
			m.InstanceId = string(val)
		case num == 2 && typ == protowire.BytesType:
			a, ok := decodeAction(val)
			if !ok {
				return nil, false
			}
			m.Actions = append(m.Actions, a)
		case num == 3 && typ == protowire.BytesType:
			if !setStringValue(&m.CustomStatus, val) {
				return nil, false
			}
		case num == 4 && typ == protowire.BytesType:
			if !utf8.Valid(val) {
				return nil, false
			}
			m.CompletionToken = string(val)
		default:
			other = append(other, raw...)
		}
	}
	return m, mergeOther(other, m)
}

// The field numbers of OrchestratorAction's oneof (orchestratorActionType:
// scheduleTask 2 … rewindOrchestration 9 in dtpb), checked against
// dtpb's descriptor by TestActionOneofRange. A case is one of these; any
// other field (id, an unknown one) is merged in order around it.
const actionCaseFirst, actionCaseLast = 2, 9

// decodeAction decodes an action; one of a case it does not know, or a
// second case, is decoded whole by protobuf-go.
func decodeAction(b []byte) (*dtpb.OrchestratorAction, bool) {
	a := new(dtpb.OrchestratorAction)
	whole := b
	var other []byte
	for len(b) > 0 {
		num, typ, v, val, raw, rest, ok := field(b)
		if !ok {
			return nil, false
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.VarintType:
			a.Id = int32(v)
		case (num == 2 || num == 6) && typ == protowire.BytesType && a.OrchestratorActionType == nil:
			if num == 2 {
				t, ok := decodeScheduleTask(val)
				if !ok {
					return nil, false
				}
				a.OrchestratorActionType = &dtpb.OrchestratorAction_ScheduleTask{ScheduleTask: t}
			} else {
				c, ok := decodeCompleteOrchestration(val)
				if !ok {
					return nil, false
				}
				a.OrchestratorActionType = &dtpb.OrchestratorAction_CompleteOrchestration{CompleteOrchestration: c}
			}
		case num >= actionCaseFirst && num <= actionCaseLast:
			// Another case, or a second one: protobuf-go's.
			a = new(dtpb.OrchestratorAction)
			return a, proto.Unmarshal(whole, a) == nil
		default:
			other = append(other, raw...)
		}
	}
	return a, mergeOther(other, a)
}

func decodeScheduleTask(b []byte) (*dtpb.ScheduleTaskAction, bool) {
	t := new(dtpb.ScheduleTaskAction)
	var other []byte
	for len(b) > 0 {
		num, typ, _, val, raw, rest, ok := field(b)
		if !ok {
			return nil, false
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.BytesType:
			if !utf8.Valid(val) {
				return nil, false
			}
			t.Name = string(val)
		case num == 2 && typ == protowire.BytesType:
			if !setStringValue(&t.Version, val) {
				return nil, false
			}
		case num == 3 && typ == protowire.BytesType:
			if !setStringValue(&t.Input, val) {
				return nil, false
			}
		default:
			other = append(other, raw...)
		}
	}
	return t, mergeOther(other, t)
}

func decodeCompleteOrchestration(b []byte) (*dtpb.CompleteOrchestrationAction, bool) {
	c := new(dtpb.CompleteOrchestrationAction)
	var other []byte
	for len(b) > 0 {
		num, typ, v, val, raw, rest, ok := field(b)
		if !ok {
			return nil, false
		}
		b = rest
		var sv **wrapperspb.StringValue
		switch {
		case num == 1 && typ == protowire.VarintType:
			c.OrchestrationStatus = dtpb.OrchestrationStatus(int32(v))
			continue
		case num == 2 && typ == protowire.BytesType:
			sv = &c.Result
		case num == 3 && typ == protowire.BytesType:
			sv = &c.Details
		case num == 4 && typ == protowire.BytesType:
			sv = &c.NewVersion
		default:
			other = append(other, raw...)
			continue
		}
		if !setStringValue(sv, val) {
			return nil, false
		}
	}
	return c, mergeOther(other, c)
}

// setStringValue decodes b into *dst, its value aliasing b. It reports
// false when *dst is already set (a second occurrence is protobuf-go's to
// merge) or b is not a StringValue this decoder takes.
func setStringValue(dst **wrapperspb.StringValue, b []byte) bool {
	if *dst != nil {
		return false
	}
	v, ok := decodeStringValue(b)
	*dst = v
	return ok
}

// decodeStringValue decodes a StringValue whose value aliases b.
func decodeStringValue(b []byte) (*wrapperspb.StringValue, bool) {
	s := new(wrapperspb.StringValue)
	for len(b) > 0 {
		num, typ, _, val, _, rest, ok := field(b)
		if !ok || num != 1 || typ != protowire.BytesType || !utf8.Valid(val) {
			return nil, false
		}
		b = rest
		s.Value = alias(val)
	}
	return s, true
}

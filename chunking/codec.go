package chunking

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

// Encoded is a message already serialized by Encode. Passed as the request
// of a call that uses Codec, its bytes go to the wire as they are: gRPC
// neither sizes nor marshals the message again.
type Encoded struct {
	// Bytes is the serialized message; it must not be modified while a
	// call that uses it is in flight.
	Bytes []byte
}

// Encode serializes chunk into a buffer of exactly size bytes, where size
// is the planner's size for it (Plan.Sizes). The bytes are those of
// proto.Marshal. Every action of a cached plan was sized once by the
// planner and the size of its case message (ScheduleTask, CreateTimer, …)
// is still in that message's size cache, so the encoder reuses those sizes
// (proto.MarshalOptions.UseCachedSize) instead of walking the payloads
// again: the chunk and its actions must not change between Plan and
// Encode. A size < 0 means unknown: the chunk is then marshalled normally.
// A mismatch between size and the encoded length is reported as an error,
// since it means the planner's accounting is wrong.
func Encode(chunk *dtpb.OrchestratorResponse, size int) (Encoded, error) {
	return encodeInto(nil, chunk, size)
}

// encodeInto is Encode into buf's capacity when it holds size bytes (a
// new buffer otherwise).
func encodeInto(buf []byte, chunk *dtpb.OrchestratorResponse, size int) (Encoded, error) {
	if size < 0 {
		b, err := proto.MarshalOptions{}.MarshalAppend(buf[:0], chunk)
		if err != nil {
			return Encoded{}, fmt.Errorf("chunking: encode: %w", err)
		}
		return Encoded{Bytes: b}, nil
	}
	if cap(buf) < size {
		buf = make([]byte, 0, size)
	}
	b, err := appendResponse(buf[:0], chunk)
	if err != nil {
		return Encoded{}, fmt.Errorf("chunking: encode: %w", err)
	}
	if len(b) != size {
		return Encoded{}, fmt.Errorf("chunking: encode: planned %d bytes, encoded %d", size, len(b))
	}
	return Encoded{Bytes: b}, nil
}

// Codec is the gRPC codec of the sender: requests of type Encoded (or
// *Encoded) are written as they are; every other message, and every reply,
// goes through grpc-go's proto codec. Its name is "proto", so the peer sees
// an ordinary application/grpc+proto call. Use it per call with
// grpc.ForceCodecV2(Codec{}). Codec is stateless and safe for concurrent use.
type Codec struct{}

var protoCodec = encoding.GetCodecV2(protocodec.Name)

// Marshal implements encoding.CodecV2.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	switch e := v.(type) {
	case Encoded:
		return mem.BufferSlice{mem.SliceBuffer(e.Bytes)}, nil
	case *Encoded:
		return mem.BufferSlice{mem.SliceBuffer(e.Bytes)}, nil
	}
	return protoCodec.Marshal(v)
}

// Unmarshal implements encoding.CodecV2.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error { return protoCodec.Unmarshal(data, v) }

// Name implements encoding.CodecV2; it is "proto".
func (Codec) Name() string { return protocodec.Name }

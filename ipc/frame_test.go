package ipc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"google.golang.org/protobuf/proto"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
)

func samplePackets() []proto.Message {
	return []proto.Message{
		&ipcpb.TaskConfiguration{Id: 7, TaskName: "Csc", Parameters: map[string]string{"Sources": "a.cs;b.cs"},
			Environment: map[string]string{"PATH": "/usr/bin"}, Payload: bytes.Repeat([]byte{0xab}, 300)},
		&ipcpb.TaskResult{Id: 7, Status: ipcpb.Status_STATUS_SUCCESS, Outputs: map[string]string{"x": "y"}},
		&ipcpb.LogMessage{TaskId: 7, Level: ipcpb.Level_LEVEL_WARNING, Text: "careful"},
		&ipcpb.Shutdown{Reason: ipcpb.Shutdown_REASON_ERROR, Error: "boom"},
		&ipcpb.Shutdown{}, // empty body
	}
}

func TestFrameRoundTrip(t *testing.T) {
	for _, m := range samplePackets() {
		b, err := AppendFrame(nil, m, DefaultMaxPacketSize)
		if err != nil {
			t.Fatalf("AppendFrame(%T): %v", m, err)
		}
		if got := int(binary.LittleEndian.Uint32(b[1:5])); got != len(b)-HeaderSize {
			t.Fatalf("header length = %d, want %d", got, len(b)-HeaderSize)
		}
		got, err := DecodePacket(b, DefaultMaxPacketSize)
		if err != nil {
			t.Fatalf("DecodePacket(%T): %v", m, err)
		}
		if !proto.Equal(got, m) {
			t.Errorf("round trip of %T: got %v, want %v", m, got, m)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	good, err := AppendFrame(nil, &ipcpb.LogMessage{Text: "hello"}, DefaultMaxPacketSize)
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(typ byte, n uint32) []byte {
		return binary.LittleEndian.AppendUint32([]byte{typ}, n)
	}
	tests := []struct {
		name  string
		in    []byte
		check func(error) bool
	}{
		{"empty", nil, func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		{"short header", good[:3], func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		{"truncated body", good[:len(good)-1], func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		{"trailing bytes", append(append([]byte(nil), good...), 0, 0), func(err error) bool {
			var te *TrailingBytesError
			return errors.As(err, &te) && te.N == 2
		}},
		{"type zero", hdr(0, 0), func(err error) bool {
			var ue *UnknownTypeError
			return errors.As(err, &ue) && ue.Type == 0
		}},
		{"type 5", hdr(5, 0), func(err error) bool { var ue *UnknownTypeError; return errors.As(err, &ue) }},
		{"reserved bit 7", hdr(0x81, 0), func(err error) bool { var ue *UnknownTypeError; return errors.As(err, &ue) }},
		{"too large", hdr(1, 1025), func(err error) bool {
			var se *PacketSizeError
			return errors.Is(err, ErrPacketTooLarge) && errors.As(err, &se) && se.Size == 1025 && se.Limit == 1024
		}},
		{"negative as int32", hdr(1, 0x80000000), func(err error) bool { return errors.Is(err, ErrPacketTooLarge) }},
		{"bad protobuf", append(hdr(3, 2), 0xff, 0xff), func(err error) bool { var de *DecodeError; return errors.As(err, &de) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodePacket(tt.in, 1024)
			if err == nil || !tt.check(err) {
				t.Fatalf("DecodePacket = %v (%T), want the typed error of %q", err, err, tt.name)
			}
		})
	}
}

func TestSendSideSizeLimit(t *testing.T) {
	_, err := AppendFrame(nil, &ipcpb.TaskConfiguration{Payload: make([]byte, 2000)}, 1000)
	var se *PacketSizeError
	if !errors.As(err, &se) || se.Type != TypeTaskConfiguration || se.Limit != 1000 {
		t.Fatalf("AppendFrame over limit = %v, want *PacketSizeError for task_configuration", err)
	}
}

func streamOf(t *testing.T, msgs []proto.Message) []byte {
	t.Helper()
	var b []byte
	for _, m := range msgs {
		var err error
		if b, err = AppendFrame(b, m, DefaultMaxPacketSize); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func TestReaderOneByteAtATime(t *testing.T) {
	msgs := samplePackets()
	r := NewReader(iotest.OneByteReader(bytes.NewReader(streamOf(t, msgs))), DefaultMaxPacketSize)
	for i, want := range msgs {
		got, err := r.ReadPacket()
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("packet %d: got %v, want %v", i, got, want)
		}
	}
	if _, err := r.ReadPacket(); err != io.EOF {
		t.Fatalf("after last packet: got %v, want io.EOF", err)
	}
}

func TestReaderTruncatedAtEveryOffset(t *testing.T) {
	msgs := samplePackets()[:2]
	stream := streamOf(t, msgs)
	first, _ := AppendFrame(nil, msgs[0], DefaultMaxPacketSize)
	for cut := 0; cut < len(stream); cut++ {
		r := NewReader(iotest.OneByteReader(bytes.NewReader(stream[:cut])), DefaultMaxPacketSize)
		var err error
		n := 0
		for err == nil {
			_, err = r.ReadPacket()
			if err == nil {
				n++
			}
		}
		wantEOF := cut == 0 || cut == len(first)
		switch {
		case wantEOF && err != io.EOF:
			t.Fatalf("cut at %d: got %v, want io.EOF", cut, err)
		case !wantEOF && !errors.Is(err, io.ErrUnexpectedEOF):
			t.Fatalf("cut at %d: got %v, want io.ErrUnexpectedEOF", cut, err)
		}
		if want := map[bool]int{true: 1, false: 0}[cut >= len(first)]; n != want {
			t.Fatalf("cut at %d: decoded %d packets, want %d", cut, n, want)
		}
	}
}

func TestReaderLyingLengthAllocatesOnlyWhatArrives(t *testing.T) {
	hdr := binary.LittleEndian.AppendUint32([]byte{byte(TypeTaskConfiguration)}, 200<<20)
	r := NewReader(bytes.NewReader(append(hdr, make([]byte, 10)...)), DefaultMaxPacketSize)
	_, err := r.ReadPacket()
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
	}
	if cap(r.buf) > readChunk {
		t.Fatalf("reader buffer grew to %d bytes for 10 bytes received, want ≤ %d", cap(r.buf), readChunk)
	}
}

func FuzzDecode(f *testing.F) {
	// More seeds live in testdata/fuzz/FuzzDecode.
	for _, m := range samplePackets() {
		b, _ := AppendFrame(nil, m, DefaultMaxPacketSize)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		const limit = 1 << 20
		m, err := DecodePacket(b, limit)
		if err != nil {
			if m != nil {
				t.Fatalf("DecodePacket returned a packet and error %v", err)
			}
			return
		}
		re, err := AppendFrame(nil, m, limit)
		if err != nil {
			t.Fatalf("re-encode decoded %T: %v", m, err)
		}
		m2, err := DecodePacket(re, limit)
		if err != nil {
			t.Fatalf("decode re-encoded %T: %v", m, err)
		}
		if !proto.Equal(m, m2) {
			t.Fatalf("re-encoded packet differs: %v vs %v", m, m2)
		}
		// The stream reader must agree with the buffer decoder.
		r := NewReader(iotest.OneByteReader(bytes.NewReader(b)), limit)
		m3, err := r.ReadPacket()
		if err != nil || !proto.Equal(m, m3) {
			t.Fatalf("Reader disagrees with DecodePacket: %v, %v", m3, err)
		}
	})
}

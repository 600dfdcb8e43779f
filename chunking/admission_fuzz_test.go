package chunking

import (
	"encoding/binary"
	"net"
	"testing"
)

// h2Frame is an HTTP/2 frame header and payload, as a client writes them.
func h2Frame(typ, flags byte, stream uint32, payload []byte) []byte {
	b := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[5:], stream)
	return append(b, payload...)
}

// FuzzAdmitConnScan feeds the admission's frame scanner what an
// unauthenticated client controls: any bytes after the preface, split
// into reads of any size. It must never panic, never keep more stream
// states than streams were opened, and never hold a negative reservation.
func FuzzAdmitConnScan(f *testing.F) {
	msg := func(n uint32) []byte { p := make([]byte, 5); binary.BigEndian.PutUint32(p[1:], n); return p }
	seed := append([]byte(h2ClientPreface), h2Frame(h2FrameHeaders, 0x4, 1, []byte{0x82})...)
	seed = append(seed, h2Frame(h2FrameData, 0, 1, msg(1<<20))...)
	seed = append(seed, h2Frame(h2FrameData, h2FlagPadded, 1, append([]byte{3}, append(msg(100), 0, 0, 0)...))...)
	seed = append(seed, h2Frame(h2FrameRSTStream, 0, 1, []byte{0, 0, 0, 8})...)
	f.Add(seed, uint8(7))
	f.Add(append([]byte(h2ClientPreface), h2Frame(h2FrameData, h2FlagPadded, 3, []byte{255})...), uint8(1))
	f.Add([]byte(h2ClientPreface[:10]), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		adm := newAdmission(4<<20, 1<<20)
		c1, c2 := net.Pipe()
		defer c1.Close()
		defer c2.Close()
		c := newAdmitConn(c1, adm)
		step := int(chunk)%64 + 1
		for len(data) > 0 {
			k := min(step, len(data))
			c.scanIn(data[:k])
			data = data[k:]
		}
		c.mu.Lock()
		streams := len(c.streams)
		c.mu.Unlock()
		if streams > int(c.lastOpen) {
			t.Fatalf("%d stream states kept, more than the highest stream id opened, %d", streams, c.lastOpen)
		}
		adm.mu.Lock()
		defer adm.mu.Unlock()
		if adm.reserved < 0 {
			t.Fatalf("reserved %d bytes, want ≥ 0", adm.reserved)
		}
	})
}

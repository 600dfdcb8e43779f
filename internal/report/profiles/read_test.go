package profiles

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// repeated is n copies of field num holding the message msg.
func repeated(num protowire.Number, msg []byte, n int) []byte {
	var one []byte
	one = protowire.AppendTag(one, num, protowire.BytesType)
	one = protowire.AppendBytes(one, msg)
	return bytes.Repeat(one, n)
}

// cpuProfile is a valid profile with one sample type (cpu nanoseconds).
func cpuProfile() []byte {
	var b []byte
	// sample_type {type: 1, unit: 2}; string_table "", "cpu", "nanoseconds"
	var vt []byte
	vt = protowire.AppendTag(vt, 1, protowire.VarintType)
	vt = protowire.AppendVarint(vt, 1)
	vt = protowire.AppendTag(vt, 2, protowire.VarintType)
	vt = protowire.AppendVarint(vt, 2)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, vt)
	for _, s := range []string{"", "cpu", "nanoseconds"} {
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendString(b, s)
	}
	return b
}

func TestReadBounds(t *testing.T) {
	sample := func(locs, values int) []byte {
		var m []byte
		var packed []byte
		for i := 0; i < locs; i++ {
			packed = protowire.AppendVarint(packed, 1)
		}
		m = protowire.AppendTag(m, 1, protowire.BytesType)
		m = protowire.AppendBytes(m, packed)
		for i := 0; i < values; i++ {
			m = protowire.AppendTag(m, 2, protowire.VarintType)
			m = protowire.AppendVarint(m, 7)
		}
		return m
	}
	var loc []byte
	loc = protowire.AppendTag(loc, 1, protowire.VarintType)
	loc = protowire.AppendVarint(loc, 1)
	withLines := func(n int) []byte { return append(append([]byte(nil), loc...), repeated(4, nil, n)...) }
	oldS, oldL, oldF := sampleLimit, locationLimit, frameLimit
	sampleLimit, locationLimit, frameLimit = 100, 50, 1000
	defer func() { sampleLimit, locationLimit, frameLimit = oldS, oldL, oldF }()

	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"samples", "more than 100 samples (the MaxSamples bound", gzipped(t, append(cpuProfile(), repeated(2, nil, 101)...))},
		{"samples plain", "MaxSamples", append(cpuProfile(), repeated(2, nil, 101)...)},
		{"locations", "more than 50 locations (the MaxLocations bound", gzipped(t, append(cpuProfile(), repeated(4, loc, 51)...))},
		{"strings", "more than 50 strings", gzipped(t, append(cpuProfile(), repeated(6, []byte("x"), 51)...))},
		{"frames", "more than 1000 stack frames, values and labels (the MaxFrames bound", gzipped(t, append(cpuProfile(), repeated(2, sample(600, 1), 2)...))},
		{"lines", "MaxFrames", gzipped(t, append(cpuProfile(), repeated(4, withLines(1001), 1)...))},
		{"nested gzip", "nested compression is refused", gzipped(t, gzipped(t, append(cpuProfile(), repeated(2, nil, 10)...)))},
		{"truncated", "unexpected EOF", append(cpuProfile(), protowire.AppendTag(nil, 2, protowire.BytesType)[0], 9, 1)},
		{"overrun", "overruns", append(cpuProfile(), repeated(2, []byte{0x12, 0x05, 1}, 1)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, CPUFile), tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Analyze(dir, false, 5)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), CPUFile) {
				t.Errorf("got %v, want an error naming %s and containing %q", err, CPUFile, tc.want)
			}
		})
	}

	// Within the bounds: read, gzipped or not.
	ok := append(cpuProfile(), repeated(2, sample(3, 1), 100)...)
	ok = append(ok, repeated(4, withLines(2), 50)...)
	for name, data := range map[string][]byte{"plain": ok, "gzip": gzipped(t, ok)} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, CPUFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Analyze(dir, false, 5); err != nil {
			t.Errorf("%s profile within the bounds: %v", name, err)
		}
	}
}

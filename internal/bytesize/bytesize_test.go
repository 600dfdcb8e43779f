package bytesize

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int
		wantErr string // substring
	}{
		{"0", 0, ""},
		{"6000", 6000, ""},
		{"6000B", 6000, ""},
		{"46KB", 46_000, ""},
		{"46 KB", 46_000, ""},
		{"1.5MB", 1_500_000, ""},
		{"4.5MB", 4_500_000, ""},
		{"2GB", 2_000_000_000, ""},
		{"128KiB", 131_072, ""},
		{"2MiB", 2 << 20, ""},
		{"1.5KiB", 1536, ""},
		{"1.5MiB", 3 << 19, ""},
		{"1GiB", 1 << 30, ""},
		{"8388608", 8 << 20, ""},
		{"", 0, "want a whole number of bytes"},
		{"-5", 0, "negative"},
		{"-5KB", 0, "negative"},
		{"46QB", 0, `invalid size "46QB" (want a whole number of bytes, or a number with unit B, KB, MB, GB, KiB, MiB, GiB)`},
		{"46kb", 0, "want a whole number"},
		{"KB", 0, "want a whole number"},
		{"1.5", 0, "want a whole number"},
		{"1.5B", 0, "not a whole number of bytes"},
		{"1.0001KB", 0, "not a whole number of bytes"},
		{"1e6", 0, "want a whole number"},
		{"0x10", 0, "want a whole number"},
		{"+5", 0, "want a whole number"},
		{" 5", 0, "want a whole number"},
		{"5 ", 0, "want a whole number"},
		{"5  KB", 0, "want a whole number"},
		{"1.KB", 0, "want a whole number"},
		{"9223372036854775807", math.MaxInt, ""},
		{"9223372036854775808", 0, "larger than 9223372036854775807 bytes"},
		{"99999999999GB", 0, "larger than"},
		{strings.Repeat("9", 65), 0, "longer than 64 characters"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Parse(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q): got %d, %v, want error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q): got %d, %v, want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		in   int
		want string
	}{
		{0, "0B"},
		{1, "1B"},
		{256, "256B"},
		{999, "999B"},
		{1000, "1KB"},
		{1024, "1KiB"},
		{1536, "1.5KiB"},
		{6000, "6KB"},
		{46_000, "46KB"},
		{46_001, "46001B"},
		{131_072, "128KiB"},
		{1_500_000, "1.5MB"},
		{4_500_000, "4.5MB"},
		{4_089_446, "4089446B"},
		{2 << 20, "2MiB"},
		{1_024_000, "1000KiB"},
		{64 << 20, "64MiB"},
		{1 << 30, "1GiB"},
		{3_000_000_000, "3GB"},
		{-5, "-5B"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := Format(tc.in); got != tc.want {
				t.Fatalf("Format(%d): got %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestFormatRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ns := []int{0, 1, 1000, 1024, 1 << 40, math.MaxInt, math.MaxInt - 1}
	for range 2000 {
		ns = append(ns, r.IntN(1<<20), r.IntN(1<<10)*1000, r.IntN(1<<10)<<10, r.IntN(1<<12)*100_000, int(r.Uint64()>>1))
	}
	for _, n := range ns {
		s := Format(n)
		got, err := Parse(s)
		if err != nil || got != n {
			t.Fatalf("Parse(Format(%d) = %q): got %d, %v, want %d", n, s, got, err, n)
		}
	}
}

// Package bytesize is amdahl's one grammar of byte sizes, shared by scenario
// files, settings (ipc.buffer, chunking.max_chunk_bytes) and listings.
//
// A size is a whole number of bytes ("6000", "6000B") or a decimal number
// with a unit, where KB, MB and GB are powers of 1000 and KiB, MiB and GiB
// powers of 1024 ("46KB" = 46000, "1.5MB" = 1500000, "128KiB" = 131072,
// "1.5MiB" = 1572864). Format writes sizes that Parse reads back.
package bytesize

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
)

// units are the units of sizes, in the order Format tries them: larger
// units first, and at equal magnitude the binary unit first, since payload
// sizes are usually powers of two.
var units = []struct {
	name string
	mult int
}{
	{"GiB", 1 << 30}, {"GB", 1e9},
	{"MiB", 1 << 20}, {"MB", 1e6},
	{"KiB", 1 << 10}, {"KB", 1e3},
	{"B", 1},
}

// Want describes the grammar, for messages: "a whole number of bytes, or a
// number with unit B, KB, MB, GB, KiB, MiB, GiB".
const Want = "a whole number of bytes, or a number with unit B, KB, MB, GB, KiB, MiB, GiB"

// Parse parses a byte size: a whole number of bytes ("6000", "6000B") or a
// decimal number with a unit, where KB, MB and GB are powers of 1000 and
// KiB, MiB and GiB powers of 1024 ("46KB" = 46000, "1.5MB" = 1500000,
// "128KiB" = 131072). One space may separate the number and the unit. The
// result must be a whole number of bytes that fits in an int; negative sizes
// are rejected. The error quotes s and says why: `invalid size "46QB" (want
// a whole number of bytes, or …)`.
func Parse(s string) (int, error) {
	bad := func(why string) (int, error) {
		return 0, fmt.Errorf("invalid size %q (%s)", s, why)
	}
	if len(s) > 64 {
		return bad("longer than 64 characters")
	}
	num := strings.TrimRightFunc(s, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' })
	unit := s[len(num):]
	if unit != "" {
		num = strings.TrimSuffix(num, " ")
	}
	if strings.HasPrefix(num, "-") {
		return bad("negative")
	}
	if !number.MatchString(num) {
		return bad("want " + Want)
	}
	mult := int64(0)
	for _, u := range units {
		if u.name == unit {
			mult = int64(u.mult)
		}
	}
	switch {
	case unit == "" && !strings.Contains(num, "."):
		mult = 1
	case mult == 0:
		return bad("want " + Want)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return bad("want " + Want)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return bad("not a whole number of bytes")
	}
	n := r.Num()
	if !n.IsInt64() || n.Int64() > math.MaxInt {
		return bad(fmt.Sprintf("larger than %d bytes", math.MaxInt))
	}
	return int(n.Int64()), nil
}

var number = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// Format formats n bytes for listings, in the largest unit (GiB, GB, MiB,
// MB, KiB, KB) in which n is at least 1 and exact with at most one decimal
// digit ("128KiB", "1.5MB", "46KB"), otherwise in bytes ("46001B"). The
// result of a non-negative n parses back to n with Parse.
func Format(n int) string {
	if n > 0 {
		for _, u := range units { // B, last, takes any n not taken before
			// n×10 is a multiple of u, computed without overflow.
			if n >= u.mult && n%(u.mult/gcd(u.mult, 10)) == 0 {
				whole, tenths := n/u.mult, (n%u.mult)*10/u.mult
				if tenths == 0 {
					return strconv.Itoa(whole) + u.name
				}
				return strconv.Itoa(whole) + "." + strconv.Itoa(tenths) + u.name
			}
		}
	}
	return strconv.Itoa(n) + "B"
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

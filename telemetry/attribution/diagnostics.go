package attribution

import (
	"math"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// Diagnostics counts what the input held besides clean trees. Every count
// is shown in reports: none of it is dropped silently.
type Diagnostics struct {
	Spans int `json:"spans"`
	// Duplicates are spans seen again with the same trace and span id (an
	// export retried, a file concatenated twice); the first copy is kept.
	Duplicates int `json:"duplicates"`
	// Orphans are spans whose parent is not in the input; Attached of them
	// were attached to the unit of their trace (its root was known).
	Orphans  int `json:"orphans"`
	Attached int `json:"orphans_attached"`
	// Cycles are spans whose chain of parents loops; TooDeep spans nested
	// deeper than MaxTreeDepth. Both are left out.
	Cycles  int `json:"cycles"`
	TooDeep int `json:"too_deep"`
	// Nested are amdahl.work spans inside another unit: counted as
	// phase-less children of the outer unit, not as units.
	Nested int `json:"nested_roots"`
	// Unrooted are spans of traces that hold no amdahl.work root.
	Unrooted int `json:"unrooted"`
	// Placed counts far-side groups moved by causal placement (clock skew
	// between processes), Clipped near-side spans cut at a far-side group,
	// Unplaced parents with several round trips, walked as recorded.
	Placed   int `json:"placed"`
	Clipped  int `json:"clipped"`
	Unplaced int `json:"unplaced"`
	// Outside counts spans that ran (partly) outside their parent's
	// window once placed, cut to it (a cut span's subtree counts once):
	// time the critical path does not see. A few come from races and
	// clocks (an in-process gRPC server span that ends after its client's,
	// the wall clock stepped, a far-side group longer than its window, an
	// orphan attached to its unit); a count near the number of units says
	// a span is started in the wrong place (under a parent that has ended).
	Outside int `json:"outside_parent"`
	// Spans with hostile timestamps, left out (a unit whose root is one,
	// whole: BadUnits): NoTime a missing or zero start or end, Reversed
	// an end before the start, TooLong longer than MaxSpanDuration,
	// Beyond a time from 2262 on (int64 nanoseconds end in April 2262).
	NoTime   int `json:"bad_missing"`
	Reversed int `json:"bad_reversed"`
	TooLong  int `json:"bad_too_long"`
	Beyond   int `json:"bad_beyond_2262"`
	BadUnits int `json:"units_left_out"`
	// RootMissing counts traces whose root span is not in the input
	// (UnitsRoots): their topmost span stands in (Work.StandIn).
	RootMissing int `json:"traces_root_missing"`
	// Overflow counts units left out because a sum would overflow.
	Overflow int `json:"units_overflow"`
	// Folded counts the spans of rows folded past MaxRows (into rows of
	// OverflowComponent).
	Folded int `json:"spans_folded"`
}

// bad returns the spans left out for their timestamps.
func (d *Diagnostics) bad() int { return d.NoTime + d.Reversed + d.TooLong + d.Beyond }

// Add adds o's counts to d.
func (d *Diagnostics) Add(o Diagnostics) {
	d.Spans += o.Spans
	d.Duplicates += o.Duplicates
	d.Orphans += o.Orphans
	d.Attached += o.Attached
	d.Cycles += o.Cycles
	d.TooDeep += o.TooDeep
	d.Nested += o.Nested
	d.Unrooted += o.Unrooted
	d.Placed += o.Placed
	d.Clipped += o.Clipped
	d.Unplaced += o.Unplaced
	d.Outside += o.Outside
	d.NoTime += o.NoTime
	d.Reversed += o.Reversed
	d.TooLong += o.TooLong
	d.Beyond += o.Beyond
	d.BadUnits += o.BadUnits
	d.RootMissing += o.RootMissing
	d.Overflow += o.Overflow
	d.Folded += o.Folded
}

// satAdd is a + b for non-negative durations, saturating at the largest
// Duration (which Accumulator.Add refuses as an overflow).
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// DefaultMaxSpanDuration is the longest span taken by default; longer
// ones are left out (Diagnostics.TooLong).
const DefaultMaxSpanDuration = 24 * time.Hour

// MaxMaxSpanDuration bounds MaxSpanDuration: placement shifts a span by
// at most about its parent's length, and times stay within int64
// nanoseconds (maxTime is 100 days before their end).
const MaxMaxSpanDuration = 1000 * time.Hour

// maxTime is 2262-01-01 in Unix nanoseconds: later times are refused.
var maxTime = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// Kinds of hostile timestamps (badTime).
const (
	timeOK uint8 = iota
	timeNone
	timeReversed
	timeTooLong
	timeBeyond
)

// badTime says what is wrong with s's times, or timeOK.
func badTime(s *spans.Span, bound int64) uint8 {
	switch {
	case s.Beyond() || s.Start >= maxTime || s.End >= maxTime:
		return timeBeyond
	case s.Start <= 0 || s.End <= 0:
		return timeNone
	case s.End < s.Start:
		return timeReversed
	case s.End-s.Start > bound:
		return timeTooLong
	}
	return timeOK
}

func (d *Diagnostics) countBad(kind uint8) {
	switch kind {
	case timeNone:
		d.NoTime++
	case timeReversed:
		d.Reversed++
	case timeTooLong:
		d.TooLong++
	case timeBeyond:
		d.Beyond++
	}
}

package attribution

import (
	"fmt"
	"time"
)

// The cells of the text tables, exported so that other views of the same
// figures (report.html) print exactly what the tables print.

// FormatPercent is a share as the tables print it: "12.3%".
func FormatPercent(f float64) string { return pct(f) }

// FormatSignedPercent is a gain as the tables print it: "-1.2%", "-" for
// NaN, never "-0.0%".
func FormatSignedPercent(f float64) string { return pctSigned(f) }

// FormatInterval is an interval as the A/B table prints it: "12.3% ±1.2",
// "-" when it is not defined.
func FormatInterval(i Interval) string {
	if !i.Defined() {
		return "-"
	}
	return fmt.Sprintf("%s ±%.1f", pctSigned(i.Value), 100*i.HalfWidth())
}

// RoundDuration rounds d as the tables print durations: to 1 ms from 1 s,
// to 10 µs from 1 ms, else to 100 ns.
func RoundDuration(d time.Duration) time.Duration { return round(d) }

// FormatSignedDuration is a change of time as the tables print it:
// "+1.2ms", "-300ns".
func FormatSignedDuration(d time.Duration) string { return signedDur(d) }

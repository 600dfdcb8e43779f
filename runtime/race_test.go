//go:build race

package runtime

// raceEnabled: the race detector slows units about tenfold; tests that
// run many units run fewer under it.
const raceEnabled = true

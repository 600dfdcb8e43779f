package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// envTestMain makes the test binary act as the amdahl binary (the
// helper-process pattern): amdahl run spawns os.Executable() as
// "<exe> taskhost", which here is this test binary, with this variable
// inherited.
const envTestMain = "AMDAHL_CMD_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envTestMain) == "1" {
		os.Exit(mainArgs(os.Args[1:]))
	}
	if os.Getenv(envPeakRSS) == "1" {
		os.Exit(peakRSSMain(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

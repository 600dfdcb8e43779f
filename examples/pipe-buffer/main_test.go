package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// The test binary is both parent and child, like the program.
func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(realMain(context.Background(), nil, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// TestExample runs a small count: all four cases print and every message
// round-tripped with the environment it was sent with. No timings are
// checked; they are measurements, not contracts.
func TestExample(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"--messages", "4", "--env-bytes", "256KiB", "--execute", "1ms"}
	if code := realMain(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	text := out.String()
	if want := "4 task configurations per case, environment 262144 bytes each"; !strings.Contains(text, want) {
		t.Errorf("output lacks %q:\n%s", want, text)
	}
	for _, c := range []struct{ buffer, mode string }{{"128KiB", "sync"}, {"128KiB", "async"}, {"1MiB", "sync"}, {"1MiB", "async"}} {
		re := regexp.MustCompile(`(?m)^` + c.buffer + ` +\S+ +` + c.mode + ` +[0-9.]+ ± [0-9.]+ ms +[0-9.]+ ms +[0-9.]+ ± [0-9.]+ ms +4/4$`)
		if !re.MatchString(text) {
			t.Errorf("no line for buffer %s, %s with 4/4 round-tripped:\n%s", c.buffer, c.mode, text)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--messages", "0"}, {"--env-bytes", "64MiB1"}, {"--env-bytes", "1"}, {"--execute", "2s"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := realMain(context.Background(), args, &out, &errb); code != 2 {
				t.Errorf("got exit %d, want 2 (%s)", code, errb.String())
			}
		})
	}
}

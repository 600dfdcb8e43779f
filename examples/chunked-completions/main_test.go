package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestExample runs the program with its in-process sidecar: both planners
// make chunks within the limit, the sidecar reassembles the completion
// sent, the same for both, and legacy computes more sizings than cached.
func TestExample(t *testing.T) {
	const limit = 1 << 20
	var out, errb bytes.Buffer
	if code := realMain(context.Background(), []string{"--actions", "24", "--max-chunk-bytes", "1MiB"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	text := out.String()
	for _, want := range []string{
		"planner legacy: ", "planner cached: ",
		"legacy and cached: the sidecar reassembled the same completion: true",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if got := strings.Count(text, "sidecar reassembled 24 actions from "); got != 2 {
		t.Errorf("got %d reassembled completions of 24 actions, want 2:\n%s", got, text)
	}
	if got := strings.Count(text, "same as sent: true"); got != 2 {
		t.Errorf("got %d completions the same as sent, want 2:\n%s", got, text)
	}

	chunks := regexp.MustCompile(`chunk \d+: +(\d+) actions, +(\d+) bytes`).FindAllStringSubmatch(text, -1)
	if len(chunks) < 4 {
		t.Fatalf("got %d chunk lines, want at least 2 per planner:\n%s", len(chunks), text)
	}
	actions := 0
	for _, c := range chunks {
		n, _ := strconv.Atoi(c[2])
		if n > limit {
			t.Errorf("%s: got %d bytes, want at most %d", c[0], n, limit)
		}
		a, _ := strconv.Atoi(c[1])
		actions += a
	}
	if actions != 2*24 {
		t.Errorf("chunks carry %d actions in all, want %d (24 per planner)", actions, 2*24)
	}

	// The plan's counts and the counter's agree, and legacy sized more.
	sz := regexp.MustCompile(`sizings: (\d+) action \+ (\d+) response \(plan\); counter amdahl.chunking.sizing.computations: action=(\d+) response=(\d+)`).FindAllStringSubmatch(text, -1)
	if len(sz) != 2 {
		t.Fatalf("got %d sizing lines, want 2:\n%s", len(sz), text)
	}
	var total [2]int
	for i, m := range sz {
		if m[1] != m[3] || m[2] != m[4] {
			t.Errorf("%s: the plan's counts and the counter's differ", m[0])
		}
		a, _ := strconv.Atoi(m[1])
		r, _ := strconv.Atoi(m[2])
		total[i] = a + r
	}
	if legacy, cached := total[0], total[1]; legacy <= cached {
		t.Errorf("got legacy %d sizings, cached %d; want legacy > cached", legacy, cached)
	}
	if cached := total[1]; cached != 24 {
		t.Errorf("got cached %d sizings, want 24 (each action once)", cached)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--actions", "0"}, {"--actions", "10001"}, {"--action-bytes", "x"}, {"--max-chunk-bytes", "5MiB"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := realMain(context.Background(), args, &out, &errb); code != 2 {
				t.Errorf("got exit %d, want 2 (%s)", code, errb.String())
			}
		})
	}
}

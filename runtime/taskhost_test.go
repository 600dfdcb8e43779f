package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"github.com/amdahl-rt/amdahl/ipc/ipcpb"
)

// hashConfig is a TaskHash configuration of params parameters of size
// bytes each, hashed passes times.
func hashConfig(params, size, passes int) *ipcpb.TaskConfiguration {
	p := map[string]string{ParamPasses: strconv.Itoa(passes)}
	for i := range params {
		p["p"+strconv.Itoa(i)] = strings.Repeat(string(rune('a'+i%26)), size)
	}
	return &ipcpb.TaskConfiguration{TaskName: TaskHash, Parameters: p, Payload: []byte("payload")}
}

// TestHashTask checks hashTask's digest against SHA-256 computed here, and
// that what it allocates does not grow with the values' sizes nor the
// passes: it hashes the values where they are, without a copy of each per
// pass (a task host's
// allocations, and so its collections, come from what it receives).
func TestHashTask(t *testing.T) {
	cfg := hashConfig(3, 1000, 2)
	var sum [sha256.Size]byte
	for range 2 {
		h := sha256.New()
		h.Write(sum[:])
		for _, k := range []string{"p0", "p1", "p2"} {
			h.Write([]byte(k))
			h.Write([]byte(cfg.Parameters[k]))
		}
		h.Write(cfg.Payload)
		h.Sum(sum[:0])
	}
	got, err := hashTask(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := hex.EncodeToString(sum[:]); got["digest"] != want || got["bytes"] != "6000" {
		t.Errorf("hashTask: %v, want digest %s and bytes 6000", got, want)
	}

	allocs := func(cfg *ipcpb.TaskConfiguration) float64 {
		return testing.AllocsPerRun(20, func() {
			if _, err := hashTask(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
		})
	}
	once, more := allocs(hashConfig(32, 10, 1)), allocs(hashConfig(32, 64<<10, 4))
	if more > once {
		t.Errorf("hashTask allocates %v times for 32 parameters of 64 KiB hashed 4 times, %v for 32 of 10 bytes hashed once: want no more", more, once)
	}
}

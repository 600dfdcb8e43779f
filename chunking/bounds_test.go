package chunking

import (
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// wantRejected checks that err has code c and that its message names every
// one of words (the bound, its value, how to raise it).
func wantRejected(t *testing.T, what string, err error, c codes.Code, words ...string) {
	t.Helper()
	if status.Code(err) != c {
		t.Fatalf("%s: got %v, want %v", what, err, c)
	}
	msg := status.Convert(err).Message()
	for _, w := range words {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: message %q does not name %q", what, msg, w)
		}
	}
}

// TestSidecarTokenBounds: a chunk over a token's caps, or a message over
// the gRPC receive limit, is refused with ResourceExhausted and a message
// naming the bound; nothing of it is buffered.
func TestSidecarTokenBounds(t *testing.T) {
	n := proto.Size(chunk("0123456789abcdef-1", 0, true, 0))
	for _, tc := range []struct {
		name  string
		cfg   SidecarConfig
		words []string
	}{
		{"chunks", SidecarConfig{MaxBufferedChunks: 1},
			[]string{"MaxBufferedChunks = 1", "SidecarConfig.MaxBufferedBytes or .MaxBufferedChunks", "--max-token-chunks"}},
		{"bytes", SidecarConfig{MaxBufferedBytes: n + n/2},
			[]string{"MaxBufferedBytes = " + strconv.Itoa(n+n/2), "--max-token-bytes"}},
		{"receive limit", SidecarConfig{MaxRecvMsgSize: n / 2},
			[]string{"larger than max", strconv.Itoa(n / 2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg := startRig(t, tc.cfg)
			tok := rg.lease(t, "instance-1")
			err := raw(t, rg, chunk(tok, 0, true, 0))
			if tc.name == "receive limit" {
				wantRejected(t, "chunk 0", err, codes.ResourceExhausted, tc.words...)
				if got := rg.sc.BufferedTokens(); got != 0 {
					t.Errorf("%d tokens buffered, want 0", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantRejected(t, "chunk 1", raw(t, rg, chunk(tok, 1, true, 1)), codes.ResourceExhausted, tc.words...)
			if got := rg.sc.BufferedTokens(); got != 0 {
				t.Errorf("%d tokens buffered after a chunk over the token's cap, want 0 (dropped)", got)
			}
		})
	}
}

func TestSidecarConfigInvalid(t *testing.T) {
	for _, tc := range []struct {
		cfg  SidecarConfig
		want string
	}{
		{SidecarConfig{BufferTTL: -1}, "SidecarConfig.BufferTTL is -1ns, want ≥ 0"},
		{SidecarConfig{MaxBufferedBytes: -1}, "SidecarConfig.MaxBufferedBytes is -1, want ≥ 0"},
		{SidecarConfig{MaxBufferedChunks: -1}, "SidecarConfig.MaxBufferedChunks is -1, want ≥ 0"},
		{SidecarConfig{MaxRecvMsgSize: -1}, "SidecarConfig.MaxRecvMsgSize is -1, want ≥ 0"},
	} {
		if _, err := NewSidecar(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewSidecar(%+v): got %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
}

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
)

// sidecarBoundFlags are the flags of amdahl sidecar that raise or lower a
// chunking.SidecarConfig bound.
var sidecarBoundFlags = []string{"--buffer-ttl", "--max-token-bytes", "--max-token-chunks", "--max-total-buffered-bytes",
	"--max-pending-instances", "--max-instance-id-bytes", "--max-recv-msg-size", "--max-connections", "--max-streams-per-connection", "--max-calls"}

func TestSidecarHelpDocumentsBounds(t *testing.T) {
	code, out, _ := runCLI(t, "sidecar", "--help")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, f := range sidecarBoundFlags {
		if !strings.Contains(out, f) {
			t.Errorf("sidecar --help does not document %s:\n%s", f, out)
		}
	}
}

func TestSidecarFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		want    chunking.SidecarConfig
		wantErr string
	}{
		{"defaults", nil, chunking.SidecarConfig{
			BufferTTL: chunking.DefaultBufferTTL, MaxBufferedBytes: chunking.DefaultMaxBufferedBytes,
			MaxBufferedChunks: chunking.DefaultMaxBufferedChunks, MaxTotalBufferedBytes: chunking.DefaultMaxTotalBufferedBytes,
			MaxPendingInstances: chunking.DefaultMaxPendingInstances, MaxInstanceIDBytes: chunking.DefaultMaxInstanceIDBytes,
			MaxRecvMsgSize: chunking.DefaultMaxRecvMsgSize, MaxConnections: chunking.DefaultMaxConnections,
			MaxStreamsPerConnection: chunking.DefaultMaxStreamsPerConnection, MaxCalls: chunking.DefaultMaxCalls}, ""},
		{"set", []string{"--buffer-ttl", "30s", "--max-token-bytes", "1MiB", "--max-token-chunks", "7",
			"--max-total-buffered-bytes", "2GiB", "--max-pending-instances", "5", "--max-instance-id-bytes", "64",
			"--max-recv-msg-size", "8MB", "--max-connections", "3", "--max-streams-per-connection", "9", "--max-calls", "11"},
			chunking.SidecarConfig{BufferTTL: 30 * time.Second, MaxBufferedBytes: 1 << 20, MaxBufferedChunks: 7,
				MaxTotalBufferedBytes: 2 << 30, MaxPendingInstances: 5, MaxInstanceIDBytes: 64, MaxRecvMsgSize: 8e6,
				MaxConnections: 3, MaxStreamsPerConnection: 9, MaxCalls: 11}, ""},
		{"zero size", []string{"--max-token-bytes", "0"}, chunking.SidecarConfig{}, "--max-token-bytes 0: want ≥ 1"},
		{"zero total", []string{"--max-total-buffered-bytes", "0B"}, chunking.SidecarConfig{}, "--max-total-buffered-bytes 0: want ≥ 1"},
		{"negative pending", []string{"--max-pending-instances", "-3"}, chunking.SidecarConfig{}, "--max-pending-instances -3: want ≥ 1"},
		{"zero count", []string{"--max-token-chunks", "0"}, chunking.SidecarConfig{}, "--max-token-chunks 0: want ≥ 1"},
		{"zero connections", []string{"--max-connections", "0"}, chunking.SidecarConfig{}, "--max-connections 0: want ≥ 1"},
		{"zero streams", []string{"--max-streams-per-connection", "0"}, chunking.SidecarConfig{}, "--max-streams-per-connection 0: want ≥ 1"},
		{"zero calls", []string{"--max-calls", "0"}, chunking.SidecarConfig{}, "--max-calls 0: want ≥ 1"},
		{"zero ttl", []string{"--buffer-ttl", "0s"}, chunking.SidecarConfig{}, "--buffer-ttl 0s: want a positive duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f sidecarFlags
			cmd := &cobra.Command{}
			f.register(cmd)
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := f.config()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.BufferTTL != tc.want.BufferTTL || got.MaxBufferedBytes != tc.want.MaxBufferedBytes ||
				got.MaxBufferedChunks != tc.want.MaxBufferedChunks || got.MaxTotalBufferedBytes != tc.want.MaxTotalBufferedBytes ||
				got.MaxPendingInstances != tc.want.MaxPendingInstances || got.MaxInstanceIDBytes != tc.want.MaxInstanceIDBytes ||
				got.MaxRecvMsgSize != tc.want.MaxRecvMsgSize || got.MaxConnections != tc.want.MaxConnections ||
				got.MaxStreamsPerConnection != tc.want.MaxStreamsPerConnection || got.MaxCalls != tc.want.MaxCalls {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestSidecarTracing: amdahl sidecar makes no span when nothing would read
// one, and the SDK's when something does (here a recorder, as an
// exporter or Pyroscope would).
func TestSidecarTracing(t *testing.T) {
	ctx := context.Background()
	noEnv := otelsetup.WithLookupEnv(func(string) (string, bool) { return "", false })
	for _, tc := range []struct {
		name string
		opts []otelsetup.Option
		noop bool
	}{
		{"nothing reads spans", []otelsetup.Option{noEnv}, true},
		{"a recorder reads them", []otelsetup.Option{noEnv, otelsetup.WithRecorder()}, false},
	} {
		tel, err := otelsetup.Setup(ctx, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		_, noop := sidecarTracing(tel).(tracenoop.TracerProvider)
		if noop != tc.noop {
			t.Errorf("%s: a no-op tracer provider %v, want %v", tc.name, noop, tc.noop)
		}
		if err := tel.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

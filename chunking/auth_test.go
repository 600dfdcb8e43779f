package chunking

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

// TestSidecarToken: with SidecarConfig.Token every call, unary or stream,
// must carry "authorization: Bearer <token>"; any other call fails with
// Unauthenticated before its handler runs, and is counted.
func TestSidecarToken(t *testing.T) {
	const tok = "s3cret-Token.42"
	mp, sums := meterRig(t)
	rg := startRig(t, SidecarConfig{Token: tok, MeterProvider: mp})
	for _, tc := range []struct {
		name string
		md   []string // key, value pairs
		want codes.Code
	}{
		{"no token", nil, codes.Unauthenticated},
		{"wrong token", []string{"authorization", "Bearer s3cret-Token.43"}, codes.Unauthenticated},
		{"prefix of the token", []string{"authorization", "Bearer s3cret"}, codes.Unauthenticated},
		{"not bearer", []string{"authorization", "Basic " + tok}, codes.Unauthenticated},
		{"two values", []string{"authorization", "Bearer " + tok, "authorization", "Bearer " + tok}, codes.Unauthenticated},
		{"over the bound", []string{"authorization", "Bearer " + strings.Repeat("x", MaxTokenBytes+1)}, codes.Unauthenticated},
		{"right token", []string{"authorization", "Bearer " + tok}, codes.OK},
		{"scheme in lower case", []string{"authorization", "bearer " + tok}, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.md != nil {
				ctx = metadata.AppendToOutgoingContext(ctx, tc.md...)
			}
			_, err := dtpb.StartInstance(ctx, rg.conn, &dtpb.CreateInstanceRequest{InstanceId: "i-" + strings.ReplaceAll(tc.name, " ", "-")})
			if got := status.Code(err); got != tc.want {
				t.Fatalf("StartInstance: got %v (%v), want %v", got, err, tc.want)
			}
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			st, err := dtpb.GetWorkItems(ctx, rg.conn, &dtpb.GetWorkItemsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); tc.want != codes.OK && status.Code(err) != tc.want {
				t.Fatalf("GetWorkItems: got %v, want %v", err, tc.want)
			}
		})
	}
	// Six refused cases, each refused twice (StartInstance, GetWorkItems).
	if got := sums()[MetricSidecarRejections+"/"+ReasonUnauthenticated]; got != 12 {
		t.Errorf("%s/%s = %d, want 12", MetricSidecarRejections, ReasonUnauthenticated, got)
	}
	if got := rg.sc.PendingInstances(); got != 2 {
		t.Errorf("%d instances pending, want 2: only the authenticated starts scheduled anything", got)
	}
}

func TestSidecarTokenInvalid(t *testing.T) {
	for _, tc := range []struct {
		tok, want string
	}{
		{"with space", "SidecarConfig.Token has the byte 0x20 at 4"},
		{"new\nline", "SidecarConfig.Token has the byte 0xa at 3"},
		{strings.Repeat("x", MaxTokenBytes+1), "SidecarConfig.Token is 4097 bytes, want 1..4096"},
	} {
		if _, err := NewSidecar(SidecarConfig{Token: tc.tok}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewSidecar(Token %.20q): got %v, want an error with %q", tc.tok, err, tc.want)
		}
	}
}

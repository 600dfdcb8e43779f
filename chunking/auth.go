package chunking

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MaxTokenBytes bounds SidecarConfig.Token and the authorization metadata
// the sidecar reads.
const MaxTokenBytes = 4096

// AuthorizationHeader is the gRPC metadata key that carries the bearer
// token: "authorization: Bearer <token>".
const AuthorizationHeader = "authorization"

// checkToken says why tok cannot be a bearer token, or nil: it must be
// 1..MaxTokenBytes visible ASCII characters (no spaces), which is what
// HTTP/2 header values carry unchanged.
func checkToken(tok string) error {
	if tok == "" || len(tok) > MaxTokenBytes {
		return fmt.Errorf("is %d bytes, want 1..%d", len(tok), MaxTokenBytes)
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("has the byte %#x at %d, want visible ASCII only (no spaces or control characters)", c, i)
		}
	}
	return nil
}

// authorizer checks the bearer token of every call.
type authorizer struct {
	want    [sha256.Size]byte // the token's digest: the comparison takes the same time whatever its length
	metrics *sidecarMetrics
}

// check returns nil when md carries exactly one authorization value,
// "Bearer <token>" (the scheme in any case) with the token wanted, and an
// Unauthenticated status otherwise.
func (a *authorizer) check(ctx context.Context, md metadata.MD) error {
	vals := md.Get(AuthorizationHeader)
	why := ""
	switch {
	case len(vals) == 0:
		why = "no authorization metadata"
	case len(vals) > 1:
		why = fmt.Sprintf("%d authorization values, want one", len(vals))
	case len(vals[0]) > len("Bearer ")+MaxTokenBytes:
		why = fmt.Sprintf("an authorization value of %d bytes, over the bound of %d", len(vals[0]), len("Bearer ")+MaxTokenBytes)
	case len(vals[0]) < len("Bearer ") || !strings.EqualFold(vals[0][:len("Bearer ")], "Bearer "):
		why = "an authorization value that is not a bearer token"
	default:
		got := sha256.Sum256([]byte(vals[0][len("Bearer "):]))
		if subtle.ConstantTimeCompare(got[:], a.want[:]) == 1 {
			return nil
		}
		why = "a bearer token that is not the sidecar's"
	}
	a.metrics.refused(ctx, ReasonUnauthenticated)
	return status.Errorf(codes.Unauthenticated, "sidecar: the call has %s (want \"authorization: Bearer <token>\" with the token the sidecar was given)", why)
}

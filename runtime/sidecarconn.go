package runtime

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amdahl-rt/amdahl/chunking/dtpb"
)

const defaultSidecarConnectTimeout = 5 * time.Second

// probeSidecar makes one cheap call to addr, waiting for the connection
// for up to timeout (0: the default): abandoning the empty completion
// token, which a sidecar answers NotFound without changing anything. Any
// answer but Unavailable, DeadlineExceeded, Unauthenticated or
// PermissionDenied means the sidecar is reachable and takes the
// credentials. The call goes on a connection of its own, dialled with
// dial (credentials and token) and closed after it: an untraced one, so
// that the probe is no span of the run.
func probeSidecar(ctx context.Context, addr string, dial []grpc.DialOption, timeout time.Duration) error {
	if timeout == 0 {
		timeout = defaultSidecarConnectTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := probeCall(pctx, addr, dial)
	switch status.Code(err) {
	case codes.OK:
		return nil
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled:
		if ctx.Err() != nil {
			return fmt.Errorf("runtime: sidecar %s: %w", addr, ctx.Err())
		}
		return fmt.Errorf("runtime: sidecar %s not reachable within %v (Config.SidecarConnectTimeout): %w", addr, timeout, err)
	case codes.Unauthenticated, codes.PermissionDenied:
		return fmt.Errorf("runtime: sidecar %s refused this client's token: %w", addr, err)
	}
	return fmt.Errorf("runtime: sidecar %s: %w", addr, err)
}

// probeCall makes probeSidecar's call, waiting for the connection until
// ctx ends, and returns nil if the sidecar answered it with anything but
// Unavailable, DeadlineExceeded, Canceled, Unauthenticated or
// PermissionDenied, else the call's error (with its gRPC status).
func probeCall(ctx context.Context, addr string, dial []grpc.DialOption) error {
	cc, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return status.Errorf(codes.Unavailable, "sidecar %s: %v", addr, err)
	}
	defer cc.Close()
	err = cc.Invoke(ctx, dtpb.MethodAbandonTaskOrchestratorWorkItem, &dtpb.AbandonOrchestrationTaskRequest{},
		&dtpb.AbandonOrchestrationTaskResponse{}, grpc.WaitForReady(true))
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled, codes.Unauthenticated, codes.PermissionDenied:
		return err
	}
	return nil
}

// bearer is the per-call credentials of Config.SidecarToken.
type bearer struct {
	md map[string]string
	// secure is false only over plaintext to a loopback address, which
	// connect allows on purpose.
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return b.md, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }

// loopbackAddr reports whether addr's host is a loopback IP literal or
// "localhost". A host name is not resolved: what it names may change.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

package chunking

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// Sidecar defaults.
const (
	DefaultBufferTTL         = 5 * time.Minute
	DefaultMaxBufferedBytes  = 256 << 20
	DefaultMaxBufferedChunks = 4096
	// DefaultMaxTotalBufferedBytes is four tokens at DefaultMaxBufferedBytes.
	DefaultMaxTotalBufferedBytes = 1 << 30
	DefaultMaxPendingInstances   = 100_000
	DefaultMaxInstanceIDBytes    = 1024
	// DefaultMaxRecvMsgSize absorbs the framing overshoot of .NET's payload
	// accounting (the newest Durable Task Go SDK uses the same 64 MiB).
	DefaultMaxRecvMsgSize = 64 << 20
	// DefaultMaxKeptCompletions is how many applied completions a sidecar
	// without OnApplied keeps for Completions and DrainCompletions.
	DefaultMaxKeptCompletions = 4096
	// DefaultStreamWorkers is how many goroutines a sidecar keeps to run
	// calls on (SidecarConfig.StreamWorkers).
	DefaultStreamWorkers = 8
	// MaxStreamWorkers bounds SidecarConfig.StreamWorkers: each kept
	// goroutine holds its stack while idle.
	MaxStreamWorkers = 8192
)

// SidecarConfig configures a Sidecar. Zero fields take the defaults.
type SidecarConfig struct {
	// BufferTTL drops a partial completion idle for longer (default 5 min).
	BufferTTL time.Duration
	// MaxBufferedBytes and MaxBufferedChunks cap one token's buffer
	// (default 256 MiB, 4096 chunks). A chunk over either is refused with
	// ResourceExhausted and the token's buffer is dropped: that completion
	// can never fit.
	MaxBufferedBytes  int
	MaxBufferedChunks int
	// MaxTotalBufferedBytes caps the bytes held by the messages being
	// received and by all partial completions together (default 1 GiB).
	// A message reserves three times its size before its body is let in,
	// and waits while that does not fit (see the package doc, "Sidecar
	// bounds"); a buffered chunk counts what it holds decoded, its
	// serialized size and DecodedActionBytes per action. A partial chunk
	// that would take the partial completions over it is refused
	// with ResourceExhausted before it is buffered, and the token's buffer
	// stays as it was, so the same chunk may be sent again once completions,
	// abandons, disconnects or the TTL have released room. A final chunk is
	// never refused for it, since applying it frees its buffer.
	MaxTotalBufferedBytes int
	// MaxPendingInstances caps the instances StartInstance has scheduled
	// and that have not completed, queued or leased (default 100,000): a
	// lease holds its work item until the completion or an abandon, so a
	// worker that leases and never completes must count too. A start over
	// it is refused with ResourceExhausted and nothing is scheduled. There
	// is no TTL: a started orchestration that waits for a worker is not
	// dropped, since StartInstance promised to run it; this bound and
	// MaxInstanceIDBytes are what keep the memory finite. Work items given
	// to Submit are the caller's and not counted.
	MaxPendingInstances int
	// MaxInstanceIDBytes caps the length of an instance id given to
	// StartInstance (default 1024 bytes); a longer one is refused with
	// InvalidArgument.
	MaxInstanceIDBytes int
	// MaxRecvMsgSize is the server's receive limit (default the smaller of
	// 64 MiB and an eighth of MaxTotalBufferedBytes; at most
	// MaxTotalBufferedBytes);
	// gRPC refuses a larger message with ResourceExhausted before reading
	// it. A message being received or handled counts toward
	// MaxTotalBufferedBytes (see the package doc, "Sidecar bounds").
	MaxRecvMsgSize int
	// Now is the clock of the TTL (default time.Now); tests inject one.
	Now func() time.Time
	// OnApplied, if not nil, is called with each completion once it is
	// applied, on the goroutine of the call that applied it and after the
	// sidecar's lock is released (it should not block for long: the
	// worker waits for its reply meanwhile). The sidecar then keeps no
	// completions: Completions and DrainCompletions return none, and the
	// payloads are garbage as soon as OnApplied returns. Applied counts
	// them either way. A service that only counts or forwards completions
	// sets it, so that its memory does not grow with the completions'
	// payloads.
	OnApplied func(Completion)
	// BorrowPayloads, with OnApplied, lends OnApplied the completion's
	// payloads instead of giving them: the actions' StringValue strings
	// (inputs, results, details, versions) and the custom status share the
	// memory of the messages they arrived in, which the sidecar reuses for
	// later messages once OnApplied returns. OnApplied must then not keep
	// them, nor anything that holds them, past its return (strings.Clone
	// what it keeps). It saves a copy of every payload byte and most of
	// the sidecar's garbage. The instance id, completion token and task
	// names are the completion's own either way. Without OnApplied it is
	// refused.
	//
	// The request an interceptor or stats handler among ServerOptions
	// sees is lent too: it must not keep the request, or any string in
	// it, past its return (no asynchronous logger or audit queue without
	// a proto.Clone), and an interceptor must call the handler once, on
	// its own goroutine, before it returns (a handler called after the
	// call has returned fails with Internal). A stats handler's
	// InPayload.Payload is then not a proto.Message. ServerOptions must
	// not force a server codec (grpc.ForceServerCodec,
	// grpc.ForceServerCodecV2): it replaces the one that lends the
	// payloads, and every CompleteOrchestratorTask fails with Internal.
	BorrowPayloads bool
	// MaxKeptCompletions caps the completions kept for Completions and
	// DrainCompletions when OnApplied is nil (default 4096): over it the
	// oldest kept completion is forgotten, and counted by
	// ForgottenCompletions. Applying is not affected.
	MaxKeptCompletions int
	// Component, if not nil, records chunking.deserialize and
	// chunking.execute on the server.
	Component *telemetry.Component
	// TracerProvider and MeterProvider, if not nil, instrument the gRPC
	// server with otelgrpc (W3C trace context from metadata) and receive the
	// amdahl.sidecar.* metrics. When both are the OTel API's no-ops
	// (trace/noop, metric/noop), nothing would read otelgrpc's spans or
	// metrics: the server then only takes each call's trace context from
	// its metadata, the one thing of otelgrpc's that still mattered.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// StreamWorkers is how many goroutines the gRPC server keeps to run
	// calls on (grpc.NumStreamWorkers; default DefaultStreamWorkers, at
	// most MaxStreamWorkers). A call that finds them all busy runs on a
	// goroutine of its own, as every call would without them; an open
	// GetWorkItems stream holds one for as long as it is open. A kept
	// goroutine keeps the stack a call grew, where a goroutine per call
	// grows and copies its stack on nearly every call: a cost seen in a
	// process that completes small orchestrations to its in-process
	// sidecar (BenchmarkOrchestration; docs/measurements/telemetry-cost.md).
	// grpc.NumStreamWorkers among
	// ServerOptions overrides it (0 there: a goroutine per call).
	StreamWorkers int
	// TLS, if not nil, makes the sidecar serve TLS with it; without it the
	// sidecar serves plaintext, fit for loopback only (see the package doc,
	// "Sidecar security").
	TLS *tls.Config
	// ServerOptions are added to the gRPC server's options (interceptors,
	// keepalive). Credentials belong in TLS, not here: grpc.Creds among
	// ServerOptions replaces the sidecar's own, which read each message's
	// size before its body is let in, and MaxTotalBufferedBytes then no
	// longer counts the messages being received.
	ServerOptions []grpc.ServerOption
	// Token, if not empty, is the bearer token every call must carry as
	// gRPC metadata "authorization: Bearer <Token>"; a call without it, or
	// with another token, fails with Unauthenticated on its headers, before
	// gRPC reads its body or makes a stream for it, and is counted in
	// amdahl.sidecar.rejections (unauthenticated).
	// The comparison takes constant time. Token must be 1..MaxTokenBytes
	// visible ASCII characters. Over plaintext the token travels in clear:
	// give it with TLS (ServerOptions) unless the sidecar listens on
	// loopback.
	Token string
	// MaxConnections caps the client connections served at once (default
	// DefaultMaxConnections); a connection over it is closed as soon as it
	// is accepted and counted in amdahl.sidecar.rejections (connections).
	MaxConnections int
	// MaxStreamsPerConnection caps the calls one connection may have open
	// at once (default DefaultMaxStreamsPerConnection; HTTP/2
	// SETTINGS_MAX_CONCURRENT_STREAMS): a gRPC client queues its calls over
	// it until one ends.
	MaxStreamsPerConnection int
	// MaxCalls caps the calls open at once over every connection (default
	// DefaultMaxCalls): each may send its first 64 KiB (its initial HTTP/2
	// window) before the sidecar reads the size of its message, so
	// MaxCalls × 64 KiB is what calls can hold beside
	// MaxTotalBufferedBytes. A call over it fails with ResourceExhausted
	// on its headers and is counted in amdahl.sidecar.rejections (calls).
	MaxCalls int
}

// withDefaults validates cfg and returns it with every zero field set to
// its default.
func (cfg SidecarConfig) withDefaults() (SidecarConfig, error) {
	if cfg.BufferTTL < 0 {
		return cfg, fmt.Errorf("chunking: sidecar: SidecarConfig.BufferTTL is %v, want ≥ 0 (0 takes the default %v)", cfg.BufferTTL, DefaultBufferTTL)
	}
	for _, f := range []struct {
		name string
		p    *int
		dflt int
	}{
		{"MaxBufferedBytes", &cfg.MaxBufferedBytes, DefaultMaxBufferedBytes},
		{"MaxBufferedChunks", &cfg.MaxBufferedChunks, DefaultMaxBufferedChunks},
		{"MaxTotalBufferedBytes", &cfg.MaxTotalBufferedBytes, DefaultMaxTotalBufferedBytes},
		{"MaxPendingInstances", &cfg.MaxPendingInstances, DefaultMaxPendingInstances},
		{"MaxInstanceIDBytes", &cfg.MaxInstanceIDBytes, DefaultMaxInstanceIDBytes},
		{"MaxKeptCompletions", &cfg.MaxKeptCompletions, DefaultMaxKeptCompletions},
		{"StreamWorkers", &cfg.StreamWorkers, DefaultStreamWorkers},
		{"MaxConnections", &cfg.MaxConnections, DefaultMaxConnections},
		{"MaxStreamsPerConnection", &cfg.MaxStreamsPerConnection, DefaultMaxStreamsPerConnection},
		{"MaxCalls", &cfg.MaxCalls, DefaultMaxCalls},
	} {
		if *f.p < 0 {
			return cfg, fmt.Errorf("chunking: sidecar: SidecarConfig.%s is %d, want ≥ 0 (0 takes the default %d)", f.name, *f.p, f.dflt)
		}
		*f.p = cmp.Or(*f.p, f.dflt)
	}
	if cfg.MaxRecvMsgSize < 0 {
		return cfg, fmt.Errorf("chunking: sidecar: SidecarConfig.MaxRecvMsgSize is %d, want ≥ 0 (0 takes the default %d)", cfg.MaxRecvMsgSize, DefaultMaxRecvMsgSize)
	}
	cfg.MaxRecvMsgSize = cmp.Or(cfg.MaxRecvMsgSize, max(1, min(DefaultMaxRecvMsgSize, cfg.MaxTotalBufferedBytes/8)))
	if cfg.StreamWorkers > MaxStreamWorkers {
		return cfg, fmt.Errorf("chunking: sidecar: SidecarConfig.StreamWorkers is %d, want at most %d (0 takes the default %d)", cfg.StreamWorkers, MaxStreamWorkers, DefaultStreamWorkers)
	}
	if cfg.BorrowPayloads && cfg.OnApplied == nil {
		return cfg, fmt.Errorf("chunking: sidecar: SidecarConfig.BorrowPayloads needs OnApplied: the payloads are lent to it, and a sidecar without it keeps its completions")
	}
	if cfg.Token != "" {
		if err := checkToken(cfg.Token); err != nil {
			return cfg, fmt.Errorf("chunking: sidecar: SidecarConfig.Token %w", err)
		}
	}
	cfg.BufferTTL = cmp.Or(cfg.BufferTTL, DefaultBufferTTL)
	if cfg.MaxRecvMsgSize > cfg.MaxTotalBufferedBytes {
		return cfg, fmt.Errorf("chunking: sidecar: SidecarConfig.MaxRecvMsgSize is %d, over MaxTotalBufferedBytes = %d: "+
			"a message being received counts toward the total, so one that large could never be let in", cfg.MaxRecvMsgSize, cfg.MaxTotalBufferedBytes)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg, nil
}

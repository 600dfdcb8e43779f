// Package chunking implements Durable Task compatible chunked orchestrator
// completions: the worker-side Planner (size once, fail fast, pack
// greedily), the retrying Sender, and the receiving Sidecar that
// reassembles chunks keyed by completion token. The wire format and
// algorithm follow durabletask-dotnet (see
// shared/reference/durabletask-chunking.md); the protocol types live in
// subpackage dtpb.
//
// # Planner
//
// Without LargePayloads every action is sized once, in order; the first
// action larger than the limit replaces the whole turn by a failure
// completion (CompleteOrchestration FAILED, errorType
// System.InvalidOperationException, the reference message text with
// invariant number formatting). The whole-response size is derived from the
// kept sizes plus envelope and framing; a response that fits is sent as it
// is. Otherwise actions are packed greedily, in order, reusing the kept
// sizes. With LargePayloads nothing is rejected and a lone oversized action
// gets a chunk of its own. The field matrix (isPartial, chunkIndex presence,
// first-chunk-only fields, numEventsProcessed presence, customStatus on
// every chunk) is the reference's.
//
// Accounting Wire (default) budgets envelope and per-action framing so that
// every chunk's serialized size is at most the limit, except a lone action
// that does not fit even alone; Payload counts only action sizes, exactly
// as .NET (whose chunks can exceed the limit with many tiny actions).
// Algorithm Legacy is a faithful port of the pre-optimisation .NET
// algorithm with the same output and more sizing work, for A/B runs.
//
// # Encode once
//
// The Sender marshals each chunk into a buffer of the planned size, reusing
// the size caches the planner filled (proto.MarshalOptions.UseCachedSize),
// and passes the bytes to gRPC as Encoded through Codec, so gRPC neither
// sizes nor marshals them again. The two outer levels, the response and
// its actions, are sized and written field by field (protowire): protobuf-go
// reaches an action's oneof case by reflection, which is most of the cost
// of a small action; everything below goes through protobuf-go. The bytes
// are proto.Marshal's (TestWireMatchesMarshal and the property test compare
// them).
//
// # Sidecar shutdown
//
// Sidecar.Close(ctx) drains as grpc.Server.GracefulStop does: no new
// connections or RPCs; open GetWorkItems streams end with Unavailable
// ("sidecar shutting down") and keep their leases, so a completion already
// under way still applies; the calls in flight finish. If ctx ends first
// the server is force-stopped (grpc.Server.Stop) and Close returns an error
// wrapping ctx.Err() that counts the calls still in flight. The runtime's
// in-process sidecar and amdahl sidecar allow the drain 5 s.
//
// # Sidecar resends
//
// A chunk sent again with the index of one its token's buffer holds (a
// retry after a lost reply) is compared with the chunk accepted, by
// proto.Equal: the buffer keeps the chunks until the completion is
// applied, so no hash is kept. Identical, it is acknowledged and counted in
// amdahl.sidecar.duplicates. Different, it is refused with
// FailedPrecondition, counted in amdahl.sidecar.protocol_errors
// (conflicting_resend), and the buffer stays as it was. FailedPrecondition
// rather than InvalidArgument because the message is valid alone and
// conflicts only with the token's state, as a gap does; Durable Task
// workers do not retry it, and the .NET worker abandons the work item,
// which comes again under a new token. Once a token has completed its
// chunks are gone (only the index of its final chunk is kept, for one
// BufferTTL): a final message sent again then, or an earlier chunk, is
// acknowledged without comparison, and nothing of it is applied.
//
// # Sidecar bounds
//
// What a client can make the sidecar hold is bounded, and each bound is
// checked before the bytes are kept. A call over a bound fails with a gRPC
// code that Durable Task workers do not retry, and a message naming the
// bound and its value and, for the sidecar's own bounds, how to raise it.
// Zero SidecarConfig fields take the defaults; amdahl sidecar has a flag
// for each (sizes written 64MiB, 1GiB, 1.5GB):
//
//	MaxRecvMsgSize, the smaller of 64 MiB and an eighth of
//	    MaxTotalBufferedBytes, at most MaxTotalBufferedBytes
//	    (--max-recv-msg-size): the largest message accepted. gRPC refuses a
//	    larger one with ResourceExhausted from its length prefix, before
//	    reading it (and bounds decompression alike).
//	MaxBufferedBytes, 256 MiB (--max-token-bytes), and MaxBufferedChunks,
//	    4096 (--max-token-chunks): one token's partial completion. A chunk
//	    over either is refused with ResourceExhausted (protocol error
//	    over_cap) and the token's buffer is dropped: that completion can
//	    never fit.
//	MaxTotalBufferedBytes, 1 GiB (--max-total-buffered-bytes): the messages
//	    being received and handled and the partial completions buffered,
//	    together. Every message over 64 KiB (a call's initial HTTP/2
//	    window, which a client may send unasked) reserves three times its
//	    size from its 5-byte length prefix, before its body is let in: the
//	    frames it arrives in, the contiguous copy gRPC's proto codec makes
//	    and the decoded message are all alive while it is decoded (a
//	    compressed one reserves as if it decompressed to MaxRecvMsgSize).
//	    A reservation that does not fit waits, in arrival order, with its
//	    call's flow-control window shut: the client can send no more of
//	    it, and the connection's other calls go on. It is released when the
//	    call ends. One message is let in over the bound when nothing else is
//	    reserved, so that a final chunk can always arrive and free the
//	    partial completion it ends. A buffered chunk counts what it holds
//	    decoded: its serialized size (with BorrowPayloads, the capacity of
//	    the buffer its payloads alias: a power of two, 4 KiB at least) and
//	    DecodedActionBytes (256) per action (Sidecar.BufferedBytes). A partial chunk that would take the buffers
//	    over the bound is refused with ResourceExhausted before it is
//	    buffered, counted in amdahl.sidecar.rejections
//	    (total_buffered_bytes); the token's buffer is left as it was, so the
//	    same chunk may be sent again once a completion, an abandon, a
//	    disconnect or the TTL has released room. A final chunk is never
//	    refused for it: applying it frees its buffer. The admission reads
//	    the HTTP/2 frames under gRPC, so it needs the sidecar's own
//	    credentials: TLS in SidecarConfig.TLS, not grpc.Creds in
//	    ServerOptions (which replaces them and leaves the messages being
//	    received uncounted).
//	MaxPendingInstances, 100,000 (--max-pending-instances): instances
//	    StartInstance scheduled that have not completed, queued or leased
//	    (Sidecar.PendingInstances; a lease holds its work item until the
//	    completion or an abandon). A start over it is refused with
//	    ResourceExhausted, counted in amdahl.sidecar.rejections
//	    (pending_instances), and nothing is scheduled. Pending instances
//	    have no TTL: an orchestration waiting for a worker is not dropped,
//	    since StartInstance promised to run it; this bound and the next keep
//	    their memory finite.
//	MaxInstanceIDBytes, 1024 (--max-instance-id-bytes): the instance id
//	    given to StartInstance. A longer one is refused with InvalidArgument
//	    (instance_id_bytes).
//	BufferTTL, 5 min (--buffer-ttl): a partial completion with no chunk for
//	    this long is dropped, and a completed token is forgotten after it.
//	MaxKeptCompletions, 4096: applied completions kept, payloads and all,
//	    for Completions and DrainCompletions; over it the oldest is
//	    forgotten (Sidecar.ForgottenCompletions). With OnApplied set none is
//	    kept: each applied completion is handed to it once and is garbage
//	    after; Sidecar.Applied counts them either way. amdahl sidecar and
//	    the runtime's in-process sidecar count and keep nothing. With
//	    BorrowPayloads too, the payloads are only lent to OnApplied: they
//	    share the memory of the messages they arrived in, which the
//	    sidecar reuses once OnApplied has returned (amdahl's sidecars
//	    borrow). Interceptors and stats handlers in ServerOptions then see
//	    the lent request: they must not keep it past their return, an
//	    interceptor must call the handler once and synchronously, and
//	    ServerOptions must not force a server codec (every completion
//	    would fail).
//	StreamWorkers, 8 (at most MaxStreamWorkers, 8192): goroutines kept to
//	    run calls on, each holding its grown stack while idle; a call that
//	    finds them all busy runs on a goroutine of its own. The runtime's
//	    in-process sidecar keeps one per unit in flight, and one for the
//	    work-item stream.
//
// Work items given to Submit (in process, by the caller) are not bounded.
//
// The bounds count bytes, not the process's memory: with Go's default
// GOGC=100 the heap may grow to about twice the live bytes before a
// collection. amdahl sidecar sets its memory limit (debug.SetMemoryLimit)
// to 1.25 × MaxTotalBufferedBytes + 48 MiB unless GOMEMLIMIT is set, so
// that the collector keeps the heap near what the bounds hold and gives
// memory back as it frees it; a service embedding a Sidecar chooses its
// own limit.
//
// # Sidecar security
//
// A Sidecar serves plaintext with no authentication unless configured
// otherwise, which is fit for loopback only: anyone who reaches the port
// can start instances, lease work items and complete them.
//
// TLS is SidecarConfig.TLS (not grpc.Creds in ServerOptions, which
// would leave the admission out: see "Sidecar bounds"). A bearer token is
// SidecarConfig.Token: every call, unary or stream, must carry the gRPC
// metadata "authorization: Bearer <token>" (the scheme in any case,
// exactly one value, at most MaxTokenBytes of token). The check runs on
// the call's headers (a gRPC tap handle), before gRPC makes a stream for
// the call or reads any of its body, and compares SHA-256 digests with
// crypto/subtle, so its time depends on neither the token's length nor
// how much of it matched. A call without the token, or with another,
// fails with Unauthenticated (its stream reset, so the client stops
// sending), costs no allocation for its message, and is counted in
// amdahl.sidecar.rejections (unauthenticated). Over plaintext the token
// travels in clear: pair it with TLS off loopback.
//
// What a client can hold before it is authenticated is bounded too:
// MaxConnections connections (default 64, --max-connections; one over it
// is closed as soon as it is accepted and counted as connections),
// HandshakeTimeout (10 s) to finish the TLS handshake and the HTTP/2
// preface, MaxStreamsPerConnection calls open on one connection (default
// 256, --max-streams-per-connection; a gRPC client queues the rest),
// MaxCalls calls open at once over every connection (default 1024,
// --max-calls; one over it fails with ResourceExhausted on its headers,
// counted as calls: each open call may send its first 64 KiB before the
// admission reads its size, see "Sidecar bounds") and MaxHeaderBytes
// (64 KiB) of metadata per call.
//
// amdahl sidecar listens on 127.0.0.1:4001 by default. A --listen address
// that is not loopback (0.0.0.0, ::, an empty host, another IP or a host
// name that resolves to one) needs --tls-cert FILE --tls-key FILE, or an
// explicit --insecure; without either it exits 2 and listens nowhere.
// --token-file FILE sets Token from the file (at most 4 KiB, surrounding
// white space trimmed; an empty file is an error). amdahl run --sidecar
// ADDR dials with --sidecar-tls (the system roots) or --sidecar-ca FILE,
// and sends --sidecar-token-file's token; see runtime.Config.
//
// # Settings
//
// The package reads no environment variables; the runtime maps the
// settings chunking.algorithm (cached|legacy, default cached),
// chunking.accounting (wire|payload, default wire) and
// chunking.max_chunk_bytes (1,048,576..4,089,446, default 4,089,446) onto
// PlannerConfig with ParseAlgorithm and ParseAccounting.
//
// # Telemetry
//
// Spans: chunking.serialize (attributes amdahl.chunking.actions, .chunks,
// .sizing.actions, .sizing.responses, .algorithm, amdahl.bytes),
// chunking.send with one child span chunking.send.chunk per chunk (retries
// as "retry" events with amdahl.rpc.code and amdahl.chunking.attempt),
// chunking.abandon, and on the sidecar chunking.deserialize (validation
// and reassembly of each message) and chunking.execute (an applied
// completion). The trace context travels in gRPC metadata (W3C
// traceparent): through otelgrpc's stats handlers when the sidecar's
// providers read spans or metrics, else through internal/grpctrace's
// interceptors.
//
// Profiles: when the component sets pprof labels
// (telemetry.ComponentConfig.PhaseLabels; in amdahl on whenever a CPU
// profile is taken, see AMDAHL_PHASE_LABELS), the serialize phase runs under phase=serialize and
// each of its steps under step=<name> as well: validate (the fail-fast
// pass that sizes each action once, without LargePayloads), size (every
// other sizing: the whole response, the envelope, and the legacy planner's
// sizing again while it packs, which it does a chunk ahead so that the
// label changes twice per chunk, not per action), pack (building the
// chunks) and encode (Sender.Complete's marshalling). The legacy planner's
// repeated sizing is then the samples with step=size. The labels change
// once per step region; with labels off nothing is set
// (BenchmarkStepLabels).
//
// Metrics: amdahl.chunking.sizing.computations {call} by amdahl.sizing.kind
// (action|response), amdahl.chunking.bytes (By), amdahl.chunking.chunks
// ({chunk} per completion, histogram), amdahl.chunking.retries {retry} by
// amdahl.rpc.code, amdahl.chunking.rejections {completion} by amdahl.reason;
// amdahl.sidecar.partial_buffers {buffer} (up-down),
// amdahl.sidecar.duplicates {chunk}, amdahl.sidecar.protocol_errors
// {error} by amdahl.reason, amdahl.sidecar.rejections {call} by
// amdahl.reason (the bound reached: total_buffered_bytes,
// pending_instances, instance_id_bytes, connections, calls; or the bearer token
// missing or wrong: unauthenticated). Every one carries the amdahl.scenario and
// amdahl.variant of the config's Component. The counters of rare events
// (retries by each retryable code, oversized rejections, partial buffers,
// duplicates, protocol errors and rejections by each reason) are created
// at zero, so that a dashboard's rate reads 0 rather than no data.
package chunking

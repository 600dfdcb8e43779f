package ipc

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/amdahl-rt/amdahl/telemetry"
)

// Option configures a Conn. Options are applied over the defaults; the
// package reads no environment variables and no feature waves (a program
// resolves its settings and passes them as options).
type Option func(*config)

type config struct {
	comp             *telemetry.Component
	newCodec         func() Codec
	mp               metric.MeterProvider
	logger           *slog.Logger
	mode             Mode
	buffer           int
	maxPacket        int
	queueBytes       int
	queuePackets     int
	handshakeTimeout time.Duration
	transport        string
	stall            time.Duration
	// Test hooks, set by options defined in tests only.
	onWrite func(Type, int) // called by the writer before each write
	onStall func(kind string)
	hello   []byte // replaces this end's handshake hello
}

// WithStallThreshold sets how long a write may stay blocked, or a request
// may await its reply (PhasePolicy), before the stall watchdog logs a
// warning and counts amdahl.ipc.stalls (default 1 minute; 0 disables). It
// never cancels or kills anything: long tasks are normal.
func WithStallThreshold(d time.Duration) Option { return func(o *config) { o.stall = d } }

// WithTelemetry sets the component whose phase API records ipc.serialize,
// ipc.send, ipc.receive and ipc.deserialize. nil disables spans and phase
// metrics.
func WithTelemetry(c *telemetry.Component) Option { return func(o *config) { o.comp = c } }

// WithMeterProvider sets the provider of the component metrics
// (amdahl.ipc.*). nil means no metrics.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *config) { o.mp = mp } }

// WithLogger sets the logger for buffer sizing and protocol errors
// (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *config) { o.logger = l } }

// WithMode sets the send mode (setting ipc.send; default Sync).
func WithMode(m Mode) Option { return func(o *config) { o.mode = m } }

// WithBufferSize sets the requested SO_SNDBUF of this end, in bytes
// (setting ipc.buffer; default DefaultBufferSize).
func WithBufferSize(n int) Option { return func(o *config) { o.buffer = n } }

// WithMaxPacketSize sets the largest frame body sent or accepted
// (default DefaultMaxPacketSize).
func WithMaxPacketSize(n int) Option { return func(o *config) { o.maxPacket = n } }

// WithQueueLimits bounds the outbound queue in bytes and packets (defaults
// 64 MiB and 1024). A single packet larger than the byte bound is still
// accepted when the queue is empty.
func WithQueueLimits(bytes, packets int) Option {
	return func(o *config) { o.queueBytes, o.queuePackets = bytes, packets }
}

// WithHandshakeTimeout bounds the handshake (default 10s). The data phase
// has no timeout.
func WithHandshakeTimeout(d time.Duration) Option { return func(o *config) { o.handshakeTimeout = d } }

func resolve(transport string, opts []Option) (config, error) {
	c := config{
		maxPacket:        DefaultMaxPacketSize,
		queueBytes:       64 << 20,
		queuePackets:     1024,
		handshakeTimeout: 10 * time.Second,
		stall:            time.Minute,
		mode:             Sync,
		buffer:           DefaultBufferSize,
		transport:        transport,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	switch {
	case c.mode != Sync && c.mode != Async:
		return c, fmt.Errorf("invalid ipc.send %d: want Sync or Async", c.mode)
	case c.buffer <= 0 || c.buffer > MaxBufferSize:
		return c, fmt.Errorf("invalid ipc.buffer %d: want 1 to %d bytes", c.buffer, MaxBufferSize)
	case c.maxPacket <= 0 || c.maxPacket > 1<<31-1:
		return c, fmt.Errorf("invalid max packet size %d: want 1 to %d bytes", c.maxPacket, 1<<31-1)
	case c.queueBytes <= 0 || c.queuePackets <= 0:
		return c, fmt.Errorf("invalid queue limits %d bytes, %d packets: want both positive", c.queueBytes, c.queuePackets)
	case c.stall < 0:
		return c, fmt.Errorf("invalid stall threshold %v: want positive, or 0 to disable", c.stall)
	case c.handshakeTimeout <= 0:
		return c, fmt.Errorf("invalid handshake timeout %v: want positive", c.handshakeTimeout)
	}
	return c, nil
}

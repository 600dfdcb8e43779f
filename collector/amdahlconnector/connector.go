package amdahlconnector

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap"

	"github.com/amdahl-rt/amdahl/collector/amdahlconnector/internal/metadata"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// amdahlConnector holds traces until their units can be attributed,
// attributes them with the engine of amdahl report (package attribution)
// and sends the runtime's three histograms downstream on an interval.
type amdahlConnector struct {
	cfg    *Config
	set    connector.Settings
	next   consumer.Metrics
	logger *zap.Logger
	health *health
	now    func() time.Time

	in spans.Interner
	// The rules of Config.Units and Config.Rows; converters (each with
	// its rules' scratch) are pooled across ConsumeTraces calls.
	units      attribution.UnitMode
	sel        *attribution.Matcher
	rows       *attribution.Rows
	converters sync.Pool

	mu  sync.Mutex // guards buf
	buf *buffer
	// traces recycles traces' states: the buffer's, and attribute's once
	// a trace is attributed.
	traces tracePool

	aggMu    sync.Mutex // guards agg, builders; held across attribution
	agg      *aggregator
	builders map[attribution.UnitMode]*attribution.Builder

	// Log once per interval: what the bounds did since lastLog.
	logMu   sync.Mutex
	pending bufferCounts
	lastLog time.Time

	startOnce, stopOnce sync.Once
	stop                chan struct{}
	stopped             chan struct{}
	started             bool
	shutdownErr         error
}

var _ connector.Traces = (*amdahlConnector)(nil)

func newConnector(set connector.Settings, cfg *Config, next consumer.Metrics) (*amdahlConnector, error) {
	c := &amdahlConnector{
		cfg: cfg, set: set, next: next, logger: set.Logger, now: time.Now,
		stop: make(chan struct{}), stopped: make(chan struct{}),
	}
	c.buf = newBuffer(cfg, &c.traces)
	c.pending.reset()
	var err error
	if c.units, c.sel, err = attribution.ParseUnits(cfg.Units); err != nil {
		return nil, fmt.Errorf("amdahl connector: units: %w", err)
	}
	if c.rows, err = loadRows(cfg.Rows); err != nil {
		return nil, fmt.Errorf("amdahl connector: rows: %w", err)
	}
	c.converters.New = func() any { return newConverter(&c.in, cfg.VariantAttributes, c.rows, c.sel) }
	c.builders = map[attribution.UnitMode]*attribution.Builder{}
	c.agg = newAggregator(cfg, instanceID(set.Resource), c.now())
	h, err := newHealth(set.TelemetrySettings, c.sizes)
	if err != nil {
		return nil, fmt.Errorf("amdahl connector: create its metrics: %w", err)
	}
	c.health = h
	return c, nil
}

// instanceID is the collector's service.instance.id (the service sets it
// on TelemetrySettings.Resource), or a random one when it has none (tests),
// so that the series of two collectors never collide downstream.
func instanceID(res pcommon.Resource) string {
	if v, ok := res.Attributes().Get(keyServiceInstance); ok && v.AsString() != "" {
		return v.AsString()
	}
	return newInstanceID()
}

func (c *amdahlConnector) sizes() (traces, spans, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.buf.traces)), int64(c.buf.spans), c.buf.bytes
}

// Capabilities: the input is only read.
func (c *amdahlConnector) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: false}
}

// Start starts the goroutine that attributes due traces, flushes the
// metrics and logs the bounds' events. It returns at once.
func (c *amdahlConnector) Start(context.Context, component.Host) error {
	c.startOnce.Do(func() {
		c.started = true
		go c.run()
	})
	return nil
}

// Shutdown stops the goroutine, attributes every trace whose root arrived
// (nothing more will: the Collector shuts down receivers first), drops the
// others (counted, reason shutdown) and sends the metrics a last time. It
// works without Start and more than once.
func (c *amdahlConnector) Shutdown(ctx context.Context) error {
	c.stopOnce.Do(func() {
		close(c.stop)
		if c.started {
			select {
			case <-c.stopped:
			case <-ctx.Done():
				c.shutdownErr = fmt.Errorf("amdahl connector: shutdown: %w", ctx.Err())
				return
			}
		}
		c.mu.Lock()
		due := c.buf.drainAll(nil)
		c.mu.Unlock()
		c.attribute(due)
		c.report(true)
		err := c.flush(ctx)
		if c.health.reg != nil {
			err = errors.Join(err, c.health.reg.Unregister())
		}
		c.shutdownErr = err
	})
	return c.shutdownErr
}

// tick is how often due traces are looked for: a tenth of the wait,
// between 10 ms and 1 s.
func (c *amdahlConnector) tick() time.Duration {
	return min(max(c.cfg.Wait/10, 10*time.Millisecond), time.Second)
}

func (c *amdahlConnector) run() {
	defer close(c.stopped)
	t := time.NewTicker(c.tick())
	defer t.Stop()
	lastFlush := c.now()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		now := c.now()
		c.expire(now)
		c.report(false)
		if now.Sub(lastFlush) >= c.cfg.FlushInterval {
			lastFlush = now
			if err := c.flush(context.Background()); err != nil {
				c.logger.Warn("amdahl connector: sending metrics failed", zap.Error(err))
			}
		}
	}
}

// expire attributes the traces due at now.
func (c *amdahlConnector) expire(now time.Time) {
	c.mu.Lock()
	due := c.buf.expire(now, nil)
	c.mu.Unlock()
	c.attribute(due)
}

// ConsumeTraces holds td's spans by trace. td is not retained: its spans
// are copied into the connector's compact form.
func (c *amdahlConnector) ConsumeTraces(_ context.Context, td ptrace.Traces) error {
	if td.SpanCount() == 0 {
		return nil
	}
	cv := c.converters.Get().(*converter)
	defer c.converters.Put(cv)
	cv.reset()
	for _, rs := range td.ResourceSpans().All() {
		cv.resource(rs)
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				cv.span(sp)
			}
		}
	}
	now := c.now()
	c.mu.Lock()
	for i := range cv.spans {
		m := cv.meta[i]
		var info *unitInfo
		if m.info >= 0 {
			info = &cv.infos[m.info]
		}
		c.buf.add(&cv.spans[i], m, info, now)
	}
	c.mu.Unlock()
	return nil
}

// attribute attributes the units of each trace and records their metrics.
func (c *amdahlConnector) attribute(due []*traceState) {
	if len(due) == 0 {
		return
	}
	c.aggMu.Lock()
	defer c.aggMu.Unlock()
	var units, unattributed int64
	var (
		none unitInfo
		cur  *traceState
		at   map[spans.SpanID]*unitInfo // cur's roots, when many
	)
	add := func(w attribution.Work) {
		var u *unitInfo
		if at != nil {
			u = at[w.Root.SpanID]
		} else {
			u = cur.info(w.Root.SpanID)
		}
		if u == nil {
			u = &none
		}
		c.agg.add(w, u)
		units++
	}
	for _, t := range due {
		if t.amdahl && c.rows.UsesAuto() {
			// amdahl's trace: amdahl's rows, not the conventions' (as
			// amdahl report reads a file of amdahl's).
			for i := range t.spans {
				t.spans[i].ClearSemconvRow()
			}
		}
		cur, at = t, nil
		if len(t.roots) > maxLinearRoots {
			at = make(map[spans.SpanID]*unitInfo, len(t.roots))
			for i := range t.roots {
				at[t.roots[i].id] = &t.roots[i].info
			}
		}
		d := c.builder(c.unitMode(t)).EachTree(t.spans, add)
		unattributed += int64(d.Unrooted)
		c.traces.put(t)
	}
	ctx := context.Background()
	if units > 0 {
		c.health.unitsAttributed.Add(ctx, units)
	}
	if unattributed > 0 {
		c.health.spansUnattributed.Add(ctx, unattributed)
	}
	if c.agg.dropped > 0 {
		c.health.pointsDropped.Add(ctx, c.agg.dropped)
		c.logMu.Lock()
		c.pending.refusedSpans["max_series (data points)"] += c.agg.dropped
		c.logMu.Unlock()
		c.agg.dropped = 0
	}
}

// maxLinearRoots: a trace with more unit roots finds them by a map.
const maxLinearRoots = 16

// unitMode is the unit mode of trace t: Config.Units, where auto is
// amdahl.work spans in a trace that has one or whose root's service has
// sent some (a service of amdahl's: its other traces, such as the
// sidecar's work-item stream, are no units, as in amdahl report of its
// file), else the trace's root.
func (c *amdahlConnector) unitMode(t *traceState) attribution.UnitMode {
	if c.units != attribution.UnitsAuto {
		return c.units
	}
	if t.hasWork || t.amdahlService {
		return attribution.UnitsAmdahl
	}
	return attribution.UnitsRoots
}

// builder returns the Builder of mode (aggMu held).
func (c *amdahlConnector) builder(mode attribution.UnitMode) *attribution.Builder {
	b := c.builders[mode]
	if b == nil {
		b = &attribution.Builder{Reuse: true, Units: mode}
		c.builders[mode] = b
	}
	return b
}

// flush sends every series downstream.
func (c *amdahlConnector) flush(ctx context.Context) error {
	c.aggMu.Lock()
	md := c.agg.build(c.now(), metadata.ScopeName, telemetry.Version)
	c.aggMu.Unlock()
	if md.DataPointCount() == 0 {
		return nil
	}
	return c.next.ConsumeMetrics(ctx, md)
}

// report counts the bounds' events in the health metrics and logs them
// once per log_interval (or now, with force).
func (c *amdahlConnector) report(force bool) {
	c.mu.Lock()
	got := c.buf.counts
	if !got.empty() {
		c.buf.counts.reset()
	}
	c.mu.Unlock()
	ctx := context.Background()
	if !got.empty() {
		for r, n := range got.evictedTraces {
			c.health.tracesEvicted.Add(ctx, n, reasonOpt(r))
		}
		for r, n := range got.refusedSpans {
			c.health.spansRefused.Add(ctx, n, reasonOpt(r))
		}
		if got.lateSpans > 0 {
			c.health.spansLate.Add(ctx, got.lateSpans)
		}
	}
	c.logMu.Lock()
	defer c.logMu.Unlock()
	p := &c.pending
	for r, n := range got.evictedTraces {
		p.evictedTraces[r] += n
	}
	for r, n := range got.evictedSpans {
		p.evictedSpans[r] += n
	}
	for r, n := range got.refusedSpans {
		p.refusedSpans[r] += n
	}
	p.lateSpans += got.lateSpans
	now := c.now()
	if p.empty() || (!force && now.Sub(c.lastLog) < c.cfg.LogInterval) {
		return
	}
	fields := []zap.Field{zap.Duration("since", now.Sub(c.lastLog))}
	if c.lastLog.IsZero() {
		fields = fields[:0]
	}
	for _, r := range slices.Sorted(maps.Keys(p.evictedTraces)) {
		fields = append(fields, zap.Int64("traces_evicted_"+r, p.evictedTraces[r]), zap.Int64("spans_evicted_"+r, p.evictedSpans[r]))
	}
	for _, r := range slices.Sorted(maps.Keys(p.refusedSpans)) {
		fields = append(fields, zap.Int64("spans_refused_"+r, p.refusedSpans[r]))
	}
	if p.lateSpans > 0 {
		fields = append(fields, zap.Int64("spans_late", p.lateSpans))
	}
	c.logger.Warn("amdahl connector: bounds dropped data (see docs/collector.md for the bounds)", fields...)
	c.lastLog = now
	p.reset()
}

// newInstanceID returns a random id for a collector without
// service.instance.id.
func newInstanceID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

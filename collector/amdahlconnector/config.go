package amdahlconnector

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/confmap"

	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// loadRows returns the rule set rows names, as amdahl report's --rows
// (attribution.LoadRows); empty is auto.
func loadRows(rows string) (*attribution.Rows, error) {
	return attribution.LoadRows(cmp.Or(rows, "auto"))
}

// Config is the amdahl connector's configuration. Every field has a
// default (createDefaultConfig); Validate names the field that is wrong.
type Config struct {
	// Wait is how long a trace is held after the last of its unit roots
	// (an amdahl.work span, or a span with no parent) arrived, for the
	// spans of other processes to arrive. The default, 6s, covers the OTel
	// SDKs' batch span processor delay (OTEL_BSP_SCHEDULE_DELAY, 5s) of a
	// process that exports after the root's, plus the batch processor's
	// 200ms in front of the connector.
	Wait time.Duration `mapstructure:"wait"`
	// TraceTimeout is how long a trace whose root never arrives is held
	// before it is dropped and counted (reason "timeout").
	TraceTimeout time.Duration `mapstructure:"trace_timeout"`
	// MaxTraces bounds the traces held at once; a new trace past it evicts
	// the oldest (counted, reason "max_traces").
	MaxTraces int `mapstructure:"max_traces"`
	// MaxSpansPerTrace bounds one trace; the span past it is refused and
	// the trace dropped (counted, reason "max_spans_per_trace"): a trace
	// attributed without some of its spans would move time between rows.
	MaxSpansPerTrace int `mapstructure:"max_spans_per_trace"`
	// MaxBytes bounds the memory of the spans held, as the connector
	// counts it: 136 bytes a span plus its name's and component's, 208 a
	// trace (the heap holds about 220 a span with the slices' spare room,
	// BenchmarkVsSpanMetrics); past it the oldest traces are evicted
	// (counted, reason "max_bytes").
	MaxBytes int64 `mapstructure:"max_bytes"`
	// DoneTraces is how many attributed or dropped trace ids are
	// remembered, so that a span arriving after its trace was attributed
	// is counted as late and not attributed a second time.
	DoneTraces int `mapstructure:"done_traces"`
	// MaxSeries bounds the metric series (distinct attribute sets over the
	// three histograms); a data point of a new series past it is dropped
	// and counted.
	MaxSeries int `mapstructure:"max_series"`
	// FlushInterval is how often the cumulative histograms are sent
	// downstream (and once more at shutdown).
	FlushInterval time.Duration `mapstructure:"metrics_flush_interval"`
	// LogInterval is how often a bound that refused or evicted something
	// is logged (once per interval, with the counts since the last log).
	LogInterval time.Duration `mapstructure:"log_interval"`
	// Source is the value of the amdahl.source attribute on every data
	// point, which tells the connector's series from the runtime's (which
	// have none) in the dashboards' source variable.
	Source string `mapstructure:"source"`
	// Units says which spans are units of work, as amdahl report's
	// --unit: auto (amdahl.work spans in a trace that has them, else the
	// trace's root), amdahl, roots, or a selector
	// ("kind=server,service=frontend").
	Units string `mapstructure:"units"`
	// Rows is the rule set that gives spans their rows, as amdahl
	// report's --rows: auto (amdahl's attributes in a trace that has
	// them, else the semantic conventions), amdahl, semconv, or the path
	// of a rules file (read at start).
	Rows string `mapstructure:"rows"`
	// VariantAttributes are the attribute keys whose first present value
	// (on the unit's root span, then on its resource) is the amdahl.variant
	// of its metrics; a unit with none has no amdahl.variant.
	VariantAttributes []string `mapstructure:"variant_attributes"`

	// prevent unkeyed literal initialization
	_ struct{}
}

var _ confmap.Validator = (*Config)(nil)

// Defaults.
const (
	defaultWait             = 6 * time.Second
	defaultTraceTimeout     = time.Minute
	defaultMaxTraces        = 100_000
	defaultMaxSpansPerTrace = 10_000
	defaultMaxBytes         = 512 << 20
	defaultDoneTraces       = 200_000
	defaultMaxSeries        = 10_000
	defaultFlushInterval    = 15 * time.Second
	defaultLogInterval      = time.Minute
	defaultSource           = "collector"
)

// Upper bounds of counts, so that a typo cannot ask for more memory than
// a machine has before the first span arrives.
const (
	maxMaxTraces  = 100_000_000
	maxDoneTraces = 100_000_000
	maxMaxSeries  = 1_000_000
)

func createDefaultConfig() *Config {
	return &Config{
		Wait:              defaultWait,
		TraceTimeout:      defaultTraceTimeout,
		MaxTraces:         defaultMaxTraces,
		MaxSpansPerTrace:  defaultMaxSpansPerTrace,
		MaxBytes:          defaultMaxBytes,
		DoneTraces:        defaultDoneTraces,
		MaxSeries:         defaultMaxSeries,
		FlushInterval:     defaultFlushInterval,
		LogInterval:       defaultLogInterval,
		Source:            defaultSource,
		Units:             "auto",
		Rows:              "auto",
		VariantAttributes: []string{"amdahl.variant", "service.version"},
	}
}

// Validate checks every field and returns all problems at once, each
// naming its field and the valid values.
func (c *Config) Validate() error {
	var errs []error
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s: %v: want > 0", name, d))
		}
	}
	positive("wait", c.Wait)
	positive("trace_timeout", c.TraceTimeout)
	positive("metrics_flush_interval", c.FlushInterval)
	positive("log_interval", c.LogInterval)
	if c.TraceTimeout > 0 && c.Wait > c.TraceTimeout {
		errs = append(errs, fmt.Errorf("trace_timeout: %v: want ≥ wait (%v)", c.TraceTimeout, c.Wait))
	}
	count := func(name string, v, hi int) {
		if v < 1 || v > hi {
			errs = append(errs, fmt.Errorf("%s: %d: want 1 to %d", name, v, hi))
		}
	}
	count("max_traces", c.MaxTraces, maxMaxTraces)
	count("max_spans_per_trace", c.MaxSpansPerTrace, maxSpansLimit)
	count("done_traces", c.DoneTraces, maxDoneTraces)
	count("max_series", c.MaxSeries, maxMaxSeries)
	if min := int64(spanBytes + traceBytes); c.MaxBytes < min {
		errs = append(errs, fmt.Errorf("max_bytes: %d: want ≥ %d (one span of one trace)", c.MaxBytes, min))
	}
	if c.Source == "" {
		errs = append(errs, errors.New("source: empty: want a name for the connector's series (default \"collector\")"))
	}
	if _, _, err := attribution.ParseUnits(c.Units); err != nil {
		errs = append(errs, fmt.Errorf("units: %w", err))
	}
	if _, err := loadRows(c.Rows); err != nil {
		errs = append(errs, fmt.Errorf("rows: %w", err))
	}
	for i, k := range c.VariantAttributes {
		if k == "" {
			errs = append(errs, fmt.Errorf("variant_attributes[%d]: empty key", i))
		}
	}
	return errors.Join(errs...)
}

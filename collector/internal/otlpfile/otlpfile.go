// Package otlpfile reads recorded OTLP JSON trace files (gzipped, one
// ExportTraceServiceRequest a line, as the Collector's file exporter and
// amdahl's trace file write them) as the Collector's receivers would hand
// them on: one ptrace.Traces per line. The connector's tests, benchmarks
// and the distribution's tests replay the same recordings through it.
package otlpfile

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"os"

	"go.opentelemetry.io/collector/pdata/ptrace"
)

// MaxLine bounds one line (one request) of a file.
const MaxLine = 64 << 20

// Read returns the file's requests in order. A line longer than MaxLine,
// or one that is not an OTLP JSON request, is an error naming it.
func Read(path string) ([]ptrace.Traces, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, MaxLine)
	var out []ptrace.Traces
	var um ptrace.JSONUnmarshaler
	for line := 1; sc.Scan(); line++ {
		td, err := um.UnmarshalTraces(sc.Bytes())
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, td)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w (a line may be at most %d bytes)", path, err, MaxLine)
	}
	return out, nil
}

// Retrace gives every span of td a trace id of generation gen (its last
// four bytes), so that recorded traces replayed again are new traces to
// the connector, not late spans of the ones it has seen.
func Retrace(td ptrace.Traces, gen uint32) {
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				id := s.TraceID()
				id[12], id[13], id[14], id[15] = byte(gen>>24), byte(gen>>16), byte(gen>>8), byte(gen)
				s.SetTraceID(id)
			}
		}
	}
}

package otelsetup

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/amdahl-rt/amdahl/telemetry/spans"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// protoJSONClient is the trace file's former writer, kept as the reference
// TraceFileExporter is checked and measured against: the OTLP exporter's
// SDK → protobuf transform, then spans.MarshalTraceLine (protojson, a
// map[string]any round trip to turn base64 ids into hex, encoding/json).
type protoJSONClient struct{ w io.Writer }

func (*protoJSONClient) Start(context.Context) error { return nil }
func (*protoJSONClient) Stop(context.Context) error  { return nil }

func (c *protoJSONClient) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	line, err := spans.MarshalTraceLine(&coltracepb.ExportTraceServiceRequest{ResourceSpans: rs})
	if err != nil {
		return err
	}
	if _, err := c.w.Write(line); err != nil {
		return fmt.Errorf("write trace file: %w", err)
	}
	return nil
}

// newProtoJSONExporter returns the former trace file exporter, writing to w.
func newProtoJSONExporter(tb testing.TB, w io.Writer) *otlptrace.Exporter {
	exp, err := otlptrace.New(context.Background(), &protoJSONClient{w: w})
	if err != nil {
		tb.Fatal(err)
	}
	return exp
}

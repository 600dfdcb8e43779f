package otelsetup

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// NewTraceFileExporter returns a span exporter that appends to path (created
// or truncated now) one OTLP JSON ExportTraceServiceRequest per line: the
// format of the OpenTelemetry Collector's file exporter, so files from either
// are interchangeable. Trace and span ids are hex, enums are numbers, 64-bit
// integers are strings (OTLP/JSON).
func NewTraceFileExporter(ctx context.Context, path string) (*otlptrace.Exporter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open trace file: %w", err)
	}
	return otlptrace.New(ctx, &fileClient{f: f})
}

// fileClient is the otlptrace.Client that writes lines; the otlptrace
// exporter does the SDK → OTLP transformation.
type fileClient struct {
	mu     sync.Mutex
	f      *os.File
	closed bool
}

func (c *fileClient) Start(context.Context) error { return nil }

func (c *fileClient) Stop(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.f.Close()
}

func (c *fileClient) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	line, err := MarshalTraceLine(&coltracepb.ExportTraceServiceRequest{ResourceSpans: rs})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("trace file: closed")
	}
	if _, err := c.f.Write(line); err != nil {
		return fmt.Errorf("write trace file: %w", err)
	}
	return nil
}

var idKeys = map[string]bool{"traceId": true, "spanId": true, "parentSpanId": true}

// MarshalTraceLine encodes req as one line of OTLP JSON, newline included.
func MarshalTraceLine(req *coltracepb.ExportTraceServiceRequest) ([]byte, error) {
	raw, err := protojson.MarshalOptions{UseEnumNumbers: true}.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode otlp json: %w", err)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("encode otlp json: %w", err)
	}
	if err := convertIDs(v, base64ToHex); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // Encode appends the newline
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode otlp json: %w", err)
	}
	return buf.Bytes(), nil
}

// UnmarshalTraceLine decodes one line of OTLP JSON (hex ids).
func UnmarshalTraceLine(line []byte) (*coltracepb.ExportTraceServiceRequest, error) {
	var v any
	if err := json.Unmarshal(line, &v); err != nil {
		return nil, err
	}
	if err := convertIDs(v, hexToBase64); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, req); err != nil {
		return nil, err
	}
	return req, nil
}

// ReadTraceFile reads every request of an OTLP JSON trace file (ours or the
// Collector's). A bad line is an error naming its line number.
func ReadTraceFile(r io.Reader) ([]*coltracepb.ExportTraceServiceRequest, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<30)
	var out []*coltracepb.ExportTraceServiceRequest
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		req, err := UnmarshalTraceLine(line)
		if err != nil {
			return nil, fmt.Errorf("trace file line %d: %w", n, err)
		}
		out = append(out, req)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read trace file: %w", err)
	}
	return out, nil
}

func convertIDs(v any, conv func(string) (string, error)) error {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && idKeys[k] {
				c, err := conv(s)
				if err != nil {
					return fmt.Errorf("field %s: %w", k, err)
				}
				x[k] = c
				continue
			}
			if err := convertIDs(e, conv); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := convertIDs(e, conv); err != nil {
				return err
			}
		}
	}
	return nil
}

func base64ToHex(s string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func hexToBase64(s string) (string, error) {
	b, err := hex.DecodeString(s)
	if err != nil {
		return "", fmt.Errorf("want hex: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

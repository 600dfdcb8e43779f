package spans

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

var idKeys = map[string]bool{"traceId": true, "spanId": true, "parentSpanId": true}

// MarshalTraceLine encodes req as one line of OTLP JSON, newline included:
// what FileWriter writes for the same spans, through protojson and
// encoding/json (slow; for tests and tools that hold OTLP protobufs).
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

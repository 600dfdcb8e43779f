package attribution

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// A tspan is one span of a test trace file, written as OTLP JSON by
// otlpFile: ids are names, hashed; times in ms after t0 unless raw.
type tspan struct {
	trace, id, parent string
	name              string
	kind              int // OTLP's number
	start, end        float64
	attrs             []string // key, value, key, value…
	// raw* replace the times as written when set ("" omits the field).
	rawStart, rawEnd *string
}

// A tres is one resource (service) of a test trace file with its spans.
type tres struct {
	service string
	attrs   []string // more resource attributes: key, value…
	spans   []tspan
}

func jsonStr(s string) string { return fmt.Sprintf("%q", s) }

func kvs(attrs []string) string {
	var parts []string
	for i := 0; i+1 < len(attrs); i += 2 {
		parts = append(parts, fmt.Sprintf(`{"key":%s,"value":{"stringValue":%s}}`, jsonStr(attrs[i]), jsonStr(attrs[i+1])))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// otlpFile writes resources as the Collector's file exporter does: one
// ExportTraceServiceRequest per line, one line per resource.
func otlpFile(res ...tres) []byte {
	var b bytes.Buffer
	for _, r := range res {
		var spans []string
		for _, s := range r.spans {
			tid, sid := traceID(s.trace), spanID(s.trace, s.id)
			parent := ""
			if s.parent != "" {
				p := spanID(s.trace, s.parent)
				parent = hex.EncodeToString(p[:])
			}
			start := fmt.Sprintf(`"startTimeUnixNano":"%d",`, ms(s.start))
			end := fmt.Sprintf(`"endTimeUnixNano":"%d",`, ms(s.end))
			if s.rawStart != nil {
				start = ""
				if *s.rawStart != "" {
					start = fmt.Sprintf(`"startTimeUnixNano":%s,`, *s.rawStart)
				}
			}
			if s.rawEnd != nil {
				end = ""
				if *s.rawEnd != "" {
					end = fmt.Sprintf(`"endTimeUnixNano":%s,`, *s.rawEnd)
				}
			}
			spans = append(spans, fmt.Sprintf(`{"traceId":"%s","spanId":"%s","parentSpanId":"%s","flags":256,"name":%s,"kind":%d,%s%s"attributes":%s,"status":{}}`,
				hex.EncodeToString(tid[:]), hex.EncodeToString(sid[:]), parent, jsonStr(s.name), s.kind, start, end, kvs(s.attrs)))
		}
		rattrs := append([]string{"service.name", r.service}, r.attrs...)
		fmt.Fprintf(&b, `{"resourceSpans":[{"resource":{"attributes":%s},"scopeSpans":[{"scope":{"name":"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp","version":"0.72.0"},"spans":[%s]}],"schemaUrl":"https://opentelemetry.io/schemas/1.26.0"}]}`+"\n",
			kvs(rattrs), strings.Join(spans, ","))
	}
	return b.Bytes()
}

// OTLP span kinds.
const (
	kInternal = 1
	kServer   = 2
	kClient   = 3
	kProducer = 4
	kConsumer = 5
)

// demoUnit is one request through a small shop as the OTel SDK and the
// otelhttp/otelgrpc instrumentations record it (ms): frontend's server
// span 0–10; its HTTP client call to cart 0.5–4.5, cart's server span
// 1–4 with a database call 1.5–3.5; its gRPC call to pricing 5–9,
// pricing's server span 5.5–8.5; an internal render 9–9.8. cartSkew and
// pricingSkew shift those services' clocks.
func demoUnit(trace string, at, cartSkew, pricingSkew float64) (front, cart, pricing []tspan) {
	front = []tspan{
		{trace, "root", "", "GET /checkout", kServer, at, at + 10, []string{"http.request.method", "GET", "http.route", "/checkout", "url.path", "/checkout"}, nil, nil},
		{trace, "c1", "root", "HTTP GET", kClient, at + 0.5, at + 4.5, []string{"http.request.method", "GET", "server.address", "cart", "server.port", "8080", "url.full", "http://cart:8080/cart?id=7"}, nil, nil},
		{trace, "c2", "root", "shop.Pricing/Quote", kClient, at + 5, at + 9, []string{"rpc.system.name", "grpc", "rpc.method", "shop.Pricing/Quote", "server.address", "pricing"}, nil, nil},
		{trace, "render", "root", "render", kInternal, at + 9, at + 9.8, nil, nil, nil},
	}
	c, p := at+cartSkew, at+pricingSkew
	cart = []tspan{
		{trace, "s1", "c1", "GET /cart", kServer, c + 1, c + 4, []string{"http.request.method", "GET", "http.route", "/cart"}, nil, nil},
		{trace, "db", "s1", "SELECT items", kClient, c + 1.5, c + 3.5, []string{"db.system.name", "postgresql", "db.operation.name", "SELECT", "db.collection.name", "items", "server.address", "postgres"}, nil, nil},
	}
	pricing = []tspan{
		{trace, "s2", "c2", "shop.Pricing/Quote", kServer, p + 5.5, p + 8.5, []string{"rpc.system.name", "grpc", "rpc.method", "shop.Pricing/Quote", "rpc.response.status_code", "OK"}, nil, nil},
	}
	return front, cart, pricing
}

// demoFile is n demo units, the services' clocks skewed by skew(i).
func demoFile(n int, skew func(i int) (cart, pricing float64)) []byte {
	var front, cart, pricing tres
	front.service, cart.service, pricing.service = "frontend", "cart", "pricing"
	for i := range n {
		cs, ps := 0.0, 0.0
		if skew != nil {
			cs, ps = skew(i)
		}
		f, c, p := demoUnit(fmt.Sprint("demo", i), float64(i)*20, cs, ps)
		front.spans = append(front.spans, f...)
		cart.spans = append(cart.spans, c...)
		pricing.spans = append(pricing.spans, p...)
	}
	return otlpFile(front, cart, pricing)
}

// readReport reads data with the package's Read and sums it.
func readReport(t *testing.T, data []byte) (Report, error) {
	t.Helper()
	var acc Accumulator
	d, err := Read(bytes.NewReader(data), "t.jsonl", spans.Limits{}, nil, acc.Add)
	acc.AddDiagnostics(d)
	return acc.Report(false), err
}

func rowQ(r Report) map[string]float64 {
	m := map[string]float64{}
	for _, row := range append(r.Rows, r.Gaps...) {
		m[row.Name] = row.Q
	}
	return m
}

func rowNames(r Report) []string {
	var names []string
	for _, row := range append(r.Rows, r.Gaps...) {
		names = append(names, row.Name)
	}
	slices.Sort(names)
	return names
}

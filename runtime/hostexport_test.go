package runtime

import (
	"context"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/amdahl-rt/amdahl/runtime/scenario"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/otelsetup"
)

// traceCollector is a real OTLP/gRPC trace service on 127.0.0.1:0 that
// keeps every request, until the test ends.
type traceCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string // http://127.0.0.1:port
	mu   sync.Mutex
	reqs []*coltracepb.ExportTraceServiceRequest
}

func newTraceCollector(t *testing.T) *traceCollector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &traceCollector{addr: "http://" + ln.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return c
}

func (c *traceCollector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, req)
	c.mu.Unlock()
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// exported is one span the collector received, with its resource's
// service.name.
type exported struct {
	service string
	span    *tracepb.Span
}

func (c *traceCollector) spans() []exported {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []exported
	for _, r := range c.reqs {
		for _, rs := range r.ResourceSpans {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					out = append(out, exported{service, sp})
				}
			}
		}
	}
	return out
}

// TestHostsExportTheirSpans: with an OTLP endpoint, the parent and its
// task hosts export to it; each taskhost.<phase> span arrives exactly once,
// from the host (service.name amdahl-taskhost), as a child of the parent's
// runtime.host span, while the parent keeps its synthesised copies
// (amdahl.remote=true) for attribution without exporting them.
func TestHostsExportTheirSpans(t *testing.T) {
	sc, err := scenario.Builtin("taskhost")
	if err != nil {
		t.Fatal(err)
	}
	const units = 6
	col := newTraceCollector(t)
	ctx := context.Background()
	mem := tracetest.NewSpanRecorder() // the parent's in-memory view of every span it ends
	tel, err := otelsetup.Setup(ctx, otelsetup.WithLookupEnv(noEnv), otelsetup.WithOTLP(col.addr, "grpc"),
		otelsetup.WithSpanProcessor(mem))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, testSettings(t, "scenario.count=6"), nil)
	cfg.UseTelemetry(tel)
	cfg.Hosts.Env = append(cfg.Hosts.Env, otelsetup.EnvOTLPEndpoint+"="+col.addr)
	sum, err := Run(ctx, cfg, sc)
	if err != nil {
		t.Fatal(err)
	}
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if sum.OK != units {
		t.Fatalf("got %d ok units (%v), want %d", sum.OK, sum.Examples, units)
	}

	// The parent: its runtime.host spans, and its synthesised copies.
	hostSpans := map[string]string{} // span id → trace id
	remote := map[string]int{}
	for _, sp := range mem.Ended() {
		if sp.Name() == SpanHost {
			hostSpans[sp.SpanContext().SpanID().String()] = sp.SpanContext().TraceID().String()
		}
		for _, kv := range sp.Attributes() {
			if kv.Key == telemetry.AttrRemote && kv.Value.AsBool() {
				remote[sp.Name()]++
			}
		}
	}
	if len(hostSpans) != units {
		t.Fatalf("parent ended %d %s spans, want %d", len(hostSpans), SpanHost, units)
	}

	phases := []string{"taskhost.receive", "taskhost.deserialize", "taskhost.execute", "taskhost.serialize"}
	got := map[string]int{}
	ids := map[string]string{} // span id → name: every span, from either process, exactly once
	hostsFromParent := 0
	for _, e := range col.spans() {
		name := e.span.GetName()
		id := hex.EncodeToString(e.span.GetSpanId())
		if prev, dup := ids[id]; dup {
			t.Errorf("span %s (%s from %q) exported twice (first as %s)", id, name, e.service, prev)
		}
		ids[id] = name
		if name == SpanHost {
			if _, ok := hostSpans[id]; !ok || e.service == HostServiceName {
				t.Errorf("%s %s from %q: not one the parent ended", SpanHost, id, e.service)
			}
			hostsFromParent++
		}
		for _, kv := range e.span.GetAttributes() {
			if kv.Key == string(telemetry.AttrRemote) {
				t.Errorf("collector got %s with %s (service %q): synthesised copies must not be exported", name, telemetry.AttrRemote, e.service)
			}
		}
		if !strings.HasPrefix(name, "taskhost.") {
			continue
		}
		got[name]++
		if e.service != HostServiceName {
			t.Errorf("%s came from service %q, want %q", name, e.service, HostServiceName)
		}
		parent := hex.EncodeToString(e.span.GetParentSpanId())
		traceID, ok := hostSpans[parent]
		if !ok {
			t.Errorf("%s has parent %s, want one of the parent's %s spans", name, parent, SpanHost)
		} else if tid := hex.EncodeToString(e.span.GetTraceId()); tid != traceID {
			t.Errorf("%s is in trace %s, want its parent's %s", name, tid, traceID)
		}
	}
	// One trace per unit, no orphan: every exported span's parent was
	// exported too (by either process), in the same trace.
	byID := map[string]*tracepb.Span{}
	for _, e := range col.spans() {
		byID[hex.EncodeToString(e.span.GetSpanId())] = e.span
	}
	for _, e := range col.spans() {
		if len(e.span.GetParentSpanId()) == 0 {
			continue
		}
		p, ok := byID[hex.EncodeToString(e.span.GetParentSpanId())]
		if !ok {
			t.Errorf("%s (%q): parent %x not exported", e.span.GetName(), e.service, e.span.GetParentSpanId())
		} else if hex.EncodeToString(p.GetTraceId()) != hex.EncodeToString(e.span.GetTraceId()) {
			t.Errorf("%s (%q) and its parent %s are in different traces", e.span.GetName(), e.service, p.GetName())
		}
	}
	if hostsFromParent != units {
		t.Errorf("collector got %d %s spans from the parent, want %d", hostsFromParent, SpanHost, units)
	}
	for _, name := range phases {
		if got[name] != units {
			t.Errorf("collector got %d %s spans, want %d (once per unit)", got[name], name, units)
		}
		if remote[name] != units {
			t.Errorf("parent synthesised %d %s spans, want %d (attribution needs them)", remote[name], name, units)
		}
	}
	seen := map[string]bool{}
	for _, row := range sum.Attribution.Rows {
		seen[row.Name] = true
	}
	if !seen["taskhost.execute"] {
		t.Errorf("no taskhost.execute row in the attribution; rows: %v", seen)
	}
}

// TestHostEnviron: a task host inherits the parent's exporter settings but
// not what names the parent itself; Config.Hosts.Env and the settings win.
func TestHostEnviron(t *testing.T) {
	parent := []string{
		"PATH=/bin", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_HEADERS=k=v",
		"OTEL_RESOURCE_ATTRIBUTES=deployment.environment=ci", "PYROSCOPE_SERVER_ADDRESS=http://127.0.0.1:4040",
		"OTEL_SERVICE_NAME=parent", "PYROSCOPE_APPLICATION_NAME=parent", "AMDAHL_TRACE_FILE=trace.jsonl",
		"AMDAHL_METRICS_ADDR=127.0.0.1:9090", "AMDAHL_PROFILE_DIR=out", "OTEL_METRICS_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=http://127.0.0.1:4317",
	}
	for _, tc := range []struct {
		name  string
		extra []string
		want  map[string]string // "" : absent
	}{
		{"inherited", nil, map[string]string{
			"PATH": "/bin", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_HEADERS": "k=v",
			"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=ci", "PYROSCOPE_SERVER_ADDRESS": "http://127.0.0.1:4040",
			"OTEL_SERVICE_NAME": "", "PYROSCOPE_APPLICATION_NAME": "", "AMDAHL_TRACE_FILE": "", "AMDAHL_METRICS_ADDR": "",
			"AMDAHL_PROFILE_DIR": "", "OTEL_METRICS_EXPORTER": "none", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "",
		}},
		{"HostEnv names the service", []string{"OTEL_SERVICE_NAME=workers"}, map[string]string{"OTEL_SERVICE_NAME": "workers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]string{}
			for _, kv := range hostEnviron(parent, tc.extra) {
				k, v, _ := strings.Cut(kv, "=")
				got[k] = v // the last wins, as in os/exec
			}
			for k, want := range tc.want {
				if got[k] != want {
					t.Errorf("%s: got %q, want %q", k, got[k], want)
				}
			}
		})
	}
}

// TestHostTelemetry: a host's service.name is amdahl-taskhost unless
// OTEL_SERVICE_NAME says otherwise, and a host with nothing to export
// records nothing.
func TestHostTelemetry(t *testing.T) {
	col := newTraceCollector(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		env     map[string]string
		enabled bool
		service string
	}{
		{"nothing to export", map[string]string{"AMDAHL_TRACE_FILE": filepath.Join(t.TempDir(), "t.jsonl")}, false, ""},
		{"otlp", map[string]string{otelsetup.EnvOTLPEndpoint: col.addr}, true, HostServiceName},
		{"otlp, named", map[string]string{otelsetup.EnvOTLPEndpoint: col.addr, "OTEL_SERVICE_NAME": "workers"}, true, "workers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The exporters read the process environment.
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			tel, err := hostTelemetry(ctx, os.LookupEnv)
			if err != nil {
				t.Fatal(err)
			}
			if got := tel != nil; got != tc.enabled {
				t.Fatalf("telemetry enabled: got %v, want %v", got, tc.enabled)
			}
			if tel == nil {
				return
			}
			before := len(col.spans())
			c, err := tel.Component("taskhost")
			if err != nil {
				t.Fatal(err)
			}
			_, ph := c.Start(ctx, telemetry.Execute, telemetry.None)
			ph.End()
			if err := tel.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			spans := col.spans()[before:]
			if len(spans) != 1 || spans[0].service != tc.service {
				t.Errorf("collector got %d spans (%v), want 1 from %q", len(spans), spans, tc.service)
			}
		})
	}
}

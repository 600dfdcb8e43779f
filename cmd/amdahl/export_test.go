package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/pprof/profile"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// attrProfileID is the span attribute otel-profiling-go sets on a span
// whose id it puts in the span_id pprof label.
const attrProfileID = "pyroscope.profile.id"

// spanStore is a real OTLP/gRPC trace service on loopback that keeps every
// span with its resource's service.name.
type spanStore struct {
	coltracepb.UnimplementedTraceServiceServer
	addr  string // http://host:port
	mu    sync.Mutex
	spans []storedSpan
}

type storedSpan struct {
	service string
	*tracepb.Span
}

func newSpanStore(t *testing.T) *spanStore {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &spanStore{addr: "http://" + ln.Addr().String()}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, s)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(ln) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return s
}

func (s *spanStore) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s.spans = append(s.spans, storedSpan{service, sp})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (s *spanStore) all() []storedSpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]storedSpan(nil), s.spans...)
}

func attr(sp *tracepb.Span, key string) string {
	for _, kv := range sp.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// pyroscopeServer is a Pyroscope /ingest endpoint on loopback that keeps
// every uploaded profile by application (the name before its tags).
type pyroscopeServer struct {
	*httptest.Server
	mu    sync.Mutex
	profs map[string][]*profile.Profile // application → profiles
	errs  []error
}

func newPyroscopeServer(t *testing.T) *pyroscopeServer {
	t.Helper()
	ps := &pyroscopeServer{profs: map[string][]*profile.Profile{}}
	ps.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer w.WriteHeader(http.StatusOK)
		if r.URL.Path != "/ingest" {
			return
		}
		app, _, _ := strings.Cut(r.URL.Query().Get("name"), "{")
		profs, err := parseUpload(r)
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if err != nil {
			ps.errs = append(ps.errs, err)
		}
		ps.profs[app] = append(ps.profs[app], profs...)
	}))
	t.Cleanup(ps.Close)
	return ps
}

// parseUpload reads the gzipped pprof of every "profile" part.
func parseUpload(r *http.Request) ([]*profile.Profile, error) {
	_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return nil, err
	}
	var out []*profile.Profile
	mr := multipart.NewReader(io.LimitReader(r.Body, 64<<20), params["boundary"])
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if part.FormName() != "profile" {
			continue
		}
		b, err := io.ReadAll(part)
		if err != nil {
			return out, err
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return out, err
		}
		p, err := profile.Parse(zr)
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
}

// cpu returns the CPU profiles of the applications whose name has prefix.
func (ps *pyroscopeServer) cpu(prefix string) []*profile.Profile {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []*profile.Profile
	for app, profs := range ps.profs {
		if !strings.HasPrefix(app, prefix) {
			continue
		}
		for _, p := range profs {
			for _, st := range p.SampleType {
				if st.Type == "cpu" {
					out = append(out, p)
					break
				}
			}
		}
	}
	return out
}

func (ps *pyroscopeServer) apps() map[string]int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := map[string]int{}
	for app, profs := range ps.profs {
		out[app] = len(profs)
	}
	return out
}

// labelled counts the samples with label key=value (any value if value is
// empty) in profs.
func labelled(profs []*profile.Profile, key, value string) int {
	n := 0
	for _, p := range profs {
		for _, s := range p.Sample {
			for _, v := range s.Label[key] {
				if value == "" || v == value {
					n++
					break
				}
			}
		}
	}
	return n
}

// exportScenario has both kinds of unit: hashing in the hosts' execute
// phase long enough for the hosts' CPU profiles to sample it, and chunked
// completions of many tiny actions for the parent's chunking serialize
// (with the legacy planner, run below, sizing is most of it: step=size).
const exportScenario = `name: exported
seed: 3
count: 24
workloads:
  - kind: taskhost
    weight: 0.5
    task:
      config_mean: 64KB
      config_cap: 128KB
      environment: 2KB
      parameters: 8
      execute_passes: 400
  - kind: fanout
    weight: 0.5
    fanout:
      shapes:
        - name: 30000x64B
          actions: 30000
          action_bytes: 64B
`

// TestRunProfilesReachPyroscope: with --pyroscope and --otlp-endpoint, the
// parent and every task host upload profiles; the hosts' CPU samples carry
// phase=execute and, through otel-profiling-go, span_id labels naming spans
// the collector received (with pyroscope.profile.id); chunking's carry its
// step labels.
func TestRunProfilesReachPyroscope(t *testing.T) {
	ps := newPyroscopeServer(t)
	col := newSpanStore(t)
	scen := filepath.Join(t.TempDir(), "exported.yaml")
	if err := os.WriteFile(scen, []byte(exportScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCLI(t, "run", "--scenario-file", scen, "--set", "chunking.algorithm=legacy", "--pyroscope", ps.URL, "--otlp-endpoint", col.addr)
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q", code, errs)
	}
	ps.mu.Lock()
	if len(ps.errs) > 0 {
		t.Errorf("bad uploads: %v", errors.Join(ps.errs...))
	}
	ps.mu.Unlock()
	hostCPU := ps.cpu(runtime.HostServiceName)
	var parentCPU []*profile.Profile
	for _, p := range ps.cpu("amdahl") {
		if !containsProfile(hostCPU, p) {
			parentCPU = append(parentCPU, p)
		}
	}
	if len(parentCPU) == 0 || len(hostCPU) == 0 {
		t.Fatalf("CPU profiles: %d from the parent, %d from %s, want both; uploads by application: %v",
			len(parentCPU), len(hostCPU), runtime.HostServiceName, ps.apps())
	}

	// Span profiles: every span_id label is the id of a span exported with
	// pyroscope.profile.id, and the hosts' execute spans are among them.
	profiled := map[string]storedSpan{}
	for _, sp := range col.all() {
		if id := attr(sp.Span, attrProfileID); id != "" {
			if id != hex.EncodeToString(sp.GetSpanId()) {
				t.Errorf("span %s has %s=%s, not its own id", sp.GetName(), attrProfileID, id)
			}
			profiled[id] = sp
		}
	}
	hostExec := 0
	for _, p := range append(append([]*profile.Profile(nil), parentCPU...), hostCPU...) {
		for _, s := range p.Sample {
			for _, id := range s.Label["span_id"] {
				sp, ok := profiled[id]
				if !ok {
					t.Errorf("CPU sample labelled span_id=%s: no span with that id and %s reached the collector", id, attrProfileID)
					continue
				}
				if sp.service == runtime.HostServiceName && sp.GetName() == "taskhost.execute" && containsProfile(hostCPU, p) {
					hostExec++
				}
			}
		}
	}
	if hostExec == 0 {
		t.Errorf("no host CPU sample labelled with the span_id of a taskhost.execute span (%d profiled spans)", len(profiled))
	}

	// The labels that answer "where does serialize go".
	for _, want := range []struct {
		who   string
		profs []*profile.Profile
		key   string
		value string
	}{
		{"host", hostCPU, telemetry.LabelPhase, telemetry.Execute.String()},
		{"parent", parentCPU, telemetry.LabelPhase, telemetry.Serialize.String()},
		{"parent", parentCPU, telemetry.LabelStep, "size"},
	} {
		t.Run(want.who+"/"+want.key+"="+want.value, func(t *testing.T) {
			if labelled(want.profs, want.key, want.value) > 0 {
				return
			}
			t.Errorf("no CPU sample labelled %s=%s in the %s's profiles", want.key, want.value, want.who)
		})
	}
}

func containsProfile(profs []*profile.Profile, p *profile.Profile) bool {
	for _, q := range profs {
		if q == p {
			return true
		}
	}
	return false
}

// TestStandaloneSidecarExports: `amdahl sidecar`, its own process, exports
// its spans (service.name amdahl-sidecar) to the OTLP endpoint in its
// environment, as children of the run's spans in the same traces, each
// span once; and uploads its profiles to the Pyroscope server in its
// environment.
func TestStandaloneSidecarExports(t *testing.T) {
	ps := newPyroscopeServer(t)
	col := newSpanStore(t)
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "OTEL_") && !strings.HasPrefix(k, "PYROSCOPE_") && !strings.HasPrefix(k, "AMDAHL_") {
			env = append(env, kv)
		}
	}
	side := startSidecarChild(t, append(env, envTestMain+"=1", "OTEL_EXPORTER_OTLP_ENDPOINT="+col.addr, "PYROSCOPE_SERVER_ADDRESS="+ps.URL))

	code, _, errs := runCLI(t, "run", "--sidecar", side.addr, "--scenario", "fanout", "--set", "scenario.count=6", "--otlp-endpoint", col.addr)
	if code != exitOK {
		t.Fatalf("run --sidecar: exit %d, stderr %q", code, errs)
	}
	if stderr, err := side.stop(t); err != nil {
		t.Errorf("sidecar: %v; stderr %s", err, stderr)
	}

	spans := col.all()
	byID := map[string]storedSpan{}
	for _, sp := range spans {
		id := hex.EncodeToString(sp.GetSpanId())
		if prev, dup := byID[id]; dup {
			t.Errorf("span %s (%s) exported twice (also as %s from %s)", sp.GetName(), sp.service, prev.GetName(), prev.service)
		}
		byID[id] = sp
	}
	sidecar, fromRun := 0, 0
	names := map[string]int{}
	for _, sp := range spans {
		if sp.service != "amdahl-sidecar" {
			continue
		}
		sidecar++
		names[sp.GetName()]++
		if len(sp.GetParentSpanId()) == 0 {
			continue // a call made outside any unit (the work-item stream)
		}
		parent, ok := byID[hex.EncodeToString(sp.GetParentSpanId())]
		if !ok {
			t.Errorf("sidecar span %s: parent %x not exported", sp.GetName(), sp.GetParentSpanId())
			continue
		}
		if !bytes.Equal(parent.GetTraceId(), sp.GetTraceId()) {
			t.Errorf("sidecar span %s in trace %x, its parent %s in %x", sp.GetName(), sp.GetTraceId(), parent.GetName(), parent.GetTraceId())
		}
		if parent.service != "amdahl-sidecar" {
			fromRun++
		}
	}
	if sidecar == 0 || names["chunking.deserialize"] == 0 {
		t.Fatalf("collector got %d spans from amdahl-sidecar (%v), want chunking.deserialize among them", sidecar, names)
	}
	if fromRun == 0 {
		t.Errorf("no sidecar span is a child of a span of the run: the trace context did not cross")
	}
	n := 0
	for app, c := range ps.apps() {
		if strings.HasPrefix(app, "amdahl-sidecar") {
			n += c
		}
	}
	if n == 0 {
		t.Errorf("no profile from amdahl-sidecar reached Pyroscope; uploads: %v", ps.apps())
	}
}

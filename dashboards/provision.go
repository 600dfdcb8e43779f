package dashboards

import (
	"fmt"
	"path/filepath"
)

// Images of the compose file, pinned. The compose file is for users with
// Docker; CI does not run it (docs/grafana.md).
const (
	ImageGrafana    = "grafana/grafana:11.3.0"
	ImagePrometheus = "prom/prometheus:v2.55.1"
	ImageTempo      = "grafana/tempo:2.6.1"
	ImageJaeger     = "jaegertracing/all-in-one:1.62.0"
	ImagePyroscope  = "grafana/pyroscope:1.9.1"
)

// Where the files go under `amdahl dashboards --out DIR`.
const (
	DirDashboards     = "dashboards"
	FileDatasources   = "grafana/provisioning/datasources/amdahl.yaml"
	FileDashboardProv = "grafana/provisioning/dashboards/amdahl.yaml"
	FilePrometheus    = "prometheus/prometheus.yml"
	FileTempo         = "tempo/tempo.yaml"
	FileCompose       = "compose.yaml"
)

// grafanaDashboardsPath is where the compose file mounts DirDashboards in
// the Grafana container, and where the dashboard provider reads.
const grafanaDashboardsPath = "/var/lib/grafana/dashboards/amdahl"

// MetricsPort is the port the compose file's Prometheus scrapes on the
// Docker host: run amdahl with --metrics-addr on it.
const MetricsPort = 9464

// CollectorMetricsPort is the port of amdahl-collector's Prometheus
// exporter (its default configuration's), which the provisioned
// Prometheus also scrapes.
const CollectorMetricsPort = 8889

var datasourcesYAML = fmt.Sprintf(`# Grafana datasources for amdahl's dashboards (written by amdahl dashboards).
# The dashboards select datasources through variables whose defaults are
# these uids; the URLs are the services of compose.yaml.
apiVersion: 1
datasources:
  - name: amdahl Prometheus
    type: %[1]s
    uid: %[2]s
    access: proxy
    url: http://prometheus:9090
    isDefault: true
    jsonData:
      httpMethod: POST
      timeInterval: 5s
      # Exemplars on the latency panels carry trace_id: open the trace.
      exemplarTraceIdDestinations:
        - name: trace_id
          datasourceUid: %[5]s
          urlDisplayLabel: Trace in Tempo
        - name: trace_id
          datasourceUid: %[7]s
          urlDisplayLabel: Trace in Jaeger
  - name: amdahl Pyroscope
    type: %[3]s
    uid: %[4]s
    access: proxy
    url: http://pyroscope:4040
    jsonData:
      minStep: 15s
  - name: amdahl Tempo
    type: %[9]s
    uid: %[5]s
    access: proxy
    url: http://tempo:3200
    jsonData:
      # Trace to profile: a span's CPU profile (span_id pprof label).
      tracesToProfiles:
        datasourceUid: %[4]s
        profileTypeId: %[6]s
        tags:
          - key: service.name
            value: service_name
        customQuery: false
      tracesToMetrics:
        datasourceUid: %[2]s
        tags:
          - key: service.name
            value: service_name
      nodeGraph:
        enabled: true
  - name: amdahl Jaeger
    type: %[8]s
    uid: %[7]s
    access: proxy
    url: http://jaeger:16686
    jsonData:
      tracesToMetrics:
        datasourceUid: %[2]s
        tags:
          - key: service.name
            value: service_name
      nodeGraph:
        enabled: true
`, TypePrometheus, PrometheusUID, TypePyroscope, PyroscopeUID, TempoUID, ProfileCPU, JaegerUID, TypeJaeger, TypeTempo)

var dashboardProvYAML = `# Grafana dashboard provider for amdahl's dashboards (written by amdahl dashboards).
apiVersion: 1
providers:
  - name: amdahl
    orgId: 1
    folder: amdahl
    folderUid: amdahl
    type: file
    disableDeletion: false
    allowUiUpdates: false
    updateIntervalSeconds: 30
    options:
      path: ` + grafanaDashboardsPath + `
`

var prometheusYAML = fmt.Sprintf(`# Prometheus for amdahl's dashboards (written by amdahl dashboards). It
# scrapes an amdahl process on the Docker host: amdahl run --metrics-addr
# 0.0.0.0:%[1]d (or the Docker bridge address), and the Prometheus exporter
# of an amdahl-collector there (docs/collector.md; its endpoint must listen
# on an address the container reaches, e.g. 0.0.0.0:%[2]d). Run Prometheus
# with --enable-feature=exemplar-storage (compose.yaml does) for exemplars.
global:
  scrape_interval: 5s
  evaluation_interval: 5s
scrape_configs:
  - job_name: amdahl
    static_configs:
      - targets: ['host.docker.internal:%[1]d']
  # honor_labels keeps the exporter's job (the units' service.name) and
  # instance (the collector's service.instance.id): the dashboards select
  # services by job, and two collectors' series stay apart.
  - job_name: amdahl-collector
    honor_labels: true
    static_configs:
      - targets: ['host.docker.internal:%[2]d']
`, MetricsPort, CollectorMetricsPort)

var tempoYAML = `# Tempo, single binary, local storage (written by amdahl dashboards).
server:
  http_listen_port: 3200
distributor:
  receivers:
    otlp:
      protocols:
        grpc:
          endpoint: 0.0.0.0:4317
        http:
          endpoint: 0.0.0.0:4318
storage:
  trace:
    backend: local
    local:
      path: /tmp/tempo/traces
    wal:
      path: /tmp/tempo/wal
`

var composeYAML = fmt.Sprintf(`# Grafana, Prometheus, Tempo, Jaeger and Pyroscope for amdahl's dashboards
# (written by amdahl dashboards; not exercised in amdahl's CI, see
# docs/grafana.md). Ports are published on 127.0.0.1 only:
#   Grafana http://127.0.0.1:3000 (anonymous admin), Prometheus :9090,
#   Tempo :3200 with OTLP on :4317 (gRPC) and :4318 (HTTP),
#   Jaeger UI :16686 with OTLP on :14317 (gRPC) and :14318 (HTTP),
#   Pyroscope :4040.
# Prometheus scrapes the Docker host's port %[6]d (amdahl run --metrics-addr).
name: amdahl-observability
services:
  grafana:
    image: %[1]s
    environment:
      GF_AUTH_ANONYMOUS_ENABLED: "true"
      GF_AUTH_ANONYMOUS_ORG_ROLE: Admin
      GF_AUTH_DISABLE_LOGIN_FORM: "true"
    volumes:
      - ./grafana/provisioning:/etc/grafana/provisioning:ro
      - ./%[7]s:%[8]s:ro
    ports:
      - 127.0.0.1:3000:3000
    depends_on: [prometheus, tempo, jaeger, pyroscope]
  prometheus:
    image: %[2]s
    command:
      - --config.file=/etc/prometheus/prometheus.yml
      - --enable-feature=exemplar-storage
    volumes:
      - ./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro
    extra_hosts:
      - host.docker.internal:host-gateway
    ports:
      - 127.0.0.1:9090:9090
  tempo:
    image: %[3]s
    command: [-config.file=/etc/tempo/tempo.yaml]
    volumes:
      - ./tempo/tempo.yaml:/etc/tempo/tempo.yaml:ro
    ports:
      - 127.0.0.1:3200:3200
      - 127.0.0.1:4317:4317
      - 127.0.0.1:4318:4318
  jaeger:
    image: %[4]s
    ports:
      - 127.0.0.1:16686:16686
      - 127.0.0.1:14317:4317
      - 127.0.0.1:14318:4318
  pyroscope:
    image: %[5]s
    ports:
      - 127.0.0.1:4040:4040
`, ImageGrafana, ImagePrometheus, ImageTempo, ImageJaeger, ImagePyroscope, MetricsPort, DirDashboards, grafanaDashboardsPath)

// Files returns every file `amdahl dashboards --out DIR` writes besides
// the dashboards, by path relative to DIR.
func Files() map[string][]byte {
	return map[string][]byte{
		FileDatasources:   []byte(datasourcesYAML),
		FileDashboardProv: []byte(dashboardProvYAML),
		FilePrometheus:    []byte(prometheusYAML),
		FileTempo:         []byte(tempoYAML),
		FileCompose:       []byte(composeYAML),
	}
}

// Write writes the dashboards into dir/dashboards and the provisioning,
// Prometheus, Tempo and compose files beside them (dir is created if
// missing), and returns the paths written.
func Write(dir string) ([]string, error) {
	paths, err := WriteJSON(filepath.Join(dir, DirDashboards))
	if err != nil {
		return nil, err
	}
	more, err := writeFiles(dir, Files())
	if err != nil {
		return nil, err
	}
	return append(paths, more...), nil
}

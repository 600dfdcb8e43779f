package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type provDatasource struct {
	Name      string         `yaml:"name"`
	Type      string         `yaml:"type"`
	UID       string         `yaml:"uid"`
	URL       string         `yaml:"url"`
	Access    string         `yaml:"access"`
	IsDefault bool           `yaml:"isDefault"`
	JSONData  map[string]any `yaml:"jsonData"`
}

type composeFile struct {
	Name     string `yaml:"name"`
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Ports       []string          `yaml:"ports"`
		ExtraHosts  []string          `yaml:"extra_hosts"`
		DependsOn   []string          `yaml:"depends_on"`
	} `yaml:"services"`
}

func parseYAML(t *testing.T, name string, v any) {
	t.Helper()
	data, ok := Files()[name]
	if !ok {
		t.Fatalf("%s is not written", name)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s does not parse: %v", name, err)
	}
}

// datasourceRefs returns every {"type", "uid"} object under a "datasource"
// key in the dashboard JSON, with the path where it was found.
func datasourceRefs(v any, path string, out map[string][2]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			if k == "datasource" {
				if m, ok := c.(map[string]any); ok {
					typ, _ := m["type"].(string)
					uid, _ := m["uid"].(string)
					out[path+"/datasource"] = [2]string{typ, uid}
					continue
				}
			}
			datasourceRefs(c, path+"/"+k, out)
		}
	case []any:
		for i, c := range x {
			datasourceRefs(c, fmt.Sprintf("%s[%d]", path, i), out)
		}
	}
}

// The provisioning files and the compose file parse; every datasource a
// dashboard uses, through a datasource variable or a provisioned link
// (exemplars, traces to profiles), is provisioned with that uid and type;
// the compose file mounts what the provisioning reads and pins its images.
func TestProvisioning(t *testing.T) {
	ds, byUID := checkDatasources(t)
	providerPath := checkProviders(t)
	checkCompose(t, providerPath, ds)
	checkPrometheusConfig(t, byUID)
	var tempoCfg map[string]any
	parseYAML(t, FileTempo, &tempoCfg)
	checkDashboardDatasources(t, byUID)
}

// checkDatasources: every provisioned datasource has a uid, a type and an
// http URL, and the links between them (exemplars, traces to profiles and
// to metrics) name provisioned uids.
func checkDatasources(t *testing.T) ([]provDatasource, map[string]provDatasource) {
	t.Helper()
	var ds struct {
		APIVersion  int              `yaml:"apiVersion"`
		Datasources []provDatasource `yaml:"datasources"`
	}
	parseYAML(t, FileDatasources, &ds)
	byUID := map[string]provDatasource{}
	for _, d := range ds.Datasources {
		if d.UID == "" || d.Type == "" || !strings.HasPrefix(d.URL, "http://") {
			t.Errorf("datasource %q: uid %q, type %q, url %q", d.Name, d.UID, d.Type, d.URL)
		}
		byUID[d.UID] = d
	}
	// Links between datasources name provisioned uids.
	for _, d := range ds.Datasources {
		var linked []string
		if dests, ok := d.JSONData["exemplarTraceIdDestinations"].([]any); ok {
			for _, e := range dests {
				m, _ := e.(map[string]any)
				if m["name"] != "trace_id" {
					t.Errorf("%s: exemplar destination label %v, want trace_id (the exporter's)", d.UID, m["name"])
				}
				linked = append(linked, fmt.Sprint(m["datasourceUid"]))
			}
			if len(dests) == 0 {
				t.Errorf("%s: no exemplar destinations", d.UID)
			}
		}
		for _, k := range []string{"tracesToProfiles", "tracesToMetrics"} {
			if m, ok := d.JSONData[k].(map[string]any); ok {
				linked = append(linked, fmt.Sprint(m["datasourceUid"]))
			}
		}
		for _, uid := range linked {
			if _, ok := byUID[uid]; !ok {
				t.Errorf("datasource %s links to %q, which is not provisioned", d.UID, uid)
			}
		}
	}
	if tp, ok := byUID[TempoUID].JSONData["tracesToProfiles"].(map[string]any); !ok || byUID[fmt.Sprint(tp["datasourceUid"])].Type != TypePyroscope {
		t.Errorf("tempo datasource has no traces-to-profiles link to a pyroscope datasource: %v", byUID[TempoUID].JSONData)
	}
	if _, ok := byUID[PrometheusUID].JSONData["exemplarTraceIdDestinations"]; !ok {
		t.Error("prometheus datasource has no exemplar trace destinations")
	}
	return ds.Datasources, byUID
}

// checkProviders: one file provider of dashboards; it returns the path it
// reads.
func checkProviders(t *testing.T) string {
	t.Helper()
	var prov struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name, Folder, Type    string
			FolderUID             string `yaml:"folderUid"`
			OrgID                 int    `yaml:"orgId"`
			DisableDeletion       bool   `yaml:"disableDeletion"`
			AllowUIUpdates        bool   `yaml:"allowUiUpdates"`
			UpdateIntervalSeconds int    `yaml:"updateIntervalSeconds"`
			Options               struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	parseYAML(t, FileDashboardProv, &prov)
	if len(prov.Providers) != 1 || prov.Providers[0].Type != "file" {
		t.Fatalf("dashboard providers: %+v", prov.Providers)
	}
	return prov.Providers[0].Options.Path
}

// checkCompose: the compose file pins its images, publishes on loopback
// only, mounts only files amdahl dashboards writes (the dashboards at the
// provider's path, the provisioning folder), runs Prometheus with
// exemplar storage, and has a service for every datasource's host.
func checkCompose(t *testing.T, providerPath string, datasources []provDatasource) {
	t.Helper()
	var compose composeFile
	parseYAML(t, FileCompose, &compose)
	for name, s := range compose.Services {
		img, tag, ok := strings.Cut(s.Image, ":")
		if !ok || img == "" || tag == "" || tag == "latest" {
			t.Errorf("service %s: image %q is not pinned", name, s.Image)
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("service %s publishes %q beyond loopback", name, p)
			}
		}
		// Every file it mounts from the output folder is written.
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			rel := strings.TrimPrefix(src, "./")
			if _, ok := Files()[rel]; ok || rel == DirDashboards || rel == "grafana/provisioning" {
				continue
			}
			t.Errorf("service %s mounts %s, which amdahl dashboards does not write", name, src)
		}
	}
	mounts := func(svc, target string) bool {
		return slices.ContainsFunc(compose.Services[svc].Volumes, func(v string) bool {
			_, rest, _ := strings.Cut(v, ":")
			dst, _, _ := strings.Cut(rest, ":")
			return dst == target
		})
	}
	if !mounts("grafana", providerPath) {
		t.Errorf("grafana does not mount the dashboards at the provider's path %s", providerPath)
	}
	if !mounts("grafana", "/etc/grafana/provisioning") {
		t.Error("grafana does not mount the provisioning folder")
	}
	if !slices.Contains(compose.Services["prometheus"].Command, "--enable-feature=exemplar-storage") {
		t.Error("prometheus runs without exemplar storage")
	}
	for _, d := range datasources {
		host := strings.Split(strings.TrimPrefix(d.URL, "http://"), ":")[0]
		if _, ok := compose.Services[host]; !ok {
			t.Errorf("datasource %s points at %s, which is not a compose service", d.UID, d.URL)
		}
	}
}

// checkPrometheusConfig: Prometheus scrapes at the datasource's
// timeInterval, and its amdahl-collector job keeps the exporter's labels.
func checkPrometheusConfig(t *testing.T, byUID map[string]provDatasource) {
	t.Helper()
	var promCfg struct {
		Global        map[string]string `yaml:"global"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			HonorLabels   bool   `yaml:"honor_labels"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	parseYAML(t, FilePrometheus, &promCfg)
	if len(promCfg.ScrapeConfigs) == 0 || promCfg.Global["scrape_interval"] != byUID[PrometheusUID].JSONData["timeInterval"] {
		t.Errorf("prometheus scrape interval %q, datasource timeInterval %v: want equal", promCfg.Global["scrape_interval"], byUID[PrometheusUID].JSONData["timeInterval"])
	}
	// The amdahl-collector's job keeps the exporter's job and instance
	// (the dashboards select its services by job).
	collectorJob := false
	for _, sc := range promCfg.ScrapeConfigs {
		if sc.JobName == "amdahl-collector" && sc.HonorLabels && len(sc.StaticConfigs) == 1 &&
			slices.Equal(sc.StaticConfigs[0].Targets, []string{fmt.Sprintf("host.docker.internal:%d", CollectorMetricsPort)}) {
			collectorJob = true
		}
	}
	if !collectorJob {
		t.Errorf("prometheus.yml has no amdahl-collector job with honor_labels on port %d: %+v", CollectorMetricsPort, promCfg.ScrapeConfigs)
	}
}

// checkDashboardDatasources: every dashboard's datasource variables
// default to provisioned datasources of their type, every datasource it
// names is one of its variables (never a literal uid), it has the common
// variables and its file's uid, and every panel states its unit.
func checkDashboardDatasources(t *testing.T, byUID map[string]provDatasource) {
	t.Helper()
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range all {
		raw, err := Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		vars := map[string]string{} // datasource variable -> plugin type
		names := map[string]bool{}
		list, _ := doc["templating"].(map[string]any)["list"].([]any)
		for _, v := range list {
			m := v.(map[string]any)
			names[m["name"].(string)] = true
			if m["type"] != "datasource" {
				continue
			}
			typ, _ := m["query"].(string)
			cur, _ := m["current"].(map[string]any)
			uid, _ := cur["value"].(string)
			vars[m["name"].(string)] = typ
			if p, ok := byUID[uid]; !ok || p.Type != typ {
				t.Errorf("%s: datasource variable %s (type %s) defaults to %q, which is not a provisioned %s datasource", name, m["name"], typ, uid, typ)
			}
		}
		for _, want := range []string{"source", "service_name", "scenario", "variant"} {
			if !names[want] {
				t.Errorf("%s: no %s variable", name, want)
			}
		}
		if uid, _ := doc["uid"].(string); uid != strings.TrimSuffix(name, ".json") {
			t.Errorf("%s: uid %q, want the file's name", name, uid)
		}
		refs := map[string][2]string{}
		datasourceRefs(doc, "", refs)
		if len(refs) == 0 {
			t.Errorf("%s: no datasource references", name)
		}
		for path, ref := range refs {
			v := strings.TrimSuffix(strings.TrimPrefix(ref[1], "${"), "}")
			if !strings.HasPrefix(ref[1], "${") || vars[v] == "" {
				t.Errorf("%s %s: datasource uid %q is not a datasource variable", name, path, ref[1])
			} else if vars[v] != ref[0] {
				t.Errorf("%s %s: datasource type %q, but variable %s is of type %s", name, path, ref[0], v, vars[v])
			}
		}
		// Every panel states its unit.
		for _, p := range panels(d) {
			if p.Type == "row" {
				continue
			}
			if p.FieldConfig == nil || p.FieldConfig.Defaults.Unit == nil || *p.FieldConfig.Defaults.Unit == "" {
				t.Errorf("%s: panel %q has no unit", name, title(p))
			}
		}
	}
}

// Write puts the dashboards where the provider reads them and every other
// file at its path, with the content tested above.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	paths, err := Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	if want := len(all) + len(Files()); len(paths) != want {
		t.Errorf("wrote %d files, want %d: %v", len(paths), want, paths)
	}
	for name := range all {
		if _, err := os.Stat(filepath.Join(dir, DirDashboards, name)); err != nil {
			t.Error(err)
		}
	}
	for name, want := range Files() {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s: %v (content equal: %v)", name, err, string(got) == string(want))
		}
	}
}

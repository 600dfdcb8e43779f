package runtime

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/internal/features"
	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/taskproto"
)

// A valid value for every documented setting, and what it must set.
var validSettings = []struct {
	name, value string
	check       func(Settings) bool
}{
	{"ipc.buffer", "256KiB", func(s Settings) bool { return s.IPCBuffer == 256<<10 }},
	{"ipc.send", "async", func(s Settings) bool { return s.IPCSend == ipc.Async }},
	{"ipc.transport", "pipe", func(s Settings) bool { return s.IPCTransport == Pipes }},
	{"ipc.delta", "off", func(s Settings) bool { return !s.IPCDelta }},
	{"chunking.algorithm", "legacy", func(s Settings) bool { return s.ChunkAlgorithm == chunking.Legacy }},
	{"chunking.accounting", "payload", func(s Settings) bool { return s.ChunkAccounting == chunking.Payload }},
	{"chunking.max_chunk_bytes", "2000000", func(s Settings) bool { return s.MaxChunkBytes == 2_000_000 }},
	{"chunking.large_payloads", "on", func(s Settings) bool { return s.LargePayloads }},
	{"runtime.nodes", "5", func(s Settings) bool { return s.Nodes == 5 }},
	{"runtime.concurrency", "7", func(s Settings) bool { return s.Concurrency == 7 }},
	{"runtime.queue", "9", func(s Settings) bool { return s.Queue == 9 }},
	{"runtime.task_timeout", "45s", func(s Settings) bool { return s.TaskTimeout == 45*time.Second }},
	{"runtime.host_procs", "3", func(s Settings) bool { return s.HostProcs == 3 }},
	{"runtime.host_gogc", "250", func(s Settings) bool { return s.HostGOGC == 250 }},
	{"scenario.count", "123", func(s Settings) bool { return s.Count == 123 }},
	{"scenario.seed", "42", func(s Settings) bool { return s.SeedSet && s.Seed == 42 }},
	{"variant", "candidate", func(s Settings) bool { return s.Variant == "candidate" }},
	{"perturb.ipc.serialize", "50us", func(s Settings) bool { return s.Perturb[0] == 50*time.Microsecond }},
	{"perturb.ipc.send", "200us", func(s Settings) bool { return s.Perturb[1] == 200*time.Microsecond }},
	{"perturb.taskhost.execute", "1ms", func(s Settings) bool { return s.Perturb[2] == time.Millisecond }},
	{"runtime.completion_bytes", "16MiB", func(s Settings) bool { return s.CompletionBytes == 16<<20 }},
	{"sidecar.retry.attempts", "3", func(s Settings) bool { return s.RetryAttempts == 3 }},
	{"sidecar.retry.base_delay", "50ms", func(s Settings) bool { return s.RetryBaseDelay == 50*time.Millisecond }},
	{"sidecar.retry.max_delay", "2s", func(s Settings) bool { return s.RetryMaxDelay == 2*time.Second }},
	{"sidecar.breaker.open_after", "0", func(s Settings) bool { return s.BreakerOpenAfter == 0 }},
	{"sidecar.breaker.probe_interval", "250ms", func(s Settings) bool { return s.BreakerProbe == 250*time.Millisecond }},
}

func TestEverySettingAccepted(t *testing.T) {
	if len(validSettings) != len(SettingNames()) {
		t.Fatalf("the test covers %d settings, the registry has %d: %v", len(validSettings), len(SettingNames()), SettingNames())
	}
	for _, tc := range validSettings {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ResolveSettings([]string{tc.name + "=" + tc.value}, noEnv)
			if err != nil {
				t.Fatalf("--set %s=%s: %v", tc.name, tc.value, err)
			}
			if !tc.check(s) {
				t.Errorf("--set %s=%s did not take effect: %+v", tc.name, tc.value, s)
			}
			if got, _ := s.Get(tc.name); got == "" {
				t.Errorf("Get(%s) is empty after setting it", tc.name)
			}
			env := map[string]string{EnvName(tc.name): tc.value}
			s, err = ResolveSettings(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if err != nil {
				t.Fatalf("%s=%s: %v", EnvName(tc.name), tc.value, err)
			}
			if !tc.check(s) {
				t.Errorf("%s=%s did not take effect", EnvName(tc.name), tc.value)
			}
			if !strings.Contains(SettingsHelp(), tc.name) || !strings.Contains(SettingsHelp(), EnvName(tc.name)) {
				t.Errorf("SettingsHelp does not document %s (%s)", tc.name, EnvName(tc.name))
			}
		})
	}
}

func TestBadSettingsRejected(t *testing.T) {
	for _, tc := range []struct {
		set  string
		want []string
	}{
		{"ipc.bufer=1MiB", []string{`unknown setting "ipc.bufer"`, "valid names:", "ipc.buffer", "variant"}},
		{"ipc.buffer=lots", []string{"ipc.buffer", `"lots"`, "KiB, MiB, GiB", "1.5MiB"}},
		{"ipc.buffer=0", []string{"ipc.buffer", "positive"}},
		{"ipc.buffer=2GiB", []string{"ipc.buffer", "up to 1073741824 bytes (1GiB)"}},
		{"ipc.send=fast", []string{"ipc.send", "want sync or async"}},
		{"ipc.transport=tcp", []string{"ipc.transport", "socketpair or pipe"}},
		{"ipc.delta=maybe", []string{"ipc.delta", "on or off"}},
		{"chunking.algorithm=magic", []string{"chunking.algorithm", "cached or legacy"}},
		{"chunking.accounting=bytes", []string{"chunking.accounting", "wire or payload"}},
		{"chunking.max_chunk_bytes=100", []string{"chunking.max_chunk_bytes", "1048576 to 4089446"}},
		{"chunking.max_chunk_bytes=4MiB", []string{"chunking.max_chunk_bytes", "1048576 to 4089446", "KiB, MiB, GiB"}},
		{"chunking.max_chunk_bytes=2.5", []string{"chunking.max_chunk_bytes", "1048576 to 4089446"}},
		{"chunking.large_payloads=yes please", []string{"chunking.large_payloads", "on or off"}},
		{"runtime.nodes=0", []string{"runtime.nodes", "1 to 256"}},
		{"runtime.concurrency=-1", []string{"runtime.concurrency", "1 to 4096"}},
		{"runtime.queue=x", []string{"runtime.queue"}},
		{"runtime.task_timeout=soon", []string{"runtime.task_timeout", "duration"}},
		{"runtime.host_procs=0", []string{"runtime.host_procs", "auto or a whole number from 1 to 1024"}},
		{"runtime.host_procs=many", []string{"runtime.host_procs", "auto or a whole number from 1 to 1024"}},
		{"runtime.host_procs=1025", []string{"runtime.host_procs", "auto or a whole number from 1 to 1024"}},
		{"runtime.host_gogc=off", []string{"runtime.host_gogc", "inherit or a whole number from 10 to 10000"}},
		{"runtime.host_gogc=5", []string{"runtime.host_gogc", "inherit or a whole number from 10 to 10000"}},
		{"scenario.count=-5", []string{"scenario.count"}},
		{"scenario.seed=-1", []string{"scenario.seed", "whole number"}},
		{"variant=Has Spaces", []string{"variant", "a-z 0-9"}},
		{"runtime.completion_bytes=1KiB", []string{"runtime.completion_bytes", "from 1048576 to 68719476736 bytes"}},
		{"runtime.completion_bytes=lots", []string{"runtime.completion_bytes", "KiB, MiB, GiB"}},
		{"sidecar.retry.attempts=0", []string{"sidecar.retry.attempts", "1 to 100"}},
		{"sidecar.retry.attempts=many", []string{"sidecar.retry.attempts", "1 to 100"}},
		{"sidecar.retry.base_delay=0", []string{"sidecar.retry.base_delay", "duration from 1ms to 1m0s"}},
		{"sidecar.retry.max_delay=1h", []string{"sidecar.retry.max_delay", "duration from 1ms to 5m0s"}},
		{"sidecar.breaker.open_after=10ms", []string{"sidecar.breaker.open_after", "from 100ms to 10m0s", "0 for off"}},
		{"sidecar.breaker.open_after=-1s", []string{"sidecar.breaker.open_after", "0 for off"}},
		{"sidecar.breaker.probe_interval=0", []string{"sidecar.breaker.probe_interval", "from 10ms to 1m0s"}},
		{"sidecar.breaker.probe_interval=soon", []string{"sidecar.breaker.probe_interval"}},
		{"novalue", []string{"--set wants name=value", `"novalue"`}},
		{"=x", []string{"--set wants name=value"}},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := ResolveSettings([]string{tc.set}, noEnv)
			if err == nil {
				t.Fatalf("--set %s: got nil, want an error", tc.set)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("--set %s: got %q, want it to contain %q", tc.set, err, w)
				}
			}
		})
	}
	// A bad environment value names the variable.
	_, err := ResolveSettings(nil, func(k string) (string, bool) {
		if k == "AMDAHL_IPC_SEND" {
			return "fast", true
		}
		return "", false
	})
	if err == nil || !strings.Contains(err.Error(), "AMDAHL_IPC_SEND") {
		t.Errorf("AMDAHL_IPC_SEND=fast: got %v, want an error naming the variable", err)
	}
}

// TestSizeSettings: the size settings take the one size grammar of
// internal/bytesize, and Get reports plain bytes.
func TestSizeSettings(t *testing.T) {
	for _, tc := range []struct {
		name, value, get string
	}{
		{"ipc.buffer", "1.5MiB", "1572864"},
		{"ipc.buffer", "262144", "262144"},
		{"ipc.buffer", "2MB", "2000000"},
		{"ipc.buffer", "1GiB", "1073741824"},
		{"chunking.max_chunk_bytes", "3.5MiB", "3670016"},
		{"chunking.max_chunk_bytes", "2MB", "2000000"},
		{"chunking.max_chunk_bytes", "1MiB", "1048576"},
		{"chunking.max_chunk_bytes", "4089446B", "4089446"},
	} {
		s, err := ResolveSettings([]string{tc.name + "=" + tc.value}, noEnv)
		if err != nil {
			t.Errorf("--set %s=%s: %v", tc.name, tc.value, err)
			continue
		}
		if got, _ := s.Get(tc.name); got != tc.get {
			t.Errorf("--set %s=%s: Get = %q, want %q", tc.name, tc.value, got, tc.get)
		}
	}
}

func TestSettingsPrecedence(t *testing.T) {
	env := func(k string) (string, bool) {
		if k == "AMDAHL_RUNTIME_NODES" {
			return "3", true
		}
		return "", false
	}
	s, err := ResolveSettings(nil, env)
	if err != nil || s.Nodes != 3 {
		t.Fatalf("env only: got nodes %d, %v; want 3", s.Nodes, err)
	}
	s, err = ResolveSettings([]string{"runtime.nodes=4", "runtime.nodes=6"}, env)
	if err != nil || s.Nodes != 6 {
		t.Fatalf("--set over env, last wins: got nodes %d, %v; want 6", s.Nodes, err)
	}
	d, err := DefaultSettings()
	if err != nil {
		t.Fatal(err)
	}
	if d.IPCBuffer != ipc.DefaultBufferSize || d.IPCSend != ipc.Sync || !d.IPCDelta || d.MaxChunkBytes != chunking.DefaultMaxChunkBytes {
		t.Errorf("defaults: %+v", d)
	}
}

// TestHostProcs: runtime.host_procs is each task host's GOMAXPROCS, set
// in its environment; auto divides the parent's procs between the hosts.
func TestHostProcs(t *testing.T) {
	for _, tc := range []struct {
		sets  []string
		procs int
		want  int
	}{
		{[]string{"runtime.nodes=2"}, 2, 1},
		{[]string{"runtime.nodes=2"}, 16, 8},
		{[]string{"runtime.nodes=3"}, 16, 5},
		{[]string{"runtime.nodes=8"}, 2, 1},
		{[]string{"runtime.nodes=2", "runtime.host_procs=auto"}, 7, 3},
		{[]string{"runtime.nodes=8", "runtime.host_procs=4"}, 2, 4},
	} {
		s, err := ResolveSettings(tc.sets, noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.hostProcs(tc.procs); got != tc.want {
			t.Errorf("%v with %d procs: host procs %d, want %d", tc.sets, tc.procs, got, tc.want)
		}
	}
	s, err := ResolveSettings([]string{"runtime.host_procs=6"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if env := s.childEnv(); !slices.Contains(env, "GOMAXPROCS=6") || !slices.Contains(env, "GOGC=400") {
		t.Errorf("child environment %q lacks GOMAXPROCS=6 or the default GOGC=400", env)
	}
	if v, _ := s.Get("runtime.host_procs"); v != "6" {
		t.Errorf("Get: %q, want 6", v)
	}
	s, err = ResolveSettings([]string{"runtime.host_gogc=inherit"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range s.childEnv() {
		if strings.HasPrefix(kv, "GOGC=") {
			t.Errorf("runtime.host_gogc=inherit: child environment has %s", kv)
		}
	}
	if d, _ := ResolveSettings(nil, noEnv); d.HostProcs != 0 {
		t.Errorf("default host procs %d, want 0 (auto)", d.HostProcs)
	} else if v, _ := d.Get("runtime.host_procs"); v != "auto" {
		t.Errorf("default Get: %q, want auto", v)
	}
}

func TestSettingsCarryToChildren(t *testing.T) {
	s, err := ResolveSettings([]string{"ipc.buffer=128KiB", "ipc.send=async", "ipc.delta=off"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	env := s.childEnv()
	got := strings.Join(env, " ")
	for _, want := range []string{"AMDAHL_IPC_BUFFER=131072", "AMDAHL_IPC_SEND=async", "AMDAHL_IPC_DELTA=off", "AMDAHL_PERTURB_TASKHOST_EXECUTE=0s"} {
		if !strings.Contains(got, want) {
			t.Errorf("child environment %q lacks %q", got, want)
		}
	}
	// The host reads them back (taskproto.ServeHost).
	lookup := func(k string) (string, bool) {
		for _, kv := range env {
			if name, v, _ := strings.Cut(kv, "="); name == k {
				return v, true
			}
		}
		return "", false
	}
	h, err := taskproto.HostSettingsFromEnv(lookup)
	if err != nil {
		t.Fatal(err)
	}
	if h.Buffer != 128<<10 || h.Send != ipc.Async || h.Delta || h.ExecuteDelay != 0 {
		t.Errorf("host settings: %+v, want buffer 131072, async, delta off, no delay", h)
	}
	// The variables the host reads are the registry's names for them.
	for name, env := range map[string]string{"ipc.buffer": taskproto.EnvBuffer, "ipc.send": taskproto.EnvSend, "ipc.delta": taskproto.EnvDelta,
		"perturb.taskhost.execute": taskproto.EnvExecuteDelay} {
		if EnvName(name) != env || !slices.Contains(hostSettingNames[:], name) {
			t.Errorf("setting %s: registry variable %s, host reads %s", name, EnvName(name), env)
		}
	}
	s2, err := ResolveSettings([]string{"perturb.taskhost.execute=1s"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := taskproto.HostSettingsFromEnv(lookupIn(s2.childEnv())); err != nil || h.ExecuteDelay != time.Second {
		t.Errorf("the longest execute delay the registry takes: host reads %v, %v; want 1s", h.ExecuteDelay, err)
	}
}

// lookupIn looks a variable up in env, a list of NAME=value.
func lookupIn(env []string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		for _, kv := range env {
			if name, v, _ := strings.Cut(kv, "="); name == k {
				return v, true
			}
		}
		return "", false
	}
}

// TestWaveDefaults: disabling wave 0.1 restores the legacy buffer and the
// legacy chunk planner as defaults; an explicit setting still wins.
func TestWaveDefaults(t *testing.T) {
	t.Setenv(features.EnvDisableFrom, "0.1")
	features.Reset()
	t.Cleanup(features.Reset)
	d, err := DefaultSettings()
	if err != nil || d.IPCBuffer != 128<<10 || d.ChunkAlgorithm != chunking.Legacy {
		t.Errorf("wave 0.1 off: got buffer %d algorithm %v, %v; want %d and legacy", d.IPCBuffer, d.ChunkAlgorithm, err, 128<<10)
	}
	s, err := ResolveSettings([]string{"chunking.algorithm=cached", "ipc.buffer=1MiB"}, nil)
	if err != nil || s.ChunkAlgorithm != chunking.Cached || s.IPCBuffer != 1<<20 {
		t.Errorf("explicit settings over the wave: got %v %d, %v", s.ChunkAlgorithm, s.IPCBuffer, err)
	}
	t.Setenv(features.EnvDisableFrom, "")
	features.Reset()
	if d, err := DefaultSettings(); err != nil || d.IPCBuffer != ipc.DefaultBufferSize || d.ChunkAlgorithm != chunking.Cached {
		t.Errorf("every wave on: got buffer %d algorithm %v, %v; want %d and cached", d.IPCBuffer, d.ChunkAlgorithm, err, ipc.DefaultBufferSize)
	}
	// With a lookup of its own, ResolveSettings reads the wave variable
	// through it too.
	s, err = ResolveSettings(nil, func(k string) (string, bool) { return "0.1", k == features.EnvDisableFrom })
	if err != nil || s.IPCBuffer != 128<<10 || s.ChunkAlgorithm != chunking.Legacy {
		t.Errorf("wave 0.1 off through lookupEnv: got buffer %d algorithm %v, %v", s.IPCBuffer, s.ChunkAlgorithm, err)
	}
}

// TestWaveInvalid: a wave variable that is not a version is an error that
// names it and the valid waves, never "every wave enabled".
func TestWaveInvalid(t *testing.T) {
	t.Setenv(features.EnvDisableFrom, "latest")
	features.Reset()
	t.Cleanup(features.Reset)
	check := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), features.EnvDisableFrom) || !strings.Contains(err.Error(), features.Wave0_1.String()) {
			t.Errorf("%s with %s=latest: %v, want an error naming the variable and wave 0.1", what, features.EnvDisableFrom, err)
		}
	}
	_, err := DefaultSettings()
	check("DefaultSettings", err)
	_, err = ResolveSettings(nil, nil)
	check("ResolveSettings", err)
	_, err = ResolveSettings(nil, func(k string) (string, bool) { return "x.y", k == features.EnvDisableFrom })
	check("ResolveSettings through lookupEnv", err)
	if help := SettingsHelp(); !strings.Contains(help, "1048576") {
		t.Errorf("SettingsHelp with an invalid wave variable lacks the default ipc.buffer 1048576:\n%s", help)
	}
}

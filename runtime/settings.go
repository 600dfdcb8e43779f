package runtime

import (
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/amdahl-rt/amdahl/chunking"
	"github.com/amdahl-rt/amdahl/internal/bytesize"
	"github.com/amdahl-rt/amdahl/internal/features"
	"github.com/amdahl-rt/amdahl/ipc"
	"github.com/amdahl-rt/amdahl/ipc/taskproto"
	"github.com/amdahl-rt/amdahl/telemetry"
)

// Transport is how the runtime connects to its task hosts (setting
// ipc.transport).
type Transport uint8

// The transports to task hosts.
const (
	// Socketpair: an AF_UNIX stream socketpair handed to the child at spawn.
	Socketpair Transport = iota
	// Pipes: two anonymous pipes sized with F_SETPIPE_SZ.
	Pipes
)

// String returns "socketpair" or "pipe".
func (t Transport) String() string {
	if t == Pipes {
		return ipc.TransportPipe
	}
	return ipc.TransportSocketpair
}

// ParseTransport parses an ipc.transport value.
func ParseTransport(s string) (Transport, error) {
	switch s {
	case ipc.TransportSocketpair:
		return Socketpair, nil
	case ipc.TransportPipe:
		return Pipes, nil
	}
	return 0, fmt.Errorf("want %s or %s", ipc.TransportSocketpair, ipc.TransportPipe)
}

// Settings are the runtime's knobs. Each has one name, usable as
// `--set name=value` and as the environment variable AMDAHL_<NAME> (dots
// and the name upper-cased: ipc.buffer ⇔ AMDAHL_IPC_BUFFER). Build them
// with DefaultSettings or ResolveSettings; the zero value is not valid.
type Settings struct {
	IPCBuffer       int                 // ipc.buffer: requested send buffer, bytes
	IPCSend         ipc.Mode            // ipc.send: sync | async
	IPCTransport    Transport           // ipc.transport: socketpair | pipe
	IPCDelta        bool                // ipc.delta: on | off
	ChunkAlgorithm  chunking.Algorithm  // chunking.algorithm: cached | legacy
	ChunkAccounting chunking.Accounting // chunking.accounting: wire | payload
	MaxChunkBytes   int                 // chunking.max_chunk_bytes
	LargePayloads   bool                // chunking.large_payloads
	Nodes           int                 // runtime.nodes: task hosts at most
	Concurrency     int                 // runtime.concurrency: units of work in flight at most
	Queue           int                 // runtime.queue: submitted units waiting for a worker at most
	TaskTimeout     time.Duration       // runtime.task_timeout: 0 = none
	CompletionBytes int64               // runtime.completion_bytes: payload bytes of fanout completions in flight
	HostProcs       int                 // runtime.host_procs: GOMAXPROCS of each task host; 0 = auto (hostProcs)
	HostGOGC        int                 // runtime.host_gogc: GOGC of each task host; 0 = inherit (not set)
	Count           int                 // scenario.count: 0 = the scenario's own
	Seed            uint64              // scenario.seed (when SeedSet)
	SeedSet         bool
	Variant         string // variant: low-cardinality label on every span and metric
	// Sidecar calls: the retry budget of each call (sidecar.retry.*) and
	// the circuit breaker (sidecar.breaker.*; OpenAfter 0 = off).
	RetryAttempts    int
	RetryBaseDelay   time.Duration
	RetryMaxDelay    time.Duration
	BreakerOpenAfter time.Duration
	BreakerProbe     time.Duration
	// Perturb lengthens phases on purpose (perturb.<component>.<phase>): a
	// causal experiment; 0 (the default) is off.
	Perturb [len(perturbable)]time.Duration
}

// perturbable are the phases perturb.<component>.<phase> can lengthen:
// those measured by a telemetry.Component (Start … End), which
// sleeps in End.
var perturbable = [...]struct {
	component string
	phase     telemetry.Phase
}{
	{"ipc", telemetry.Serialize},
	{"ipc", telemetry.Send},
	{"taskhost", telemetry.Execute},
}

func parsePerturb(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > time.Second {
		return 0, errors.New("want a Go duration from 0 to 1s, such as 200us or 2ms (0 for off)")
	}
	return d, nil
}

// setting is one knob of the registry.
type setting struct {
	name   string
	values string // valid values, for messages and help
	doc    string
	get    func(*Settings) string
	set    func(*Settings, string) error
}

// EnvName returns the environment variable of a setting name:
// "ipc.buffer" → "AMDAHL_IPC_BUFFER".
func EnvName(name string) string {
	return "AMDAHL_" + strings.ToUpper(strings.ReplaceAll(name, ".", "_"))
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func parseOnOff(s string) (bool, error) {
	switch s {
	case "on", "true":
		return true, nil
	case "off", "false":
		return false, nil
	}
	return false, errors.New("want on or off")
}

func parseCount(s string, min, max int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < min || n > max {
		return 0, fmt.Errorf("want a whole number from %d to %d", min, max)
	}
	return n, nil
}

// parseSize parses a size (package internal/bytesize: bytes, or a number
// with unit B, KB, MB, GB, KiB, MiB, GiB) from min to max bytes.
func parseSize(s string, min, max int) (int, error) {
	n, err := bytesize.Parse(s)
	if err != nil || n < min || n > max {
		return 0, fmt.Errorf("want a size from %d to %d bytes: %s", min, max, bytesize.Want)
	}
	return n, nil
}

// durationSetting is a setting whose value is a Go duration from min to
// max; zero, if not "", is what 0 means in the help ("off").
func durationSetting(name string, min, max time.Duration, zero string, field func(*Settings) *time.Duration, doc string) setting {
	want := fmt.Sprintf("a Go duration from %v to %v (e.g. 500ms, 3s)", min, max)
	if zero != "" {
		want += "; 0 for " + zero
	}
	return setting{name: name, values: want, doc: doc,
		get: func(s *Settings) string { return field(s).String() },
		set: func(s *Settings, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || (d < min && !(zero != "" && d == 0)) || d > max {
				return errors.New("want " + want)
			}
			*field(s) = d
			return nil
		}}
}

// wordOrCount is a setting whose value is word (the field 0) or a whole
// number from min to max.
func wordOrCount(name, word string, min, max int, field func(*Settings) *int, doc string) setting {
	return setting{name: name, values: fmt.Sprintf("%s, or %d to %d", word, min, max), doc: doc,
		get: func(s *Settings) string {
			if n := *field(s); n != 0 {
				return strconv.Itoa(n)
			}
			return word
		},
		set: func(s *Settings, v string) error {
			n := 0
			if v != word {
				var err error
				if n, err = parseCount(v, min, max); err != nil {
					return fmt.Errorf("want %s or a whole number from %d to %d", word, min, max)
				}
			}
			*field(s) = n
			return nil
		}}
}

var registry = []setting{
	{name: "ipc.buffer", values: fmt.Sprintf("a size from 1B to %s (e.g. 262144, 256KiB, 1.5MiB)", bytesize.Format(ipc.MaxBufferSize)),
		doc: "requested kernel send buffer of each end (SO_SNDBUF, or F_SETPIPE_SZ for pipes); default 1MiB, 128KiB with AMDAHL_DISABLE_FEATURES_FROM_VERSION=0.1",
		get: func(s *Settings) string { return strconv.Itoa(s.IPCBuffer) },
		set: func(s *Settings, v string) error {
			n, err := ipc.ParseBufferSize(v)
			if err != nil {
				return fmt.Errorf("want a positive size up to %d bytes (%s): %s (e.g. 262144, 256KiB, 1.5MiB)",
					ipc.MaxBufferSize, bytesize.Format(ipc.MaxBufferSize), bytesize.Want)
			}
			s.IPCBuffer = n
			return nil
		}},
	{name: "ipc.send", values: "sync, async", doc: "sync: Send returns once the bytes are written (backpressure felt by the caller); async: once queued",
		get: func(s *Settings) string { return s.IPCSend.String() },
		set: func(s *Settings, v string) error {
			m, err := ipc.ParseMode(v)
			if err != nil {
				return errors.New("want sync or async")
			}
			s.IPCSend = m
			return nil
		}},
	{name: "ipc.transport", values: "socketpair, pipe", doc: "connection to each task host",
		get: func(s *Settings) string { return s.IPCTransport.String() },
		set: func(s *Settings, v string) (err error) { s.IPCTransport, err = ParseTransport(v); return err }},
	{name: "ipc.delta", values: "on, off", doc: "send an unchanged environment as \"identical\" instead of in full",
		get: func(s *Settings) string { return onOff(s.IPCDelta) },
		set: func(s *Settings, v string) (err error) { s.IPCDelta, err = parseOnOff(v); return err }},
	{name: "chunking.algorithm", values: "cached, legacy", doc: "completion planner: cached sizes each action once; legacy is the pre-optimisation algorithm (A/B); default cached, legacy with AMDAHL_DISABLE_FEATURES_FROM_VERSION=0.1",
		get: func(s *Settings) string { return s.ChunkAlgorithm.String() },
		set: func(s *Settings, v string) error {
			a, err := chunking.ParseAlgorithm(v)
			if err != nil {
				return errors.New("want cached or legacy")
			}
			s.ChunkAlgorithm = a
			return nil
		}},
	{name: "chunking.accounting", values: "wire, payload", doc: "what counts toward a chunk's size: wire keeps every chunk within the limit; payload is .NET-exact",
		get: func(s *Settings) string { return s.ChunkAccounting.String() },
		set: func(s *Settings, v string) error {
			a, err := chunking.ParseAccounting(v)
			if err != nil {
				return errors.New("want wire or payload")
			}
			s.ChunkAccounting = a
			return nil
		}},
	{name: "chunking.max_chunk_bytes", values: fmt.Sprintf("a size from %d to %d bytes (e.g. 2MB, 3.5MiB)", chunking.MinMaxChunkBytes, chunking.DefaultMaxChunkBytes),
		doc: "chunk size limit",
		get: func(s *Settings) string { return strconv.Itoa(s.MaxChunkBytes) },
		set: func(s *Settings, v string) (err error) {
			s.MaxChunkBytes, err = parseSize(v, chunking.MinMaxChunkBytes, chunking.DefaultMaxChunkBytes)
			return err
		}},
	{name: "chunking.large_payloads", values: "on, off", doc: "announce large-payload support: an oversized action gets a chunk of its own instead of failing the orchestration",
		get: func(s *Settings) string { return onOff(s.LargePayloads) },
		set: func(s *Settings, v string) (err error) { s.LargePayloads, err = parseOnOff(v); return err }},
	{name: "runtime.nodes", values: "1 to 256", doc: "task host processes at most (spawned lazily, reused)",
		get: func(s *Settings) string { return strconv.Itoa(s.Nodes) },
		set: func(s *Settings, v string) (err error) { s.Nodes, err = parseCount(v, 1, 256); return err }},
	{name: "runtime.concurrency", values: "1 to 4096", doc: "units of work in flight at most",
		get: func(s *Settings) string { return strconv.Itoa(s.Concurrency) },
		set: func(s *Settings, v string) (err error) { s.Concurrency, err = parseCount(v, 1, 4096); return err }},
	{name: "runtime.queue", values: "1 to 65536", doc: "submitted units waiting for a worker at most; Submit blocks beyond it",
		get: func(s *Settings) string { return strconv.Itoa(s.Queue) },
		set: func(s *Settings, v string) (err error) { s.Queue, err = parseCount(v, 1, 65536); return err }},
	{name: "runtime.completion_bytes", values: "a size from 1MiB to 64GiB (e.g. 64MiB, 1GiB)",
		doc: "payload bytes of the fanout completions in flight at most (the sender and the in-process sidecar hold up to about twice them while they are sent and reassembled); a unit waits for them in dispatch, and a completion larger than this runs alone",
		get: func(s *Settings) string { return strconv.FormatInt(s.CompletionBytes, 10) },
		set: func(s *Settings, v string) error {
			n, err := parseSize(v, 1<<20, 64<<30)
			s.CompletionBytes = int64(n)
			return err
		}},
	{name: "runtime.task_timeout", values: "a Go duration (e.g. 30s, 2m); 0 for none", doc: "a task still running in its host after this fails and the host is replaced",
		get: func(s *Settings) string { return s.TaskTimeout.String() },
		set: func(s *Settings, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return errors.New("want a non-negative Go duration such as 30s or 2m (0 for none)")
			}
			s.TaskTimeout = d
			return nil
		}},
	wordOrCount("runtime.host_procs", "auto", 1, 1024, func(s *Settings) *int { return &s.HostProcs },
		"GOMAXPROCS of each task host (set in its environment): auto gives each the parent's GOMAXPROCS over runtime.nodes, at least 1, so the hosts together run no more Go threads at once than the parent may; a host runs one task at a time"),
	wordOrCount("runtime.host_gogc", "inherit", 10, 10000, func(s *Settings) *int { return &s.HostGOGC },
		"GOGC of each task host (set in its environment; default 400): a host's live heap is small, so at Go's 100 it collects every 4 MiB it allocates, a few dozen taskhost units; inherit leaves Go's default (or the parent's GOGC); a task that keeps a large heap wants less, its heap growing to (1 + GOGC/100) times what it keeps"),
	{name: "perturb.ipc.serialize", values: "a Go duration from 0 to 1s (e.g. 200us); 0 for off", doc: "causal experiment: every ipc.serialize phase sleeps this much longer (amdahl ab --candidate perturb.ipc.serialize=200us measures Δe2e/Δphase)",
		get: func(s *Settings) string { return s.Perturb[0].String() },
		set: func(s *Settings, v string) (err error) { s.Perturb[0], err = parsePerturb(v); return err }},
	{name: "perturb.ipc.send", values: "a Go duration from 0 to 1s (e.g. 200us); 0 for off", doc: "causal experiment: every ipc.send phase sleeps this much longer (amdahl ab --candidate perturb.ipc.send=200us measures Δe2e/Δphase)",
		get: func(s *Settings) string { return s.Perturb[1].String() },
		set: func(s *Settings, v string) (err error) { s.Perturb[1], err = parsePerturb(v); return err }},
	{name: "perturb.taskhost.execute", values: "a Go duration from 0 to 1s (e.g. 200us); 0 for off", doc: "causal experiment: every taskhost.execute phase sleeps this much longer (amdahl ab --candidate perturb.taskhost.execute=200us measures Δe2e/Δphase)",
		get: func(s *Settings) string { return s.Perturb[2].String() },
		set: func(s *Settings, v string) (err error) { s.Perturb[2], err = parsePerturb(v); return err }},
	{name: "sidecar.retry.attempts", values: "1 to 100", doc: "attempts of each call to the sidecar (a chunk, StartInstance, an abandon) that fails Unavailable, Unknown, DeadlineExceeded or Internal, the first included",
		get: func(s *Settings) string { return strconv.Itoa(s.RetryAttempts) },
		set: func(s *Settings, v string) (err error) { s.RetryAttempts, err = parseCount(v, 1, 100); return err }},
	durationSetting("sidecar.retry.base_delay", time.Millisecond, time.Minute, "", func(s *Settings) *time.Duration { return &s.RetryBaseDelay },
		"backoff before a call's first retry; it doubles on each retry up to sidecar.retry.max_delay (+0-20 % jitter)"),
	durationSetting("sidecar.retry.max_delay", time.Millisecond, 5*time.Minute, "", func(s *Settings) *time.Duration { return &s.RetryMaxDelay },
		"longest backoff between two attempts of a call"),
	durationSetting("sidecar.breaker.open_after", 100*time.Millisecond, 10*time.Minute, "off", func(s *Settings) *time.Duration { return &s.BreakerOpenAfter },
		"circuit breaker: once no call has reached the sidecar for this long (each answered Unavailable), units that need it fail at once, class \"sidecar unavailable\", instead of each spending the retry budget, and calls waiting out a backoff stop; probes close it when the sidecar answers again"),
	durationSetting("sidecar.breaker.probe_interval", 10*time.Millisecond, time.Minute, "", func(s *Settings) *time.Duration { return &s.BreakerProbe },
		"while the breaker is open, the sidecar is probed this often (one cheap call, with this as its timeout)"),
	{name: "scenario.count", values: "1 to 10000000, or 0 for the scenario's own", doc: "units of work in the run",
		get: func(s *Settings) string { return strconv.Itoa(s.Count) },
		set: func(s *Settings, v string) (err error) { s.Count, err = parseCount(v, 0, 10_000_000); return err }},
	{name: "scenario.seed", values: "a whole number from 0 to 18446744073709551615", doc: "seed of the scenario's generator (default: the scenario's own)",
		get: func(s *Settings) string {
			if !s.SeedSet {
				return ""
			}
			return strconv.FormatUint(s.Seed, 10)
		},
		set: func(s *Settings, v string) error {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return errors.New("want a whole number from 0 to 18446744073709551615")
			}
			s.Seed, s.SeedSet = n, true
			return nil
		}},
	{name: "variant", values: "1 to 32 of a-z 0-9 _ -", doc: "label of this run on every span and metric (baseline/candidate, canary/stable)",
		get: func(s *Settings) string { return s.Variant },
		set: func(s *Settings, v string) error {
			if v == "" || len(v) > 32 || strings.TrimLeft(v, "abcdefghijklmnopqrstuvwxyz0123456789_-") != "" {
				return errors.New("want 1 to 32 characters of a-z 0-9 _ -")
			}
			s.Variant = v
			return nil
		}},
}

func lookup(name string) (*setting, bool) {
	for i := range registry {
		if registry[i].name == name {
			return &registry[i], true
		}
	}
	return nil, false
}

// SettingNames returns every setting name, sorted.
func SettingNames() []string {
	out := make([]string, len(registry))
	for i, s := range registry {
		out[i] = s.name
	}
	sort.Strings(out)
	return out
}

// SettingError is an unknown setting name or an invalid value.
type SettingError struct {
	Name   string
	Value  string
	Source string // "--set", or the environment variable
	Reason string
}

func (e *SettingError) Error() string {
	if e.Value == "" && e.Reason == "" {
		return fmt.Sprintf("unknown setting %q (from %s); valid names: %s", e.Name, e.Source, strings.Join(SettingNames(), ", "))
	}
	return fmt.Sprintf("invalid value %q for setting %s (from %s): %s", e.Value, e.Name, e.Source, e.Reason)
}

// legacyIPCBuffer is ipc.buffer's default with wave 0.1 disabled: the
// seed's 128 KiB.
const legacyIPCBuffer = 128 << 10

// DefaultSettings returns the defaults, the feature-wave dependent ones
// resolved for this process (AMDAHL_DISABLE_FEATURES_FROM_VERSION, resolved
// once per process): with wave 0.1 disabled, ipc.buffer is 128KiB and
// chunking.algorithm is legacy. An invalid value of that variable is an
// error naming it and the valid waves.
func DefaultSettings() (Settings, error) {
	waves, err := features.Current()
	if err != nil {
		return Settings{}, err
	}
	return defaultSettings(waves), nil
}

// defaultSettings returns the defaults under the feature waves res.
func defaultSettings(waves features.Resolution) Settings {
	nodes := min(max(goruntime.NumCPU(), 2), 8)
	alg, buffer := chunking.Cached, ipc.DefaultBufferSize
	if !waves.Enabled(features.Wave0_1) {
		alg, buffer = chunking.Legacy, legacyIPCBuffer
	}
	return Settings{
		IPCBuffer:       buffer,
		ChunkAlgorithm:  alg,
		IPCSend:         ipc.Sync,
		IPCTransport:    Socketpair,
		IPCDelta:        true,
		MaxChunkBytes:   chunking.DefaultMaxChunkBytes,
		Nodes:           nodes,
		Concurrency:     2 * nodes,
		Queue:           2 * nodes,
		TaskTimeout:     2 * time.Minute,
		CompletionBytes: DefaultCompletionBytes,
		HostGOGC:        DefaultHostGOGC,
		Variant:         "baseline",

		RetryAttempts:    chunking.DefaultRetryPolicy.MaxAttempts,
		RetryBaseDelay:   chunking.DefaultRetryPolicy.BaseDelay,
		RetryMaxDelay:    chunking.DefaultRetryPolicy.MaxDelay,
		BreakerOpenAfter: DefaultBreakerOpenAfter,
		BreakerProbe:     DefaultBreakerProbe,
	}
}

// Set sets the setting name from its string value; source names where it
// came from in the error ("--set", "AMDAHL_IPC_BUFFER"). An unknown name
// or invalid value is a *SettingError, and the settings are left as they
// were.
func (s *Settings) Set(name, value, source string) error {
	st, ok := lookup(name)
	if !ok {
		return &SettingError{Name: name, Source: source}
	}
	// Set a copy: a setter may have assigned its field before it failed,
	// and a refused value must leave the settings as they were.
	next := *s
	if err := st.set(&next, strings.TrimSpace(value)); err != nil {
		return &SettingError{Name: name, Value: value, Source: source, Reason: err.Error()}
	}
	*s = next
	return nil
}

// Get returns the value of the setting name as a string ("" for an unset
// scenario.seed); ok is false for an unknown name.
func (s *Settings) Get(name string) (string, bool) {
	st, ok := lookup(name)
	if !ok {
		return "", false
	}
	return st.get(s), true
}

// Map returns every setting's value by name (summary.json, logs).
func (s *Settings) Map() map[string]string {
	out := make(map[string]string, len(registry))
	for _, st := range registry {
		out[st.name] = st.get(s)
	}
	return out
}

// ResolveSettings builds the settings: defaults (the feature waves from
// AMDAHL_DISABLE_FEATURES_FROM_VERSION), then the environment
// (AMDAHL_<NAME>), then sets, each "name=value" (a --set flag), later ones
// winning. Variables are read with lookupEnv; nil means the process
// environment, with the waves resolved once per process (DefaultSettings).
// Any unknown name or invalid value is a *SettingError naming the setting
// and the valid names or values, and an invalid wave variable is an error
// naming it and the valid waves; nothing is half-applied.
func ResolveSettings(sets []string, lookupEnv func(string) (string, bool)) (Settings, error) {
	var s Settings
	var err error
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
		s, err = DefaultSettings()
	} else {
		var waves features.Resolution
		waves, err = features.FromEnv(lookupEnv)
		s = defaultSettings(waves)
	}
	if err != nil {
		return Settings{}, err
	}
	for _, st := range registry {
		if v, ok := lookupEnv(EnvName(st.name)); ok {
			if err := s.Set(st.name, v, EnvName(st.name)); err != nil {
				return Settings{}, err
			}
		}
	}
	for _, kv := range sets {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return Settings{}, fmt.Errorf("--set wants name=value, got %q (valid names: %s)", kv, strings.Join(SettingNames(), ", "))
		}
		if err := s.Set(strings.TrimSpace(name), value, "--set"); err != nil {
			return Settings{}, err
		}
	}
	return s, nil
}

// SettingsHelp returns a table of every setting: name, environment
// variable, valid values, default and what it does (for `amdahl run --help`).
func SettingsHelp() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	def, err := DefaultSettings()
	if err != nil {
		// Help still shows the shipped defaults; running reports the
		// invalid variable.
		def = defaultSettings(features.Resolution{DisableFrom: features.EnableAll})
	}
	fmt.Fprintln(tw, "  NAME\tENVIRONMENT\tDEFAULT\tVALUES")
	names := SettingNames()
	for _, n := range names {
		st, _ := lookup(n)
		d := st.get(&def)
		if d == "" {
			d = "(scenario's)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", st.name, EnvName(st.name), d, st.values)
	}
	tw.Flush()
	b.WriteString("\n")
	for _, n := range names {
		st, _ := lookup(n)
		fmt.Fprintf(&b, "  %-31s %s\n", st.name, st.doc)
	}
	return b.String()
}

// hostSettingNames are the settings a task host uses: the parent passes
// them, resolved, in the host's environment (childEnv), and the host reads
// them back with taskproto.HostSettingsFromEnv (their variables are
// taskproto's Env* constants), so both ends of a connection use the same
// values.
var hostSettingNames = [...]string{"ipc.buffer", "ipc.send", "ipc.delta", "perturb.taskhost.execute"}

// childEnv returns the environment entries that carry the host settings to
// a task host, its GOMAXPROCS (runtime.host_procs) and its GOGC
// (runtime.host_gogc, unless inherit).
func (s *Settings) childEnv() []string {
	out := make([]string, 0, len(hostSettingNames)+2)
	for _, name := range hostSettingNames {
		v, _ := s.Get(name)
		out = append(out, EnvName(name)+"="+v)
	}
	out = append(out, "GOMAXPROCS="+strconv.Itoa(s.hostProcs(goruntime.GOMAXPROCS(0))))
	if s.HostGOGC > 0 {
		out = append(out, "GOGC="+strconv.Itoa(s.HostGOGC))
	}
	return out
}

// DefaultCompletionBytes is runtime.completion_bytes's default: one of
// the mixed and fanout scenarios' largest completions (32 × 2 MiB) at a
// time, which keeps a mixed run within 300 MB whatever its length
// (TestMixedMemory).
const DefaultCompletionBytes = 64 << 20

// Defaults of sidecar.breaker.open_after and
// sidecar.breaker.probe_interval: a sidecar that has answered nothing for
// 3 s is down, not slow (a live one answers a unit's call in well under
// 100 ms), and a probe twice a second finds it back within half a second.
const (
	DefaultBreakerOpenAfter = 3 * time.Second
	DefaultBreakerProbe     = 500 * time.Millisecond
)

// DefaultHostGOGC is runtime.host_gogc's default. At Go's GOGC of 100 a
// heap's target is at least 4 MiB, at 400 at least 16 MiB; a task host
// that keeps little between tasks (our reading of the built-in ones) sits
// at that floor, so it collects every few dozen taskhost units, each
// collection's fixed cost spread over few. 400 costs the hosts less CPU
// per taskhost unit than 200 or 100 (docs/measurements/telemetry-cost.md,
// "Measured").
const DefaultHostGOGC = 400

// hostProcs returns each task host's GOMAXPROCS: runtime.host_procs, or
// for auto the parent's procs (its GOMAXPROCS) over runtime.nodes, at
// least 1. A task host serves one task at a time; with more Ps than it
// uses, its idle ones still cost CPU (spinning threads looking for work,
// idle-time GC workers, contended runtime locks) that the parent and the
// other hosts could have run (docs/measurements/telemetry-cost.md,
// "Measured": 2 Ps in each of 2 hosts against 1).
func (s *Settings) hostProcs(procs int) int {
	if s.HostProcs > 0 {
		return s.HostProcs
	}
	return max(1, procs/max(1, s.Nodes))
}

// delays returns the phase delays of the parent's components that the
// perturb.* settings call for, by component (the task host's own are
// carried by childEnv).
func (s *Settings) delays() map[string]map[telemetry.Phase]time.Duration {
	out := map[string]map[telemetry.Phase]time.Duration{}
	for i, p := range perturbable {
		if d := s.Perturb[i]; d > 0 && p.component != "taskhost" {
			if out[p.component] == nil {
				out[p.component] = map[telemetry.Phase]time.Duration{}
			}
			out[p.component][p.phase] = d
		}
	}
	return out
}

// ipcOptions returns the ipc options of either end of a connection to a
// task host: the ipc settings and the task-host protocol.
func (s *Settings) ipcOptions() []ipc.Option {
	return []ipc.Option{ipc.WithBufferSize(s.IPCBuffer), ipc.WithMode(s.IPCSend), taskproto.WithCodec(taskproto.WithDelta(s.IPCDelta))}
}

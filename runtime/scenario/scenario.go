package scenario

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/amdahl-rt/amdahl/internal/bytesize"
)

// Kind is the kind of a unit of work.
type Kind uint8

const (
	// KindTask is a task dispatched to an out-of-process task host (ipc),
	// whose result is completed to the sidecar.
	KindTask Kind = iota + 1
	// KindFanout is an orchestration completion of many actions, chunked to
	// the sidecar.
	KindFanout
)

// String returns "taskhost" or "fanout", the names ParseKind accepts.
func (k Kind) String() string {
	switch k {
	case KindTask:
		return "taskhost"
	case KindFanout:
		return "fanout"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind parses a kind name as written in scenario files. The error
// lists the valid names.
func ParseKind(s string) (Kind, error) {
	switch s {
	case "taskhost":
		return KindTask, nil
	case "fanout":
		return KindFanout, nil
	}
	return 0, fmt.Errorf("invalid kind %q (valid: taskhost, fanout)", s)
}

// Scenario is a declarative, seeded workload: Count units of work, each drawn
// from one of Workloads by weight. The same Scenario (Seed included) always
// generates the same units of work; see NewGenerator.
//
// Scenarios are usually loaded with Load, Parse or
// Builtin, which fill in every default and validate. A Scenario built
// in Go may leave fields zero where the field's doc says so; Validate and
// NewGenerator treat those as the defaults.
type Scenario struct {
	Name        string
	Description string
	Seed        uint64
	Count       int        // units of work in a run (≥ 1)
	Workloads   []Workload // ≥ 1; chosen per unit by weight
}

// Workload is one kind of unit of work within a Scenario.
type Workload struct {
	Kind   Kind
	Weight float64     // > 0; 0 means the default, 1
	Task   *TaskSpec   // set iff Kind == KindTask; nil with KindTask means DefaultTaskSpec
	Fanout *FanoutSpec // set iff Kind == KindFanout
}

// TaskSpec is the seed-001 (MSBuild TaskHost) shape: configuration packets
// of log-normal size, an environment repeated on every packet, and real CPU
// work in the host.
//
// A zero ConfigMeanBytes, ConfigSigma, ConfigCapBytes, ConfigMinBytes or
// Parameters means that field's default. EnvironmentBytes and ExecutePasses
// are taken as given, since 0 is a valid value for both; start from
// DefaultTaskSpec to get their defaults.
type TaskSpec struct {
	ConfigMeanBytes  int     // mean of the log-normal configuration size (default 46 KB = 46000)
	ConfigSigma      float64 // σ of the underlying normal (default 1.0; 0 < σ ≤ 3)
	ConfigCapBytes   int     // samples are capped here (default 1.5 MB = 1500000; ≤ 64 MiB)
	ConfigMinBytes   int     // samples are floored here (default 256)
	EnvironmentBytes int     // size of the environment map sent with every packet (default 6 KB = 6000; ≤ 64 MiB); the same map contents on every item
	Parameters       int     // number of parameters the configuration is split across (default 8; 1..10000)
	ExecutePasses    int     // CPU work in the host: passes of SHA-256 over the parameter bytes (default 2; 0..1000)
}

// Task defaults, from seed 001 (see builtin/taskhost.yaml).
const (
	defaultConfigMeanBytes  = 46_000
	defaultConfigSigma      = 1.0
	defaultConfigCapBytes   = 1_500_000
	defaultConfigMinBytes   = 256
	defaultEnvironmentBytes = 6_000
	defaultParameters       = 8
	defaultExecutePasses    = 2
)

// Limits enforced by Validate. They keep a scenario file from asking for more
// memory or CPU than a benchmark run can sensibly give it.
const (
	maxConfigBytes      = 64 << 20
	maxSigma            = 3.0
	maxEnvironmentBytes = 64 << 20
	maxParameters       = 10_000
	maxExecutePasses    = 1_000
	maxActions          = 100_000
	maxActionBytes      = 8 << 20
)

// DefaultTaskSpec returns a TaskSpec with every field set to its default.
func DefaultTaskSpec() TaskSpec {
	return TaskSpec{
		ConfigMeanBytes:  defaultConfigMeanBytes,
		ConfigSigma:      defaultConfigSigma,
		ConfigCapBytes:   defaultConfigCapBytes,
		ConfigMinBytes:   defaultConfigMinBytes,
		EnvironmentBytes: defaultEnvironmentBytes,
		Parameters:       defaultParameters,
		ExecutePasses:    defaultExecutePasses,
	}
}

// FanoutSpec is the seed-000 (Durable Task chunking) shape: each unit of work
// is one of Shapes, chosen by weight.
type FanoutSpec struct{ Shapes []FanoutShape }

// FanoutShape is one orchestration completion: Actions actions of
// ActionBytes each.
type FanoutShape struct {
	Name             string  // unique within the spec, e.g. "64x128KiB"; "" means "<Actions>x<bytesize.Format(ActionBytes)>"
	Weight           float64 // > 0; 0 means the default, 1
	Actions          int     // 1..100000
	ActionBytes      int     // payload bytes of each action (1..8 MiB)
	FirstActionBytes int     // if > 0, the first action's payload size instead (the first-action-oversized case); 0 = same as the others (≤ 8 MiB)
}

// Error is an invalid scenario: a file that does not parse, or a
// value out of range. Field is the path of the offending field in file
// notation ("workloads[1].task.config_mean"); File, Line and Column are set
// when the scenario came from a file (Line and Column are 1-based, 0 when
// unknown).
type Error struct {
	File         string
	Line, Column int
	Field        string
	Msg          string
}

// Error returns "file:line:col: field: msg", omitting the parts that are
// empty.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		if b.Len() > 0 {
			b.WriteByte(':')
		}
		b.WriteString(strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Column))
		}
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func fieldErrorf(field, format string, args ...any) *Error {
	return &Error{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Validate reports the first problem with s as a *Error, or nil.
// Zero values documented as defaults are accepted. Validate does not modify s.
func (s *Scenario) Validate() error {
	c := s.clone()
	c.applyDefaults()
	if err := c.validate(); err != nil {
		return err
	}
	return nil
}

// clone returns a deep copy of s.
func (s *Scenario) clone() *Scenario {
	c := *s
	c.Workloads = slices.Clone(s.Workloads)
	for i := range c.Workloads {
		w := &c.Workloads[i]
		if w.Task != nil {
			t := *w.Task
			w.Task = &t
		}
		if w.Fanout != nil {
			w.Fanout = &FanoutSpec{Shapes: slices.Clone(w.Fanout.Shapes)}
		}
	}
	return &c
}

// applyDefaults replaces zero values that are documented as defaults.
func (s *Scenario) applyDefaults() {
	for i := range s.Workloads {
		w := &s.Workloads[i]
		if w.Weight == 0 {
			w.Weight = 1
		}
		if w.Kind == KindTask && w.Task == nil {
			t := DefaultTaskSpec()
			w.Task = &t
		}
		if t := w.Task; t != nil {
			if t.ConfigMeanBytes == 0 {
				t.ConfigMeanBytes = defaultConfigMeanBytes
			}
			if t.ConfigSigma == 0 {
				t.ConfigSigma = defaultConfigSigma
			}
			if t.ConfigCapBytes == 0 {
				t.ConfigCapBytes = defaultConfigCapBytes
			}
			if t.ConfigMinBytes == 0 {
				t.ConfigMinBytes = defaultConfigMinBytes
			}
			if t.Parameters == 0 {
				t.Parameters = defaultParameters
			}
		}
		if f := w.Fanout; f != nil {
			for j := range f.Shapes {
				sh := &f.Shapes[j]
				if sh.Weight == 0 {
					sh.Weight = 1
				}
				if sh.Name == "" {
					sh.Name = sh.defaultName()
				}
			}
		}
	}
}

func (sh *FanoutShape) defaultName() string {
	return fmt.Sprintf("%dx%s", sh.Actions, bytesize.Format(sh.ActionBytes))
}

// validate checks s as it is, without defaults.
func (s *Scenario) validate() *Error {
	if s.Name == "" {
		return fieldErrorf("name", "required")
	}
	if s.Count < 1 {
		return fieldErrorf("count", "%d is out of range (valid: ≥ 1)", s.Count)
	}
	if len(s.Workloads) == 0 {
		return fieldErrorf("workloads", "at least one workload is required")
	}
	var total float64
	for i := range s.Workloads {
		if err := s.Workloads[i].validate(fmt.Sprintf("workloads[%d]", i)); err != nil {
			return err
		}
		total += s.Workloads[i].Weight
	}
	if math.IsInf(total, 0) {
		return fieldErrorf("workloads", "the weights add up to more than %g", math.MaxFloat64)
	}
	return nil
}

func (w *Workload) validate(path string) *Error {
	if err := checkWeight(path+".weight", w.Weight); err != nil {
		return err
	}
	switch w.Kind {
	case KindTask:
		if w.Fanout != nil {
			return fieldErrorf(path+".fanout", "not allowed for kind taskhost (use task)")
		}
		if w.Task == nil {
			return fieldErrorf(path+".task", "required for kind taskhost")
		}
		return w.Task.validate(path + ".task")
	case KindFanout:
		if w.Task != nil {
			return fieldErrorf(path+".task", "not allowed for kind fanout (use fanout)")
		}
		if w.Fanout == nil {
			return fieldErrorf(path+".fanout", "required for kind fanout")
		}
		return w.Fanout.validate(path + ".fanout")
	case 0:
		return fieldErrorf(path+".kind", "required (valid: taskhost, fanout)")
	}
	return fieldErrorf(path+".kind", "invalid kind %d (valid: taskhost, fanout)", uint8(w.Kind))
}

func checkWeight(field string, w float64) *Error {
	if !(w > 0) || math.IsInf(w, 0) {
		return fieldErrorf(field, "%g is out of range (valid: a finite number > 0)", w)
	}
	return nil
}

func (t *TaskSpec) validate(path string) *Error {
	switch {
	case t.ConfigCapBytes < 1 || t.ConfigCapBytes > maxConfigBytes:
		return fieldErrorf(path+".config_cap", "%s is out of range (valid: 1B..%s)",
			bytesize.Format(t.ConfigCapBytes), bytesize.Format(maxConfigBytes))
	case t.ConfigMinBytes < 1:
		return fieldErrorf(path+".config_min", "%s is out of range (valid: 1B..config_mean)", bytesize.Format(t.ConfigMinBytes))
	case t.ConfigMeanBytes < t.ConfigMinBytes || t.ConfigMeanBytes > t.ConfigCapBytes:
		return fieldErrorf(path+".config_mean", "%s is out of range (valid: config_min (%s)..config_cap (%s))",
			bytesize.Format(t.ConfigMeanBytes), bytesize.Format(t.ConfigMinBytes), bytesize.Format(t.ConfigCapBytes))
	case !(t.ConfigSigma > 0 && t.ConfigSigma <= maxSigma):
		return fieldErrorf(path+".config_sigma", "%g is out of range (valid: 0 < σ ≤ %g)", t.ConfigSigma, maxSigma)
	case t.EnvironmentBytes < 0 || t.EnvironmentBytes > maxEnvironmentBytes:
		return fieldErrorf(path+".environment", "%s is out of range (valid: 0B..%s)",
			bytesize.Format(t.EnvironmentBytes), bytesize.Format(maxEnvironmentBytes))
	case t.Parameters < 1 || t.Parameters > maxParameters:
		return fieldErrorf(path+".parameters", "%d is out of range (valid: 1..%d)", t.Parameters, maxParameters)
	case t.ExecutePasses < 0 || t.ExecutePasses > maxExecutePasses:
		return fieldErrorf(path+".execute_passes", "%d is out of range (valid: 0..%d)", t.ExecutePasses, maxExecutePasses)
	}
	return nil
}

func (f *FanoutSpec) validate(path string) *Error {
	if len(f.Shapes) == 0 {
		return fieldErrorf(path+".shapes", "at least one shape is required")
	}
	first := make(map[string]int, len(f.Shapes))
	var total float64
	for i := range f.Shapes {
		sh := &f.Shapes[i]
		p := fmt.Sprintf("%s.shapes[%d]", path, i)
		switch {
		case sh.Name == "":
			return fieldErrorf(p+".name", "required")
		case sh.Actions < 1 || sh.Actions > maxActions:
			return fieldErrorf(p+".actions", "%d is out of range (valid: 1..%d)", sh.Actions, maxActions)
		case sh.ActionBytes < 1 || sh.ActionBytes > maxActionBytes:
			return fieldErrorf(p+".action_bytes", "%s is out of range (valid: 1B..%s)",
				bytesize.Format(sh.ActionBytes), bytesize.Format(maxActionBytes))
		case sh.FirstActionBytes < 0 || sh.FirstActionBytes > maxActionBytes:
			return fieldErrorf(p+".first_action_bytes", "%s is out of range (valid: 0B..%s; 0 = same as action_bytes)",
				bytesize.Format(sh.FirstActionBytes), bytesize.Format(maxActionBytes))
		}
		if err := checkWeight(p+".weight", sh.Weight); err != nil {
			return err
		}
		if j, ok := first[sh.Name]; ok {
			return fieldErrorf(p+".name", "duplicate shape name %q (first at shapes[%d])", sh.Name, j)
		}
		first[sh.Name] = i
		total += sh.Weight
	}
	if math.IsInf(total, 0) {
		return fieldErrorf(path+".shapes", "the weights add up to more than %g", math.MaxFloat64)
	}
	return nil
}

// Loading.

// Keys accepted at each level of a scenario file, in documentation order.
var (
	scenarioKeys = []string{"name", "description", "seed", "count", "workloads"}
	workloadKeys = []string{"kind", "weight", "task", "fanout"}
	taskKeys     = []string{"config_mean", "config_sigma", "config_cap", "config_min", "environment", "parameters", "execute_passes"}
	fanoutKeys   = []string{"shapes"}
	shapeKeys    = []string{"name", "weight", "actions", "action_bytes", "first_action_bytes"}
)

// Load reads and parses the scenario file at path, as Parse
// does.
func Load(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load scenario: %w", err)
	}
	return Parse(path, data)
}

// Parse parses a scenario in YAML or JSON, fills in the defaults for
// absent fields and validates it. file is used only in error messages and,
// when the scenario has no name, to name it (file's base name without its
// extension). Every error is a *Error naming the file, line, column
// and field. Anchors and aliases are followed; merge keys ("<<") are not
// supported.
func Parse(file string, data []byte) (*Scenario, error) {
	d := &decoder{file: file, pos: make(map[string]*yaml.Node)}
	root, err := d.parse(data)
	if err != nil {
		return nil, err
	}
	s, err := d.scenario(root)
	if err != nil {
		return nil, err
	}
	if _, ok := d.pos["name"]; !ok && file != "" {
		base := filepath.Base(file)
		s.Name = strings.TrimSuffix(base, filepath.Ext(base))
	}
	if err := s.validate(); err != nil {
		d.locate(err)
		return nil, err
	}
	return s, nil
}

// decoder walks a yaml.Node tree by hand, so that every error can name the
// field and its position, and records where each field was read so that
// validation errors can be placed too.
type decoder struct {
	file string
	pos  map[string]*yaml.Node // field path → the key (or sequence item) node it was read from
}

func (d *decoder) errorf(at *yaml.Node, field, format string, args ...any) *Error {
	e := &Error{File: d.file, Field: field, Msg: fmt.Sprintf(format, args...)}
	if at != nil {
		e.Line, e.Column = at.Line, at.Column
	}
	return e
}

// locate places a validation error at the field it names, or at its nearest
// ancestor that appears in the file (a defaulted field has no position).
func (d *decoder) locate(e *Error) {
	e.File = d.file
	for f := e.Field; ; f = parentField(f) {
		if n, ok := d.pos[f]; ok {
			e.Line, e.Column = n.Line, n.Column
			return
		}
		if f == "" {
			return
		}
	}
}

func parentField(f string) string {
	if i := strings.LastIndexAny(f, ".["); i >= 0 {
		return f[:i]
	}
	return ""
}

// parse parses exactly one YAML document and returns its root node.
func (d *decoder) parse(data []byte) (*yaml.Node, error) {
	docs, err := parseDocuments(data, 2)
	switch {
	case err != nil:
		return nil, d.syntaxError(data, err)
	case len(docs) == 0:
		return nil, d.errorf(nil, "", "empty scenario")
	case len(docs) > 1:
		return nil, d.errorf(docs[1], "", "more than one YAML document (want one scenario per file)")
	}
	doc := docs[0]
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, d.errorf(doc, "", "empty scenario")
	}
	root := doc.Content[0]
	d.pos[""] = root
	return root, nil
}

// parseDocuments parses up to max documents of data.
func parseDocuments(data []byte, max int) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for len(docs) < max {
		doc := new(yaml.Node)
		if err := dec.Decode(doc); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return docs, err
		}
		docs = append(docs, doc)
	}
	return docs, nil
}

var yamlLine = regexp.MustCompile(`(?s)^yaml: (?:line ([0-9]+): )?(.*)$`)

// syntaxError turns a YAML parser error into a *Error with the line
// of the problem.
func (d *decoder) syntaxError(data []byte, err error) *Error {
	e := &Error{File: d.file, Msg: "invalid YAML: " + err.Error()}
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return e
	}
	e.Msg = "invalid YAML: " + m[2]
	e.Line, _ = strconv.Atoi(m[1])
	if line := syntaxLine(data, m[2]); line > 0 {
		e.Line = line
	}
	return e
}

// syntaxLine returns the 1-based line at which a syntax error with message
// msg first appears, or 0 if it cannot tell. yaml.v3 reports some errors
// at the line where the enclosing construct began, 0-based, and others
// (an unknown alias) with no line at all; the first line whose prefix of
// the document fails with the same message is where the problem is. The
// search is quadratic, so it is bounded to scenario-sized inputs.
func syntaxLine(data []byte, msg string) int {
	const maxBytes, maxLines = 16 << 10, 1000
	if len(data) > maxBytes {
		return 0
	}
	line := 0
	for i := 0; i <= len(data) && line < maxLines; i++ {
		if i < len(data) && data[i] != '\n' {
			continue
		}
		line++
		_, err := parseDocuments(data[:i], math.MaxInt)
		if err == nil {
			continue
		}
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil && m[2] == msg {
			return line
		}
	}
	return 0
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// describe names a node's kind for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!str":
			return fmt.Sprintf("string %q", v)
		case "!!int":
			return "integer " + v
		case "!!float":
			return "number " + v
		case "!!bool":
			return "boolean " + v
		}
		return fmt.Sprintf("%s %q", n.ShortTag(), v)
	}
	return "an unsupported node"
}

// fields walks the mapping n in file order, calling fn for each key. A null n
// is an empty mapping. Other kinds, non-scalar keys, duplicate keys and keys
// not in valid are errors.
func (d *decoder) fields(n *yaml.Node, path string, valid []string, fn func(key string, k, v *yaml.Node, field string) error) error {
	at := n
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return d.errorf(at, path, "want a mapping, got %s", describe(n))
	}
	seen := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if rk := resolve(k); rk.Kind != yaml.ScalarNode {
			return d.errorf(k, path, "want a key, got %s", describe(rk))
		}
		key := resolve(k).Value
		field := join(path, key)
		if !slices.Contains(valid, key) {
			return d.errorf(k, field, "unknown key (valid: %s)", strings.Join(valid, ", "))
		}
		if first, ok := seen[key]; ok {
			return d.errorf(k, field, "duplicate key (first at line %d)", first.Line)
		}
		seen[key] = k
		d.pos[field] = k
		if err := fn(key, k, v, field); err != nil {
			return err
		}
	}
	return nil
}

// items walks the sequence n, calling fn for each item. A null n is an empty
// list.
func (d *decoder) items(n *yaml.Node, path string, fn func(item *yaml.Node, field string) error) error {
	at := n
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return d.errorf(at, path, "want a list, got %s", describe(n))
	}
	for i, item := range n.Content {
		field := fmt.Sprintf("%s[%d]", path, i)
		d.pos[field] = item
		if err := fn(item, field); err != nil {
			return err
		}
	}
	return nil
}

// scalar returns v as a non-null scalar, or an error placed at the key k.
func (d *decoder) scalar(k, v *yaml.Node, field, want string) (*yaml.Node, error) {
	v = resolve(v)
	if v.Kind != yaml.ScalarNode || isNull(v) {
		return nil, d.errorf(k, field, "want %s, got %s", want, describe(v))
	}
	return v, nil
}

func (d *decoder) str(k, v *yaml.Node, field string) (string, error) {
	v, err := d.scalar(k, v, field, "a string")
	if err != nil {
		return "", err
	}
	return v.Value, nil
}

func (d *decoder) int(k, v *yaml.Node, field string) (int, error) {
	v, err := d.scalar(k, v, field, "a whole number")
	if err != nil {
		return 0, err
	}
	var n int64
	if v.ShortTag() != "!!int" || v.Decode(&n) != nil || n > math.MaxInt || n < math.MinInt {
		return 0, d.errorf(k, field, "want a whole number, got %s", describe(v))
	}
	return int(n), nil
}

func (d *decoder) uint64(k, v *yaml.Node, field string) (uint64, error) {
	v, err := d.scalar(k, v, field, "a whole number")
	if err != nil {
		return 0, err
	}
	var n uint64
	if v.ShortTag() != "!!int" || v.Decode(&n) != nil {
		return 0, d.errorf(k, field, "want a whole number 0..%d, got %s", uint64(math.MaxUint64), describe(v))
	}
	return n, nil
}

func (d *decoder) float(k, v *yaml.Node, field string) (float64, error) {
	v, err := d.scalar(k, v, field, "a number")
	if err != nil {
		return 0, err
	}
	var f float64
	if t := v.ShortTag(); t != "!!int" && t != "!!float" || v.Decode(&f) != nil {
		return 0, d.errorf(k, field, "want a number, got %s", describe(v))
	}
	return f, nil
}

func (d *decoder) size(k, v *yaml.Node, field string) (int, error) {
	v, err := d.scalar(k, v, field, "a size")
	if err != nil {
		return 0, err
	}
	if t := v.ShortTag(); t != "!!int" && t != "!!float" && t != "!!str" {
		return 0, d.errorf(k, field, "want a size, got %s", describe(v))
	}
	n, err := bytesize.Parse(v.Value)
	if err != nil {
		return 0, d.errorf(k, field, "%v", err)
	}
	return n, nil
}

func (d *decoder) scenario(root *yaml.Node) (*Scenario, error) {
	s := &Scenario{}
	err := d.fields(root, "", scenarioKeys, func(key string, k, v *yaml.Node, field string) error {
		var err error
		switch key {
		case "name":
			s.Name, err = d.str(k, v, field)
		case "description":
			s.Description, err = d.str(k, v, field)
		case "seed":
			s.Seed, err = d.uint64(k, v, field)
		case "count":
			s.Count, err = d.int(k, v, field)
		case "workloads":
			err = d.items(v, field, func(item *yaml.Node, field string) error {
				w, err := d.workload(item, field)
				s.Workloads = append(s.Workloads, w)
				return err
			})
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (d *decoder) workload(n *yaml.Node, path string) (Workload, error) {
	w := Workload{Weight: 1}
	err := d.fields(n, path, workloadKeys, func(key string, k, v *yaml.Node, field string) error {
		var err error
		switch key {
		case "kind":
			var s string
			if s, err = d.str(k, v, field); err != nil {
				return err
			}
			if w.Kind, err = ParseKind(s); err != nil {
				return d.errorf(k, field, "%v", err)
			}
		case "weight":
			w.Weight, err = d.float(k, v, field)
		case "task":
			t := DefaultTaskSpec()
			w.Task = &t
			err = d.task(v, field, w.Task)
		case "fanout":
			w.Fanout = &FanoutSpec{}
			err = d.fanout(v, field, w.Fanout)
		}
		return err
	})
	if w.Kind == KindTask && w.Task == nil {
		t := DefaultTaskSpec()
		w.Task = &t
	}
	return w, err
}

func (d *decoder) task(n *yaml.Node, path string, t *TaskSpec) error {
	return d.fields(n, path, taskKeys, func(key string, k, v *yaml.Node, field string) error {
		var err error
		switch key {
		case "config_mean":
			t.ConfigMeanBytes, err = d.size(k, v, field)
		case "config_sigma":
			t.ConfigSigma, err = d.float(k, v, field)
		case "config_cap":
			t.ConfigCapBytes, err = d.size(k, v, field)
		case "config_min":
			t.ConfigMinBytes, err = d.size(k, v, field)
		case "environment":
			t.EnvironmentBytes, err = d.size(k, v, field)
		case "parameters":
			t.Parameters, err = d.int(k, v, field)
		case "execute_passes":
			t.ExecutePasses, err = d.int(k, v, field)
		}
		return err
	})
}

func (d *decoder) fanout(n *yaml.Node, path string, f *FanoutSpec) error {
	return d.fields(n, path, fanoutKeys, func(key string, k, v *yaml.Node, field string) error {
		return d.items(v, field, func(item *yaml.Node, field string) error {
			sh, err := d.shape(item, field)
			f.Shapes = append(f.Shapes, sh)
			return err
		})
	})
}

func (d *decoder) shape(n *yaml.Node, path string) (FanoutShape, error) {
	sh := FanoutShape{Weight: 1}
	named := false
	err := d.fields(n, path, shapeKeys, func(key string, k, v *yaml.Node, field string) error {
		var err error
		switch key {
		case "name":
			named = true
			sh.Name, err = d.str(k, v, field)
		case "weight":
			sh.Weight, err = d.float(k, v, field)
		case "actions":
			sh.Actions, err = d.int(k, v, field)
		case "action_bytes":
			sh.ActionBytes, err = d.size(k, v, field)
		case "first_action_bytes":
			sh.FirstActionBytes, err = d.size(k, v, field)
		}
		return err
	})
	if err == nil && !named {
		sh.Name = sh.defaultName()
	}
	return sh, err
}

// Built-in scenarios.

//go:embed builtin/*.yaml
var builtinFiles embed.FS

// builtinNames lists the built-ins in listing order; each is
// builtin/<name>.yaml.
var builtinNames = []string{"taskhost", "fanout", "mixed"}

// Builtins returns the built-in scenarios (taskhost, fanout, mixed),
// freshly parsed on every call, so callers may modify them.
func Builtins() []*Scenario {
	out := make([]*Scenario, 0, len(builtinNames))
	for _, name := range builtinNames {
		s, err := Builtin(name)
		if err != nil {
			panic(err) // the embedded files are tested; this is a build defect
		}
		out = append(out, s)
	}
	return out
}

// Builtin returns a fresh copy of the named built-in scenario. An
// unknown name is an error listing the valid names.
func Builtin(name string) (*Scenario, error) {
	if !slices.Contains(builtinNames, name) {
		return nil, fmt.Errorf("unknown scenario %q (valid: %s)", name, strings.Join(builtinNames, ", "))
	}
	file := "builtin/" + name + ".yaml"
	data, err := builtinFiles.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("built-in scenario %s: %w", name, err)
	}
	return Parse(file, data)
}

// Generation.

// Item is one unit of work drawn from a Scenario.
type Item struct {
	Seq      int         // 0-based index within the run
	Kind     Kind        // the workload's kind
	Workload int         // index into Scenario.Workloads
	Shape    string      // fanout shape name; "" for tasks
	Task     *TaskItem   // set iff Kind == KindTask
	Fanout   *FanoutItem // set iff Kind == KindFanout
}

// TaskItem is a task's configuration. Parameters is the item's own map;
// Environment is shared and read-only.
type TaskItem struct {
	// TaskName is the task the host runs; "" means runtime.TaskHash (the built-in
	// CPU work of the taskhost scenario). Other names need a host that
	// serves them (runtime.ServeHost with tasks of its own).
	TaskName    string
	ConfigBytes int // the sampled configuration size
	// Parameters maps "p0".."pN-1" to values whose lengths add up to
	// ConfigBytes exactly. The values are substrings of the generator's
	// shared text, not copies.
	Parameters map[string]string
	// Environment maps "VAR_000", "VAR_001", ... to values; keys and values
	// together take EnvironmentBytes (a few bytes less when the last entry
	// cannot fit). It is the same map instance on every item of the
	// workload and must not be modified.
	Environment   map[string]string
	ExecutePasses int
}

// FanoutItem is an orchestration completion.
type FanoutItem struct {
	// ActionBytes is the payload size of each action, in order. It is shared
	// by every item of the shape and must not be modified.
	ActionBytes []int

	gen  *Generator // the text payloads come from; nil for items built by hand
	salt int
}

// Payload returns the payload of action i: ActionBytes[i] bytes of the
// generating Generator's text (shared, never copied), or, for an item built
// by hand, of a text shared by all such items. It panics if i is out of
// range or the size exceeds the text (at least 8 MiB).
func (f *FanoutItem) Payload(i int) string {
	g := f.gen
	if g == nil {
		g = handText()
	}
	return g.Text(f.ActionBytes[i], f.salt+i)
}

var (
	handOnce sync.Once
	handGen  *Generator
)

// handText is the text source of items built by hand, built on first use.
func handText() *Generator {
	handOnce.Do(func() {
		handGen = (&Scenario{Name: "payloads", Seed: 1, Count: 1, Workloads: []Workload{{Kind: KindFanout, Weight: 1,
			Fanout: &FanoutSpec{Shapes: []FanoutShape{{Name: "payload", Weight: 1, Actions: 1, ActionBytes: 1}}}}}}).NewGenerator()
	})
	return handGen
}

// Generator produces a scenario's units of work, deterministically: the same
// scenario (seed included) yields the same sequence of items, parameter
// values included.
type Generator struct {
	s    *Scenario // a validated copy, defaults applied
	rng  *rand.Rand
	seq  int
	pick chooser // of workloads
	work []genWorkload
	text string
}

// genWorkload is what a workload needs at generation time, built once.
type genWorkload struct {
	mu      float64           // of the log-normal (task)
	keys    []string          // parameter names (task)
	env     map[string]string // (task)
	shapes  chooser           // (fanout)
	actions [][]int           // per shape (fanout)
}

// chooser picks an index by weight.
type chooser []float64 // cumulative weights

func newChooser(weights []float64) chooser {
	c := make(chooser, len(weights))
	var sum float64
	for i, w := range weights {
		sum += w
		c[i] = sum
	}
	return c
}

func (c chooser) pick(r *rand.Rand) int {
	if len(c) == 1 {
		return 0 // no draw: adding a second workload is what changes the sequence
	}
	u := r.Float64() * c[len(c)-1]
	return min(sort.Search(len(c), func(i int) bool { return c[i] > u }), len(c)-1)
}

// PCG stream selectors, so that the item sequence, the text and each
// environment are independent streams of the same seed.
const (
	itemStream = 0x616d6461686c2d69 // "amdahl-i"
	textStream = 0x616d6461686c2d74 // "amdahl-t"
	envStream  = 0x616d6461686c2d65 // "amdahl-e"
)

// minTextBytes is the least shared text length: 8 MiB, more than the largest
// action a shape may ask for.
const minTextBytes = 8 << 20

// textAlphabet has 64 printable characters that need no escaping in JSON,
// XML or a shell.
const textAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// NewGenerator returns a generator of s's units of work. It works on a copy:
// later changes to s do not affect it. It builds the shared text (at least
// 8 MiB) and each task workload's environment up front. NewGenerator panics
// if s is invalid (Validate returns an error); scenarios from Parse,
// Load and Builtin are valid.
func (s *Scenario) NewGenerator() *Generator {
	c := s.clone()
	c.applyDefaults()
	if err := c.validate(); err != nil {
		panic(fmt.Sprintf("scenario: NewGenerator: invalid scenario: %v", err))
	}
	g := &Generator{
		s:   c,
		rng: rand.New(rand.NewPCG(c.Seed, itemStream)),
	}
	textBytes := minTextBytes
	weights := make([]float64, len(c.Workloads))
	for i, w := range c.Workloads {
		weights[i] = w.Weight
		if t := w.Task; t != nil {
			textBytes = max(textBytes, (t.ConfigCapBytes+t.Parameters-1)/t.Parameters)
		}
	}
	g.pick = newChooser(weights)
	g.text = newText(c.Seed, textBytes)
	g.work = make([]genWorkload, len(c.Workloads))
	for i, w := range c.Workloads {
		gw := &g.work[i]
		switch w.Kind {
		case KindTask:
			t := w.Task
			gw.mu = math.Log(float64(t.ConfigMeanBytes)) - t.ConfigSigma*t.ConfigSigma/2
			gw.keys = make([]string, t.Parameters)
			for j := range gw.keys {
				gw.keys[j] = "p" + strconv.Itoa(j)
			}
			gw.env = g.environment(c.Seed, i, t.EnvironmentBytes)
		case KindFanout:
			sw := make([]float64, len(w.Fanout.Shapes))
			gw.actions = make([][]int, len(w.Fanout.Shapes))
			for j, sh := range w.Fanout.Shapes {
				sw[j] = sh.Weight
				a := make([]int, sh.Actions)
				for k := range a {
					a[k] = sh.ActionBytes
				}
				if sh.FirstActionBytes > 0 {
					a[0] = sh.FirstActionBytes
				}
				gw.actions[j] = a
			}
			gw.shapes = newChooser(sw)
		}
	}
	return g
}

func newText(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, textStream))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		x := r.Uint64()
		for j := i; j < min(i+8, n); j++ {
			b[j] = textAlphabet[x&63]
			x >>= 6
		}
	}
	return string(b)
}

// environment builds a task workload's environment: entries of random value
// lengths until size bytes of keys and values are used.
func (g *Generator) environment(seed uint64, workload, size int) map[string]string {
	r := rand.New(rand.NewPCG(seed, envStream+uint64(workload)))
	env := make(map[string]string)
	const minValue, maxValue = 4, 200
	used := 0
	for i := 0; ; i++ {
		key := fmt.Sprintf("VAR_%03d", i)
		left := size - used - len(key)
		if left < 1 {
			return env
		}
		n := minValue + r.IntN(maxValue-minValue+1)
		// Take the rest when another entry would not fit after this one.
		if n >= left || left-n < len(key)+1+minValue {
			n = left
		}
		env[key] = g.Text(n, int(r.Uint64()>>2))
		used += len(key) + n
	}
}

// Next returns the next unit of work. The sequence never ends; the caller
// stops at Scenario.Count. Next is not safe for concurrent use.
func (g *Generator) Next() Item {
	wi := g.pick.pick(g.rng)
	w := &g.s.Workloads[wi]
	gw := &g.work[wi]
	it := Item{Seq: g.seq, Kind: w.Kind, Workload: wi}
	g.seq++
	switch w.Kind {
	case KindTask:
		t := w.Task
		x := math.Exp(gw.mu + t.ConfigSigma*g.rng.NormFloat64())
		// Clamp as a float: exp may be far beyond int range.
		size := int(math.Round(math.Min(math.Max(x, float64(t.ConfigMinBytes)), float64(t.ConfigCapBytes))))
		salt := int(g.rng.Uint64() >> 2)
		params := make(map[string]string, len(gw.keys))
		base, rem := size/len(gw.keys), size%len(gw.keys)
		for j, k := range gw.keys {
			n := base
			if j < rem {
				n++
			}
			params[k] = g.Text(n, salt+j)
		}
		it.Task = &TaskItem{ConfigBytes: size, Parameters: params, Environment: gw.env, ExecutePasses: t.ExecutePasses}
	case KindFanout:
		si := gw.shapes.pick(g.rng)
		it.Shape = w.Fanout.Shapes[si].Name
		it.Fanout = &FanoutItem{ActionBytes: gw.actions[si], gen: g, salt: int(g.rng.Uint64() >> 2)}
	}
	return it
}

// Text returns a substring of length n of the generator's shared
// pseudo-random printable text, starting at an offset derived from salt: the
// same (n, salt) always gives the same string. It does not allocate. The text
// is at least 8 MiB long (longer if a task's parameter can be larger). Text
// panics if n is negative or longer than the text. Unlike Next, Text is safe
// for concurrent use.
func (g *Generator) Text(n, salt int) string {
	if n < 0 || n > len(g.text) {
		panic(fmt.Sprintf("scenario: Generator.Text: length %d out of range [0, %d]", n, len(g.text)))
	}
	off := mix64(uint64(salt)) % uint64(len(g.text)-n+1)
	return g.text[off : off+uint64(n)]
}

// mix64 is the SplitMix64 finalizer: nearby salts give unrelated offsets.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

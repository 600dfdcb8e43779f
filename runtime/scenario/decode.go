package scenario

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/amdahl-rt/amdahl/internal/bytesize"
	"github.com/amdahl-rt/amdahl/internal/yamldoc"
)

// Keys accepted at each level of a scenario file, in documentation order.
var (
	scenarioKeys = []string{"name", "description", "seed", "count", "workloads"}
	workloadKeys = []string{"kind", "weight", "orchestration", "task", "fanout"}
	taskKeys     = []string{"config_mean", "config_sigma", "config_cap", "config_min", "environment", "parameters", "execute_passes"}
	fanoutKeys   = []string{"shapes"}
	shapeKeys    = []string{"name", "weight", "actions", "action_bytes", "first_action_bytes"}
)

// Load reads and parses the scenario file at path, as Parse does. A file
// larger than 1 MiB is an *Error; Load tells from its size when it can, and
// otherwise reads no more than one byte past the limit.
func Load(path string) (*Scenario, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load scenario: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > maxFileBytes {
		return nil, tooLarge(path, bytesize.Format(int(min(fi.Size(), math.MaxInt))))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("load scenario: %w", err)
	}
	if len(data) > maxFileBytes {
		// Not a regular file, or one that grew: its size is unknown.
		return nil, tooLarge(path, "more than "+bytesize.Format(maxFileBytes))
	}
	return Parse(path, data)
}

func tooLarge(file, size string) *Error {
	return &Error{File: file, Msg: fmt.Sprintf("too large: %s (valid: at most %s per scenario file)", size, bytesize.Format(maxFileBytes))}
}

// Parse parses a scenario in YAML or JSON, fills in the defaults for
// absent fields and validates it. file is used only in error messages and,
// when the scenario has no name, to name it (file's base name without its
// extension). Every error is an *Error naming the file, line, column
// and field. Anchors and aliases are followed, every use of an alias
// counting its nodes again against the budget of 10,000; merge keys ("<<")
// are not supported. data longer than 1 MiB is refused before it is parsed.
func Parse(file string, data []byte) (*Scenario, error) {
	if len(data) > maxFileBytes {
		return nil, tooLarge(file, bytesize.Format(len(data)))
	}
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
//
// The tree is a graph: an alias is a pointer to its anchor's node, so a
// walk that follows aliases can visit a node many times, and anchors that
// alias anchors multiply (a "billion laughs"). Every visit is counted
// against maxNodes, so the walk is linear in that budget however the
// aliases nest, and every scalar's length is checked on its visit before
// anything resolves or parses it.
type decoder struct {
	file  string
	pos   map[string]*yaml.Node // field path → the key (or sequence item) node it was read from
	nodes int                   // nodes visited so far, aliases expanded
	via   *yaml.Node            // the outermost alias being expanded, if any
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

// parse parses exactly one YAML document and returns its root node. The
// node budget is checked on the bytes first (prescan), so that the parser
// never builds a tree larger than a bounded multiple of it.
func (d *decoder) parse(data []byte) (*yaml.Node, error) {
	if _, line, col := prescan(data, maxNodes); line > 0 {
		return nil, &Error{File: d.file, Line: line, Column: col,
			Msg: fmt.Sprintf("more than %d YAML nodes (valid: at most %d per scenario file)", maxNodes, maxNodes)}
	}
	root, perr := yamldoc.Parse(data)
	if perr != nil {
		e := &Error{File: d.file, Line: perr.Line, Column: perr.Column, Msg: perr.Msg}
		if errors.Is(perr, yamldoc.ErrMoreDocuments) {
			e.Msg += " (want one scenario per file)"
		}
		return nil, e
	}
	if root == nil {
		return nil, d.errorf(nil, "", "empty scenario")
	}
	d.pos[""] = root
	return root, nil
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// visit counts a visit to the node at against maxNodes and returns it with
// its alias resolved. A scalar longer than maxValueBytes is an error, before
// anything resolves its tag or parses it. Errors are placed at pos (or, over
// the budget, at the outermost alias being expanded).
func (d *decoder) visit(at, pos *yaml.Node, field string) (*yaml.Node, error) {
	d.nodes++
	if d.nodes > maxNodes {
		if d.via != nil {
			pos = d.via
		} else if at.Kind == yaml.AliasNode {
			pos = at
		}
		return nil, d.errorf(pos, field, "more than %d YAML nodes with aliases expanded (valid: at most %d per scenario file)", maxNodes, maxNodes)
	}
	n := resolve(at)
	if n.Kind == yaml.ScalarNode && len(n.Value) > maxValueBytes {
		return nil, d.errorf(pos, field, "too long: %d bytes (valid: at most %d bytes)", len(n.Value), maxValueBytes)
	}
	return n, nil
}

// expanding records at as the alias being expanded, if it is the outermost,
// and returns the function that ends its expansion.
func (d *decoder) expanding(at *yaml.Node) (done func()) {
	if at.Kind != yaml.AliasNode || d.via != nil {
		return func() {}
	}
	d.via = at
	return func() { d.via = nil }
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
func (d *decoder) fields(at *yaml.Node, path string, valid []string, fn func(key string, k, v *yaml.Node, field string) error) error {
	n, err := d.visit(at, at, path)
	if err != nil {
		return err
	}
	defer d.expanding(at)()
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return d.errorf(at, path, "want a mapping, got %s", describe(n))
	}
	// Not len(n.Content): a mapping of many keys is refused at its first
	// unknown or duplicate one, however often an alias repeats it.
	seen := make(map[string]*yaml.Node, min(len(n.Content)/2, len(valid)))
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		rk, err := d.visit(k, k, path)
		if err != nil {
			return err
		}
		if rk.Kind != yaml.ScalarNode {
			return d.errorf(k, path, "want a key, got %s", describe(rk))
		}
		key := rk.Value
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
// list. A list of more than max items is an error, before any is decoded.
func (d *decoder) items(at *yaml.Node, path string, max int, fn func(item *yaml.Node, field string) error) error {
	n, err := d.visit(at, at, path)
	if err != nil {
		return err
	}
	defer d.expanding(at)()
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return d.errorf(at, path, "want a list, got %s", describe(n))
	}
	if len(n.Content) > max {
		return d.errorf(at, path, "too many: %d (valid: at most %d)", len(n.Content), max)
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
	v, err := d.visit(v, k, field)
	if err != nil {
		return nil, err
	}
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

// typed returns v, a scalar tagged with one of tags, decoded as a T; want
// says what a field of T takes, in the error for any other value.
func typed[T any](d *decoder, k, v *yaml.Node, field, want string, tags ...string) (T, error) {
	var x, zero T
	v, err := d.scalar(k, v, field, want)
	if err != nil {
		return zero, err
	}
	if !slices.Contains(tags, v.ShortTag()) || v.Decode(&x) != nil {
		return zero, d.errorf(k, field, "want %s, got %s", want, describe(v))
	}
	return x, nil
}

func (d *decoder) int(k, v *yaml.Node, field string) (int, error) {
	return typed[int](d, k, v, field, "a whole number", "!!int")
}

func (d *decoder) bool(k, v *yaml.Node, field string) (bool, error) {
	return typed[bool](d, k, v, field, "true or false", "!!bool")
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
	return typed[float64](d, k, v, field, "a number", "!!int", "!!float")
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
			err = d.items(v, field, maxWorkloads, func(item *yaml.Node, field string) error {
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
	var orchestration *yaml.Node // the key, if the file sets it
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
		case "orchestration":
			w.Orchestration, err = d.bool(k, v, field)
			orchestration = k
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
	if err == nil && w.Kind == KindFanout && orchestration != nil && !w.Orchestration {
		err = d.errorf(orchestration, join(path, "orchestration"), "false is not allowed for kind fanout (valid: true, or leave it out): a fanout unit is an orchestration completion")
	}
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
		return d.items(v, field, maxShapes, func(item *yaml.Node, field string) error {
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

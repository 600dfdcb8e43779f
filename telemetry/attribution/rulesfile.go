package attribution

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/amdahl-rt/amdahl/internal/yamldoc"
	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// Bounds of a rules file.
const (
	maxRulesBytes = 1 << 20
	maxRules      = 1000
	maxRuleAttrs  = 32
	maxRuleString = 256
)

// RulesError is an error in a rules file, at a line and column.
type RulesError struct {
	File      string
	Line, Col int
	Msg       string
}

func (e *RulesError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// LoadRows returns the rule set amdahl report's --rows names: a built-in
// one (auto, amdahl, semconv), else the rules file at that path
// (LoadRules).
func LoadRows(name string) (*Rows, error) {
	switch name {
	case "auto", "amdahl", "semconv":
		src, err := ParseRowSource(name)
		return &Rows{Source: src}, err
	}
	return LoadRules(name)
}

// LoadRules reads the rules file at path (at most 1 MiB) as ParseRules.
func LoadRules(path string) (*Rows, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rules file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRulesBytes+1))
	if err != nil {
		return nil, fmt.Errorf("rules file: %w", err)
	}
	return ParseRules(path, data)
}

// ParseRules parses a rules file (YAML; name is used in errors):
//
//	fallback: semconv          # auto, amdahl, semconv or none (default semconv)
//	rules:                     # the first that matches gives the row
//	  - match:                 # every field given must match ('*': any run)
//	      name: "GET /cart*"
//	      kind: server         # internal, server, client, producer, consumer
//	      service: frontend    # service.name
//	      attributes: {http.route: "*"}
//	    row:
//	      component: "{service}"  # {name} {service} {kind} {attribute key}
//	      phase: execute          # queue … execute, or absent
//	      direction: request      # request, reply, or absent
//	      op: "{http.route}"
//
// A row needs a phase or an op. Every error is a *RulesError naming the
// line and column: an unknown key, a bad value, more than 1,000 rules, a
// string over 256 bytes, anchors and aliases (not supported), invalid
// YAML, more than one document.
func ParseRules(name string, data []byte) (*Rows, error) {
	if len(data) > maxRulesBytes {
		return nil, &RulesError{File: name, Msg: fmt.Sprintf("more than %d bytes (the bound of a rules file)", maxRulesBytes)}
	}
	root, perr := yamldoc.Parse(data)
	if perr != nil {
		return nil, &RulesError{File: name, Line: perr.Line, Col: perr.Column, Msg: perr.Msg}
	}
	if root == nil {
		return nil, &RulesError{File: name, Msg: "empty: want a mapping with rules"}
	}
	p := rulesParser{file: name}
	rows := &Rows{Source: RowsFile, Fallback: RowsSemconv, File: name}
	err := p.mapping(root, "", []string{"fallback", "rules"}, func(key string, k, v *yaml.Node) error {
		switch key {
		case "fallback":
			s, err := p.str(v, "fallback")
			if err != nil {
				return err
			}
			if s == "none" {
				rows.Fallback = RowsNone
				return nil
			}
			src, err := ParseRowSource(s)
			if err != nil {
				return p.errorf(v, "fallback: %v (or none)", err)
			}
			rows.Fallback = src
			return nil
		case "rules":
			if v.Kind != yaml.SequenceNode {
				return p.errorf(v, "rules: want a list of rules")
			}
			if len(v.Content) > maxRules {
				return p.errorf(v, "rules: %d rules, want at most %d", len(v.Content), maxRules)
			}
			for i, n := range v.Content {
				r, err := p.rule(n, fmt.Sprintf("rules[%d]", i))
				if err != nil {
					return err
				}
				rows.Rules = append(rows.Rules, r)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

type rulesParser struct{ file string }

func (p *rulesParser) errorf(n *yaml.Node, format string, args ...any) error {
	return &RulesError{File: p.file, Line: n.Line, Col: n.Column, Msg: fmt.Sprintf(format, args...)}
}

// mapping calls fn for each key of mapping n, refusing keys not in valid.
func (p *rulesParser) mapping(n *yaml.Node, path string, valid []string, fn func(key string, k, v *yaml.Node) error) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return p.errorf(n, "%sanchors and aliases are not supported", prefix(path))
	}
	if n.Kind != yaml.MappingNode {
		return p.errorf(n, "%swant a mapping (%s)", prefix(path), strings.Join(valid, ", "))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if v.Kind == yaml.AliasNode || v.Anchor != "" {
			return p.errorf(v, "%s%s: anchors and aliases are not supported", prefix(path), k.Value)
		}
		if valid != nil && !slices.Contains(valid, k.Value) {
			return p.errorf(k, "%sunknown key %q (valid: %s)", prefix(path), k.Value, strings.Join(valid, ", "))
		}
		if seen[k.Value] {
			return p.errorf(k, "%s%s given twice", prefix(path), k.Value)
		}
		seen[k.Value] = true
		if err := fn(k.Value, k, v); err != nil {
			return err
		}
	}
	return nil
}

func prefix(path string) string {
	if path == "" {
		return ""
	}
	return path + ": "
}

func (p *rulesParser) str(v *yaml.Node, field string) (string, error) {
	if v.Kind != yaml.ScalarNode {
		return "", p.errorf(v, "%s: want a string", field)
	}
	if len(v.Value) > maxRuleString {
		return "", p.errorf(v, "%s: %d bytes, want at most %d", field, len(v.Value), maxRuleString)
	}
	if strings.Count(v.Value, "{") != strings.Count(v.Value, "}") {
		return "", p.errorf(v, "%s: unbalanced braces in %q", field, v.Value)
	}
	return v.Value, nil
}

func (p *rulesParser) rule(n *yaml.Node, path string) (Rule, error) {
	r := Rule{Line: n.Line}
	var haveRow bool
	err := p.mapping(n, path, []string{"match", "row"}, func(key string, k, v *yaml.Node) error {
		if key == "match" {
			return p.match(v, path+".match", &r.Match)
		}
		haveRow = true
		return p.row(v, path+".row", &r.Row)
	})
	if err == nil && !haveRow {
		err = p.errorf(n, "%s: a rule needs a row", path)
	}
	return r, err
}

func (p *rulesParser) match(n *yaml.Node, path string, m *Matcher) error {
	return p.mapping(n, path, []string{"name", "kind", "service", "attributes"}, func(key string, k, v *yaml.Node) error {
		field := path + "." + key
		if key == "attributes" {
			return p.mapping(v, field, nil, func(ak string, _, av *yaml.Node) error {
				if len(m.Attrs) == maxRuleAttrs {
					return p.errorf(av, "%s: more than %d attributes", field, maxRuleAttrs)
				}
				pat, err := p.str(av, field+"."+ak)
				if err == nil && pat == "" {
					err = p.errorf(av, "%s.%s: empty pattern (\"*\" matches any value)", field, ak)
				}
				m.Attrs = append(m.Attrs, AttrMatch{Key: ak, Pattern: pat})
				return err
			})
		}
		s, err := p.str(v, field)
		if err != nil {
			return err
		}
		switch key {
		case "name":
			m.Name = s
		case "service":
			m.Service = s
		case "kind":
			kind, err := spans.ParseSpanKind(s)
			if err != nil {
				return p.errorf(v, "%s: %v", field, err)
			}
			m.Kind, m.HasKind = kind, true
		}
		return nil
	})
}

func (p *rulesParser) row(n *yaml.Node, path string, r *RowTemplate) error {
	err := p.mapping(n, path, []string{"component", "phase", "direction", "op"}, func(key string, k, v *yaml.Node) error {
		field := path + "." + key
		s, err := p.str(v, field)
		if err != nil {
			return err
		}
		switch key {
		case "component":
			r.Component = s
		case "op":
			r.Op = s
		case "phase":
			if r.Phase, err = telemetry.ParsePhase(s); err != nil {
				return p.errorf(v, "%s: %v", field, err)
			}
		case "direction":
			if r.Direction, err = telemetry.ParseDirection(s); err != nil {
				return p.errorf(v, "%s: %v", field, err)
			}
		}
		return nil
	})
	if err == nil && !r.Phase.Valid() && r.Op == "" {
		err = p.errorf(n, "%s: a row needs a phase or an op", path)
	}
	return err
}

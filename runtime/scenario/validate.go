package scenario

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/amdahl-rt/amdahl/internal/bytesize"
)

// Error is an invalid scenario: a file that does not parse, or a value out
// of range. Field is the path of the offending field in file notation
// ("workloads[1].task.config_mean"); File, Line and Column are set when the
// scenario came from a file (Line and Column are 1-based, 0 when unknown).
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

// Validate reports the first problem with s as an *Error, or nil.
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
		w.Weight = cmp.Or(w.Weight, 1)
		if w.Kind == KindTask && w.Task == nil {
			t := DefaultTaskSpec()
			w.Task = &t
		}
		if t := w.Task; t != nil {
			t.ConfigMeanBytes = cmp.Or(t.ConfigMeanBytes, defaultConfigMeanBytes)
			t.ConfigSigma = cmp.Or(t.ConfigSigma, defaultConfigSigma)
			t.ConfigCapBytes = cmp.Or(t.ConfigCapBytes, defaultConfigCapBytes)
			t.ConfigMinBytes = cmp.Or(t.ConfigMinBytes, defaultConfigMinBytes)
			t.Parameters = cmp.Or(t.Parameters, defaultParameters)
		}
		if f := w.Fanout; f != nil {
			for j := range f.Shapes {
				sh := &f.Shapes[j]
				sh.Weight = cmp.Or(sh.Weight, 1)
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
	if err := checkLength("name", s.Name, maxNameBytes); err != nil {
		return err
	}
	if err := checkLength("description", s.Description, maxValueBytes); err != nil {
		return err
	}
	if s.Count < 1 || s.Count > maxCount {
		return fieldErrorf("count", "%d is out of range (valid: 1..%d)", s.Count, maxCount)
	}
	if len(s.Workloads) == 0 {
		return fieldErrorf("workloads", "at least one workload is required")
	}
	if len(s.Workloads) > maxWorkloads {
		return fieldErrorf("workloads", "too many: %d (valid: at most %d)", len(s.Workloads), maxWorkloads)
	}
	var total float64
	var env, actions int // what NewGenerator allocates for, over all workloads
	for i := range s.Workloads {
		w := &s.Workloads[i]
		path := fmt.Sprintf("workloads[%d]", i)
		if err := w.validate(path); err != nil {
			return err
		}
		total += w.Weight
		if t := w.Task; t != nil {
			if env += t.EnvironmentBytes; env > maxTotalEnvironmentBytes {
				return fieldErrorf(path+".task.environment", "the environments of all task workloads add up to %s (valid: at most %s over all workloads)",
					bytesize.Format(env), bytesize.Format(maxTotalEnvironmentBytes))
			}
		}
		if f := w.Fanout; f != nil {
			for j := range f.Shapes {
				if actions += f.Shapes[j].Actions; actions > maxTotalActions {
					return fieldErrorf(fmt.Sprintf("%s.fanout.shapes[%d].actions", path, j), "the actions of all shapes add up to %d (valid: at most %d over all workloads)",
						actions, maxTotalActions)
				}
			}
		}
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

func checkLength(field, s string, max int) *Error {
	if len(s) > max {
		return fieldErrorf(field, "too long: %d bytes (valid: at most %d bytes)", len(s), max)
	}
	return nil
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
	if len(f.Shapes) > maxShapes {
		return fieldErrorf(path+".shapes", "too many: %d (valid: at most %d)", len(f.Shapes), maxShapes)
	}
	first := make(map[string]int, len(f.Shapes))
	var total float64
	for i := range f.Shapes {
		sh := &f.Shapes[i]
		p := fmt.Sprintf("%s.shapes[%d]", path, i)
		switch {
		case sh.Name == "":
			return fieldErrorf(p+".name", "required")
		case len(sh.Name) > maxNameBytes:
			return checkLength(p+".name", sh.Name, maxNameBytes)
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

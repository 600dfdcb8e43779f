package telemetry

import (
	"context"
	"runtime/pprof"
)

// LabelStep is the pprof label set around one step of a phase body (for
// chunking's serialize: size, validate, pack, encode), next to LabelPhase:
// a profile filtered on step=size shows every sizing call of the phase.
const LabelStep = "step"

// Steps are the pprof label sets phase=<phase>, step=<name> (with the
// component and direction, as the phase's own labels) of the steps of
// one phase of a component, built once (Component.Steps) so that entering a
// step allocates nothing. A nil *Steps is valid: PhaseSpan.Step with it does
// nothing.
type Steps struct {
	phase Phase
	ctx   [NumDirections][]context.Context // the phase's labels and step i, on an empty context
	set   [NumDirections][]pprof.LabelSet
}

// Steps returns the step labels of phase p, the i-th named names[i]; nil
// when the component is disabled or sets no pprof labels
// (ComponentConfig.PhaseLabels), so that steps cost a nil check then. An
// invalid phase panics: it is a programming error.
func (c *Component) Steps(p Phase, names ...string) *Steps {
	if !p.Valid() {
		panic("telemetry: Steps of an invalid phase")
	}
	if c == nil || !c.labels {
		return nil
	}
	st := &Steps{phase: p}
	for d := None; d <= Reply; d++ {
		for _, n := range names {
			set := pprof.Labels(append(phaseLabelArgs(c.name, p, d), LabelStep, n)...)
			st.set[d] = append(st.set[d], set)
			st.ctx[d] = append(st.ctx[d], pprof.WithLabels(context.Background(), set))
		}
	}
	return st
}

// Step runs the rest of the phase body, until the next Step or End, under
// the pprof labels phase=<phase> and step=<the i-th name of st>, plus the
// labels of the context the phase was started from; i < 0 goes back to the
// phase label alone. It does nothing when the phase sets no labels, when
// st is nil, or when st belongs to another phase. It reads no clock and
// records no span: steps are regions of a profile only.
//
// Set a step per region, not per item: it costs one
// pprof.SetGoroutineLabels, and when the phase's parent context carries
// labels of its own (span_id from otel-profiling-go) it allocates.
func (ps PhaseSpan) Step(st *Steps, i int) {
	if !ps.label || st == nil {
		return
	}
	ps.step(st, i)
}

func (ps PhaseSpan) step(st *Steps, i int) {
	if st.phase != ps.phase {
		return
	}
	if i < 0 || i >= len(st.ctx[ps.dir]) {
		if ps.inherit {
			pprof.SetGoroutineLabels(pprof.WithLabels(ps.base, ps.c.phaseLbl[ps.phase][ps.dir]))
		} else {
			pprof.SetGoroutineLabels(ps.c.labelCtx[ps.phase][ps.dir])
		}
		return
	}
	if ps.inherit {
		pprof.SetGoroutineLabels(pprof.WithLabels(ps.base, st.set[ps.dir][i]))
		return
	}
	pprof.SetGoroutineLabels(st.ctx[ps.dir][i])
}

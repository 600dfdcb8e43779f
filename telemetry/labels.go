package telemetry

import (
	"context"
	"runtime/pprof"
)

// pprof labels a phase body runs under, next to LabelPhase (and LabelStep
// inside a step): with them a CPU sample names the row of the run's table
// it belongs to, <component>.<phase>/<direction>.
const (
	// LabelComponent is the component's name (ipc, taskhost, chunking).
	LabelComponent = "component"
	// LabelDirection is request or reply; a phase without a direction
	// (queue, dispatch, execute) has no direction label.
	LabelDirection = "direction"
)

// phaseLabelArgs are the key/value pairs of phase p (direction d) of the
// component name.
func phaseLabelArgs(name string, p Phase, d Direction) []string {
	args := []string{LabelComponent, name, LabelPhase, p.String()}
	if d != None {
		args = append(args, LabelDirection, d.String())
	}
	return args
}

// LabelContext returns a context that carries the pprof labels of phase p
// (direction d) of the component, and nothing else, built once; nil when
// the component is disabled or sets no labels (ComponentConfig.PhaseLabels).
// It is for a goroutine that does a phase's work outside a phase body, all
// of its life or between phases (a transport's reader or writer loop, a
// gRPC server's goroutine before the handler decodes a request):
// pprof.SetGoroutineLabels(ctx) with it costs no allocation. An invalid
// phase or direction panics: it is a programming error.
func (c *Component) LabelContext(p Phase, d Direction) context.Context {
	if !p.Valid() || d > Reply {
		panic("telemetry: LabelContext of an invalid phase or direction")
	}
	if c == nil || !c.labels {
		return nil
	}
	return c.labelCtx[p][d]
}

// WithPhaseLabels returns ctx with the pprof labels of phase p (direction
// d) of the component added to those ctx carries (span_id from
// otel-profiling-go, say); LabelContext when ctx carries none (no
// allocation then), nil when the component sets no labels.
func (c *Component) WithPhaseLabels(ctx context.Context, p Phase, d Direction) context.Context {
	lctx := c.LabelContext(p, d)
	if lctx == nil || !hasLabels(ctx) {
		return lctx
	}
	return pprof.WithLabels(ctx, c.phaseLbl[p][d])
}

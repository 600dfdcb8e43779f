package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/amdahl-rt/amdahl/runtime/scenario"
)

// Run runs a scenario end to end: it starts a Runtime with cfg, submits
// the scenario's Count units (Settings.Count and Settings.Seed, when set,
// override the scenario's), waits for every one to end, closes the
// Runtime and returns the Summary. When ctx ends, submission stops, queued
// units are reported cancelled and running ones get cfg.DrainTimeout to
// finish; the Summary still accounts for every submitted unit, and the
// error is ctx's. A Summary whose counts do not reconcile is an error.
// With cfg.MaxInFlight, Run submits a unit only while fewer than that many
// are in flight (a closed loop), so units do not wait in the queue.
func Run(ctx context.Context, cfg Config, sc *scenario.Scenario) (Summary, error) {
	if sc == nil {
		return Summary{}, errors.New("runtime: run: no scenario")
	}
	s := *sc
	if cfg.Settings.Count > 0 {
		s.Count = cfg.Settings.Count
	}
	if cfg.Settings.SeedSet {
		s.Seed = cfg.Settings.Seed
	}
	if err := s.Validate(); err != nil {
		return Summary{}, err
	}
	if cfg.Scenario == "" {
		cfg.Scenario = s.Name
	}
	var slots chan struct{} // closed loop: a slot per unit in flight
	if cfg.MaxInFlight > 0 {
		slots = make(chan struct{}, cfg.MaxInFlight)
		onResult := cfg.OnResult
		cfg.OnResult = func(res Result) {
			if onResult != nil {
				onResult(res)
			}
			<-slots
		}
	}
	r, err := New(ctx, cfg)
	if err != nil {
		return Summary{}, err
	}
	gen := s.NewGenerator()
	submitted := 0
	var runErr error
	for submitted < s.Count {
		if err := ctx.Err(); err != nil {
			runErr = err
			break
		}
		if slots != nil {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				runErr = ctx.Err()
			}
			if runErr != nil {
				break
			}
		}
		if err := r.Submit(ctx, gen.Next()); err != nil {
			if slots != nil {
				<-slots
			}
			runErr = err
			break
		}
		submitted++
	}
	if runErr == nil {
		waitErr := r.Wait(ctx)
		if waitErr != nil {
			runErr = waitErr
		}
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	cerr := r.Close(closeCtx)
	sum := r.Summary()
	if sum.Submitted != submitted {
		return sum, fmt.Errorf("runtime: accounting: %d units submitted but %d ended (ok %d, failed %d, cancelled %d)",
			submitted, sum.Submitted, sum.OK, sum.Failed, sum.Cancelled)
	}
	if errors.Is(runErr, context.Canceled) || errors.Is(runErr, context.DeadlineExceeded) {
		return sum, errors.Join(fmt.Errorf("run interrupted after %d of %d units: %w", submitted, s.Count, ctx.Err()), cerr)
	}
	return sum, errors.Join(runErr, cerr)
}

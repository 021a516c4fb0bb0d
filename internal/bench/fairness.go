package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet"
)

// fairness: tenant A queues Runs runs, the fleet saturates for
// FairnessSettle, then tenant B submits BRuns runs. B's runs must each
// complete within FairnessBound of their submission (docs/ARCHITECTURE.md §7: a
// backlog delays another tenant by about one turn's service time), while
// most of A's backlog is still queued.
func (e *env) fairness(ctx context.Context) error {
	e.rep.Parameters.BRuns = e.cfg.BRuns
	if err := e.warmup(ctx, min(e.cfg.Warmup, 8)); err != nil {
		return err
	}
	a, err := e.tenant(ctx, "a")
	if err != nil {
		return err
	}
	b, err := e.tenant(ctx, "b")
	if err != nil {
		return err
	}
	e.startProgress(func(elapsed time.Duration) string {
		n, _ := e.done(ctx, a)
		return fmt.Sprintf("%s fairness: A %d/%d runs done, B %d/%d", elapsed, n, e.cfg.Runs, e.model.finalsOf(b.tag), e.cfg.BRuns)
	})
	start := time.Now()
	subsA, errsA := e.submit(ctx, a, 0, e.cfg.Runs, 6)
	// Let A's backlog build up and the fleet saturate.
	select {
	case <-time.After(e.cfg.FairnessSettle):
	case <-ctx.Done():
		return ctx.Err()
	}

	aDoneAtB, err := e.done(ctx, a)
	if err != nil {
		return err
	}
	f := &FairnessFigures{ARuns: e.cfg.Runs, BRuns: e.cfg.BRuns, BBound: Duration(e.cfg.FairnessBound), ABacklogAtB: len(subsA) - aDoneAtB}
	var subsB []submission
	errsB := 0
	took := make([]time.Duration, e.cfg.BRuns)
	var wg sync.WaitGroup
	for i := range e.cfg.BRuns {
		s, err := e.submitOne(ctx, b, i)
		if err != nil {
			errsB++
			continue
		}
		subsB = append(subsB, s)
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, e.cfg.Stall)
			defer cancel()
			_ = b.c.Events(rctx, s.id, 0, func(ev agentfleet.Event) error {
				if ev.Terminal() {
					took[i] = time.Since(s.at)
				}
				return nil
			})
		})
	}
	wg.Wait()
	aDoneAfterB, err := e.done(ctx, a)
	if err != nil {
		return err
	}
	f.ADoneDuringB = aDoneAfterB - aDoneAtB

	waitErr := e.waitAll(ctx, a)
	e.stopProgress()
	if waitErr != nil && ctx.Err() != nil {
		return waitErr
	}
	if waitErr != nil {
		e.rep.note("stopped waiting for A: %v", waitErr)
	}
	countsA, _, lastA, err := e.collect(ctx, a, subsA, errsA)
	if err != nil {
		return err
	}
	countsB, _, _, err := e.collect(ctx, b, subsB, errsB)
	if err != nil {
		return err
	}
	f.ATotal = Duration(lastA.Sub(start))
	missing := 0
	for _, d := range took {
		f.BCompletion = append(f.BCompletion, Duration(d))
		if d == 0 {
			missing++
		}
		f.BWorst = max(f.BWorst, Duration(d))
	}
	e.rep.Figures.Runs = addCounts(countsA, countsB)
	e.rep.Figures.Fairness = f
	e.rep.checkRuns()
	e.rep.check("B followed to the end", missing == 0, false, "%d of B's %d runs ended while followed", e.cfg.BRuns-missing, e.cfg.BRuns)
	if f.ABacklogAtB >= 100 {
		// Whatever the machine's speed: B did not wait for A's backlog,
		// most of which was still queued when B was done.
		e.rep.check("B not behind A's backlog", 3*f.ADoneDuringB < f.ABacklogAtB, false,
			"%d of A's backlog of %d finished while B ran", f.ADoneDuringB, f.ABacklogAtB)
	} else {
		e.rep.note("A's backlog was only %d runs when B submitted: too small to judge fair share (at least 100; raise --runs)", f.ABacklogAtB)
	}
	e.rep.check("B within bound", missing == 0 && f.BWorst <= f.BBound, true, "worst %s, bound %s", f.BWorst, f.BBound)
	return nil
}

func addCounts(a, b RunCounts) RunCounts {
	return RunCounts{
		Submitted: a.Submitted + b.Submitted, SubmitErrors: a.SubmitErrors + b.SubmitErrors,
		Completed: a.Completed + b.Completed, Failed: a.Failed + b.Failed, Lost: a.Lost + b.Lost,
		Turns: a.Turns + b.Turns, FailedExamples: append(a.FailedExamples, b.FailedExamples...),
	}
}

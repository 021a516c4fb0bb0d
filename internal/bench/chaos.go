package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// chaos runs a production-shaped fleet of processes (NATS server,
// dispatcher, Workers workers, Postgres) and, while Runs runs go through
// it, crashes or restarts each of them in turn: it SIGKILLs a worker (a
// replacement starts at once), restarts the NATS server on the same port
// and store (first gracefully, then with SIGKILL), restarts Postgres
// (PGRestartCmd), and SIGKILLs the dispatcher while the last fifth of the
// runs is being submitted (another starts on the same address; the
// submissions it dropped are retried with their idempotency keys). Every
// run must complete with the right answer, none may be lost, no turn may
// be committed twice (each run's trace holds exactly one model_call per
// turn, seq dense); model calls made again because a process died
// mid-call are counted.
func (e *env) chaos(ctx context.Context) error {
	pf := e.procs
	t, err := e.tenant(ctx, "chaos")
	if err != nil {
		return err
	}
	f := &ChaosFigures{}
	e.startProgress(e.turnRate(e.cfg.Runs))
	start := time.Now()
	late := e.cfg.Runs - e.cfg.Runs/5
	subs, submitErrs := e.submit(ctx, t, 0, late, 8)
	var lateSubs []submission
	var lateErrs int
	lateDone := make(chan struct{})
	submitLate := sync.OnceFunc(func() {
		go func() {
			defer close(lateDone)
			// Two at a time, so that the kill finds some still to come.
			lateSubs, lateErrs = e.submit(ctx, t, late, e.cfg.Runs, 2)
		}()
	})

	type disruption struct {
		at   float64 // fraction of runs done
		what string
		do   func(context.Context) (string, error)
	}
	steps := []disruption{
		{0.15, "SIGKILL worker 1, start a replacement", func(ctx context.Context) (string, error) {
			pf.killWorker(0)
			if _, err := pf.startWorker(ctx); err != nil {
				return "", fmt.Errorf("replacement worker: %w", err)
			}
			return fmt.Sprintf("its turns come back after AckWait %s", e.cfg.AckWait), nil
		}},
		{0.30, "restart the NATS server (SIGTERM, same port and store)", func(ctx context.Context) (string, error) {
			return "", pf.restartNATS(ctx, false)
		}},
		{0.45, "SIGKILL the NATS server, start it again (same port and store)", func(ctx context.Context) (string, error) {
			return "", pf.restartNATS(ctx, true)
		}},
		{0.60, "restart Postgres", func(ctx context.Context) (string, error) {
			if e.cfg.PGRestartCmd == "" {
				return "skipped: no --pg-restart-cmd", errSkipped
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(cctx, "sh", "-c", e.cfg.PGRestartCmd).CombinedOutput()
			if err != nil {
				return strings.TrimSpace(string(out)), fmt.Errorf("%q: %w", e.cfg.PGRestartCmd, err)
			}
			return e.cfg.PGRestartCmd, nil
		}},
		{0.80, "SIGKILL the dispatcher mid-submission, start another", func(ctx context.Context) (string, error) {
			submitLate()
			// Kill it once a few of the late runs are in, with more on the way.
			want := int64(late + min(4, (e.cfg.Runs-late)/2))
		wait:
			for t.submitted.Load() < want {
				select {
				case <-lateDone: // they failed: kill it all the same
					break wait
				case <-time.After(time.Millisecond):
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			in := t.submitted.Load() - int64(late)
			failover, err := pf.crashDispatcher(ctx)
			if err != nil {
				return "", err
			}
			f.SchedulerFailover = Duration(failover)
			return fmt.Sprintf("%d of the last %d runs submitted before it; the new one scheduling %s after the kill", in, e.cfg.Runs-late, Duration(failover)), nil
		}},
	}
	for _, s := range steps {
		n, err := e.waitDone(ctx, t, int(s.at*float64(len(subs))))
		if err != nil {
			e.rep.note("before %q: %v", s.what, err)
			break
		}
		at := time.Since(start)
		note, err := s.do(ctx)
		step := ChaosStep{At: Duration(at), What: s.what, Took: Duration(time.Since(start) - at), Done: n, Note: note}
		switch {
		case errors.Is(err, errSkipped):
		case err != nil:
			step.Failed = true
			step.Note = strings.TrimSpace(note + " " + err.Error())
		}
		f.Timeline = append(f.Timeline, step)
		e.say("%s at %s: %s", s.what, Duration(at), orDash(step.Note))
	}
	submitLate()
	<-lateDone
	subs, submitErrs = append(subs, lateSubs...), submitErrs+lateErrs
	return e.chaosVerdict(ctx, t, f, start, subs, submitErrs)
}

// chaosVerdict waits for t's runs and judges them: every run completed,
// no turn committed twice, traces dense, every disruption done.
func (e *env) chaosVerdict(ctx context.Context, t *tenant, f *ChaosFigures, start time.Time, subs []submission, submitErrs int) error {
	st := e.procs.store()
	waitErr := e.waitAll(ctx, t)
	_, runs, last, err := e.finish(ctx, t, subs, submitErrs, waitErr)
	if err != nil {
		return err
	}
	f.Wall = Duration(last.Sub(start))
	for _, r := range runs {
		double, broken, err := traceCheck(ctx, st, r)
		if err != nil {
			return fmt.Errorf("read trace of %s: %w", r.ID, err)
		}
		f.DoubleCommits += double
		if broken {
			f.SeqGaps++
		}
	}
	f.ModelCalls, f.RepeatedCalls = e.model.repeatedCalls(t.tag)
	e.rep.Figures.Chaos = f
	if err := e.checkEffects(ctx, st, t, runs); err != nil {
		return err
	}
	e.rep.checkRuns()
	e.rep.check("no turn committed twice", f.DoubleCommits == 0, false, "%d turns with more than one model_call event", f.DoubleCommits)
	e.rep.check("traces dense", f.SeqGaps == 0, false, "%d runs whose events are not seq 1..n with one model_call per turn", f.SeqGaps)
	for _, s := range f.Timeline {
		if s.Failed {
			e.rep.check("disruption: "+s.What, false, false, "%s", s.Note)
		}
	}
	return nil
}

var errSkipped = errors.New("skipped")

// waitDone waits until at least n of t's runs have ended.
func (e *env) waitDone(ctx context.Context, t *tenant, n int) (int, error) {
	lastServed, lastMove := e.model.served(), time.Now()
	for {
		d, err := e.done(ctx, t)
		if err == nil && d >= n {
			return d, nil
		}
		if s := e.model.served(); s != lastServed {
			lastServed, lastMove = s, time.Now()
		} else if time.Since(lastMove) > e.cfg.Stall {
			return d, errStalled
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return d, ctx.Err()
		}
	}
}

// traceCheck reads a run's events: double counts turns with more than one
// model_call (committed twice); broken says the seq is not dense from 1
// or a committed turn has no model_call.
func traceCheck(ctx context.Context, st store.Store, r agentfleet.Run) (double int, broken bool, err error) {
	evs, err := st.EventListByRun(ctx, store.EventListByRunParams{RunID: r.ID})
	if err != nil {
		return 0, false, err
	}
	calls := map[int]int{}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			broken = true
		}
		if ev.Type == agentfleet.EventModelCall && !isSubCall(ev) {
			calls[ev.Turn]++
		}
	}
	for turn := 1; turn <= r.Turn; turn++ {
		switch n := calls[turn]; {
		case n > 1:
			double += n - 1
		case n == 0:
			broken = true
		}
	}
	return double, broken, nil
}

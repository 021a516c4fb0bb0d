package bench

import (
	"context"
	"time"
)

// throughput submits Runs runs of Turns turns at once, from Submitters
// concurrent submitters, and measures from the first submission to the
// last completion. Completion is detected by polling the run counts (the
// store's, or the API's list of runs not ended), never by following each
// run, so the bench itself costs the fleet little.
func (e *env) throughput(ctx context.Context) error {
	e.rep.Parameters.Submitters = e.cfg.Submitters
	if err := e.warmup(ctx, e.cfg.Warmup); err != nil {
		return err
	}
	t, err := e.tenant(ctx, "throughput")
	if err != nil {
		return err
	}
	served0 := e.model.served()
	local := e.fleet.local()
	var self0, kids0, pg0 time.Duration
	var roles0 map[string]time.Duration
	if local {
		self0, kids0 = cpuTimes()
		pg0 = postgresCPU()
		if e.procs != nil {
			roles0 = e.procs.cpuByRole()
		}
	}
	e.startProgress(e.turnRate(e.cfg.Runs))
	start := time.Now()
	subs, submitErrs := e.submit(ctx, t, 0, e.cfg.Runs, e.cfg.Submitters)
	submitWall := time.Since(start)
	waitErr := e.waitAll(ctx, t)
	detected := time.Now()
	var self1, kids1, pg1 time.Duration
	var roles1 map[string]time.Duration
	if local {
		self1, kids1 = cpuTimes()
		pg1 = postgresCPU()
		if e.procs != nil {
			roles1 = e.procs.cpuByRole()
		}
	}
	e.stopProgress()
	if waitErr != nil && ctx.Err() != nil {
		return waitErr
	}
	if waitErr != nil {
		e.rep.note("stopped waiting: %v", waitErr)
	}

	counts, _, last, err := e.collect(ctx, t, subs, submitErrs)
	if err != nil {
		return err
	}
	e.rep.Figures.Runs = counts
	wall := last.Sub(start)
	if last.IsZero() || wall <= 0 {
		wall = detected.Sub(start)
	}
	f := &ThroughputFigures{
		Wall: Duration(wall), SubmitWall: Duration(submitWall),
		TurnsPerSec: float64(counts.Turns) / wall.Seconds(),
		RunsPerSec:  float64(counts.Completed) / wall.Seconds(),
		ModelCalls:  e.model.served() - served0,
	}
	if local && counts.Turns > 0 {
		self, kids := self1-self0, kids1-kids0
		cpu := self + kids
		turns := time.Duration(counts.Turns)
		f.CPUTotal = durPtr(cpu)
		f.CPUPerTurn = durPtr(cpu / turns)
		f.CPUPerTurnSelf = durPtr(self / turns)
		f.CPUPerTurnChildren = durPtr(kids / turns)
		cores := cpu.Seconds() / detected.Sub(start).Seconds()
		f.CPUCores = &cores
		if roles1 != nil {
			f.CPUPerTurnByProcess = map[string]Duration{}
			for role, c := range roles1 {
				f.CPUPerTurnByProcess[role] = Duration((c - roles0[role]) / turns)
			}
		}
		if e.rep.Parameters.Store == "postgres" && pg1 > pg0 {
			f.CPUPerTurnPostgres = durPtr((pg1 - pg0) / turns)
			e.rep.note("Postgres CPU per turn is that of every process named postgres on this machine (other databases' work included), not part of CPU per turn")
		}
		if e.procs != nil {
			e.rep.note("CPU per turn: this process is the bench (fake model, API client); its children are the fleet (NATS, dispatcher, workers and their sandbox processes), not Postgres; from the first submission until completion was seen")
		} else {
			e.rep.note("CPU per turn: this process is the fleet with the bench's fake model and API client; its children are the sandbox processes; from the first submission until completion was seen")
		}
	} else if !local {
		e.rep.note("CPU per turn is measured only for a fleet the bench runs (not with --url)")
	}
	e.rep.Figures.Throughput = f
	e.rep.checkRuns()
	if f.ModelCalls > counts.Turns {
		e.rep.note("the model served %d calls for %d turns: %d repeated or retried", f.ModelCalls, counts.Turns, f.ModelCalls-counts.Turns)
	}
	return nil
}

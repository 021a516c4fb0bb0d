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
	var cpu0 cpuSample
	if local {
		cpu0 = e.sampleCPU()
	}
	e.startProgress(e.turnRate(e.cfg.Runs))
	start := time.Now()
	subs, submitErrs := e.submit(ctx, t, 0, e.cfg.Runs, e.cfg.Submitters)
	submitWall := time.Since(start)
	waitErr := e.waitAll(ctx, t)
	detected := time.Now()
	var cpu1 cpuSample
	if local {
		cpu1 = e.sampleCPU()
	}
	counts, runs, last, err := e.finish(ctx, t, subs, submitErrs, waitErr)
	if err != nil {
		return err
	}
	if err := e.checkEffects(ctx, e.fleet.store(), t, runs); err != nil {
		return err
	}
	wall := wallTime(start, last, detected)
	f := &ThroughputFigures{
		Wall: Duration(wall), SubmitWall: Duration(submitWall),
		TurnsPerSec: float64(counts.Turns) / wall.Seconds(),
		RunsPerSec:  float64(counts.Completed) / wall.Seconds(),
		ModelCalls:  e.model.served() - served0,
	}
	if local && counts.Turns > 0 {
		self, kids := cpu1.self-cpu0.self, cpu1.kids-cpu0.kids
		cpu := self + kids
		turns := time.Duration(counts.Turns)
		f.CPUTotal = durPtr(cpu)
		f.CPUPerTurn = durPtr(cpu / turns)
		f.CPUPerTurnSelf = durPtr(self / turns)
		f.CPUPerTurnChildren = durPtr(kids / turns)
		cores := cpu.Seconds() / detected.Sub(start).Seconds()
		f.CPUCores = &cores
		n := float64(counts.Turns)
		swSelf, swKids := float64(cpu1.switchesSelf-cpu0.switchesSelf)/n, float64(cpu1.switchesKids-cpu0.switchesKids)/n
		f.SwitchesPerTurn, f.SwitchesPerTurnSelf, f.SwitchesPerTurnChildren = new(swSelf+swKids), new(swSelf), new(swKids)
		if cpu1.roles != nil {
			f.CPUPerTurnByProcess = map[string]Duration{}
			f.SwitchesPerTurnByProcess = map[string]float64{}
			for role, u := range cpu1.roles {
				f.CPUPerTurnByProcess[role] = Duration((u.cpu - cpu0.roles[role].cpu) / turns)
				f.SwitchesPerTurnByProcess[role] = float64(u.switches-cpu0.roles[role].switches) / n
			}
		}
		if e.rep.Parameters.Store == "postgres" && cpu1.postgres > cpu0.postgres {
			f.CPUPerTurnPostgres = durPtr((cpu1.postgres - cpu0.postgres) / turns)
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

// cpuSample is the CPU time used so far by this process, its children,
// the local PostgreSQL and, with spawned processes, each fleet role; and
// the context switches of this process and its children.
type cpuSample struct {
	self, kids, postgres       time.Duration
	switchesSelf, switchesKids int64
	roles                      map[string]roleUsage
}

func (e *env) sampleCPU() cpuSample {
	var c cpuSample
	c.self, c.kids = cpuTimes()
	c.switchesSelf, c.switchesKids = contextSwitches()
	c.postgres = postgresCPU()
	if e.procs != nil {
		c.roles = e.procs.usageByRole()
	}
	return c
}

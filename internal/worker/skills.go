package worker

import (
	"context"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/skills"
	"github.com/agentfleet/agentfleet/internal/store"
)

// skillLibrary is the skills the run's agent sees, from this process's
// index of its tenant's, current as of the skills revision the turn's
// load read with the run (no read of its own; a tenant without skills
// costs nothing); nil when it sees none. A failure is the store's: the
// turn is retried.
func (w *Worker) skillLibrary(ctx context.Context, run agentfleet.Run, rev int64) (agentfleet.SkillLibrary, error) {
	return w.skills.For(ctx, run.Tenant, run.Agent, rev)
}

// learn compiles a run this worker completed into a skill of its tenant
// when its agent learns (AgentSpec.Learn): a near-duplicate of a skill
// the agent sees is updated instead of another added. The run has ended
// whatever happens here, so a failure is logged, not the turn's.
func (w *Worker) learn(ctx context.Context, run agentfleet.Run) {
	if run.Status != agentfleet.StatusCompleted {
		return
	}
	agent, err := w.agents.get(ctx, run.Tenant, run.Agent, run.AgentVersion)
	if err != nil || !agent.Learn {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	steps, err := w.cfg.Store.StepListByRun(ctx, store.StepListByRunParams{RunID: run.ID})
	var x *skills.Index
	if err == nil {
		x, err = w.skills.Index(ctx, run.Tenant)
	}
	var sk agentfleet.Skill
	var updated bool
	if err == nil {
		sk, updated, err = skills.Learn(ctx, w.cfg.Store, x, run, steps)
	}
	if err != nil {
		w.log.Warn("learn a skill from a completed run", "tenant", run.Tenant, "run", run.ID, "agent", run.Agent, "err", err)
		return
	}
	w.log.Info("learned a skill", "tenant", run.Tenant, "run", run.ID, "skill", sk.Name, "updated", updated)
}

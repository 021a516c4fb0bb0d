// Forwarding: the turns popped from the fair queue in order, started in
// the store when their tenant caps its runs, and published to the
// workers' queue as far as its room allows.

package scheduler

import (
	"context"
	"errors"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/store"
)

// start moves a new run from queued to running. started is false when the
// run is no longer queued (cancelled meanwhile): its turn is dropped.
func (s *Scheduler) start(ctx context.Context, d *bus.Delivery) (started bool, err error) {
	_, err = s.cfg.Store.RunTransition(ctx, store.RunTransitionParams{
		ID: d.Turn.RunID, From: []agentfleet.RunStatus{agentfleet.StatusQueued}, To: agentfleet.StatusRunning,
	})
	switch {
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		if aerr := d.Ack(ctx); aerr != nil {
			s.log.Warn("scheduler: ack dropped turn", "run", d.Turn.RunID, "err", aerr)
		}
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// room is how many turns the workers' queue can take now: one per idle
// worker slot, plus the cushion, minus what already waits there. The idle
// slots are the slots the workers announced less the turns they hold
// (delivered, not yet acked). A worker parks one pull request whatever
// its free slots, so the parked requests alone would count idle workers,
// not slots, and keep a worker of 64 slots fed a cushion at a time; they
// are the floor for workers not heard from yet.
func (s *Scheduler) room(ctx context.Context, st *state, work *bus.TurnSource, slots *bus.SlotTally) (int, bus.Backlog, error) {
	bl, err := work.Pending(ctx)
	if err != nil {
		return 0, bus.Backlog{}, err
	}
	bl.Undelivered = undeliveredAtLeast(bl.Undelivered, bl.LastDelivered, st.lastForwarded)
	s.cfg.Metrics.backlogRead()
	idle := max(bl.Waiting, slots.Total()-bl.AckPending)
	return max(0, idle+s.cfg.ReadyDepth-int(bl.Undelivered)), bl, nil
}

// dispatch forwards up to room turns in fair order and returns how many
// it forwarded. The turns of one call go out as one batch: published
// together, their acks awaited together.
func (s *Scheduler) dispatch(ctx context.Context, st *state, room int) int {
	st.q.Recheck()
	type pick struct {
		id, tenant    string
		fresh, direct bool
		d             *bus.Delivery
	}
	var picks []pick
	for len(picks) < room {
		id, tenant, fresh, ok := st.q.Pop(func(tenant string) bool { return s.tenants.admit(ctx, tenant) })
		if !ok {
			break
		}
		d := st.held[id]
		if fresh && s.tenants.capped(ctx, tenant) {
			// Start a capped tenant's run here, in the store, so that
			// the count of its active runs includes it from now on,
			// not only once a worker picks it up.
			started, err := s.start(ctx, d)
			if err != nil {
				s.log.Warn("scheduler: start run", "run", d.Turn.RunID, "err", err)
				s.push(ctx, st, id, fresh)
				break
			}
			if !started {
				st.release(id)
				continue
			}
			s.tenants.started(tenant)
		}
		// No other tenant waits: the turn after this one may skip the
		// scheduler.
		direct := st.q.Len() == st.q.TenantLen(tenant)
		picks = append(picks, pick{id, tenant, fresh, direct, d})
	}
	if len(picks) == 0 {
		return 0
	}
	turns := make([]bus.Turn, len(picks))
	for i, p := range picks {
		turns[i] = p.d.Turn
		turns[i].Direct = p.direct
	}
	seqs, errs := s.cfg.Bus.ForwardTurns(ctx, turns)
	st.lastForwarded = seqs
	n := 0
	for i, p := range picks {
		if errs[i] != nil {
			// Put it back (at its tenant's tail, close enough to its
			// fair position) and retry later.
			s.log.Warn("scheduler: forward turn", "run", p.d.Turn.RunID, "err", errs[i])
			s.push(ctx, st, p.id, p.fresh)
			continue
		}
		st.release(p.id)
		// Forwarded; if the ack is lost the turn comes back after
		// HoldAckWait and the work queue drops it as a duplicate.
		if err := p.d.AckAsync(); err != nil {
			s.log.Warn("scheduler: ack forwarded turn", "run", p.d.Turn.RunID, "err", err)
		}
		s.cfg.Metrics.forwarded(p.tenant, st.queued(p.tenant))
		n++
	}
	return n
}

// undeliveredAtLeast is the workers' queue's count of undelivered turns
// made no lower than the turns the last forward stored that the consumer
// has not delivered yet (stream sequence above lastDelivered: one
// consumer delivers a work queue in order). The server counts a stored
// message as pending for its consumers only once the stream has signalled
// them, after the publish's ack, so a look right after a forward can miss
// the batch and the scheduler would fill the cushion twice. The floor
// counts only the last batch, so a stream that was reset (sequences
// starting over) costs at most one batch's room.
func undeliveredAtLeast(numPending, lastDelivered uint64, forwarded []uint64) uint64 {
	var ours uint64
	for _, seq := range forwarded {
		if seq > lastDelivered {
			ours++
		}
	}
	return max(numPending, ours)
}

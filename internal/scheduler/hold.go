// The hold: the turns the leader keeps un-acked in memory, queued per
// tenant in the fair queue until they are forwarded.

package scheduler

import (
	"context"

	"github.com/agentfleet/agentfleet/internal/budget"
	"github.com/agentfleet/agentfleet/internal/bus"
)

// state is what the leader holds: the fair queue of message ids, the
// newest delivery of each, and the tenants with turns spilled.
type state struct {
	q    *budget.FairQueue[string]
	held map[string]*bus.Delivery
	// runqHeld counts the held deliveries from AF_RUNQ, which the
	// server stops delivering at HoldMax of.
	runqHeld int
	spills   map[string]*spill
	// toSpill are arrivals of spilling tenants, spilled after the
	// intake is drained.
	toSpill []*bus.Delivery
	// lastForwarded is the last forward's AF_WORK stream sequences (see
	// undeliveredAtLeast).
	lastForwarded []uint64
}

func newState() *state {
	return &state{q: budget.NewFairQueue[string](), held: map[string]*bus.Delivery{}, spills: map[string]*spill{}}
}

func (s *Scheduler) take(ctx context.Context, st *state, d *bus.Delivery) {
	id := d.Turn.MsgID()
	if old, ok := st.held[id]; ok {
		if old.Queue != d.Queue {
			// The same turn from the other queue (a spill whose ack
			// was lost): keep the handle held, settle this copy.
			_ = d.AckAsync()
			return
		}
		st.held[id] = d // a redelivery of a turn we hold: keep the newest handle
		return
	}
	tenant := d.Turn.Tenant
	if d.Queue == bus.QueueRunQ {
		// Behind its spilled turns, in arrival order; but a turn outside
		// the batch class goes before a batch's anyway, so while the
		// tenant holds batch turns and few others, it is held.
		if sp := st.spills[tenant]; sp != nil && (d.Turn.Batch || !s.holdsBatch(st, tenant)) {
			st.toSpill = append(st.toSpill, d)
			return
		}
		st.runqHeld++
	}
	s.hold(ctx, st, d)
}

// hold queues a delivery for forwarding.
func (s *Scheduler) hold(ctx context.Context, st *state, d *bus.Delivery) {
	id, tenant := d.Turn.MsgID(), d.Turn.Tenant
	st.held[id] = d
	if sp := st.spills[tenant]; sp != nil && d.Queue == bus.QueueSpill {
		sp.held++
	}
	s.push(ctx, st, id, d.Turn.Turn == 1 && d.Turn.Wake == 0)
	s.cfg.Metrics.queued(tenant, st.queued(tenant))
}

// holdsBatch reports whether tenant holds batch turns and few others
// (interactiveHoldMin, and a tenth of HoldMax at most).
func (s *Scheduler) holdsBatch(st *state, tenant string) bool {
	other := st.q.TenantInteractiveLen(tenant)
	return st.q.TenantLen(tenant) > other && other < min(interactiveHoldMin, s.cfg.HoldMax/10)
}

// push queues held turn id in its tenant's queue, in the batch class
// when it is a batch run's turn.
func (s *Scheduler) push(ctx context.Context, st *state, id string, fresh bool) {
	t := st.held[id].Turn
	w := s.tenants.get(ctx, t.Tenant).weight
	if t.Batch {
		st.q.PushBatch(t.Tenant, w, id, fresh)
		return
	}
	st.q.Push(t.Tenant, w, id, fresh)
}

// release drops a forwarded (or dropped) delivery from the hold.
func (st *state) release(id string) {
	d := st.held[id]
	switch {
	case d == nil:
	case d.Queue == bus.QueueRunQ:
		st.runqHeld--
	case st.spills[d.Turn.Tenant] != nil:
		st.spills[d.Turn.Tenant].held--
	}
	delete(st.held, id)
}

// queued is how many of tenant's turns wait for the workers: held, and
// spilled.
func (st *state) queued(tenant string) int {
	n := st.q.TenantLen(tenant)
	if sp := st.spills[tenant]; sp != nil {
		n += sp.waiting
	}
	return n
}

package scheduler

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/agentfleet/agentfleet/internal/bus"
)

// Spilling keeps the hold fair whatever one tenant's backlog. The server
// stops delivering AF_RUNQ at HoldMax held turns, and what waits there
// waits in arrival order: a tenant that queued 200,000 turns would put
// every other tenant's turn behind 100,000 of its own. So when the hold
// is nearly full, the tenant holding the most has its newest turns moved
// to AF_SPILL, under a source filtered to that tenant, and while it has
// turns there its arrivals follow them (in arrival order) instead of
// being held. Its spilled turns come back a chunk at a time whenever it
// holds few, so it keeps its fair share. The others' turns always find
// room in the hold.
//
// A spilled turn is stored in AF_SPILL (same message id) before its
// AF_RUNQ message is acked, so a crash between the two leaves the turn in
// both queues: forwarded twice, AF_WORK's duplicate window drops the
// second copy. A scheduler taking over finds the spill sources of its
// predecessor (bus.TenantSources) and resets them, as it resets AF_RUNQ.

// spill is one tenant's turns in AF_SPILL.
type spill struct {
	src *bus.TurnSource
	// waiting counts the tenant's turns in AF_SPILL not yet taken back;
	// held those taken back and not yet forwarded.
	waiting, held int
	// refilling is set while a fetch of its turns is on the wire.
	refilling bool
}

// refill is what a fetch from a tenant's spill brought back.
type refill struct {
	tenant string
	ds     []*bus.Delivery
	err    error
}

// spillBatchMax bounds the turns spilled in one publish batch.
const spillBatchMax = 1024

// spillAt is how many AF_RUNQ deliveries the hold may reach before the
// largest tenant spills; spillTo what it spills down to. The gap leaves
// the server room to deliver another tenant's turn at once.
func (s *Scheduler) spillAt() int { return max(1, s.cfg.HoldMax-max(1, s.cfg.HoldMax/8)) }
func (s *Scheduler) spillTo() int { return s.cfg.HoldMax * 3 / 4 }

// refillBelow is how few held turns a spilling tenant gets down to before
// its spilled turns are fetched back, and refillChunk how many come back
// at once: enough to keep its share of the workers busy meanwhile.
func (s *Scheduler) refillBelow() int {
	return max(1, min(max(2*s.cfg.ReadyDepth, pullBatchMax), s.spillTo()/2))
}
func (s *Scheduler) refillChunk() int { return max(1, min(pullBatchMax, s.spillTo()/2)) }

// spillSource opens (or creates) tenant's source on AF_SPILL.
func (s *Scheduler) spillSource(ctx context.Context, tenant string) (*bus.TurnSource, error) {
	return s.cfg.Bus.TurnSource(ctx, bus.QueueSpill, s.cfg.Durable+"-spill-"+tenant,
		bus.FilterTenant(tenant), bus.HoldFor(s.cfg.HoldAckWait), bus.MaxHeld(s.cfg.HoldMax))
}

// reclaimSpills takes over the spills a previous leader left: every
// tenant with turns in AF_SPILL spills again from here, its source reset
// so the turns its predecessor held come back at once.
func (s *Scheduler) reclaimSpills(ctx context.Context, st *state) error {
	srcs, err := s.cfg.Bus.TenantSources(ctx, bus.QueueSpill)
	if err != nil {
		return fmt.Errorf("scheduler: list spilled tenants: %w", err)
	}
	for tenant, ts := range srcs {
		src, err := s.spillSource(ctx, tenant)
		if err != nil {
			return fmt.Errorf("scheduler: open spill of tenant %s: %w", tenant, err)
		}
		if err := src.Reset(ctx); err != nil {
			return fmt.Errorf("scheduler: reset spill of tenant %s: %w", tenant, err)
		}
		st.spills[tenant] = &spill{src: src, waiting: int(ts.Waiting)}
	}
	return nil
}

// relieve spills the arrivals of spilling tenants, and the newest held
// turns of the tenant holding the most once the hold is nearly full.
func (s *Scheduler) relieve(ctx context.Context, st *state) {
	if st.runqHeld >= s.spillAt() {
		for st.runqHeld > s.spillTo() {
			tenant, n := s.largestUnspilled(st)
			if n == 0 {
				break
			}
			if !s.moveNewest(ctx, st, tenant, st.runqHeld-s.spillTo()) {
				break
			}
		}
	}
	for len(st.toSpill) > 0 {
		n := min(len(st.toSpill), spillBatchMax)
		batch := st.toSpill[:n]
		st.toSpill = st.toSpill[n:]
		for _, d := range s.spillOut(ctx, st, batch) {
			// Not spilled (NATS away): hold it after all.
			st.runqHeld++
			s.hold(ctx, st, d)
		}
	}
	st.toSpill = nil
}

// largestUnspilled is the tenant holding the most turns from AF_RUNQ
// among those not spilling yet (a spilling tenant's arrivals no longer
// come into the hold), or else the one holding the most.
func (s *Scheduler) largestUnspilled(st *state) (string, int) {
	counts := map[string]int{}
	for _, d := range st.held {
		if d.Queue == bus.QueueRunQ {
			counts[d.Turn.Tenant]++
		}
	}
	best, bestN, spilling, spillingN := "", 0, "", 0
	for tenant, n := range counts {
		if st.spills[tenant] == nil {
			if n > bestN {
				best, bestN = tenant, n
			}
		} else if n > spillingN {
			spilling, spillingN = tenant, n
		}
	}
	if bestN > 0 {
		return best, bestN
	}
	return spilling, spillingN
}

// moveNewest spills up to n of tenant's newest turns from AF_RUNQ and
// reports whether it spilled any. Turns that came back from the spill
// stay held: spilling one again would be dropped as a duplicate.
func (s *Scheduler) moveNewest(ctx context.Context, st *state, tenant string, n int) bool {
	var out, keep []*bus.Delivery
	var outFresh, keepFresh []bool
	for len(out) < n {
		id, fresh, ok := st.q.PopNewest(tenant)
		if !ok {
			break
		}
		d := st.held[id]
		if d.Queue != bus.QueueRunQ {
			keep, keepFresh = append(keep, d), append(keepFresh, fresh)
			continue
		}
		delete(st.held, id)
		st.runqHeld--
		out, outFresh = append(out, d), append(outFresh, fresh)
	}
	for i := len(keep) - 1; i >= 0; i-- {
		st.held[keep[i].Turn.MsgID()] = keep[i]
		s.push(ctx, st, keep[i].Turn.MsgID(), keepFresh[i])
	}
	if len(out) == 0 {
		return false
	}
	// Newest first off the queue: spill them oldest first.
	slices.Reverse(out)
	if st.spills[tenant] == nil {
		src, err := s.spillSource(ctx, tenant)
		if err != nil {
			s.log.Warn("scheduler: open spill", "tenant", tenant, "err", err)
			for _, d := range out {
				st.runqHeld++
				s.hold(ctx, st, d)
			}
			return false
		}
		st.spills[tenant] = &spill{src: src}
		s.log.Info("scheduler: tenant's turns spilled beyond the hold", "tenant", tenant, "held", st.runqHeld+len(out), "hold_max", s.cfg.HoldMax)
	}
	failed := s.spillOut(ctx, st, out)
	for _, d := range failed {
		st.runqHeld++
		s.hold(ctx, st, d)
	}
	s.cfg.Metrics.queued(tenant, st.queued(tenant))
	return len(failed) < len(out)
}

// spillOut moves deliveries from AF_RUNQ to their tenants' spills: stored
// there first, then acked. It returns those it could not store.
func (s *Scheduler) spillOut(ctx context.Context, st *state, ds []*bus.Delivery) (failed []*bus.Delivery) {
	turns := make([]bus.Turn, len(ds))
	for i, d := range ds {
		turns[i] = d.Turn
		turns[i].Direct = false
	}
	errs := s.cfg.Bus.SpillTurns(ctx, turns)
	for i, d := range ds {
		if errs[i] != nil {
			s.log.Warn("scheduler: spill turn", "run", d.Turn.RunID, "err", errs[i])
			failed = append(failed, d)
			continue
		}
		if sp := st.spills[d.Turn.Tenant]; sp != nil {
			sp.waiting++
		}
		if err := d.AckAsync(); err != nil {
			s.log.Warn("scheduler: ack spilled turn", "run", d.Turn.RunID, "err", err)
		}
		s.cfg.Metrics.spilled(d.Turn.Tenant)
		s.cfg.Metrics.queued(d.Turn.Tenant, st.queued(d.Turn.Tenant))
	}
	return failed
}

// startRefills fetches back a chunk of spilled turns for every spilling
// tenant that holds few, on goroutines that report on refills.
func (s *Scheduler) startRefills(ctx context.Context, st *state, refills chan<- refill, wg *sync.WaitGroup) {
	for tenant, sp := range st.spills {
		// With none left to take back by its count, fetch once more
		// only when none is held either: an empty fetch then means the
		// spill is drained.
		if sp.refilling || st.q.TenantLen(tenant) >= s.refillBelow() || sp.waiting == 0 && sp.held > 0 {
			continue
		}
		sp.refilling = true
		src, n := sp.src, s.refillChunk()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds, err := src.FetchReady(ctx, n)
			select {
			case refills <- refill{tenant: tenant, ds: ds, err: err}:
			case <-ctx.Done():
				for _, d := range ds {
					_ = d.NakWithDelay(0)
				}
			}
		}()
	}
}

// refilled holds the turns a refill brought back. A tenant whose spill
// the server reports empty stops spilling, and its source is deleted.
func (s *Scheduler) refilled(ctx context.Context, st *state, r refill) {
	sp := st.spills[r.tenant]
	if sp == nil {
		return
	}
	sp.refilling = false
	for _, d := range r.ds {
		s.take(ctx, st, d)
	}
	sp.waiting = max(0, sp.waiting-len(r.ds))
	if r.err != nil {
		s.log.Warn("scheduler: take back spilled turns", "tenant", r.tenant, "err", r.err)
		return
	}
	if len(r.ds) > 0 {
		return
	}
	bl, err := sp.src.Pending(ctx)
	if err != nil {
		s.log.Warn("scheduler: read spill", "tenant", r.tenant, "err", err)
		return
	}
	if bl.Undelivered > 0 || bl.AckPending > 0 {
		sp.waiting = int(bl.Undelivered)
		return
	}
	if err := sp.src.Delete(ctx); err != nil {
		s.log.Warn("scheduler: delete drained spill", "tenant", r.tenant, "err", err)
		return
	}
	delete(st.spills, r.tenant)
	s.log.Info("scheduler: tenant's spilled turns all taken back", "tenant", r.tenant)
}

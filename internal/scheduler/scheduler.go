// Package scheduler makes the shared fleet fair across tenants. Every turn
// to execute is published to the turn queue (AF_RUNQ, subjects
// af.runq.<tenant>.<run>); the scheduler takes them in as they arrive,
// holds them in memory in per-tenant queues, and forwards them to the
// workers' queue (AF_WORK) by weighted fair share (budget.FairQueue),
// keeping that queue shallow: it forwards as many turns as worker slots
// are idle (the slots the workers announce, bus.TallySlots, less the
// turns they hold un-acked) plus a small cushion, ReadyDepth. A tenant's new turn therefore waits behind at
// most ReadyDepth turns plus its fair share of the slots that free up,
// whatever another tenant's backlog: about one turn's service time.
//
// The design choice, and its limits:
//   - One scheduler, one consumer, one goroutine owning the fair queue: no
//     consumer or goroutine per tenant anywhere, so 1,000 active tenants
//     cost 1,000 small queue heads in one process. The fair queue is
//     O(log tenants) per turn.
//   - Held turns stay un-acked in AF_RUNQ until forwarded (AckWait
//     HoldAckWait, at most HoldMax of them). If the scheduler dies, its
//     successor resets the consumer and gets them all back at once;
//     forwarding uses the turn's own message id, so a turn forwarded just
//     before the crash is deduplicated by AF_WORK, never run twice.
//   - At most HoldMax turns are held; the server delivers no more beyond
//     that, and newer turns would wait in AF_RUNQ in arrival order. So
//     before the hold is full, the tenant holding the most has its newest
//     turns moved to AF_SPILL, a queue of its own (spill.go), and its
//     arrivals follow them there while it has any; they come back as its
//     held turns run low. Another tenant's turn therefore always finds
//     room, whatever one tenant's backlog.
//   - A turn takes one extra hop (AF_RUNQ -> scheduler -> AF_WORK), well
//     under a millisecond on a local server but a third of the NATS work
//     of a turn. A turn forwarded while no other tenant has turns waiting
//     is marked Direct, and the worker runs the turn after it at once in
//     the same slot (or, when it cannot, publishes it straight to
//     AF_WORK: bus.ContinueTurn). That turn is not marked, so a run
//     passes through here at least every other turn; a tenant that
//     arrives while another's turns skip the hop waits, at worst, behind
//     one skipped turn per turn then in flight: about one more turn's
//     service time. With one tenant busy (a batch fanning out), half of
//     the hops or more are skipped.
//   - Across dispatcher processes, a NATS lease elects the one that runs
//     the scheduler; the others wait to take over.
//
// Max concurrent runs per tenant is enforced here too: a tenant's first
// turns (new runs) are held back while it has that many runs active.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/budget"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Defaults of Config.
const (
	ReadyDepthDefault  = 4
	PullersDefault     = 4
	HoldMaxDefault     = 100_000
	HoldAckWaitDefault = time.Hour
	DurableDefault     = "scheduler"
	WorkersDefault     = "workers"
	TenantTTLDefault   = 2 * time.Second
	LeaseTTLDefault    = 10 * time.Second
	// A full ready queue is checked for room again after pollFull at
	// first; the interval doubles while checks find it still full, up to
	// pollFullMax, and drops back when one finds the workers idle (see
	// nextPollInterval). pollBlocked is how soon turns held back are
	// reconsidered.
	pollFull    = 2 * time.Millisecond
	pollFullMax = 16 * time.Millisecond
	pollBlocked = 50 * time.Millisecond
	// interactiveHoldMin is how many turns outside the batch class a
	// spilling tenant may hold before its new ones of that class follow
	// its spilled turns too.
	interactiveHoldMin = 1000
	// pullBatchMax bounds what one puller drains from the turn queue in
	// a round trip.
	pullBatchMax = 256
)

// Bus is what the scheduler needs of the message bus (a *bus.Bus).
type Bus interface {
	TurnSource(ctx context.Context, q bus.Queue, durable string, opts ...bus.SourceOption) (*bus.TurnSource, error)
	TenantSources(ctx context.Context, q bus.Queue) (map[string]bus.TenantSource, error)
	TallySlots(ctx context.Context, durable string) (*bus.SlotTally, error)
	Lease(ctx context.Context, name string, ttl time.Duration) (*bus.Lease, error)
	ForwardTurns(ctx context.Context, ts []bus.Turn) (seqs []uint64, errs []error)
	SpillTurns(ctx context.Context, ts []bus.Turn) []error
	ApplyReplicas(ctx context.Context) ([]string, error)
}

// Config configures a Scheduler.
type Config struct {
	Bus   Bus
	Store store.Store
	// ReadyDepth is how many turns may wait undelivered in the workers'
	// queue beyond the idle worker slots. Deeper hides the scheduler's
	// reaction time from busy workers; shallower is fairer.
	ReadyDepth int
	// Pullers is how many pulls from the turn queue run at once.
	Pullers int
	// HoldMax and HoldAckWait bound the turns held in memory.
	HoldMax     int
	HoldAckWait time.Duration
	// Durable names the scheduler's consumer of the turn queue, and
	// WorkersDurable the workers' consumer of their queue (read for its
	// backlog).
	Durable        string
	WorkersDurable string
	// TenantTTL is how long tenant settings (weight, max concurrent
	// runs) are cached.
	TenantTTL time.Duration
	// LeaseTTL is the leader lease's TTL; zero disables leadership
	// election (a single dispatcher).
	LeaseTTL time.Duration
	Logger   *slog.Logger
	Metrics  *Metrics
}

func (c *Config) setDefaults() {
	if c.ReadyDepth == 0 {
		c.ReadyDepth = ReadyDepthDefault
	}
	if c.Pullers == 0 {
		c.Pullers = PullersDefault
	}
	if c.HoldMax == 0 {
		c.HoldMax = HoldMaxDefault
	}
	if c.HoldAckWait == 0 {
		c.HoldAckWait = HoldAckWaitDefault
	}
	if c.Durable == "" {
		c.Durable = DurableDefault
	}
	if c.WorkersDurable == "" {
		c.WorkersDurable = WorkersDefault
	}
	if c.TenantTTL == 0 {
		c.TenantTTL = TenantTTLDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Scheduler forwards turns fairly. Create it with New and start it with
// Run.
type Scheduler struct {
	cfg     Config
	log     *slog.Logger
	tenants *tenantCache
	leading atomic.Bool
}

// Leading reports whether this scheduler schedules now (it holds the
// lease, or runs without one), so that other fleet-wide singletons (the
// retention sweep) can run where it does.
func (s *Scheduler) Leading() bool { return s.leading.Load() }

func (s *Scheduler) setLeading(on bool) {
	s.leading.Store(on)
	s.cfg.Metrics.setLeading(on)
}

// New returns a Scheduler.
func New(cfg Config) (*Scheduler, error) {
	cfg.setDefaults()
	switch {
	case cfg.Bus == nil || cfg.Store == nil:
		return nil, errors.New("scheduler: Config needs Bus and Store")
	case cfg.ReadyDepth < 1 || cfg.Pullers < 1 || cfg.HoldMax < 1 || cfg.HoldAckWait < time.Minute || cfg.TenantTTL < 0 || cfg.LeaseTTL < 0:
		return nil, fmt.Errorf("scheduler: ReadyDepth, Pullers and HoldMax must be positive and HoldAckWait at least a minute (got %d, %d, %d, %s)",
			cfg.ReadyDepth, cfg.Pullers, cfg.HoldMax, cfg.HoldAckWait)
	}
	return &Scheduler{cfg: cfg, log: cfg.Logger, tenants: newTenantCache(cfg.Store, cfg.TenantTTL)}, nil
}

// Run schedules until ctx ends. With a LeaseTTL it first waits to hold
// the scheduler lease, and steps down (then waits again) if it loses it.
func (s *Scheduler) Run(ctx context.Context) error {
	if s.cfg.LeaseTTL == 0 {
		s.setLeading(true)
		defer s.setLeading(false)
		return s.lead(ctx)
	}
	for ctx.Err() == nil {
		lease, err := s.cfg.Bus.Lease(ctx, "scheduler", s.cfg.LeaseTTL)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Warn("scheduler lease", "err", err)
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
			continue
		}
		select {
		case <-lease.Held():
		case <-ctx.Done():
			lease.Release()
			return nil
		}
		s.log.Info("scheduler lease acquired; scheduling")
		s.setLeading(true)
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-lease.Lost():
				cancel()
			case <-lctx.Done():
			}
		}()
		err = s.lead(lctx)
		s.setLeading(false)
		cancel()
		lease.Release()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("scheduler stopped", "err", err)
		}
	}
	return nil
}

// applyReplicas sets the fleet's streams to this process's replicas: the
// leader alone does, so that processes configured apart never flip them.
// It retries while the cluster cannot (a node down) until it leads no
// more.
func (s *Scheduler) applyReplicas(ctx context.Context) {
	for attempt := 0; ; attempt++ {
		changed, err := s.cfg.Bus.ApplyReplicas(ctx)
		if err == nil {
			if len(changed) > 0 {
				s.log.Info("stream replicas applied", "streams", changed)
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("apply stream replicas", "err", err, "attempt", attempt+1)
		select {
		case <-time.After(min(time.Second<<min(attempt, 5), 30*time.Second)):
		case <-ctx.Done():
			return
		}
	}
}

// lead is the scheduling loop of the leader.
func (s *Scheduler) lead(ctx context.Context) error {
	var applying sync.WaitGroup
	defer applying.Wait()
	applying.Go(func() { s.applyReplicas(ctx) })
	src, err := s.cfg.Bus.TurnSource(ctx, bus.QueueRunQ, s.cfg.Durable, bus.HoldFor(s.cfg.HoldAckWait), bus.MaxHeld(s.cfg.HoldMax), bus.ResetOnReconnect())
	if err != nil {
		return fmt.Errorf("scheduler: open turn queue: %w", err)
	}
	// Reclaim what a previous leader held un-acked.
	if err := src.Reset(ctx); err != nil {
		return fmt.Errorf("scheduler: reset turn queue consumer: %w", err)
	}
	work, err := s.cfg.Bus.TurnSource(ctx, bus.QueueWork, s.cfg.WorkersDurable)
	if err != nil {
		return fmt.Errorf("scheduler: open work queue: %w", err)
	}
	slots, err := s.cfg.Bus.TallySlots(ctx, s.cfg.WorkersDurable)
	if err != nil {
		return fmt.Errorf("scheduler: listen to the workers' slots: %w", err)
	}
	defer slots.Close()

	intake := make(chan *bus.Delivery, 256)
	pctx, stopPullers := context.WithCancel(ctx)
	var pullers sync.WaitGroup
	for range s.cfg.Pullers {
		pullers.Add(1)
		go func() {
			defer pullers.Done()
			s.pull(pctx, src, intake)
		}()
	}
	defer func() {
		stopPullers()
		pullers.Wait()
	}()

	st := newState()
	refills := make(chan refill, 16)
	var refillers sync.WaitGroup
	defer refillers.Wait()
	if err := s.reclaimSpills(ctx, st); err != nil {
		return err
	}
	// credit is how many more turns the workers' queue can take by its
	// last reported backlog. When that backlog left no room, the next
	// look waits until nextLook, however many turns arrive meanwhile.
	credit := 0
	lookEvery := pollFull
	var nextLook time.Time
	var retry *time.Timer
	var retryAt time.Time
	var lookFailures failStreak
	retryC := func() <-chan time.Time {
		if retry == nil {
			return nil
		}
		return retry.C
	}
	// retryIn makes the loop come round again within d.
	retryIn := func(d time.Duration) {
		at := time.Now().Add(d)
		switch {
		case retry == nil:
			retry = time.NewTimer(d)
		case at.Before(retryAt):
			retry.Reset(d)
		default:
			return
		}
		retryAt = at
	}
	for {
		// After the last round's forwards: a spilling tenant holding few
		// turns takes some back.
		s.startRefills(ctx, st, refills, &refillers)
		select {
		case <-ctx.Done():
			return nil
		case d := <-intake:
			s.take(ctx, st, d)
		drain:
			for {
				select {
				case d := <-intake:
					s.take(ctx, st, d)
				default:
					break drain
				}
			}
		case r := <-refills:
			s.refilled(ctx, st, r)
		case <-retryC():
			retry = nil
		}
		s.relieve(ctx, st)
		if st.q.Len() == 0 {
			continue
		}
		// Asking the server for the workers' backlog is a JetStream API
		// call; ask only when the room it last reported is used up, and
		// after a look that found no room, not before nextLook: turns
		// arriving meanwhile would otherwise each cost a look.
		if credit <= 0 {
			if wait := time.Until(nextLook); wait > 0 {
				retryIn(wait)
				continue
			}
			room, bl, err := s.room(ctx, st, work, slots)
			if err != nil {
				// NATS is away: look again later, later each time.
				wait := lookFailures.fail(s.log, "scheduler: read work queue backlog", err)
				credit, nextLook = 0, time.Now().Add(wait)
				retryIn(wait)
				continue
			}
			lookFailures.ok(s.log, "scheduler: work queue backlog read again")
			credit = room
			lookEvery = nextPollInterval(lookEvery, bl, room)
			nextLook = time.Time{}
			if room == 0 {
				nextLook = time.Now().Add(lookEvery)
			}
		}
		room := credit
		n := s.dispatch(ctx, st, room)
		credit -= n
		if st.q.Len() == 0 {
			continue
		}
		// Turns are left: the ready queue is full (look again soon), or
		// what is left is held back (a tenant at its max concurrent
		// runs, a failed forward): look again later.
		if n == room {
			retryIn(lookEvery)
		} else {
			retryIn(pollBlocked)
		}
	}
}

// failStreak paces a loop through failures in a row (NATS away): each
// retry waits twice as long as the one before, from pollBlocked up to
// failRetryMax, and only the first failure and then one every
// failLogEvery are logged, with the count, so that an outage of minutes
// writes a few lines rather than one per retry.
type failStreak struct {
	n      int
	logged time.Time
}

const (
	failRetryMax = time.Second
	failLogEvery = 10 * time.Second
)

// fail counts a failure, logs it if it is due, and returns how long to
// wait before trying again.
func (f *failStreak) fail(log *slog.Logger, msg string, err error) time.Duration {
	f.n++
	if f.n == 1 || time.Since(f.logged) >= failLogEvery {
		log.Warn(msg, "err", err, "failures_in_a_row", f.n)
		f.logged = time.Now()
	}
	return min(pollBlocked<<min(f.n-1, 8), failRetryMax)
}

// ok ends a streak, saying so if there was one.
func (f *failStreak) ok(log *slog.Logger, msg string) {
	if f.n > 0 {
		log.Info(msg, "after_failures", f.n)
		f.n = 0
	}
}

// nextPollInterval adapts how soon a ready queue found full is looked at
// again to how fast the workers drain it. A look that finds it still full
// came too early: wait twice as long next time, up to pollFullMax. A look
// that finds it empty with workers waiting came too late, as idle slots
// show: go back to pollFull. Anything between was about right. At a
// turn rate the cushion (ReadyDepth) covers for pollFullMax, the queue is
// looked at a few times per interval rather than once per arriving turn
// or every pollFull; at higher rates the interval stays near pollFull.
func nextPollInterval(cur time.Duration, bl bus.Backlog, room int) time.Duration {
	switch {
	case room == 0:
		return min(2*cur, pollFullMax)
	case bl.Undelivered == 0 && bl.Waiting > 0:
		return pollFull
	}
	return cur
}

// pull feeds the intake until ctx ends: one blocking pull for the next
// turn (so an idle queue answers at once), then whatever else is queued
// in one more round trip (so a busy one is read in batches).
func (s *Scheduler) pull(ctx context.Context, src *bus.TurnSource, intake chan<- *bus.Delivery) {
	for {
		d, err := src.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, bus.ErrClosed) {
				return
			}
			s.log.Warn("scheduler pull", "err", err)
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			continue
		}
		ds := []*bus.Delivery{d}
		if more, err := src.FetchReady(ctx, pullBatchMax); err == nil {
			ds = append(ds, more...)
		}
		for _, d := range ds {
			select {
			case intake <- d:
			case <-ctx.Done():
				return
			}
		}
	}
}

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

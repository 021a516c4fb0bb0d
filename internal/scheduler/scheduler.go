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
	"sync/atomic"
	"time"

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

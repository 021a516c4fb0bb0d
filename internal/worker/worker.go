// Package worker executes turns: it pulls one turn message per free slot
// (several in one round trip when the queue has more waiting, never more
// than it has free slots), runs the turn through the engine, commits it to
// the store (fenced by the turn number, group-committed across concurrent
// turns), publishes the turn's events and the next turn, and only then
// acks. It holds no run state beyond that, so any worker can run any turn.
//
// What happens to a delivered turn is decided by one pure function,
// decide (decide.go), from what the worker knows of it: redelivery of a
// committed turn, a turn run in place under its predecessor's message, a
// cancel, a tenant out of budget, a message delivered too often, a
// worker out of its own resources (the turn handed back uncounted). The
// worker gathers those facts and carries out the verdicts (turn.go); the
// rules are documented and table-tested there, and docs/ARCHITECTURE.md
// describes them for the whole fleet.
//
// Lifecycle: Run pulls until its context ends and then abandons in-flight
// turns without acking them (as a crash would: they are redelivered after
// AckWait). Shutdown drains instead: stop pulling, let in-flight turns
// finish within the deadline, hand back (Nak) the rest.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/skills"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Defaults of Config.
const (
	SlotsDefault      = 8
	RetryDelayDefault = time.Second
	RetryDelayMax     = 30 * time.Second
	DurableDefault    = "workers"
	AgentCacheTTL     = 5 * time.Second
	commitBatchMax    = 64
	publishTimeout    = 10 * time.Second
	storeTimeout      = 15 * time.Second
	pullRetryDelay    = 500 * time.Millisecond
	// pullBatchMax bounds the turns taken in one round trip after a pull
	// that found more queued.
	pullBatchMax = 16
)

// Bus is what a worker needs of the message bus (a *bus.Bus).
type Bus interface {
	TurnSource(ctx context.Context, q bus.Queue, durable string, opts ...bus.SourceOption) (*bus.TurnSource, error)
	SubscribeControl(fn func(tenant, runID, verb string)) (unsubscribe func(), err error)
	AnnounceSlots(durable, worker string, slots int) error
	SendEvents(evs []agentfleet.Event) (*bus.EventsSent, error)
	EnqueueTurn(ctx context.Context, t bus.Turn) error
	ContinueTurn(ctx context.Context, prev, next bus.Turn) (direct bool, err error)
	PublishControl(ctx context.Context, tenant, runID, verb string) error
	// PublishChunk sends a streamed piece of a reply, unstored.
	PublishChunk(ev agentfleet.Event) error
}

// Config configures a Worker.
type Config struct {
	Bus    Bus
	Store  store.Store
	Engine *loop.Engine
	// Queue is the queue turns are pulled from: bus.QueueWork when a
	// scheduler feeds it, bus.QueueRunQ when workers read the turn queue
	// directly.
	Queue bus.Queue
	// Durable is the consumer all workers share.
	Durable string
	// Slots is how many turns run at once: at most, for after a turn
	// failed for the worker's own exhaustion it runs fewer until it
	// recovers (slotGate). How often a turn is attempted before it is
	// dead-lettered is the bus's MaxDeliver.
	Slots int
	// RetryDelay is the first NakWithDelay of a failed attempt; it
	// doubles per attempt up to RetryDelayMax.
	RetryDelay time.Duration
	// Secrets are values redacted from everything a turn records, as
	// "[redacted]" (the provider key).
	Secrets []string
	// SecretSource opens the tenants' secrets for their turns: the
	// credentials of the runs whose agent names them, and values
	// redacted as "[secret:<name>]" from every turn of the tenant. Nil:
	// no tenant has secrets.
	SecretSource SecretSource
	Logger       *slog.Logger
	Metrics      *Metrics
	// Tracer traces turns and runs (internal/telemetry); nil traces
	// nothing.
	Tracer Tracer
}

// SecretSource is where a worker gets a tenant's secrets, opened, for a
// turn of one of its runs. A source may keep them a while; names are
// the secrets the run's agent names, which a kept list must hold (a
// secret set just before the run is read, not missed).
type SecretSource interface {
	TenantSecrets(ctx context.Context, tenant string, names []string) ([]agentfleet.OpenSecret, error)
}

// Tracer is what the worker needs of the fleet's tracing.
type Tracer interface {
	// StartTurn starts turn's span, after the turn that sent its
	// message (traceparent); end records its outcome.
	StartTurn(ctx context.Context, run agentfleet.Run, turn int, traceparent string) (context.Context, func(outcome string, err error))
	// EndRun emits the span of a run that ended.
	EndRun(ctx context.Context, run agentfleet.Run)
	// Traceparent is the trace context of ctx's span for a message.
	Traceparent(ctx context.Context) string
}

// noTracer traces nothing.
type noTracer struct{}

func (noTracer) StartTurn(ctx context.Context, _ agentfleet.Run, _ int, _ string) (context.Context, func(string, error)) {
	return ctx, func(string, error) {}
}
func (noTracer) EndRun(context.Context, agentfleet.Run) {}
func (noTracer) Traceparent(context.Context) string     { return "" }

func (c *Config) setDefaults() {
	if c.Durable == "" {
		c.Durable = DurableDefault
	}
	if c.Slots == 0 {
		c.Slots = SlotsDefault
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = RetryDelayDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Tracer == nil {
		c.Tracer = noTracer{}
	}
}

func (c *Config) validate() error {
	switch {
	case c.Bus == nil || c.Store == nil || c.Engine == nil:
		return errors.New("worker: Config needs Bus, Store and Engine")
	case c.Slots < 0:
		return fmt.Errorf("worker: Slots is %d; set AGENTFLEET_WORKER_SLOTS to a positive number", c.Slots)
	case c.RetryDelay < 0:
		return errors.New("worker: RetryDelay must not be negative (zero selects the default)")
	}
	return nil
}

// Worker executes turns. Create it with New, start it with Run.
type Worker struct {
	cfg      Config
	id       string // this worker's id in its slot announcements
	log      *slog.Logger
	commits  *committer
	agents   agentCache
	sessions sessionCache
	skills   *skills.Libraries

	// mu guards inflight, and orders start's count of a turn against
	// the drain Shutdown starts.
	mu       sync.Mutex
	inflight map[string]context.CancelCauseFunc // run id -> cancel of its executing turn
	// drainCtx ends when Shutdown begins.
	drainCtx context.Context
	drain    context.CancelFunc
	wg       sync.WaitGroup // in-flight turns, and turns held to be handed back
	slots    *slotGate
}

// New returns a Worker.
func New(cfg Config) (*Worker, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:      cfg,
		id:       uuid.NewString(),
		log:      cfg.Logger,
		inflight: map[string]context.CancelCauseFunc{},
		slots:    newSlotGate(cfg.Slots),
	}
	w.drainCtx, w.drain = context.WithCancel(context.Background())
	w.agents = newAgentCache(cfg.Store, AgentCacheTTL)
	w.sessions = newSessionCache(cfg.Store)
	w.skills = skills.NewLibraries(cfg.Store)
	return w, nil
}

var (
	errAbandoned = errors.New("worker stopped")
	errCancelled = errors.New("run cancelled")
	errHandBack  = errors.New("worker draining")
)

// Run pulls and executes turns until ctx ends or Shutdown completes. When
// ctx ends, in-flight turns are interrupted and left un-acked, as a crash
// would leave them. Run returns nil after a stop, or the error that made
// pulling impossible.
func (w *Worker) Run(ctx context.Context) error {
	src, err := w.cfg.Bus.TurnSource(ctx, w.cfg.Queue, w.cfg.Durable)
	if err != nil {
		return fmt.Errorf("worker: open turn source: %w", err)
	}
	w.commits = newCommitter(w.cfg.Store, commitBatchMax, w.cfg.Metrics)
	defer w.wg.Wait()

	unsubscribe, err := w.cfg.Bus.SubscribeControl(w.onControl)
	if err != nil {
		return fmt.Errorf("worker: subscribe to control: %w", err)
	}
	defer unsubscribe()
	if w.cfg.Queue == bus.QueueWork {
		defer w.announceSlots()()
	}

	// Each turn's context ends with ctx (abandon) or when the drain
	// deadline hands it back.
	turnsCtx, abandon := context.WithCancelCause(ctx)
	defer abandon(errAbandoned)

	for {
		// A slot first, then a message: never hold a message whose
		// AckWait clock runs while no slot is free.
		if !w.slots.take(ctx, w.drainCtx.Done()) {
			return nil
		}
		d, err := w.next(ctx, src)
		if err != nil {
			w.slots.release(1)
			if ctx.Err() != nil || w.isDraining() {
				return nil
			}
			w.log.Warn("pull turn", "err", err)
			select {
			case <-time.After(pullRetryDelay):
			case <-ctx.Done():
				return nil
			case <-w.drainCtx.Done():
				return nil
			}
			continue
		}
		if !w.start(turnsCtx, d) {
			return nil
		}
		// Turns left queued and slots free: take up to that many in one
		// round trip rather than a pull request each.
		if more := w.slots.tryTake(int(min(d.Pending, pullBatchMax))); more > 0 {
			ds, err := src.FetchReady(ctx, more)
			if err != nil && ctx.Err() == nil {
				w.log.Debug("pull ready turns", "err", err)
			}
			for i, d := range ds {
				if !w.start(turnsCtx, d) {
					for _, rest := range ds[i+1:] {
						_ = rest.NakWithDelay(0)
					}
					w.slots.release(more - i - 1)
					return nil
				}
			}
			w.slots.release(more - len(ds))
		}
	}
}

// announceSlots tells the scheduler this worker's slots now and every
// bus.SlotsAnnounceEvery, and that it has none once a drain begins or
// the returned stop is called; stop returns when the announcer has.
func (w *Worker) announceSlots() (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(bus.SlotsAnnounceEvery)
		defer tick.Stop()
		for stop := false; !stop; {
			if err := w.cfg.Bus.AnnounceSlots(w.cfg.Durable, w.id, w.slots.current()); err != nil {
				w.log.Debug("announce slots", "err", err)
			}
			select {
			case <-tick.C:
			case <-done:
				stop = true
			case <-w.drainCtx.Done():
				stop = true
			}
		}
		_ = w.cfg.Bus.AnnounceSlots(w.cfg.Durable, w.id, 0)
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// start runs the turn d holds in a goroutine of its own, in a slot the
// caller took for it, and reports true; or, when a drain has begun, hands
// d straight back, frees the slot and reports false.
func (w *Worker) start(ctx context.Context, d *bus.Delivery) bool {
	// Under w.mu, as Shutdown starts the drain: a turn is either counted
	// before Shutdown waits for the count, or not started at all.
	w.mu.Lock()
	if w.isDraining() {
		w.mu.Unlock()
		_ = d.NakWithDelay(0)
		w.slots.release(1)
		return false
	}
	w.wg.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		defer w.slots.release(1)
		w.handle(ctx, d)
	}()
	return true
}

// next pulls one message, returning early when a drain starts.
func (w *Worker) next(ctx context.Context, src *bus.TurnSource) (*bus.Delivery, error) {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(w.drainCtx, cancel)
	defer stop()
	return src.Next(pctx)
}

// Shutdown drains the worker: it stops pulling, waits for in-flight turns
// until ctx ends, then interrupts the rest and hands their messages back
// for another worker. Run returns after Shutdown.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.mu.Lock()
	w.drain()
	w.mu.Unlock()
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	w.mu.Lock()
	for _, cancel := range w.inflight {
		cancel(errHandBack)
	}
	w.mu.Unlock()
	<-done
	return nil
}

func (w *Worker) isDraining() bool { return w.drainCtx.Err() != nil }

// onControl interrupts a run's executing turn when it is cancelled. The
// store holds the truth (CancelRequested); this only makes it prompt.
func (w *Worker) onControl(_, runID, verb string) {
	if verb != "cancel" {
		return
	}
	w.mu.Lock()
	cancel := w.inflight[runID]
	w.mu.Unlock()
	if cancel != nil {
		cancel(errCancelled)
	}
}

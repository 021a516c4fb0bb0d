// Package worker executes turns: it pulls one turn message per free slot
// (several in one round trip when the queue has more waiting, never more
// than it has free slots), runs the turn through the engine, commits it to
// the store (fenced by the turn number, batched across concurrent turns),
// publishes the turn's events and the next turn, and only then acks. When
// the scheduler marked the turn Direct (its tenant was alone), the next
// turn is not published but runs at once in the same slot, under the same
// message (see inPlace). It holds no run state beyond that, so any worker
// can run any turn.
//
// Crash rules (DESIGN §2): a message whose turn is already committed
// re-publishes what that commit owed (events, next turn, the session's
// next run; all deduplicated by message id) and is acked; the model's reply
// is recorded before the script runs, so a redelivered turn (or one a
// redelivery published after it ran in place) does not pay the model
// again; a turn is committed at most once. A message delivered
// more than MaxDeliver times goes to the dead-letter stream and its run
// fails. Transient errors are retried with NakWithDelay.
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
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/loop"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Defaults of Config.
const (
	SlotsDefault      = 8
	MaxDeliverDefault = 5
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

// Config configures a Worker.
type Config struct {
	Bus    *bus.Bus
	Store  store.Store
	Engine *loop.Engine
	// Queue is the queue turns are pulled from: bus.QueueWork when a
	// scheduler feeds it, bus.QueueRunQ when workers read the turn queue
	// directly.
	Queue bus.Queue
	// Durable is the consumer all workers share.
	Durable string
	// Slots is how many turns run at once.
	Slots int
	// MaxDeliver is how often a turn is attempted before it is dead
	// lettered and its run failed.
	MaxDeliver int
	// RetryDelay is the first NakWithDelay of a failed attempt; it
	// doubles per attempt up to RetryDelayMax.
	RetryDelay time.Duration
	// Secrets are values redacted from everything a turn records.
	Secrets []string
	Logger  *slog.Logger
	Metrics *Metrics
}

func (c *Config) setDefaults() {
	if c.Durable == "" {
		c.Durable = DurableDefault
	}
	if c.Slots == 0 {
		c.Slots = SlotsDefault
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = MaxDeliverDefault
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = RetryDelayDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	switch {
	case c.Bus == nil || c.Store == nil || c.Engine == nil:
		return errors.New("worker: Config needs Bus, Store and Engine")
	case c.Slots < 0:
		return fmt.Errorf("worker: Slots is %d; set AGENTFLEET_WORKER_SLOTS to a positive number", c.Slots)
	case c.MaxDeliver < 0 || c.RetryDelay < 0:
		return errors.New("worker: MaxDeliver and RetryDelay must not be negative (zero selects the default)")
	}
	return nil
}

// Worker executes turns. Create it with New, start it with Run.
type Worker struct {
	cfg     Config
	id      string // this worker's id in its slot announcements
	log     *slog.Logger
	commits *committer
	agents  agentCache

	mu       sync.Mutex
	inflight map[string]context.CancelCauseFunc // run id -> cancel of its executing turn
	// drainCtx ends when Shutdown begins.
	drainCtx context.Context
	drain    context.CancelFunc
	wg       sync.WaitGroup // in-flight turns
	slots    chan struct{}
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
		slots:    make(chan struct{}, cfg.Slots),
	}
	w.drainCtx, w.drain = context.WithCancel(context.Background())
	w.agents = newAgentCache(cfg.Store, AgentCacheTTL)
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
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		case <-w.drainCtx.Done():
			return nil
		}
		d, err := w.next(ctx, src)
		if err != nil {
			<-w.slots
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
		if more := w.takeSlots(min(d.Pending, pullBatchMax)); more > 0 {
			ds, err := src.FetchReady(ctx, more)
			if err != nil && ctx.Err() == nil {
				w.log.Debug("pull ready turns", "err", err)
			}
			for i, d := range ds {
				if !w.start(turnsCtx, d) {
					for _, rest := range ds[i+1:] {
						_ = rest.NakWithDelay(0)
					}
					w.releaseSlots(more - i - 1)
					return nil
				}
			}
			w.releaseSlots(more - len(ds))
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
			if err := w.cfg.Bus.AnnounceSlots(w.cfg.Durable, w.id, cap(w.slots)); err != nil {
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
	if w.isDraining() {
		_ = d.NakWithDelay(0)
		<-w.slots
		return false
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() { <-w.slots }()
		w.handle(ctx, d)
	}()
	return true
}

// takeSlots takes up to n free slots without waiting and returns how
// many it took.
func (w *Worker) takeSlots(n uint64) int {
	took := 0
	for ; uint64(took) < n; took++ {
		select {
		case w.slots <- struct{}{}:
		default:
			return took
		}
	}
	return took
}

func (w *Worker) releaseSlots(n int) {
	for range n {
		<-w.slots
	}
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
	w.drain()
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

// handle processes one delivery and settles it with the queue.
func (w *Worker) handle(ctx context.Context, d *bus.Delivery) {
	start := time.Now()
	stopKeepAlive := d.KeepAlive(ctx)
	defer stopKeepAlive()

	act, err := w.process(ctx, d)
	if errors.Is(context.Cause(ctx), errAbandoned) {
		// Stopped as if crashed: leave the message for redelivery.
		w.cfg.Metrics.turnDone("abandoned", time.Since(start))
		return
	}
	switch act {
	case actAck:
		// Without waiting for the server to confirm: a lost ack only
		// brings the turn back, whose commit is then found and what it
		// owed published again (see process), and the slot is free a
		// round trip sooner.
		if err := d.AckAsync(); err != nil {
			w.log.Warn("ack turn", "run", d.Turn.RunID, "turn", d.Turn.Turn, "err", err)
		}
	case actRetry:
		delay := w.retryDelay(d.NumDelivered)
		w.log.Warn("turn failed, will retry", "run", d.Turn.RunID, "turn", d.Turn.Turn,
			"attempt", d.NumDelivered, "retry_in", delay, "err", err)
		_ = d.NakWithDelay(delay)
	case actHandBack:
		_ = d.NakWithDelay(0)
	}
	w.cfg.Metrics.turnDone(act.String(), time.Since(start))
}

func (w *Worker) retryDelay(attempt uint64) time.Duration {
	d := w.cfg.RetryDelay
	for i := uint64(1); i < attempt && d < RetryDelayMax; i++ {
		d *= 2
	}
	d = min(d, RetryDelayMax)
	// Jitter so a fleet-wide outage does not retry in lockstep.
	return d/2 + rand.N(d/2+1)
}

type action int

const (
	actAck action = iota + 1
	actRetry
	actHandBack
)

func (a action) String() string {
	switch a {
	case actAck:
		return "ack"
	case actRetry:
		return "retry"
	case actHandBack:
		return "hand_back"
	}
	return "unknown"
}

// process executes the delivered turn and says how to settle the message.
func (w *Worker) process(ctx context.Context, d *bus.Delivery) (action, error) {
	t := d.Turn
	log := w.log.With("run", t.RunID, "turn", t.Turn)
	if d.NumDelivered > uint64(w.cfg.MaxDeliver) {
		return w.deadLetter(ctx, d)
	}
	// The turn can be cancelled from here on: a cancel that arrives
	// while the run is being loaded must still reach its script.
	turnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w.mu.Lock()
	w.inflight[t.RunID] = cancel
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.inflight, t.RunID)
		w.mu.Unlock()
	}()
	// One store round trip: the run, started if this is its first turn,
	// and the history this turn needs.
	ld, err := w.cfg.Store.TurnLoad(ctx, store.TurnLoadParams{RunID: t.RunID, Turn: t.Turn, HistoryFrom: w.cfg.Engine.HistoryFrom(t.Turn)})
	if errors.Is(err, store.ErrNotFound) {
		log.Error("turn message for an unknown run; dropping it")
		_ = d.Term("unknown run")
		return 0, nil
	}
	if err != nil {
		return actRetry, fmt.Errorf("load run: %w", err)
	}
	run := ld.Run
	switch {
	case t.Turn <= run.Turn:
		// Redelivered after its commit: finish what the commit owed.
		return w.republish(ctx, t, run, t.Turn)
	case t.Turn > run.Turn+1:
		log.Error("turn message ahead of the run; dropping it", "committed", run.Turn)
		return actAck, nil
	case run.Status.Terminal():
		return actAck, nil
	case run.Status.Waiting():
		// Parked after this message was sent; the resume sends anew.
		return actAck, nil
	case run.CancelRequested:
		return w.cancelRun(ctx, run)
	case run.Status == agentfleet.StatusQueued:
		// TurnLoad starts every run it may; one still queued here
		// changed under it. Try again from the top.
		return actRetry, fmt.Errorf("run %s is still queued at turn %d", run.ID, t.Turn)
	case t.Turn > 1 && !ld.HistoryLoaded:
		return actRetry, fmt.Errorf("run %s: history of turn %d not loaded", run.ID, t.Turn)
	}
	return w.execute(ctx, turnCtx, t, run, ld, d.NumDelivered == 1 && !t.Retried, nil)
}

// execute runs turn t of a run TurnLoad read, and commits it. turnCtx is
// the turn's own context, which a cancel of the run (or a drain) ends.
// prior, for a turn run in place, holds the previous turn's events, whose
// acks may still be coming back: they must be stored before this turn
// publishes anything of its own.
func (w *Worker) execute(ctx, turnCtx context.Context, t bus.Turn, run agentfleet.Run, ld store.TurnLoadResult, firstAttempt bool, prior *bus.EventsSent) (action, error) {
	agent, err := w.agents.get(ctx, run.Tenant, run.Agent)
	if err != nil {
		return actRetry, fmt.Errorf("load agent %q: %w", run.Agent, err)
	}

	res, err := w.cfg.Engine.Step(turnCtx, loop.TurnInput{
		Run: run, Agent: agent, Steps: ld.Steps, Secrets: w.cfg.Secrets,
		FirstAttempt: firstAttempt, TenantUnlimited: ld.TenantUnlimited,
	})
	cause := context.Cause(turnCtx)
	if errors.Is(cause, errAbandoned) {
		return 0, cause
	}
	// From here on this turn may publish (its events, a cancellation, a
	// republish). A run's events are stored in the order sent only while
	// every batch is stored: if the previous turn's failed, this turn's
	// must not go out ahead of their retry.
	if err := w.awaitEvents(ctx, prior); err != nil {
		return actRetry, err
	}
	switch {
	case errors.Is(err, loop.ErrStale):
		return w.reloadAndRepublish(ctx, t, run.ID, run.Turn+1)
	case errors.Is(cause, errHandBack):
		return actHandBack, cause
	case errors.Is(cause, errCancelled):
		return w.cancelRun(ctx, run)
	case err != nil:
		return actRetry, err
	}

	if res.Outcome == loop.OutcomeNoBudget {
		return w.noBudget(ctx, run, res.Budget)
	}
	ch, err := w.commits.commit(ctx, store.TurnCommitParams{
		RunID: run.ID, Turn: res.Turn, Steps: res.Steps, Args: res.Args, Status: res.Status,
		Answer: res.Answer, Error: res.Error, Usage: res.Usage, DataBytesCarried: res.DataBytesCarried,
		Events: res.Events,
	})
	if errors.Is(err, store.ErrConflict) {
		return w.reloadAndRepublish(ctx, t, run.ID, res.Turn)
	}
	if err != nil {
		return actRetry, fmt.Errorf("commit turn: %w", err)
	}
	w.cfg.Metrics.turnCommitted(run.Tenant, res)
	sent, err := w.sendEvents(ch.Events)
	if err != nil {
		return actRetry, err
	}
	if ch.Run.Status == agentfleet.StatusRunning && !ch.Run.CancelRequested {
		if next, nld, ok := w.inPlace(turnCtx, t, firstAttempt, ch, ld); ok {
			w.cfg.Metrics.turnContinued(pathInPlace)
			// The next turn's model call and script run while these
			// events' acks come back; it waits for them before it
			// publishes, and the message is acked only after both. A
			// message that is not acked comes back, and its redelivery
			// sends these events again.
			act, err := w.execute(ctx, turnCtx, next, ch.Run, nld, true, sent)
			if act == actAck {
				if werr := w.awaitEvents(ctx, sent); werr != nil {
					return actRetry, werr
				}
			}
			return act, err
		}
	}
	if err := w.finishChange(ctx, ch, sent); err != nil {
		return actRetry, err
	}
	if ch.Run.Status == agentfleet.StatusRunning {
		if ch.Run.CancelRequested {
			return w.cancelRun(ctx, ch.Run)
		}
		if err := w.continueRun(ctx, t, ch.Run, false); err != nil {
			return actRetry, err
		}
	}
	return actAck, nil
}

// inPlace decides whether the turn after t, which ch has just committed,
// runs at once in this slot under t's message instead of being published,
// and if so returns that turn and its load. That saves the next turn its
// trip through the queue (a stored message, a pull, an ack) and its load
// from the store: the run and its history are at hand.
//
// Only when the scheduler marked t Direct (no other tenant's turn was
// waiting), so it costs fairness what publishing straight to AF_WORK
// costs, no more: the next turn is not Direct, so a run still passes
// through the scheduler at least every other turn. Only on t's first
// delivery: t's message stays un-acked (and kept alive) while the next
// turn runs, so a crash or a failure of that turn redelivers t, whose
// turn is committed by then: its redelivery publishes the next turn (see
// republish), which then runs from its own message, marked Retried so
// that it looks for the model reply its attempt in place may have
// recorded. The first delivery rule keeps that one extra delivery of t
// within MaxDeliver.
func (w *Worker) inPlace(turnCtx context.Context, t bus.Turn, firstAttempt bool, ch store.RunChangeResult, ld store.TurnLoadResult) (bus.Turn, store.TurnLoadResult, bool) {
	if !t.Direct || !firstAttempt || w.isDraining() || turnCtx.Err() != nil {
		return bus.Turn{}, store.TurnLoadResult{}, false
	}
	run := ch.Run
	next := bus.Turn{RunID: run.ID, Tenant: run.Tenant, Turn: run.Turn + 1, Wake: run.Wake}
	// The history TurnLoad would read: the steps of turns from
	// HistoryFrom up to the one just committed.
	from := w.cfg.Engine.HistoryFrom(next.Turn)
	steps := make([]agentfleet.Step, 0, len(ld.Steps)+len(ch.Steps))
	for _, s := range ld.Steps {
		if s.Turn >= from {
			steps = append(steps, s)
		}
	}
	steps = append(steps, ch.Steps...)
	return next, store.TurnLoadResult{Run: run, TenantUnlimited: ld.TenantUnlimited, Steps: steps, HistoryLoaded: true}, true
}

// afterChange publishes a change's events and starts the session's next
// run when the change ended this one.
func (w *Worker) afterChange(ctx context.Context, ch store.RunChangeResult) error {
	sent, err := w.sendEvents(ch.Events)
	if err != nil {
		return err
	}
	return w.finishChange(ctx, ch, sent)
}

// sendEvents sends a change's events without waiting for their acks
// (bus.Bus.SendEvents); awaitEvents waits for them.
func (w *Worker) sendEvents(evs []agentfleet.Event) (*bus.EventsSent, error) {
	sent, err := w.cfg.Bus.SendEvents(evs)
	if err != nil {
		return nil, fmt.Errorf("publish events: %w", err)
	}
	return sent, nil
}

// awaitEvents waits for the acks of events sendEvents sent, within
// publishTimeout whatever ctx: the turn's outcome depends on them.
func (w *Worker) awaitEvents(ctx context.Context, sent *bus.EventsSent) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if err := sent.Wait(pctx); err != nil {
		return fmt.Errorf("publish events: %w", err)
	}
	return nil
}

// finishChange waits for the events of ch that sendEvents sent, then
// starts the session's next run when the change ended this one.
func (w *Worker) finishChange(ctx context.Context, ch store.RunChangeResult, sent *bus.EventsSent) error {
	if err := w.awaitEvents(ctx, sent); err != nil {
		return err
	}
	if ch.SessionNext != nil {
		if err := w.enqueue(ctx, *ch.SessionNext, 1); err != nil {
			return fmt.Errorf("start next run %s of session: %w", ch.SessionNext.ID, err)
		}
	}
	return nil
}

// continueRun publishes the turn after prev, which run has committed:
// past the scheduler when prev's message allows it. retried marks a turn
// a redelivery publishes (bus.Turn.Retried).
func (w *Worker) continueRun(ctx context.Context, prev bus.Turn, run agentfleet.Run, retried bool) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	next := bus.Turn{RunID: run.ID, Tenant: run.Tenant, Turn: run.Turn + 1, Wake: run.Wake, Retried: retried}
	direct, err := w.cfg.Bus.ContinueTurn(pctx, prev, next)
	if err != nil {
		return fmt.Errorf("enqueue turn %d of run %s: %w", next.Turn, run.ID, err)
	}
	path := pathScheduler
	if direct {
		path = pathDirect
	}
	w.cfg.Metrics.turnContinued(path)
	return nil
}

func (w *Worker) enqueue(ctx context.Context, run agentfleet.Run, turn int) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if err := w.cfg.Bus.EnqueueTurn(pctx, bus.Turn{RunID: run.ID, Tenant: run.Tenant, Turn: turn, Wake: run.Wake}); err != nil {
		return fmt.Errorf("enqueue turn %d of run %s: %w", turn, run.ID, err)
	}
	return nil
}

func (w *Worker) reloadAndRepublish(ctx context.Context, prev bus.Turn, runID string, turn int) (action, error) {
	run, err := w.cfg.Store.RunGetByID(ctx, store.RunGetByIDParams{ID: runID})
	if err != nil {
		return actRetry, fmt.Errorf("reload run after a lost fence: %w", err)
	}
	if turn > run.Turn {
		// The fence was lost to a status change (cancelled, failed)
		// rather than to another commit of this turn.
		return actAck, nil
	}
	return w.republish(ctx, prev, run, turn)
}

// republish re-sends what the commit of turn owed: its events, and the
// next turn or the session's next run. Every publish is deduplicated by
// message id, so repeating one that already went out is harmless.
func (w *Worker) republish(ctx context.Context, prev bus.Turn, run agentfleet.Run, turn int) (action, error) {
	evs, err := w.cfg.Store.EventListByRun(ctx, store.EventListByRunParams{RunID: run.ID})
	if err != nil {
		return actRetry, fmt.Errorf("load events to republish: %w", err)
	}
	var owed []agentfleet.Event
	for _, ev := range evs {
		if ev.Turn >= turn {
			owed = append(owed, ev)
		}
	}
	ch := store.RunChangeResult{Run: run, Events: owed}
	if run.Status.Terminal() && run.SessionID != "" {
		next, err := store.SessionNext(ctx, w.cfg.Store, run.Tenant, run.SessionID)
		if err != nil {
			return actRetry, err
		}
		ch.SessionNext = next
	}
	if err := w.afterChange(ctx, ch); err != nil {
		return actRetry, err
	}
	if run.Status == agentfleet.StatusRunning {
		owedBy := prev
		switch {
		case run.Turn == turn:
		case run.Turn == turn+1 && prev.Direct && prev.Turn == turn:
			// The turn after prev may have run in place under prev's
			// message (see inPlace) and been committed, and then the
			// worker failed before publishing the turn after it: this
			// delivery owes that one. If the turn after prev ran from a
			// message of its own instead, that message published the
			// same turn to the same queue, and the message id drops
			// this copy.
			owedBy = bus.Turn{RunID: run.ID, Tenant: run.Tenant, Turn: run.Turn, Wake: run.Wake}
		default:
			return actAck, nil
		}
		if err := w.continueRun(ctx, owedBy, run, true); err != nil {
			return actRetry, err
		}
	}
	return actAck, nil
}

// cancelRun ends a run whose cancel was requested, at this turn boundary.
func (w *Worker) cancelRun(ctx context.Context, run agentfleet.Run) (action, error) {
	ch, err := w.cfg.Store.RunTransition(ctx, store.RunTransitionParams{
		ID: run.ID, To: agentfleet.StatusCancelled, Error: "cancelled",
		Events: []agentfleet.Event{
			runEvent(run, agentfleet.EventCancelled, "cancelled at a turn boundary"),
			runEvent(run, agentfleet.EventDone, string(agentfleet.StatusCancelled)),
		},
	})
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrInvalid) {
		return actAck, nil // ended meanwhile
	}
	if err != nil {
		return actRetry, fmt.Errorf("cancel run: %w", err)
	}
	if err := w.afterChange(ctx, ch); err != nil {
		return actRetry, err
	}
	return actAck, nil
}

// noBudget parks the run until budget returns, or fails it, by the
// tenant's policy.
func (w *Worker) noBudget(ctx context.Context, run agentfleet.Run, be *agentfleet.BudgetExhaustedError) (action, error) {
	tenant, err := w.cfg.Store.TenantGetByID(ctx, run.Tenant)
	if err != nil {
		return actRetry, fmt.Errorf("load tenant for its budget policy: %w", err)
	}
	summary := fmt.Sprintf("needs %d tokens, %d left of %d", be.Need, be.Left(), be.Limit)
	p := store.RunTransitionParams{ID: run.ID, From: []agentfleet.RunStatus{agentfleet.StatusRunning}}
	if tenant.Exhausted == agentfleet.ExhaustedFail {
		p.To, p.Error = agentfleet.StatusFailed, be.Error()
		p.Events = []agentfleet.Event{
			runEvent(run, agentfleet.EventError, be.Error()),
			runEvent(run, agentfleet.EventDone, string(agentfleet.StatusFailed)),
		}
	} else {
		p.To = agentfleet.StatusWaitingBudget
		ev := runEvent(run, agentfleet.EventBudgetWaiting, summary)
		ev.Content = be.Error()
		p.Events = []agentfleet.Event{ev}
	}
	ch, err := w.cfg.Store.RunTransition(ctx, p)
	if errors.Is(err, store.ErrConflict) {
		return actAck, nil
	}
	if err != nil {
		return actRetry, fmt.Errorf("park run without budget: %w", err)
	}
	if err := w.afterChange(ctx, ch); err != nil {
		return actRetry, err
	}
	return actAck, nil
}

// deadLetter gives up on a turn that failed MaxDeliver times: the message
// moves to the dead-letter stream and the run fails.
func (w *Worker) deadLetter(ctx context.Context, d *bus.Delivery) (action, error) {
	reason := fmt.Sprintf("turn %d was attempted %d times without success (max %d)", d.Turn.Turn, d.NumDelivered-1, w.cfg.MaxDeliver)
	run, err := w.cfg.Store.RunGetByID(ctx, store.RunGetByIDParams{ID: d.Turn.RunID})
	if err == nil && !run.Status.Terminal() {
		ch, terr := w.cfg.Store.RunTransition(ctx, store.RunTransitionParams{
			ID: run.ID, To: agentfleet.StatusFailed, Error: reason,
			Events: []agentfleet.Event{
				runEvent(run, agentfleet.EventError, reason),
				runEvent(run, agentfleet.EventDone, string(agentfleet.StatusFailed)),
			},
		})
		if terr != nil && !errors.Is(terr, store.ErrConflict) {
			return actRetry, fmt.Errorf("fail dead-lettered run: %w", terr)
		}
		if terr == nil {
			if err := w.afterChange(ctx, ch); err != nil {
				return actRetry, err
			}
		}
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return actRetry, fmt.Errorf("load dead-lettered run: %w", err)
	}
	if err := d.DeadLetter(context.WithoutCancel(ctx), reason); err != nil {
		return actRetry, fmt.Errorf("dead-letter turn: %w", err)
	}
	w.log.Error("turn dead-lettered", "run", d.Turn.RunID, "turn", d.Turn.Turn, "reason", reason)
	return 0, nil
}

// runEvent is an event about a run outside a turn's own events.
func runEvent(run agentfleet.Run, typ agentfleet.EventType, summary string) agentfleet.Event {
	return agentfleet.Event{
		V: agentfleet.EventVersion, RunID: run.ID, Tenant: run.Tenant, SessionID: run.SessionID,
		Turn: run.Turn, Type: typ, TS: time.Now().UTC(), Summary: summary,
	}
}

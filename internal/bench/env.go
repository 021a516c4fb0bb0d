// One bench in progress (env): the tenants it makes, the runs it submits
// through the API, and the waiting for and judging of those runs.

package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// env is one bench in progress.
type env struct {
	cfg   Config
	rep   *Report
	model *model
	fleet target
	procs *procFleet // when the fleet is processes
	// effects is the side-effect target (Config.SideEffects).
	effects *effectTarget
	tag     string // tells this bench's tasks and tenants apart
	http    *http.Client

	progMu   sync.Mutex
	progStop func()
}

func apiHTTPClient(conc int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = conc + 16
	tr.MaxIdleConnsPerHost = conc + 16
	return &http.Client{Transport: tr}
}

// tenant is a tenant the bench created, with a client holding its key
// and the tag of its tasks.
type tenant struct {
	id  string
	tag string
	c   *client.Client
	// submitted counts the runs submitted for the tenant.
	submitted atomic.Int64
}

func (e *env) tenant(ctx context.Context, name string) (*tenant, error) {
	admin := client.New(e.fleet.apiURL(), e.fleet.adminToken())
	admin.HTTP = e.http
	id := "bench-" + e.tag + "-" + name
	tv, err := admin.CreateTenant(ctx, wire.TenantRequest{ID: id})
	if err != nil {
		return nil, fmt.Errorf("create tenant %s (with the admin token): %w", id, err)
	}
	c := client.New(e.fleet.apiURL(), tv.APIKey)
	c.HTTP = e.http
	for i := range e.cfg.Secrets {
		name := fmt.Sprintf("bench_secret_%d", i)
		if _, err := c.PutSecret(ctx, "", name, wire.SecretRequest{Value: newToken(), Hosts: []string{"secret.bench.invalid"}}); err != nil {
			return nil, fmt.Errorf("tenant %s: set secret %s: %w", id, name, err)
		}
	}
	e.rep.Parameters.Secrets = e.cfg.Secrets
	return &tenant{id: id, tag: e.tag + "-" + name, c: c}, nil
}

// submission is one accepted run.
type submission struct {
	i  int
	id string
	at time.Time
}

// submit submits runs from..to-1 of t with conc concurrent submitters.
// A failed submission is retried with the same idempotency key; one that
// keeps failing counts as a submit error.
func (e *env) submit(ctx context.Context, t *tenant, from, to, conc int) ([]submission, int) {
	var next atomic.Int64
	next.Store(int64(from))
	var mu sync.Mutex
	var subs []submission
	errs := 0
	var wg sync.WaitGroup
	for range min(conc, to-from) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= to || ctx.Err() != nil {
					return
				}
				s, err := e.submitOne(ctx, t, i)
				mu.Lock()
				if err != nil {
					errs++
				} else {
					subs = append(subs, s)
					t.submitted.Add(1)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return subs, errs
}

func (e *env) submitOne(ctx context.Context, t *tenant, i int) (submission, error) {
	req := wire.RunCreateRequest{
		Message:        taskMessage(t.tag, i, e.cfg.Turns),
		IdempotencyKey: fmt.Sprintf("%s-%d", t.id, i),
		MaxTurns:       e.cfg.Turns + 1,
	}
	return e.submitRequest(ctx, t, i, req)
}

// submitRequest submits req as run i of t.
func (e *env) submitRequest(ctx context.Context, t *tenant, i int, req wire.RunCreateRequest) (submission, error) {
	// A submission that failed for want of a server (refused, reset,
	// 5xx, 429) is sent again with the same idempotency key, as a careful
	// client does, for as long as a dispatcher takes to come back: the
	// key makes it one run, and a repeat publishes what the first
	// attempt may have left unpublished.
	giveUp := time.Now().Add(submitRetryFor)
	delay := 100 * time.Millisecond
	for {
		at := time.Now()
		run, err := t.c.CreateRun(ctx, req)
		if err == nil {
			return submission{i: i, id: run.ID, at: at}, nil
		}
		var apiErr *client.Error
		if errors.As(err, &apiErr) && apiErr.Status < 500 && apiErr.Status != http.StatusTooManyRequests {
			return submission{}, err
		}
		if time.Now().Add(delay).After(giveUp) {
			return submission{}, err
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return submission{}, ctx.Err()
		}
		delay = min(2*delay, time.Second)
	}
}

// submitRetryFor is how long a submission is retried while no dispatcher
// answers: beyond a dispatcher's restart (chaos kills one mid-submission).
const submitRetryFor = 30 * time.Second

// done is how many of t's runs have ended: the store's count, or, through
// the API, the last turns the fake model answered for t's tasks.
func (e *env) done(ctx context.Context, t *tenant) (int, error) {
	if st := e.fleet.store(); st != nil {
		return countRuns(ctx, st, t, agentfleet.RunStatus.Terminal)
	}
	return e.model.finalsOf(t.tag), nil
}

// pending is 0 when all of t's runs have ended, and 1 when one has not.
func (e *env) pending(ctx context.Context, t *tenant) (int, error) {
	if st := e.fleet.store(); st != nil {
		// One unfinished run is enough to know: counting them all reads
		// every run of the tenant, a cost that grows with the bench and
		// lands on the fleet's database while it is being measured.
		list, err := st.RunList(ctx, store.RunListParams{Tenant: t.id, Status: nonTerminal, Limit: 1})
		if err != nil {
			return 0, err
		}
		return len(list.Runs), nil
	}
	list, err := t.c.ListRuns(ctx, client.ListRunsParams{Status: nonTerminal, Limit: 1})
	if err != nil {
		return 0, err
	}
	return len(list.Runs), nil
}

// countRuns counts t's runs whose status is in.
func countRuns(ctx context.Context, st store.Store, t *tenant, in func(agentfleet.RunStatus) bool) (int, error) {
	c, err := st.RunCountByStatus(ctx, t.id)
	if err != nil {
		return 0, err
	}
	n := 0
	for s, k := range c {
		if in(s) {
			n += k
		}
	}
	return n, nil
}

var nonTerminal = []agentfleet.RunStatus{
	agentfleet.StatusQueued, agentfleet.StatusRunning,
	agentfleet.StatusWaitingBudget, agentfleet.StatusWaitingApproval, agentfleet.StatusWaitingChildren,
}

// waitAll waits until none of t's runs is pending. It gives up with
// errStalled when the model served nothing for cfg.Stall (nothing moves).
//
// It asks the store four times a second until the model has answered as
// many last turns as t has runs (no run can end before that), and every
// 20 ms after, for the last commits: asking reads all of t's runs, and at
// 20 ms throughout it loaded the database under test more the longer the
// bench ran.
func (e *env) waitAll(ctx context.Context, t *tenant) error {
	const slowPoll = 250 * time.Millisecond
	lastServed, lastMove := e.model.served(), time.Now()
	var lastAsked time.Time
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if e.model.finalsOf(t.tag) >= int(t.submitted.Load()) || time.Since(lastAsked) >= slowPoll {
			lastAsked = time.Now()
			n, err := e.pending(ctx, t)
			if err == nil && n == 0 {
				return nil
			}
		}
		if s := e.model.served(); s != lastServed {
			lastServed, lastMove = s, time.Now()
		} else if time.Since(lastMove) > e.cfg.Stall {
			return errStalled
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// finish ends a wait for t's runs: it stops the progress line, returns
// waitErr when the bench itself was stopped (any other error becomes a
// note: the figures are those of what finished), and collects the runs,
// whose counts become the report's.
func (e *env) finish(ctx context.Context, t *tenant, subs []submission, submitErrs int, waitErr error) (RunCounts, []agentfleet.Run, time.Time, error) {
	e.stopProgress()
	if waitErr != nil && ctx.Err() != nil {
		return RunCounts{}, nil, time.Time{}, waitErr
	}
	if waitErr != nil {
		e.rep.note("stopped waiting: %v", waitErr)
	}
	counts, runs, last, err := e.collect(ctx, t, subs, submitErrs)
	if err == nil {
		e.rep.Figures.Runs = counts
	}
	return counts, runs, last, err
}

// wallTime is from start to the last run's end, or, when no run's end is
// known, to when the bench saw them all ended.
func wallTime(start, last, detected time.Time) time.Duration {
	if wall := last.Sub(start); !last.IsZero() && wall > 0 {
		return wall
	}
	return detected.Sub(start)
}

// listRuns returns all of t's runs.
func (e *env) listRuns(ctx context.Context, t *tenant) ([]agentfleet.Run, error) {
	var all []agentfleet.Run
	cursor := ""
	for {
		var page []agentfleet.Run
		var next string
		if st := e.fleet.store(); st != nil {
			res, err := st.RunList(ctx, store.RunListParams{Tenant: t.id, Limit: 500, Cursor: cursor})
			if err != nil {
				return nil, err
			}
			page, next = res.Runs, res.NextCursor
		} else {
			res, err := t.c.ListRuns(ctx, client.ListRunsParams{Limit: 500, Cursor: cursor})
			if err != nil {
				return nil, err
			}
			page, next = res.Runs, res.NextCursor
		}
		all = append(all, page...)
		if next == "" || len(page) == 0 {
			return all, nil
		}
		cursor = next
	}
}

// collect judges t's runs against the submissions: completed with the
// expected answer after the expected turns, failed otherwise, lost when
// not ended. It also returns the latest completion time.
func (e *env) collect(ctx context.Context, t *tenant, subs []submission, submitErrs int) (RunCounts, []agentfleet.Run, time.Time, error) {
	runs, err := e.listRuns(ctx, t)
	if err != nil {
		return RunCounts{}, nil, time.Time{}, fmt.Errorf("list runs of %s: %w", t.id, err)
	}
	byID := make(map[string]agentfleet.Run, len(runs))
	for _, r := range runs {
		byID[r.ID] = r
	}
	c := RunCounts{Submitted: len(subs), SubmitErrors: submitErrs}
	var last time.Time
	example := func(format string, a ...any) {
		if len(c.FailedExamples) < 5 {
			c.FailedExamples = append(c.FailedExamples, fmt.Sprintf(format, a...))
		}
	}
	for _, s := range subs {
		r, ok := byID[s.id]
		switch {
		case !ok:
			c.Lost++
			example("%s: accepted but not in the store", s.id)
			continue
		case !r.Status.Terminal():
			c.Lost++
			example("%s: still %s after %d turns", s.id, r.Status, r.Turn)
			continue
		}
		if r.UpdatedAt.After(last) {
			last = r.UpdatedAt
		}
		want := `"` + expectedAnswer(s.i, e.cfg.Turns) + `"`
		if r.Status == agentfleet.StatusCompleted && string(r.Answer) == want && r.Turn == e.cfg.Turns {
			c.Completed++
			c.Turns += r.Turn
			continue
		}
		c.Failed++
		example("%s: %s after %d turns, answer %s, error %q (want %s)", s.id, r.Status, r.Turn, r.Answer, r.Error, want)
	}
	return c, runs, last, nil
}

// warmup runs n runs through the fleet in a tenant of their own, so the
// measurement starts with sandbox processes up and connections open.
func (e *env) warmup(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	t, err := e.tenant(ctx, "warmup")
	if err != nil {
		return err
	}
	subs, errs := e.submit(ctx, t, 0, n, min(n, e.cfg.Submitters))
	if errs > 0 {
		return fmt.Errorf("warm-up: %d of %d submissions failed", errs, n)
	}
	if err := e.waitAll(ctx, t); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	c, _, _, err := e.collect(ctx, t, subs, 0)
	if err != nil {
		return err
	}
	if c.Completed != n {
		return fmt.Errorf("warm-up: %d of %d runs completed; %v", c.Completed, n, c.FailedExamples)
	}
	e.rep.Parameters.Warmup = n
	return nil
}

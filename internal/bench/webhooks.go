package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/webhook"
	"github.com/agentfleet/agentfleet/wire"
)

// Webhook bench goals on this project's 2-core machine: the intake alone,
// as a burst.
const (
	webhookRateGoal = 1500
	webhookP99Goal  = 20 * time.Millisecond
	// webhookPad pads each delivery's payload to about the size of a
	// small GitHub issues event.
	webhookPad = 2 << 10
	// webhookRetries is how many deliveries are sent again after the
	// burst, as a sender's retries.
	webhookRetries = 100
)

// WebhookFigures: a burst of signed GitHub deliveries to one trigger,
// then the runs they started.
type WebhookFigures struct {
	Deliveries   int `json:"deliveries"`
	PayloadBytes int `json:"payload_bytes"`
	// Accepted deliveries were answered 202 with a run id.
	Accepted int `json:"accepted"`
	// BurstWall is from the first delivery sent to the last answered;
	// AcceptedPerSec is Accepted over it.
	BurstWall      Duration `json:"burst_wall"`
	AcceptedPerSec float64  `json:"accepted_per_sec"`
	// IntakeLatency is each delivery's time from its request to its
	// 202, at the sender.
	IntakeLatency Summary `json:"intake_latency"`
	// WorkersPaused says no worker ran during the burst (a fleet of
	// processes: they were drained before it and started again after),
	// so it measured the intake on its own; otherwise they ran the
	// burst's runs meanwhile.
	WorkersPaused bool `json:"workers_paused"`
	// Retries were sent again after the burst; RetriesDeduped of them
	// were answered 200 with their first run's id.
	Retries        int `json:"retries"`
	RetriesDeduped int `json:"retries_deduped"`
	// RunsWall is from the end of the burst to the last run's end (with
	// WorkersPaused, the workers' start included).
	RunsWall   Duration `json:"runs_wall"`
	RunsPerSec float64  `json:"runs_per_sec"`
	// CPUPerDelivery is the CPU of this process and its descendants
	// during the burst, per delivery; ByProcess splits a fleet of
	// processes' share by role; Postgres is the local server's.
	CPUPerDelivery          *Duration           `json:"cpu_per_delivery,omitempty"`
	CPUPerDeliveryByProcess map[string]Duration `json:"cpu_per_delivery_by_process,omitempty"`
	CPUPerDeliveryPostgres  *Duration           `json:"cpu_per_delivery_postgres,omitempty"`
}

// signedDelivery is one delivery, signed before the burst so that the
// burst is only the intake's work.
type signedDelivery struct {
	i      int
	id     string
	header http.Header
	body   []byte
}

// webhooks creates a GitHub trigger whose message is the bench task the
// payload carries, sends Runs signed deliveries to its hook from
// Submitters senders at once, and times each to its 202. With a fleet of
// processes the workers are stopped meanwhile, so the burst measures the
// intake alone; then they start again and the 1-turn runs the burst
// started complete. A sample of the deliveries is sent again: each must get its
// first run back.
func (e *env) webhooks(ctx context.Context) error {
	e.rep.Parameters.Submitters = e.cfg.Submitters
	if err := e.warmup(ctx, e.cfg.Warmup); err != nil {
		return err
	}
	t, err := e.tenant(ctx, "webhooks")
	if err != nil {
		return err
	}
	trig, err := e.benchTrigger(ctx, t)
	if err != nil {
		return err
	}
	hook := client.New(e.fleet.apiURL(), "")
	hook.HTTP = e.http
	// Warm the intake (the trigger's cache, the connections) with
	// deliveries of a tenant of their own, whose runs end first.
	if n := min(64, e.cfg.Runs); e.cfg.Warmup > 0 {
		wt, err := e.tenant(ctx, "webhooks-warmup")
		if err != nil {
			return err
		}
		wtrig, err := e.benchTrigger(ctx, wt)
		if err != nil {
			return err
		}
		if _, errs := e.burst(ctx, hook, wtrig, e.sign(wtrig, wt, n)); errs > 0 {
			return fmt.Errorf("webhook warm-up: %d of %d deliveries failed", errs, n)
		}
		wt.submitted.Store(int64(n))
		if err := e.waitAll(ctx, wt); err != nil {
			return fmt.Errorf("webhook warm-up: %w", err)
		}
	}

	ds := e.sign(trig, t, e.cfg.Runs)
	f := &WebhookFigures{Deliveries: len(ds), PayloadBytes: len(ds[0].body)}
	local := e.fleet.local()
	if e.procs != nil {
		e.procs.stopWorkers()
		f.WorkersPaused = true
	} else {
		e.rep.note("the workers ran the burst's runs during the burst (an embedded fleet cannot pause them; --spawn does)")
	}
	var cpu0 cpuSample
	if local {
		cpu0 = e.sampleCPU()
	}
	var sent atomic.Int64
	e.startProgress(func(elapsed time.Duration) string {
		return fmt.Sprintf("%s webhooks: %d/%d deliveries answered", elapsed, sent.Load(), len(ds))
	})
	start := time.Now()
	results, errs := e.burstCounting(ctx, hook, trig, ds, &sent)
	f.BurstWall = Duration(time.Since(start))
	var cpu1 cpuSample
	if local {
		cpu1 = e.sampleCPU()
	}
	e.stopProgress()
	runsStart := time.Now()
	if f.WorkersPaused {
		if err := e.procs.restartWorkers(ctx); err != nil {
			return fmt.Errorf("start the workers again: %w", err)
		}
	}

	var lat []time.Duration
	var subs []submission
	for _, r := range results {
		if r.runID != "" {
			lat = append(lat, r.took)
			subs = append(subs, submission{i: r.i, id: r.runID, at: r.at})
		}
	}
	f.Accepted = len(subs)
	f.AcceptedPerSec = float64(f.Accepted) / time.Duration(f.BurstWall).Seconds()
	f.IntakeLatency = summarize(lat)
	if local && f.Accepted > 0 {
		n := time.Duration(f.Accepted)
		f.CPUPerDelivery = durPtr((cpu1.self + cpu1.kids - cpu0.self - cpu0.kids) / n)
		if cpu1.roles != nil {
			f.CPUPerDeliveryByProcess = map[string]Duration{}
			for role, u := range cpu1.roles {
				f.CPUPerDeliveryByProcess[role] = Duration((u.cpu - cpu0.roles[role].cpu) / n)
			}
		}
		if e.rep.Parameters.Store == "postgres" && cpu1.postgres > cpu0.postgres {
			f.CPUPerDeliveryPostgres = durPtr((cpu1.postgres - cpu0.postgres) / n)
		}
		e.rep.note("CPU per delivery is this process (the senders, the fake model) and its descendants during the burst; Postgres CPU is every process named postgres on this machine")
	}

	// A sender's retries: the first run back, nothing new.
	retries := results[:min(webhookRetries, len(results))]
	again, _ := e.burst(ctx, hook, trig, pick(ds, retries))
	for k, r := range again {
		f.Retries++
		if r.status == http.StatusOK && r.runID != "" && r.runID == retries[k].runID {
			f.RetriesDeduped++
		} else if f.Retries-f.RetriesDeduped <= 3 {
			e.rep.note("retry of delivery %s: HTTP %d run %q (%s), first sent: HTTP %d run %q", ds[r.i].id, r.status, r.runID, r.err, retries[k].status, retries[k].runID)
		}
	}

	t.submitted.Store(int64(len(subs)))
	e.startProgress(e.turnRate(len(subs)))
	waitErr := e.waitAll(ctx, t)
	detected := time.Now()
	counts, _, last, err := e.finish(ctx, t, subs, errs, waitErr)
	if err != nil {
		return err
	}
	f.RunsWall = Duration(wallTime(runsStart, last, detected))
	f.RunsPerSec = float64(counts.Completed) / time.Duration(f.RunsWall).Seconds()
	e.rep.Figures.Webhooks = f
	e.rep.checkRuns()
	e.rep.check("every delivery accepted", f.Accepted == f.Deliveries, false, "%d of %d answered 202 with a run", f.Accepted, f.Deliveries)
	e.rep.check("retries get their first run", f.RetriesDeduped == f.Retries, false, "%d of %d retries answered 200 with the first run's id", f.RetriesDeduped, f.Retries)
	e.rep.check(fmt.Sprintf("intake >= %d deliveries/s", webhookRateGoal), f.AcceptedPerSec >= webhookRateGoal, true, "%.0f/s", f.AcceptedPerSec)
	e.rep.check(fmt.Sprintf("intake p99 <= %s", webhookP99Goal), time.Duration(f.IntakeLatency.P99) <= webhookP99Goal, true, "p99 %s", f.IntakeLatency.P99)
	return nil
}

// benchTrigger creates a GitHub trigger of t whose runs' message is the
// bench task in the delivery's payload.
func (e *env) benchTrigger(ctx context.Context, t *tenant) (wire.TriggerView, error) {
	trig, err := t.c.CreateTrigger(ctx, wire.TriggerRequest{
		Name: new("bench"), Scheme: new("github"), Events: &[]string{"issues.opened"},
		Message: new("{{.payload.task}}"), MaxTurns: new(e.cfg.Turns + 1),
	})
	if err != nil {
		return trig, fmt.Errorf("create the bench's trigger: %w", err)
	}
	return trig, nil
}

// sign makes n deliveries of an issues.opened event for t's bench tasks.
func (e *env) sign(trig wire.TriggerView, t *tenant, n int) []signedDelivery {
	pad := strings.Repeat("lorem ipsum ", webhookPad/12)
	ds := make([]signedDelivery, n)
	for i := range n {
		body := fmt.Appendf(nil, `{"action":"opened","task":%q,"issue":{"number":%d,"title":"Issue %d","body":%q},"repository":{"full_name":"bench/%s"}}`,
			taskMessage(t.tag, i, e.cfg.Turns), i, i, pad, t.id)
		id := fmt.Sprintf("%s-%d", t.id, i)
		h, _ := webhook.Sign(webhook.GitHub, trig.Secret, body, id, "issues", time.Now())
		ds[i] = signedDelivery{i: i, id: id, header: h, body: body}
	}
	return ds
}

// hookResult is one delivery's answer at the sender.
type hookResult struct {
	i      int
	status int
	runID  string
	at     time.Time
	took   time.Duration
	err    error
}

func (e *env) burst(ctx context.Context, hook *client.Client, trig wire.TriggerView, ds []signedDelivery) ([]hookResult, int) {
	return e.burstCounting(ctx, hook, trig, ds, new(atomic.Int64))
}

// burstCounting sends ds from Submitters senders at once; a delivery
// refused for want of a server (5xx, 429, a connection error) is sent
// again, as GitHub would, for up to submitRetryFor.
func (e *env) burstCounting(ctx context.Context, hook *client.Client, trig wire.TriggerView, ds []signedDelivery, sent *atomic.Int64) ([]hookResult, int) {
	results := make([]hookResult, len(ds))
	var next atomic.Int64
	var errs atomic.Int64
	var wg sync.WaitGroup
	for range min(e.cfg.Submitters, len(ds)) {
		wg.Go(func() {
			for {
				k := int(next.Add(1) - 1)
				if k >= len(ds) || ctx.Err() != nil {
					return
				}
				d := ds[k]
				giveUp := time.Now().Add(submitRetryFor)
				for {
					at := time.Now()
					res, err := hook.SendHook(ctx, trig.URL, d.header, d.body)
					results[k] = hookResult{i: d.i, status: res.Status, runID: res.Answer.RunID, at: at, took: time.Since(at), err: err}
					var apiErr *client.Error
					retry := err != nil && (!errors.As(err, &apiErr) || apiErr.Status >= 500 || apiErr.Status == http.StatusTooManyRequests)
					if !retry || time.Now().After(giveUp) || ctx.Err() != nil {
						if err != nil {
							errs.Add(1)
						}
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				sent.Add(1)
			}
		})
	}
	wg.Wait()
	return results, int(errs.Load())
}

// pick returns the deliveries the results answered.
func pick(ds []signedDelivery, rs []hookResult) []signedDelivery {
	out := make([]signedDelivery, len(rs))
	for k, r := range rs {
		out[k] = ds[r.i]
	}
	return out
}

package maintain

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// The approvals sweep denies, on the leader, what waited past its
// agent's approval_timeout (reason "expired") and closes the approvals of
// runs that ended, each decision resuming its run as a person's would;
// and, on every dispatcher (the notifications are claimed), POSTs each
// new approval's view to its agent's approval_callback_url, signed like a
// run callback (callbacks.go), webhook-id "approval_<id>".

// ApprovalSweepIntervalDefault is how often the approvals sweep runs.
const ApprovalSweepIntervalDefault = time.Second

// approvalNotifyClaimMax bounds one claim of notifications.
const approvalNotifyClaimMax = 32

// ApprovalsConfig configures the approvals sweep (zero Interval:
// ApprovalSweepIntervalDefault). View is an approval as its notification
// shows it (the API's view); Decisions, when set, counts the expired ones
// (agentfleet_approval_decisions_total, the API's).
type ApprovalsConfig struct {
	Store     store.Store
	Bus       *bus.Bus
	Signer    *Signer
	View      func(store.Approval) wire.ApprovalView
	Decisions *prometheus.CounterVec
	Interval  time.Duration
	Leading   Leading
	Logger    *slog.Logger
}

// Approvals is the approvals sweep.
type Approvals struct {
	sweep
	cfg ApprovalsConfig
}

// NewApprovals returns the approvals sweep.
func NewApprovals(cfg ApprovalsConfig) *Approvals {
	cfg.Interval = cmp.Or(cfg.Interval, ApprovalSweepIntervalDefault)
	return &Approvals{sweep: newSweep(cfg.Store, cfg.Bus, cfg.Logger), cfg: cfg}
}

// Run expires approvals (while this process leads) and sends their
// notifications every interval until ctx ends.
func (a *Approvals) Run(ctx context.Context) error {
	expire := leader(a.cfg.Leading, a.Expire)
	return every(ctx, a.cfg.Interval, a.log, "approvals sweep", func(ctx context.Context) error {
		err := expire(ctx)
		if _, nerr := a.Notify(ctx); err == nil {
			err = nerr
		}
		return err
	})
}

// Expire denies the approvals that waited too long, closes those of runs
// that ended, and publishes what each decision owes.
func (a *Approvals) Expire(ctx context.Context) error {
	out, err := a.cfg.Store.ApprovalExpire(ctx, store.ApprovalExpireParams{Now: time.Now()})
	for _, res := range out {
		if res.Approval.Reason == store.ApprovalExpired && a.cfg.Decisions != nil {
			a.cfg.Decisions.WithLabelValues(res.Approval.Tenant, "expired").Inc()
		}
		if perr := a.outbox.Decided(ctx, res); perr != nil {
			// A running run without a message is the stranded sweep's.
			a.log.Warn("publish an approval's decision", "run", res.Change.Run.ID, "approval", res.Approval.ID, "err", perr)
		}
	}
	return err
}

// Notify sends one claim's worth of due approval notifications and
// returns how many it claimed. A failed one is tried again with the run
// callbacks' backoff until CallbackGiveUpDefault after the approval.
func (a *Approvals) Notify(ctx context.Context) (int, error) {
	as, err := a.cfg.Store.ApprovalNotifyClaim(ctx, store.ApprovalNotifyClaimParams{
		Now: time.Now(), Limit: approvalNotifyClaimMax, Lease: callbackTimeout + 5*time.Second,
	})
	if err != nil {
		return 0, err
	}
	for _, ap := range as {
		body, err := json.Marshal(a.cfg.View(ap))
		if err != nil {
			return 0, err
		}
		at := time.Now()
		_, err = a.cfg.Signer.Post(ctx, ap.Tenant, ap.NotifyURL, "approval_"+ap.ID, body)
		if err != nil && ctx.Err() != nil {
			return len(as), nil // cut short: the lease runs out and it is tried again
		}
		rec := store.ApprovalNotifyRecordParams{ID: ap.ID, State: store.CallbackDelivered}
		if err != nil {
			rec.Error = bound(err.Error())
			if next := a.cfg.Signer.nextAttempt(at, ap.CreatedAt, ap.NotifyAttempts); next.IsZero() {
				rec.State = store.CallbackFailed
			} else {
				rec.State, rec.NextAt = store.CallbackPending, next
			}
		}
		if err := a.cfg.Store.ApprovalNotifyRecord(ctx, rec); err != nil {
			a.log.Warn("record an approval notification", "approval", ap.ID, "err", err)
		}
	}
	return len(as), nil
}

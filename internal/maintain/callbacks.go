package maintain

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentfleet/agentfleet/internal/egress"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/webhook"
)

// Completion callbacks: a run with a callback_url has its outbox row
// stored before the run is (internal/api), so no run can end without
// one. The callback sender drains the rows of ended runs and POSTs each
// run's final view, signed with Standard Webhooks under the tenant's
// callback secret. The webhook-id is the same for every attempt of a
// run's callback, so a receiver drops the repeats. A failed attempt is
// tried again with backoff until CallbackGiveUpDefault after the first.
// The POST dials through the same network guard as scripts' fetch
// (internal/egress). Claims are leased in the store, so every dispatcher
// sends.

// Defaults of the callback sender.
const (
	CallbackIntervalDefault = time.Second
	CallbackGiveUpDefault   = 24 * time.Hour
	// CallbackBackoffDefault is the base unit of the retry schedule.
	CallbackBackoffDefault = time.Second
	callbackTimeout        = 10 * time.Second
	callbackClaimMax       = 32
	callbackSenders        = 8
	callbackPruneEvery     = 10 * time.Minute
	callbackOrphanAge      = time.Hour
	// maxErrorLen bounds an attempt's error as recorded.
	maxErrorLen = 1024
)

// callbackBackoff is the wait before each retry, in units of the
// configured base (CallbackBackoffDefault: seconds); the last repeats.
var callbackBackoff = []int{5, 30, 120, 600, 1800, 3600, 7200}

// CallbackSecretAD is the associated data a tenant's callback secret is
// sealed under (internal/api seals it, the Signer opens it).
func CallbackSecretAD(tenant string) string { return "tenant-callback:" + tenant }

// CallbackWebhookID is the webhook-id of a run's callback: one per run
// end, the same on every attempt.
func CallbackWebhookID(runID string) string { return "run_" + runID + "_end" }

// Signer POSTs signed callbacks: run completions, batch completions,
// approval notifications.
type Signer struct {
	store   store.Store
	secrets *secrets.Box
	client  *http.Client
	// backoff is the retry schedule's unit, giveUp how long after the
	// first attempt a callback is given up.
	backoff, giveUp time.Duration
}

// NewSigner returns a Signer that dials through the guard of eg, reads
// tenants' secrets from st and opens them with box (nil: it cannot sign,
// and every attempt fails saying so). backoff is the retry schedule's
// unit (zero: CallbackBackoffDefault).
func NewSigner(st store.Store, box *secrets.Box, eg egress.Config, backoff time.Duration) *Signer {
	client := egress.New(eg).HTTPClient(-1)
	client.Timeout = callbackTimeout
	return &Signer{store: st, secrets: box, client: client, backoff: cmp.Or(backoff, CallbackBackoffDefault), giveUp: CallbackGiveUpDefault}
}

// errNoSecretsKey says how to let a dispatcher sign (internal/api says the same of its secrets).
const errNoSecretsKey = "set AGENTFLEET_SECRETS_KEY to the base64 of 32 random bytes (openssl rand -base64 32), the same on every dispatcher, and restart"

// Post POSTs body to url, signed (Standard Webhooks, message id
// webhookID) with tenant's callback secret, through the egress guard. It
// returns the receiver's status and, for anything but a 2xx, why the
// attempt failed.
func (s *Signer) Post(ctx context.Context, tenant, url, webhookID string, body []byte) (int, error) {
	if s.secrets == nil {
		return 0, errors.New("this dispatcher cannot sign callbacks: " + errNoSecretsKey)
	}
	sealed, err := s.store.TenantCallbackSecretGet(ctx, tenant)
	if errors.Is(err, store.ErrNotFound) {
		return 0, fmt.Errorf("tenant %s has no callback secret: make one with POST /v1/tenants/%s/callback-secret", tenant, tenant)
	}
	if err != nil {
		return 0, fmt.Errorf("read the tenant's callback secret: %w", err)
	}
	secret, err := s.secrets.Open(sealed, CallbackSecretAD(tenant))
	if err != nil {
		return 0, fmt.Errorf("open the tenant's callback secret: %w", err)
	}
	h, err := webhook.Sign(webhook.Standard, secret, body, webhookID, "", time.Now())
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		return 0, err
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	req.Header.Set("User-Agent", "agentfleet-callback/1")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, egress.URLErrorCause(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}

// nextAttempt is when a callback whose attempt at failed, after attempts
// before it, is tried again; zero once it is to be given up (first was
// its first attempt).
func (s *Signer) nextAttempt(at, first time.Time, attempts int) time.Time {
	step := callbackBackoff[min(attempts, len(callbackBackoff)-1)]
	next := at.Add(time.Duration(step) * s.backoff)
	if next.Sub(first) > s.giveUp {
		return time.Time{}
	}
	return next
}

// bound cuts an error to what an attempt records.
func bound(s string) string {
	if len(s) <= maxErrorLen {
		return s
	}
	return strings.ToValidUTF8(s[:maxErrorLen], "") + "…"
}

// CallbacksConfig configures the callback sender (zero Interval:
// CallbackIntervalDefault). Registerer, when set, receives
// agentfleet_callbacks_total.
type CallbacksConfig struct {
	Store      store.Store
	Signer     *Signer
	Interval   time.Duration
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Callbacks drains the callback outbox.
type Callbacks struct {
	cfg  CallbacksConfig
	log  *slog.Logger
	sent *prometheus.CounterVec
}

// NewCallbacks returns the callback sender.
func NewCallbacks(cfg CallbacksConfig) (*Callbacks, error) {
	cfg.Interval = cmp.Or(cfg.Interval, CallbackIntervalDefault)
	c := &Callbacks{cfg: cfg, log: logger(cfg.Logger)}
	c.sent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentfleet_callbacks_total",
		Help: "Run completion callback attempts, by outcome: delivered, retry (failed, tried again later), failed (given up).",
	}, []string{"outcome"})
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(c.sent); err != nil {
			return nil, fmt.Errorf("maintain: register callback metrics: %w", err)
		}
	}
	return c, nil
}

// Run drains the callback outbox every interval until ctx ends: it claims
// the due callbacks of ended runs (leased, so several dispatchers share
// the work), sends them, and records each attempt.
func (c *Callbacks) Run(ctx context.Context) error {
	var lastPrune time.Time
	return every(ctx, c.cfg.Interval, c.log, "deliver run callbacks", func(ctx context.Context) error {
		var err error
		for {
			var n int
			if n, err = c.Pass(ctx); n < callbackClaimMax || err != nil {
				break
			}
		}
		if time.Since(lastPrune) > callbackPruneEvery {
			lastPrune = time.Now()
			if _, perr := c.cfg.Store.RunCallbackPrune(ctx, time.Now().Add(-callbackOrphanAge)); perr != nil {
				err = errors.Join(err, fmt.Errorf("prune run callbacks: %w", perr))
			}
		}
		return err
	})
}

// Pass sends one claim's worth of due callbacks and returns how many it
// claimed.
func (c *Callbacks) Pass(ctx context.Context) (int, error) {
	cs, err := c.cfg.Store.RunCallbackClaim(ctx, store.RunCallbackClaimParams{
		Now: time.Now(), Limit: callbackClaimMax, Lease: callbackTimeout + 5*time.Second,
	})
	if err != nil {
		return 0, err
	}
	sem := make(chan struct{}, callbackSenders)
	var wg sync.WaitGroup
	for _, cb := range cs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c.send(ctx, cb)
		})
	}
	wg.Wait()
	return len(cs), nil
}

// send makes one attempt at cb and records it.
func (c *Callbacks) send(ctx context.Context, cb store.RunCallback) {
	at := time.Now()
	status, err := c.post(ctx, cb)
	if err != nil && status == 0 && ctx.Err() != nil {
		// Cut short by the dispatcher stopping: not an attempt. The
		// claim's lease runs out and another dispatcher makes it.
		return
	}
	rec := store.RunCallbackRecordParams{RunID: cb.RunID, Attempt: store.CallbackAttempt{At: at, Status: status}, State: store.CallbackDelivered}
	outcome := "delivered"
	if err != nil {
		rec.Attempt.Error = bound(err.Error())
		first := cb.FirstAt
		if first.IsZero() {
			first = at
		}
		if next := c.cfg.Signer.nextAttempt(at, first, cb.Attempts); next.IsZero() {
			rec.State, outcome = store.CallbackFailed, "failed"
		} else {
			rec.State, rec.NextAt, outcome = store.CallbackPending, next, "retry"
		}
	}
	c.sent.WithLabelValues(outcome).Inc()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callbackTimeout)
	defer cancel()
	if _, err := c.cfg.Store.RunCallbackRecord(rctx, rec); err != nil {
		// The lease runs out and the callback is tried again.
		c.log.Warn("record a callback attempt", "run", cb.RunID, "err", err)
	}
}

// post POSTs the run's final view to its callback URL, signed with the
// tenant's callback secret.
func (c *Callbacks) post(ctx context.Context, cb store.RunCallback) (int, error) {
	run, err := c.cfg.Store.RunGetByID(ctx, store.RunGetByIDParams{ID: cb.RunID})
	if err != nil {
		return 0, fmt.Errorf("read the run: %w", err)
	}
	body, err := json.Marshal(run)
	if err != nil {
		return 0, fmt.Errorf("encode the run: %w", err)
	}
	return c.cfg.Signer.Post(ctx, cb.Tenant, cb.URL, CallbackWebhookID(run.ID), body)
}

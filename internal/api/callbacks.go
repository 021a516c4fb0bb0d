package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/egress"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/webhook"
	"github.com/agentfleet/agentfleet/wire"
)

// Completion callbacks: a run (or a trigger, for the runs it starts) may
// carry a callback_url. Its outbox row is stored before the run is
// (admit), so no run can end without one; the dispatcher drains the rows
// of ended runs (DeliverCallbacks) and POSTs each run's final view,
// signed with Standard Webhooks under the tenant's callback secret. The
// webhook-id is the same for every attempt of a run's callback, so a
// receiver drops the repeats. A failed attempt is tried again with
// backoff until CallbackGiveUpDefault after the first; each attempt is
// in the run's view (GET /v1/runs/{id}: "callback"). The POST dials
// through the same network guard as scripts' fetch (internal/egress): no
// private or loopback address unless AGENTFLEET_EGRESS_ALLOW lists it,
// and no cloud metadata address at all.

// Defaults of the callback sender.
const (
	CallbackIntervalDefault = time.Second
	CallbackGiveUpDefault   = 24 * time.Hour
	callbackTimeout         = 10 * time.Second
	callbackClaimMax        = 32
	callbackSenders         = 8
	callbackPruneEvery      = 10 * time.Minute
	callbackOrphanAge       = time.Hour
	maxCallbackURL          = 2048
)

// callbackBackoff is the wait before each retry, in units of the
// configured base (CallbackBackoffDefault: seconds); the last repeats.
var callbackBackoff = []int{5, 30, 120, 600, 1800, 3600, 7200}

// CallbackBackoffDefault is the base unit of the retry schedule.
const CallbackBackoffDefault = time.Second

// callbackState is the sender's: its HTTP client and metrics.
type callbackState struct {
	client  *http.Client
	guard   *egress.Guard
	backoff time.Duration
	giveUp  time.Duration
	sent    *prometheus.CounterVec
}

func (c *callbackState) init(cfg Config) error {
	c.guard = egress.New(cfg.Egress)
	c.client = c.guard.HTTPClient(-1)
	c.client.Timeout = callbackTimeout
	c.backoff = cfg.CallbackBackoff
	if c.backoff <= 0 {
		c.backoff = CallbackBackoffDefault
	}
	c.giveUp = CallbackGiveUpDefault
	c.sent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentfleet_callbacks_total",
		Help: "Run completion callback attempts, by outcome: delivered, retry (failed, tried again later), failed (given up).",
	}, []string{"outcome"})
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(c.sent); err != nil {
			return fmt.Errorf("api: register callback metrics: %w", err)
		}
	}
	return nil
}

// checkCallbackURL says what is wrong with a callback_url, or nil.
func (s *Server) checkCallbackURL(raw string) error {
	return s.checkCallbackURLField("callback_url", raw)
}

// checkCallbackURLField checks a URL the dispatcher is to call, in the
// request's field.
func (s *Server) checkCallbackURLField(field, raw string) error {
	if len(raw) > maxCallbackURL {
		return errUnprocessable("%s is longer than %d bytes", field, maxCallbackURL)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errUnprocessable("%s %q must be an absolute http:// or https:// URL", field, raw)
	}
	if _, err := s.callbacks.guard.CheckURL(raw); err != nil {
		if be := (*egress.BlockedError)(nil); errors.As(err, &be) && be.Metadata {
			return errUnprocessable("%s: %v", field, err)
		}
		return errUnprocessable("%s: %v (the operator can allow it in AGENTFLEET_EGRESS_ALLOW)", field, err)
	}
	return nil
}

// callbackView is a run's callback, or nil when it has none.
func (s *Server) callbackView(ctx context.Context, run agentfleet.Run) (*wire.CallbackView, error) {
	c, err := s.cfg.Store.RunCallbackGetByID(ctx, run.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cv := &wire.CallbackView{URL: c.URL, State: string(c.State), WebhookID: callbackWebhookID(run.ID), Attempts: c.Attempts, Log: c.Log}
	if cv.Log == nil {
		cv.Log = []store.CallbackAttempt{}
	}
	if c.State == store.CallbackPending && run.Status.Terminal() {
		next := c.NextAt
		cv.NextAt = &next
	}
	return cv, nil
}

// callbackWebhookID is the webhook-id of a run's callback: one per run
// end, the same on every attempt.
func callbackWebhookID(runID string) string { return "run_" + runID + "_end" }

// createCallback stores the outbox row of the run about to be created
// with params (whose id it fixes).
func (s *Server) createCallback(ctx context.Context, params *store.RunCreateParams, callbackURL string) error {
	if params.ID == "" {
		params.ID = uuid.Must(uuid.NewV7()).String()
	}
	_, err := s.cfg.Store.RunCallbackCreate(ctx, store.RunCallbackCreateParams{RunID: params.ID, Tenant: params.Tenant, URL: callbackURL})
	return err
}

// newCallbackSecret makes, seals and stores a tenant's callback secret,
// and returns it (shown once).
func (s *Server) newCallbackSecret(ctx context.Context, tenant string) (string, error) {
	if s.cfg.Secrets == nil {
		return "", &apiError{status: http.StatusServiceUnavailable, code: "secrets_key_missing",
			msg: "this dispatcher cannot store callback secrets: " + errNoSecretsKey}
	}
	secret := webhook.NewSecret(webhook.Standard)
	sealed, err := s.cfg.Secrets.Seal(secret, callbackSecretAD(tenant))
	if err != nil {
		return "", err
	}
	if err := s.cfg.Store.TenantCallbackSecretSet(ctx, store.TenantCallbackSecretSetParams{Tenant: tenant, Secret: sealed}); err != nil {
		return "", err
	}
	return secret, nil
}

func callbackSecretAD(tenant string) string { return "tenant-callback:" + tenant }

// handleCallbackSecretRotate replaces a tenant's callback secret (the
// admin, or the tenant itself). Callbacks sent from now on are signed
// with the new one.
func (s *Server) handleCallbackSecretRotate(w http.ResponseWriter, r *http.Request, p principal) {
	id, err := s.tenantForKeys(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	secret, err := s.newCallbackSecret(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.CallbackSecretView{Tenant: id, CallbackSecret: secret})
}

// DeliverCallbacks drains the callback outbox every interval until ctx
// ends: it claims the due callbacks of ended runs (leased, so several
// dispatchers share the work), sends them, and records each attempt.
func (s *Server) DeliverCallbacks(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastPrune time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			n, err := s.DeliverDueCallbacks(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("deliver run callbacks", "err", err)
			}
			if n < callbackClaimMax || err != nil {
				break
			}
		}
		if time.Since(lastPrune) > callbackPruneEvery {
			lastPrune = time.Now()
			if _, err := s.cfg.Store.RunCallbackPrune(ctx, time.Now().Add(-callbackOrphanAge)); err != nil && ctx.Err() == nil {
				s.log.Warn("prune run callbacks", "err", err)
			}
		}
	}
}

// DeliverDueCallbacks sends one claim's worth of due callbacks and
// returns how many it claimed.
func (s *Server) DeliverDueCallbacks(ctx context.Context) (int, error) {
	cs, err := s.cfg.Store.RunCallbackClaim(ctx, store.RunCallbackClaimParams{
		Now: time.Now(), Limit: callbackClaimMax, Lease: callbackTimeout + 5*time.Second,
	})
	if err != nil {
		return 0, err
	}
	sem := make(chan struct{}, callbackSenders)
	var wg sync.WaitGroup
	for _, c := range cs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s.sendCallback(ctx, c)
		})
	}
	wg.Wait()
	return len(cs), nil
}

// sendCallback makes one attempt at c and records it.
func (s *Server) sendCallback(ctx context.Context, c store.RunCallback) {
	at := time.Now()
	status, err := s.postCallback(ctx, c)
	if err != nil && status == 0 && ctx.Err() != nil {
		// Cut short by the dispatcher stopping: not an attempt. The
		// claim's lease runs out and another dispatcher makes it.
		return
	}
	attempt := store.CallbackAttempt{At: at, Status: status}
	rec := store.RunCallbackRecordParams{RunID: c.RunID, Attempt: attempt, State: store.CallbackDelivered}
	outcome := "delivered"
	if err != nil {
		rec.Attempt.Error = bound(err.Error())
		first := c.FirstAt
		if first.IsZero() {
			first = at
		}
		step := callbackBackoff[min(c.Attempts, len(callbackBackoff)-1)]
		next := at.Add(time.Duration(step) * s.callbacks.backoff)
		if next.Sub(first) > s.callbacks.giveUp {
			rec.State, outcome = store.CallbackFailed, "failed"
		} else {
			rec.State, rec.NextAt, outcome = store.CallbackPending, next, "retry"
		}
	}
	s.callbacks.sent.WithLabelValues(outcome).Inc()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if _, err := s.cfg.Store.RunCallbackRecord(rctx, rec); err != nil {
		// The lease runs out and the callback is tried again.
		s.log.Warn("record a callback attempt", "run", c.RunID, "err", err)
	}
}

// postCallback POSTs the run's final view to its callback URL, signed
// with the tenant's callback secret. It returns the receiver's status
// and, for anything but a 2xx, why the attempt failed.
func (s *Server) postCallback(ctx context.Context, c store.RunCallback) (int, error) {
	run, err := s.cfg.Store.RunGetByID(ctx, store.RunGetByIDParams{ID: c.RunID})
	if err != nil {
		return 0, fmt.Errorf("read the run: %w", err)
	}
	body, err := json.Marshal(run)
	if err != nil {
		return 0, fmt.Errorf("encode the run: %w", err)
	}
	return s.postSigned(ctx, c.Tenant, c.URL, callbackWebhookID(run.ID), body)
}

// postSigned POSTs body to url, signed (Standard Webhooks, message id
// webhookID) with tenant's callback secret, through the egress guard. It
// returns the receiver's status and, for anything but a 2xx, why the
// attempt failed.
func (s *Server) postSigned(ctx context.Context, tenant, url, webhookID string, body []byte) (int, error) {
	if s.cfg.Secrets == nil {
		return 0, errors.New("this dispatcher cannot sign callbacks: " + errNoSecretsKey)
	}
	sealed, err := s.cfg.Store.TenantCallbackSecretGet(ctx, tenant)
	if errors.Is(err, store.ErrNotFound) {
		return 0, fmt.Errorf("tenant %s has no callback secret: make one with POST /v1/tenants/%s/callback-secret", tenant, tenant)
	}
	if err != nil {
		return 0, fmt.Errorf("read the tenant's callback secret: %w", err)
	}
	secret, err := s.cfg.Secrets.Open(sealed, callbackSecretAD(tenant))
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
	resp, err := s.callbacks.client.Do(req)
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

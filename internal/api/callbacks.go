package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/google/uuid"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/egress"
	"github.com/agentfleet/agentfleet/internal/maintain"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/webhook"
	"github.com/agentfleet/agentfleet/wire"
)

// Completion callbacks: a run (or a trigger, for the runs it starts) may
// carry a callback_url. Its outbox row is stored before the run is
// (admit), so no run can end without one; the dispatcher's callback
// sender (internal/maintain) drains the rows of ended runs and POSTs each
// run's final view, signed under the tenant's callback secret; each
// attempt is in the run's view (GET /v1/runs/{id}: "callback"). A
// callback_url is checked here against the same network guard the sender
// dials through (internal/egress): no private or loopback address unless
// AGENTFLEET_EGRESS_ALLOW lists it, and no cloud metadata address at all.

// maxCallbackURL bounds a callback_url.
const maxCallbackURL = 2048

// callbackState is the guard callback URLs are checked against.
type callbackState struct {
	guard *egress.Guard
}

func (c *callbackState) init(cfg Config) {
	c.guard = egress.New(cfg.Egress)
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
	cv := &wire.CallbackView{URL: c.URL, State: string(c.State), WebhookID: maintain.CallbackWebhookID(run.ID), Attempts: c.Attempts, Log: c.Log}
	if cv.Log == nil {
		cv.Log = []store.CallbackAttempt{}
	}
	if c.State == store.CallbackPending && run.Status.Terminal() {
		next := c.NextAt
		cv.NextAt = &next
	}
	return cv, nil
}

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
	sealed, err := s.cfg.Secrets.Seal(secret, maintain.CallbackSecretAD(tenant))
	if err != nil {
		return "", err
	}
	if err := s.cfg.Store.TenantCallbackSecretSet(ctx, store.TenantCallbackSecretSetParams{Tenant: tenant, Secret: sealed}); err != nil {
		return "", err
	}
	return secret, nil
}

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

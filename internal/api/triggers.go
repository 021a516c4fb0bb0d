package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/webhook"
	"github.com/agentfleet/agentfleet/wire"
)

// Triggers are a tenant's: created, read and changed with its API key.
// A trigger's secret is generated when not given and shown once, in the
// answer that made it; it is stored sealed (Config.Secrets). Rotating it
// (PATCH with "rotate_secret" or a new "secret") keeps the old one
// accepted for SecretGrace, so a sender can be switched over without
// losing deliveries.

// Limits and defaults of triggers.
const (
	// SecretGrace is how long a rotated secret is still accepted.
	SecretGrace = 24 * time.Hour
	// HookBodyDefault and HookBodyMax bound a delivery's body; GitHub
	// sends up to 25 MiB.
	HookBodyDefault = 1 << 20
	HookBodyMax     = 25 << 20
	maxTriggerName  = 200
	maxEvents       = 100
	maxEventLen     = 200
	// DefaultMessageTemplate is the message of a trigger that names none.
	DefaultMessageTemplate = `A webhook delivery arrived (trigger {{.trigger}}, event {{.event}}{{if .action}}.{{.action}}{{end}}, delivery {{.delivery}}). Its payload is your context: act on it.`
)

// tenantTrigger admits only a tenant's key: triggers belong to a tenant.
func (s *Server) tenantTrigger(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request, p principal) {
		if p.tenant == "" {
			s.fail(w, r, errUnprocessable("triggers belong to a tenant: use its API key, not the admin token"))
			return
		}
		h(w, r, p)
	}
}

func (s *Server) triggerView(t store.Trigger, secret string) wire.TriggerView {
	v := wire.TriggerView{
		ID: t.ID, Tenant: t.Tenant, Name: t.Name, Agent: t.Agent, Scheme: t.Scheme, Message: t.Message, SessionID: t.SessionID,
		Events: t.Events, MaxTurns: t.MaxTurns, MaxTokens: t.MaxTokens, MaxBodyBytes: hookBodyLimit(t), Enabled: t.Enabled, CallbackURL: t.CallbackURL,
		URL: s.cfg.PublicURL + "/v1/hooks/" + t.ID, Secret: secret, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
	}
	if v.Events == nil {
		v.Events = []string{}
	}
	if t.PrevSecret != "" && time.Now().Before(t.PrevSecretUntil) {
		until := t.PrevSecretUntil
		v.PreviousSecretExpiresAt = &until
	}
	return v
}

func hookBodyLimit(t store.Trigger) int64 {
	if t.MaxBodyBytes > 0 {
		return t.MaxBodyBytes
	}
	return HookBodyDefault
}

// checkTrigger validates the fields req sets; scheme is the trigger's.
func (s *Server) checkTrigger(req *wire.TriggerRequest, scheme webhook.Scheme) error {
	if u := req.CallbackURL; u != nil && *u != "" {
		if err := s.checkCallbackURL(*u); err != nil {
			return err
		}
	}
	if n := req.Name; n != nil {
		if strings.TrimSpace(*n) == "" || len(*n) > maxTriggerName || strings.IndexFunc(*n, unicode.IsControl) >= 0 {
			return errUnprocessable("name must be 1 to %d characters without control characters", maxTriggerName)
		}
	}
	if a := req.Agent; a != nil && !validID(*a) {
		return errUnprocessable("agent %q is not a valid name (letters, digits, '-' and '_', up to 64)", *a)
	}
	if m := req.Message; m != nil && *m != "" {
		if _, err := webhook.ParseTemplate("message", *m); err != nil {
			return errUnprocessable("%v", err)
		}
	}
	if sid := req.SessionID; sid != nil && *sid != "" {
		if _, err := webhook.ParseTemplate("session_id", *sid); err != nil {
			return errUnprocessable("%v", err)
		}
	}
	if sec := req.Secret; sec != nil {
		if err := webhook.CheckSecret(scheme, *sec); err != nil {
			return errUnprocessable("secret: %v", err)
		}
	}
	if ev := req.Events; ev != nil {
		if len(*ev) > maxEvents {
			return errUnprocessable("events has %d entries; at most %d", len(*ev), maxEvents)
		}
		for _, e := range *ev {
			if strings.TrimSpace(e) == "" || len(e) > maxEventLen || strings.ContainsAny(e, " \t\r\n") {
				return errUnprocessable("events entry %q must be an event (\"push\"), an event and action (\"pull_request.opened\") or \"*\"", e)
			}
		}
	}
	switch {
	case req.MaxTurns != nil && (*req.MaxTurns < 0 || *req.MaxTurns > maxTurnsLimit):
		return errUnprocessable("max_turns must be between 0 (agent default) and %d", maxTurnsLimit)
	case req.MaxTokens != nil && *req.MaxTokens < 0:
		return errUnprocessable("max_tokens must not be negative (0 means no per-run cap)")
	case req.MaxBodyBytes != nil && (*req.MaxBodyBytes < 0 || *req.MaxBodyBytes > HookBodyMax):
		return errUnprocessable("max_body_bytes must be between 0 (the default, %d) and %d", HookBodyDefault, HookBodyMax)
	}
	return nil
}

func (s *Server) handleTriggerCreate(w http.ResponseWriter, r *http.Request, p principal) {
	var req wire.TriggerRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if s.cfg.Secrets == nil {
		s.fail(w, r, &apiError{status: http.StatusServiceUnavailable, code: "secrets_key_missing",
			msg: "this dispatcher cannot store trigger secrets: " + errNoSecretsKey})
		return
	}
	switch {
	case req.Scheme == nil:
		s.fail(w, r, errUnprocessable("scheme is required: one of github, standard, stripe, hmac"))
		return
	case !webhook.Scheme(*req.Scheme).Valid():
		s.fail(w, r, errUnprocessable("scheme %q is not one of github, standard, stripe, hmac", *req.Scheme))
		return
	case req.Name == nil:
		s.fail(w, r, errUnprocessable("name is required: it is {{.trigger}} in the templates"))
		return
	case req.RotateSecret:
		s.fail(w, r, errUnprocessable("rotate_secret is for PATCH; a new trigger gets a generated secret when none is given"))
		return
	}
	scheme := webhook.Scheme(*req.Scheme)
	if err := s.checkTrigger(&req, scheme); err != nil {
		s.fail(w, r, err)
		return
	}
	params := store.TriggerCreateParams{
		CallbackURL: deref(req.CallbackURL, ""),
		ID:          uuid.Must(uuid.NewV7()).String(), Tenant: p.tenant, Name: *req.Name, Agent: deref(req.Agent, "default"),
		Scheme: string(scheme), Message: deref(req.Message, ""), SessionID: deref(req.SessionID, ""),
		MaxTurns: deref(req.MaxTurns, 0), MaxTokens: deref(req.MaxTokens, 0), MaxBodyBytes: deref(req.MaxBodyBytes, 0),
		Enabled: deref(req.Enabled, true),
	}
	if params.Message == "" {
		params.Message = DefaultMessageTemplate
	}
	if req.Events != nil {
		params.Events = *req.Events
	}
	if err := s.checkAgent(r.Context(), p.tenant, params.Agent); err != nil {
		s.fail(w, r, err)
		return
	}
	shown := ""
	secret := deref(req.Secret, "")
	if secret == "" {
		secret = webhook.NewSecret(scheme)
		shown = secret
	}
	sealed, err := s.cfg.Secrets.Seal(secret, params.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	params.Secret = sealed
	t, err := s.cfg.Store.TriggerCreate(r.Context(), params)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.hooks.forget(t.ID) // no longer unknown
	writeJSON(w, http.StatusCreated, s.triggerView(t, shown))
}

const errNoSecretsKey = "set AGENTFLEET_SECRETS_KEY to the base64 of 32 random bytes (openssl rand -base64 32), the same on every dispatcher, and restart"

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// lookupTrigger reads the trigger named in the path, as the tenant sees it.
func (s *Server) lookupTrigger(r *http.Request, p principal) (store.Trigger, error) {
	id := r.PathValue("id")
	t, err := s.cfg.Store.TriggerGetByID(r.Context(), store.TriggerGetByIDParams{ID: id, Tenant: p.tenant})
	if errors.Is(err, store.ErrNotFound) {
		return t, errNotFound("no trigger %q", id)
	}
	return t, err
}

func (s *Server) handleTriggerGet(w http.ResponseWriter, r *http.Request, p principal) {
	t, err := s.lookupTrigger(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.triggerView(t, ""))
}

// badCursor turns the store's refusal of a cursor into a 400.
func badCursor(err error, cursor string) error {
	if errors.Is(err, store.ErrInvalid) {
		return errBadRequest("cursor %q is not valid: pass the next_cursor of the previous page", cursor)
	}
	return err
}

func (s *Server) handleTriggerList(w http.ResponseWriter, r *http.Request, p principal) {
	limit, err := pageLimit(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	cursor := r.URL.Query().Get("cursor")
	res, err := s.cfg.Store.TriggerList(r.Context(), store.TriggerListParams{Tenant: p.tenant, Limit: limit, Cursor: cursor})
	if err != nil {
		s.fail(w, r, badCursor(err, cursor))
		return
	}
	out := wire.TriggerList{Triggers: []wire.TriggerView{}, NextCursor: res.NextCursor}
	for _, t := range res.Triggers {
		out.Triggers = append(out.Triggers, s.triggerView(t, ""))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleTriggerUpdate(w http.ResponseWriter, r *http.Request, p principal) {
	var req wire.TriggerRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	t, err := s.lookupTrigger(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	scheme := webhook.Scheme(t.Scheme)
	switch {
	case req.Scheme != nil && *req.Scheme != t.Scheme:
		s.fail(w, r, errUnprocessable("scheme cannot change (the secret's form depends on it): create another trigger"))
		return
	case req.RotateSecret && req.Secret != nil:
		s.fail(w, r, errUnprocessable("give either secret or rotate_secret, not both"))
		return
	}
	if err := s.checkTrigger(&req, scheme); err != nil {
		s.fail(w, r, err)
		return
	}
	params := store.TriggerUpdateParams{
		CallbackURL: req.CallbackURL,
		ID:          t.ID, Tenant: p.tenant, Name: req.Name, Agent: req.Agent, Message: req.Message, SessionID: req.SessionID,
		Events: req.Events, MaxTurns: req.MaxTurns, MaxTokens: req.MaxTokens, MaxBodyBytes: req.MaxBodyBytes, Enabled: req.Enabled,
	}
	if params.Message != nil && *params.Message == "" {
		params.Message = new(DefaultMessageTemplate)
	}
	if req.Agent != nil {
		if err := s.checkAgent(r.Context(), p.tenant, *req.Agent); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	shown := ""
	if req.RotateSecret || req.Secret != nil {
		if s.cfg.Secrets == nil {
			s.fail(w, r, &apiError{status: http.StatusServiceUnavailable, code: "secrets_key_missing",
				msg: "this dispatcher cannot store trigger secrets: " + errNoSecretsKey})
			return
		}
		secret := deref(req.Secret, "")
		if req.RotateSecret {
			secret = webhook.NewSecret(scheme)
			shown = secret
		}
		sealed, err := s.cfg.Secrets.Seal(secret, t.ID)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		params.Secret, params.PrevSecretUntil = &sealed, time.Now().Add(SecretGrace)
	}
	t, err = s.cfg.Store.TriggerUpdate(r.Context(), params)
	if errors.Is(err, store.ErrNotFound) {
		err = errNotFound("no trigger %q", params.ID)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.hooks.forget(t.ID)
	writeJSON(w, http.StatusOK, s.triggerView(t, shown))
}

func (s *Server) handleTriggerDelete(w http.ResponseWriter, r *http.Request, p principal) {
	id := r.PathValue("id")
	err := s.cfg.Store.TriggerDelete(r.Context(), store.TriggerDeleteParams{ID: id, Tenant: p.tenant})
	if errors.Is(err, store.ErrNotFound) {
		err = errNotFound("no trigger %q", id)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.hooks.forget(id)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleDeliveryList(w http.ResponseWriter, r *http.Request, p principal) {
	t, err := s.lookupTrigger(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	limit, err := pageLimit(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	cursor := q.Get("cursor")
	res, err := s.cfg.Store.TriggerDeliveryList(r.Context(), store.TriggerDeliveryListParams{
		TriggerID: t.ID, Delivery: q.Get("delivery"), Limit: limit, Cursor: cursor,
	})
	if err != nil {
		s.fail(w, r, badCursor(err, cursor))
		return
	}
	out := wire.DeliveryList{Deliveries: []wire.DeliveryView{}, NextCursor: res.NextCursor}
	for _, d := range res.Deliveries {
		out.Deliveries = append(out.Deliveries, wire.DeliveryView{
			ID: d.ID, Delivery: d.Delivery, ReceivedAt: d.ReceivedAt, Event: webhook.EventName(d.Event, d.Action),
			Outcome: string(d.Outcome), Reason: d.Reason, RunID: d.RunID,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// handleTriggerTest signs a delivery with the trigger's secret, as its
// sender would, and runs it through the whole intake: the answer is the
// hook's own.
func (s *Server) handleTriggerTest(w http.ResponseWriter, r *http.Request, p principal) {
	var req wire.TriggerTestRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	t, err := s.lookupTrigger(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.hooks.unknown.Delete(t.ID) // found: made on another dispatcher since
	ht, err := s.hooks.trigger(r.Context(), s, t.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	delivery := "test-" + uuid.Must(uuid.NewV7()).String()
	body, err := testPayload(webhook.Scheme(t.Scheme), req, delivery)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	now := time.Now()
	h, err := webhook.Sign(webhook.Scheme(t.Scheme), ht.secrets[0], body, delivery, req.Event, now)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.answerHook(w, r, ht, s.intake(w, r, ht, h, body, now, false))
}

// testPayload is the body a test delivery sends: the given payload ({}
// when none), with the id and type a Stripe event carries and the type
// a Standard Webhooks one does, when the payload has none.
func testPayload(scheme webhook.Scheme, req wire.TriggerTestRequest, delivery string) ([]byte, error) {
	payload := req.Payload
	if len(payload) == 0 || string(payload) == "null" {
		payload = json.RawMessage(`{}`)
	}
	if scheme != webhook.Stripe && scheme != webhook.Standard {
		return payload, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil {
		return nil, errUnprocessable("payload must be a JSON object for the %s scheme", scheme)
	}
	if _, ok := obj["id"]; !ok && scheme == webhook.Stripe {
		obj["id"], _ = json.Marshal(delivery)
	}
	if _, ok := obj["type"]; !ok && req.Event != "" {
		obj["type"], _ = json.Marshal(req.Event)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode test payload: %w", err)
	}
	return b, nil
}

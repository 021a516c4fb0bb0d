package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// DefaultKeyName names the key a tenant is created with.
const DefaultKeyName = "default"

// DefaultPersona is the persona of every tenant's "default" agent.
const DefaultPersona = "You are a careful general-purpose agent. Work in small steps, check intermediate results with log(), and answer plainly."

func validateTenantRequest(req *wire.TenantRequest) error {
	if b := req.Budget; b != nil {
		if b.Tokens != nil && *b.Tokens < 0 {
			return errUnprocessable("budget.tokens must not be negative (0 or absent: unlimited)")
		}
		if b.Window != nil {
			if err := validWindow(*b.Window); err != nil {
				return err
			}
		}
	}
	switch {
	case req.TokensPerMinute != nil && *req.TokensPerMinute < 0:
		return errUnprocessable("tokens_per_minute must not be negative (0: no per-minute limit)")
	case req.MaxConcurrentRuns != nil && *req.MaxConcurrentRuns < 0:
		return errUnprocessable("max_concurrent_runs must not be negative (0: no limit)")
	case req.MaxQueuedRuns != nil && *req.MaxQueuedRuns < 0:
		return errUnprocessable("max_queued_runs must not be negative (0 or absent: the default, %d)", store.MaxQueuedRunsDefault)
	case req.Weight != nil && (*req.Weight < 1 || *req.Weight > 1000):
		return errUnprocessable("weight must be from 1 to 1000")
	case req.Exhausted != nil && *req.Exhausted != string(agentfleet.ExhaustedQueue) && *req.Exhausted != string(agentfleet.ExhaustedFail):
		return errUnprocessable("exhausted must be %q (park runs until budget returns) or %q", agentfleet.ExhaustedQueue, agentfleet.ExhaustedFail)
	}
	return nil
}

func validWindow(w string) error {
	switch agentfleet.BudgetWindow(w) {
	case agentfleet.WindowDay, agentfleet.WindowMonth:
		return nil
	}
	d, err := time.ParseDuration(w)
	if err != nil || d < time.Minute {
		return errUnprocessable("budget.window %q must be \"day\", \"month\" or a duration of at least 1m like \"24h\"", w)
	}
	return nil
}

func (s *Server) handleTenantCreate(w http.ResponseWriter, r *http.Request, _ principal) {
	var req wire.TenantRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if !validID(req.ID) {
		s.fail(w, r, errUnprocessable("id %q is not a valid tenant id (letters, digits, '-' and '_', up to 64)", req.ID))
		return
	}
	if err := validateTenantRequest(&req); err != nil {
		s.fail(w, r, err)
		return
	}
	p := store.TenantCreateParams{ID: req.ID, Window: agentfleet.WindowDay, Weight: 1, Exhausted: agentfleet.ExhaustedQueue}
	if b := req.Budget; b != nil {
		if b.Tokens != nil {
			p.TokenLimit = *b.Tokens
		}
		if b.Window != nil {
			p.Window = agentfleet.BudgetWindow(*b.Window)
		}
	}
	if req.TokensPerMinute != nil {
		p.TokensPerMinute = *req.TokensPerMinute
	}
	if req.MaxConcurrentRuns != nil {
		p.MaxConcurrentRuns = *req.MaxConcurrentRuns
	}
	if req.MaxQueuedRuns != nil {
		p.MaxQueuedRuns = *req.MaxQueuedRuns
	}
	if req.Weight != nil {
		p.Weight = *req.Weight
	}
	if req.Exhausted != nil {
		p.Exhausted = agentfleet.ExhaustedPolicy(*req.Exhausted)
	}
	key, err := CreateTenant(r.Context(), s.cfg.Store, p)
	if errors.Is(err, store.ErrConflict) {
		err = errConflict("tenant %q already exists", req.ID)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	view, err := s.TenantView(r.Context(), req.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	view.APIKey = key
	// Without a secrets key the tenant has no callback secret until one
	// is made (POST /v1/tenants/{id}/callback-secret).
	if s.cfg.Secrets != nil {
		if view.CallbackSecret, err = s.newCallbackSecret(r.Context(), req.ID); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusCreated, view)
}

// CreateTenant creates a tenant with its default agent and a fresh API
// key, returned once (only its hash is stored).
func CreateTenant(ctx context.Context, st store.Store, p store.TenantCreateParams) (apiKey string, err error) {
	if p.DefaultAgent.Persona == "" {
		p.DefaultAgent.Persona = DefaultPersona
	}
	if _, err := st.TenantCreate(ctx, p); err != nil {
		return "", err
	}
	key := NewAPIKey()
	if _, err := st.APIKeyCreate(ctx, store.APIKeyCreateParams{Tenant: p.ID, Key: key, Name: DefaultKeyName}); err != nil {
		return "", err
	}
	return key, nil
}

// NewAPIKey returns a fresh random API key.
func NewAPIKey() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return "af_" + base64.RawURLEncoding.EncodeToString(b)
}

func (s *Server) handleTenantGet(w http.ResponseWriter, r *http.Request, p principal) {
	id := r.PathValue("id")
	if !p.canSee(id) {
		s.fail(w, r, errNotFound("no tenant %q", id))
		return
	}
	view, err := s.TenantView(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		err = errNotFound("no tenant %q", id)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, view)
}

func (s *Server) handleTenantUpdate(w http.ResponseWriter, r *http.Request, _ principal) {
	id := r.PathValue("id")
	var req wire.TenantRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.ID != "" && req.ID != id {
		s.fail(w, r, errUnprocessable("id in the body (%q) differs from the path (%q); a tenant cannot be renamed", req.ID, id))
		return
	}
	if err := validateTenantRequest(&req); err != nil {
		s.fail(w, r, err)
		return
	}
	p := store.TenantUpdateParams{ID: id, TokensPerMinute: req.TokensPerMinute, MaxConcurrentRuns: req.MaxConcurrentRuns,
		MaxQueuedRuns: req.MaxQueuedRuns, Weight: req.Weight}
	if b := req.Budget; b != nil {
		p.TokenLimit = b.Tokens
		if b.Window != nil {
			win := agentfleet.BudgetWindow(*b.Window)
			p.Window = &win
		}
	}
	if req.Exhausted != nil {
		ex := agentfleet.ExhaustedPolicy(*req.Exhausted)
		p.Exhausted = &ex
	}
	if _, err := s.cfg.Store.TenantUpdate(r.Context(), p); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = errNotFound("no tenant %q", id)
		}
		s.fail(w, r, err)
		return
	}
	if s.cfg.TenantChanged != nil {
		s.cfg.TenantChanged(id)
	}
	view, err := s.TenantView(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, view)
}

// TenantView reads tenant id as the API shows it.
func (s *Server) TenantView(ctx context.Context, id string) (wire.TenantView, error) {
	t, err := s.cfg.Store.TenantGetByID(ctx, id)
	if err != nil {
		return wire.TenantView{}, err
	}
	return s.viewTenant(ctx, t)
}

// viewTenant adds t's budget and run counts.
func (s *Server) viewTenant(ctx context.Context, t agentfleet.Tenant) (wire.TenantView, error) {
	id := t.ID
	b, err := s.cfg.Store.BudgetGet(ctx, id, time.Now().UTC())
	if err != nil {
		return wire.TenantView{}, err
	}
	counts, err := s.cfg.Store.RunCountByStatus(ctx, id)
	if err != nil {
		return wire.TenantView{}, err
	}
	active := 0
	for st, n := range counts {
		if st == agentfleet.StatusRunning || st.Waiting() {
			active += n
		}
	}
	return wire.TenantView{
		ID: t.ID, Budget: b, TokensPerMinute: t.TokensPerMinute, MaxConcurrentRuns: t.MaxConcurrentRuns, MaxQueuedRuns: t.MaxQueuedRuns,
		Weight: t.Weight, Exhausted: t.Exhausted, WaitingRuns: counts[agentfleet.StatusWaitingBudget], ActiveRuns: active,
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
	}, nil
}

// handleTenantUsage sums a tenant's settled usage by model or by run.
func (s *Server) handleTenantUsage(w http.ResponseWriter, r *http.Request, p principal) {
	id, err := s.tenantForKeys(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	params := store.UsageListParams{Tenant: id, RunID: q.Get("run_id"), GroupBy: q.Get("group_by")}
	if params.GroupBy == "" {
		params.GroupBy = "model"
	}
	if params.GroupBy != "model" && params.GroupBy != "run" {
		s.fail(w, r, errBadRequest("group_by must be \"model\" or \"run\""))
		return
	}
	if since := q.Get("since"); since != "" {
		t, err := time.Parse(time.RFC3339, since)
		if err != nil {
			s.fail(w, r, errBadRequest("since must be an RFC 3339 time like 2026-01-02T15:04:05Z"))
			return
		}
		params.Since = t
	}
	rows, err := s.cfg.Store.UsageList(r.Context(), params)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.UsageReport{GroupBy: params.GroupBy, Rows: []wire.UsageRow{}}
	for _, row := range rows {
		out.Rows = append(out.Rows, wire.UsageRow{Key: row.Key, Usage: row.Usage, Calls: row.Calls})
	}
	writeJSON(w, http.StatusOK, out)
}

func keyView(k store.APIKey) wire.APIKeyView {
	v := wire.APIKeyView{ID: k.ID, Name: k.Name, Scopes: k.Scopes, CreatedAt: k.CreatedAt}
	if !k.LastUsedAt.IsZero() {
		used := k.LastUsedAt
		v.LastUsedAt = &used
	}
	return v
}

// keyNameMax bounds a key's name (the store's limit).
const keyNameMax = 100

// tenantForKeys checks that the principal may manage the keys (or the
// usage, or the callback secret) of the tenant in the path (the admin,
// or the tenant's own key) and that it exists; either failing is a 404,
// so ids do not leak.
func (s *Server) tenantForKeys(r *http.Request, p principal) (string, error) {
	id := r.PathValue("id")
	if !p.canSee(id) {
		return "", errNotFound("no tenant %q", id)
	}
	if _, err := s.cfg.Store.TenantGetByID(r.Context(), id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = errNotFound("no tenant %q", id)
		}
		return "", err
	}
	return id, nil
}

// handleKeyCreate makes a tenant another key; the key is in this answer
// only.
func (s *Server) handleKeyCreate(w http.ResponseWriter, r *http.Request, p principal) {
	tenant, err := s.tenantForKeys(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req wire.APIKeyRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	switch name := strings.TrimSpace(req.Name); {
	case name == "":
		s.fail(w, r, errUnprocessable("name is required: say what the key is for, e.g. \"ci\""))
		return
	case len(req.Name) > keyNameMax:
		s.fail(w, r, errUnprocessable("name is %d bytes; the limit is %d", len(req.Name), keyNameMax))
		return
	}
	for _, sc := range req.Scopes {
		if !slices.Contains(store.APIKeyScopes, sc) {
			s.fail(w, r, errUnprocessable("scopes: %q is not a scope; the scopes are %s", sc, strings.Join(store.APIKeyScopes, ", ")))
			return
		}
	}
	if req.Scopes != nil && len(req.Scopes) == 0 {
		s.fail(w, r, errUnprocessable("scopes is empty: name at least one of %s, or leave scopes out for all of them", strings.Join(store.APIKeyScopes, ", ")))
		return
	}
	key := NewAPIKey()
	k, err := s.cfg.Store.APIKeyCreate(r.Context(), store.APIKeyCreateParams{Tenant: tenant, Key: key, Name: req.Name, Scopes: req.Scopes})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.keyCreated(key)
	v := keyView(k)
	v.APIKey = key
	writeJSON(w, http.StatusCreated, v)
}

// handleKeyList lists a tenant's keys: names, ids, when made and last
// used, never the keys.
func (s *Server) handleKeyList(w http.ResponseWriter, r *http.Request, p principal) {
	tenant, err := s.tenantForKeys(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	params := store.APIKeyListParams{Tenant: tenant, Cursor: q.Get("cursor")}
	if params.Limit, err = pageLimit(q); err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.cfg.Store.APIKeyList(r.Context(), params)
	if errors.Is(err, store.ErrInvalid) {
		err = errBadRequest("cursor %q is not valid: pass the next_cursor of the previous page", params.Cursor)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.APIKeyList{Keys: make([]wire.APIKeyView, len(res.Keys)), NextCursor: res.NextCursor}
	for i, k := range res.Keys {
		out.Keys[i] = keyView(k)
	}
	writeJSON(w, http.StatusOK, out)
}

// handleKeyRevoke revokes a key at once, on every dispatcher. A tenant
// may revoke any of its keys, the one it calls with and its last one
// included: the admin token can always make it a new one.
func (s *Server) handleKeyRevoke(w http.ResponseWriter, r *http.Request, p principal) {
	tenant, err := s.tenantForKeys(r, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	keyID := r.PathValue("key")
	if err := s.cfg.Store.APIKeyDelete(r.Context(), store.APIKeyDeleteParams{Tenant: tenant, ID: keyID}); err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid) {
			err = errNotFound("tenant %q has no key %q (list them with GET /v1/tenants/%s/keys)", tenant, keyID, tenant)
		}
		s.fail(w, r, err)
		return
	}
	s.keyRevoked(keyID)
	if rv := s.cfg.KeyRevocations; rv != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), publishTimeout)
		defer cancel()
		// Revoked in the store either way; a dispatcher that misses
		// this drops the key when its cache entry expires.
		if err := rv.PublishKeyRevoked(ctx, keyID); err != nil {
			s.log.Warn("broadcast key revocation", "tenant", tenant, "key", keyID, "err", err,
				"bound", s.cfg.LookupCacheTTL)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

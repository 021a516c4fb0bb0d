package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/egress"
	"github.com/agentfleet/agentfleet/internal/sandbox"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// Agents (docs/api.md, "Defining an agent"): a tenant's profiles runs execute under. A PUT
// replaces an agent whole and makes a new version when anything changed;
// a run keeps the version it was admitted under, so neither a PUT nor a
// DELETE changes a run in flight. What a worker cannot serve is refused
// here: primitives the sandbox does not have, approve rules that are no
// rules, egress entries that are no hosts or ranges (or would open a
// cloud metadata service).

const maxAgentModelLen = 200

// tenantAgent refuses the admin token: agents belong to a tenant.
func (s *Server) tenantAgent(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request, p principal) {
		if p.tenant == "" {
			s.fail(w, r, errUnprocessable("agents belong to a tenant: use its API key, not the admin token"))
			return
		}
		h(w, r, p)
	}
}

func (s *Server) handleAgentPut(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	if !validID(name) {
		s.fail(w, r, errUnprocessable("agent name %q is not valid (letters, digits, '-' and '_', up to 64)", name))
		return
	}
	var req wire.AgentRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	switch {
	case req.Name != "" && req.Name != name:
		s.fail(w, r, errUnprocessable("name %q in the body is not the agent %q of the path: they must match (or leave name out)", req.Name, name))
		return
	case req.Tenant != "" && req.Tenant != p.tenant:
		s.fail(w, r, errUnprocessable("tenant %q in the body is not yours (%s): leave it out", req.Tenant, p.tenant))
		return
	}
	if err := s.checkAgentSpec(req.AgentSpec); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.checkAgentSecretsExist(r.Context(), p.tenant, req.Secrets); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.fetchOpenAPIDocuments(r.Context(), &req.AgentSpec); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.checkOpenAPISecrets(r.Context(), p.tenant, req.OpenAPI); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.checkMCPSecrets(r.Context(), p.tenant, req.MCP); err != nil {
		s.fail(w, r, err)
		return
	}
	_, err := s.cfg.Store.AgentGetByName(r.Context(), store.AgentGetByNameParams{Tenant: p.tenant, Name: name})
	existed := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.fail(w, r, err)
		return
	}
	a, err := s.cfg.Store.AgentUpsert(r.Context(), store.AgentUpsertParams{Tenant: p.tenant, Name: name, Spec: req.AgentSpec})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if !existed {
		status = http.StatusCreated
	}
	writeJSON(w, status, agentView(a))
}

// checkAgentSecretsExist refuses an agent that names a secret its tenant
// does not have. A secret deleted later is the worker's to report: the
// agent's next run fails, naming it.
func (s *Server) checkAgentSecretsExist(ctx context.Context, tenant string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	have, err := s.cfg.Store.SecretList(ctx, tenant)
	if err != nil {
		return err
	}
	for _, name := range names {
		if !slices.ContainsFunc(have, func(sec agentfleet.Secret) bool { return sec.Name == name }) {
			return errUnprocessable("secrets: tenant %s has no secret %q: set it first (PUT /v1/secrets/%s, or agentctl secrets set %s)", tenant, name, name, name)
		}
	}
	return nil
}

// agentMaxBodyBytes bounds an agent's PUT: room for its OpenAPI
// documents (each at most sandbox.OpenAPISpecMaxBytes, checked with its
// field named) beside the rest.
const agentMaxBodyBytes = 8 << 20

// Bounds of fetching an OpenAPI document from its spec_url at apply time.
const (
	openAPIFetchTimeout   = 10 * time.Second
	openAPIFetchRedirects = 3
)

// fetchOpenAPIDocuments fetches the documents of spec's modules given by
// spec_url, through the egress guard (the fleet's allow-list and the
// agent's egress), into their spec, and checks them: a run uses the
// document as it was when its agent was applied.
func (s *Server) fetchOpenAPIDocuments(ctx context.Context, spec *agentfleet.AgentSpec) error {
	if !slices.ContainsFunc(spec.OpenAPI, func(m agentfleet.OpenAPIModule) bool { return m.SpecURL != "" }) {
		return nil
	}
	cfg := s.cfg.Egress
	entries, err := egress.ParseAgentEntries(spec.Egress)
	if err != nil {
		return errUnprocessable("egress: %v", err)
	}
	cfg.Agent = entries
	guard := egress.New(cfg)
	client := guard.HTTPClient(openAPIFetchRedirects)
	defer client.CloseIdleConnections()
	mods := slices.Clone(spec.OpenAPI)
	for i := range mods {
		m := &mods[i]
		if m.SpecURL == "" {
			continue
		}
		doc, err := fetchOpenAPIDocument(ctx, guard, client, m.SpecURL)
		if err != nil {
			return errUnprocessable("openapi[%d].spec_url: %v", i, err)
		}
		m.Spec, _ = json.Marshal(string(doc))
		if err := sandbox.CheckOpenAPIDocument(i, *m); err != nil {
			return errUnprocessable("%v", err)
		}
	}
	spec.OpenAPI = mods
	return nil
}

func fetchOpenAPIDocument(ctx context.Context, guard *egress.Guard, client *http.Client, raw string) ([]byte, error) {
	if _, err := guard.CheckURL(raw); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, openAPIFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, application/yaml, text/yaml, */*")
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("fetching %s timed out after %s", raw, openAPIFetchTimeout)
		}
		return nil, fmt.Errorf("fetching %s: %v", raw, egress.URLErrorCause(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching %s answered %s", raw, resp.Status)
	}
	doc, err := io.ReadAll(io.LimitReader(resp.Body, sandbox.OpenAPISpecMaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %v", raw, err)
	}
	if len(doc) > sandbox.OpenAPISpecMaxBytes {
		return nil, fmt.Errorf("the document at %s is over the limit of 1 MiB", raw)
	}
	return doc, nil
}

// agentView is an agent as the API shows it: a document fetched from its
// spec_url is shown as the URL alone, so that the agent as shown can be
// put back (and is fetched again).
func agentView(a agentfleet.Agent) agentfleet.Agent {
	if !slices.ContainsFunc(a.OpenAPI, func(m agentfleet.OpenAPIModule) bool { return m.SpecURL != "" }) {
		return a
	}
	a.OpenAPI = slices.Clone(a.OpenAPI)
	for i := range a.OpenAPI {
		if a.OpenAPI[i].SpecURL != "" {
			a.OpenAPI[i].Spec = nil
		}
	}
	return a
}

// checkOpenAPISecrets refuses an OpenAPI module whose secret would never
// be sent with its requests (not HTTPS, or not to one of its hosts).
func (s *Server) checkOpenAPISecrets(ctx context.Context, tenant string, mods []agentfleet.OpenAPIModule) error {
	if !slices.ContainsFunc(mods, func(m agentfleet.OpenAPIModule) bool { return m.Secret != "" }) {
		return nil
	}
	have, err := s.cfg.Store.SecretList(ctx, tenant)
	if err != nil {
		return err
	}
	if err := sandbox.CheckOpenAPISecrets(mods, have); err != nil {
		return errUnprocessable("%v", err)
	}
	return nil
}

// checkMCPSecrets refuses an MCP server whose secret would never be
// sent to it (not HTTPS, or not one of the secret's hosts).
func (s *Server) checkMCPSecrets(ctx context.Context, tenant string, servers []agentfleet.MCPServer) error {
	if !slices.ContainsFunc(servers, func(m agentfleet.MCPServer) bool { return m.Secret != "" }) {
		return nil
	}
	have, err := s.cfg.Store.SecretList(ctx, tenant)
	if err != nil {
		return err
	}
	if err := sandbox.CheckMCPSecrets(servers, have); err != nil {
		return errUnprocessable("%v", err)
	}
	return nil
}

// checkAgentSpec refuses what no worker could serve, naming the field.
func (s *Server) checkAgentSpec(spec agentfleet.AgentSpec) error {
	for _, m := range []struct{ field, name string }{{"model", spec.Model}, {"summary_model", spec.SummaryModel}} {
		if len(m.name) > maxAgentModelLen || strings.ContainsFunc(m.name, func(r rune) bool { return r < ' ' }) {
			return errUnprocessable("%s %q is not a model name", m.field, m.name)
		}
	}
	if err := agentfleet.CheckContextWindow(spec.ContextWindow); err != nil {
		return errUnprocessable("%v", err)
	}
	if err := sandbox.CheckPrimitives(spec.Primitives); err != nil {
		return errUnprocessable("primitives: %s", strings.TrimPrefix(err.Error(), "sandbox: "))
	}
	for i, prim := range spec.Primitives {
		if slices.Contains(spec.Primitives[:i], prim) {
			return errUnprocessable("primitives: %q is listed twice", prim)
		}
	}
	if err := agentfleet.CheckAgentSecrets(spec.Secrets); err != nil {
		return errUnprocessable("%v", err)
	}
	if err := sandbox.CheckApproveRules(spec.Approve); err != nil {
		return errUnprocessable("approve: %v", err)
	}
	for _, e := range spec.Egress {
		if strings.ContainsAny(e, ", \t\n") {
			return errUnprocessable("egress: %q is not one host name, IP address or CIDR: give each as its own entry", e)
		}
	}
	if _, err := egress.ParseAgentEntries(spec.Egress); err != nil {
		return errUnprocessable("egress: %v", err)
	}
	if spec.ApprovalCallbackURL != "" {
		if err := s.checkCallbackURLField("approval_callback_url", spec.ApprovalCallbackURL); err != nil {
			return err
		}
	}
	if err := sandbox.CheckMCPServers(spec.MCP, spec.Secrets); err != nil {
		return errUnprocessable("%v", err)
	}
	if err := sandbox.CheckOpenAPIModules(spec.OpenAPI, spec.Secrets); err != nil {
		return errUnprocessable("%v", err)
	}
	return nil
}

func (s *Server) handleAgentList(w http.ResponseWriter, r *http.Request, p principal) {
	limit, err := pageLimit(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	cursor := r.URL.Query().Get("cursor")
	res, err := s.cfg.Store.AgentList(r.Context(), store.AgentListParams{Tenant: p.tenant, Limit: limit, Cursor: cursor})
	if err != nil {
		s.fail(w, r, badCursor(err, cursor))
		return
	}
	out := wire.AgentList{Agents: res.Agents, NextCursor: res.NextCursor}
	if out.Agents == nil {
		out.Agents = []agentfleet.Agent{}
	}
	for i := range out.Agents {
		out.Agents[i] = agentView(out.Agents[i])
	}
	writeJSON(w, http.StatusOK, out)
}

// handleAgentGet shows an agent's current version, or with ?version=N
// that version, which outlives replacements and the agent's delete (it
// is what a run's agent_version names).
func (s *Server) handleAgentGet(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	version := 0
	if v := r.URL.Query().Get("version"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			s.fail(w, r, errBadRequest("version must be a positive number"))
			return
		}
		version = n
	}
	a, err := s.cfg.Store.AgentGetByName(r.Context(), store.AgentGetByNameParams{Tenant: p.tenant, Name: name, Version: version})
	if errors.Is(err, store.ErrNotFound) {
		if version > 0 {
			err = errNotFound("agent %q has no version %d", name, version)
		} else {
			err = errNotFound("no agent %q", name)
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, agentView(a))
}

func (s *Server) handleAgentDelete(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	err := s.cfg.Store.AgentDelete(r.Context(), store.AgentDeleteParams{Tenant: p.tenant, Name: name})
	switch {
	case errors.Is(err, store.ErrNotFound):
		err = errNotFound("no agent %q", name)
	case name == agentfleet.DefaultAgent && errors.Is(err, store.ErrInvalid):
		err = errUnprocessable("the %q agent cannot be deleted: every tenant has it (replace it with PUT instead)", name)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// New runs naming it are refused at once here; other dispatchers
	// may take it for existing a few seconds longer, and the store
	// refuses the run then.
	s.agents.Delete(agentKey{tenant: p.tenant, name: name})
	w.WriteHeader(http.StatusNoContent)
}

// errUnknownAgent is the answer to a run naming an agent its tenant does
// not have.
func errUnknownAgent(name string) error {
	return &apiError{status: http.StatusUnprocessableEntity, code: "unprocessable", cause: store.ErrUnknownAgent,
		msg: "unknown agent " + strconv.Quote(name) + " (every tenant has " + strconv.Quote(agentfleet.DefaultAgent) + ")"}
}

package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// Approvals (docs/api.md, "Approvals"; docs/ARCHITECTURE.md §2): a worker
// parks a run whose script called what its agent's approve rules cover
// (waiting_approval, holding nothing).
// Here a tenant's key, or the admin for any tenant, lists them and
// approves or denies one; the decision resumes the run, whose turn runs
// again (its recorded reply, the same script) and meets the call
// decided: approved, it proceeds; denied, it throws a catchable error
// with the reason. Who decided (the key's name, or "admin") is recorded.
// The dispatcher's approvals sweep (internal/maintain) denies what waited
// past the agent's approval_timeout (reason "expired"), closes the
// approvals of runs that ended, and notifies the agent's
// approval_callback_url of each new approval: a POST of its view,
// signed like a run callback, webhook-id "approval_<id>".

// approvalState is the approvals' metrics.
type approvalState struct {
	decisions *prometheus.CounterVec
}

func (a *approvalState) init(cfg Config) error {
	a.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentfleet_approval_decisions_total",
		Help: "Approvals decided, by tenant and decision: approved, denied, expired (denied by the sweep after approval_timeout).",
	}, []string{"tenant", "decision"})
	if cfg.Registerer == nil {
		return nil
	}
	pending := &pendingCollector{store: cfg.Store, desc: prometheus.NewDesc("agentfleet_approvals_pending",
		"Approvals waiting for a decision, by tenant.", []string{"tenant"}, nil)}
	for _, c := range []prometheus.Collector{a.decisions, pending} {
		if err := cfg.Registerer.Register(c); err != nil {
			return fmt.Errorf("api: register approval metrics: %w", err)
		}
	}
	return nil
}

// pendingCollector counts pending approvals in the store at each scrape,
// so every dispatcher reports the same figure.
type pendingCollector struct {
	store store.Store
	desc  *prometheus.Desc
}

func (c *pendingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := c.store.ApprovalCountPending(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for tenant, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), tenant)
	}
}

func approvalView(a store.Approval) wire.ApprovalView {
	v := wire.ApprovalView{
		ID: a.ID, Tenant: a.Tenant, RunID: a.RunID, SessionID: a.SessionID, Turn: a.Turn, CallIndex: a.Index,
		Primitive: a.Primitive, Method: a.Method, URL: a.URL, Preview: a.Preview, RequestDigest: a.Digest, Status: string(a.Status), Reason: a.Reason,
		Scope: string(a.Scope), DecidedBy: a.DecidedBy, CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt, Notify: string(a.NotifyState),
	}
	if !a.DecidedAt.IsZero() {
		t := a.DecidedAt
		v.DecidedAt = &t
	}
	return v
}

// approvalTenant is the tenant a request lists or acts for: a key's own;
// for the admin, ?tenant= or every tenant ("").
func approvalTenant(r *http.Request, p principal) string {
	if p.admin {
		return r.URL.Query().Get("tenant")
	}
	return p.tenant
}

func (s *Server) handleApprovalList(w http.ResponseWriter, r *http.Request, p principal) {
	q := r.URL.Query()
	limit, err := pageLimit(q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := store.ApprovalStatus(q.Get("status"))
	switch status {
	case "", store.ApprovalPending, store.ApprovalApproved, store.ApprovalDenied:
	default:
		s.fail(w, r, errBadRequest("status %q: use pending, approved or denied", status))
		return
	}
	cursor := q.Get("cursor")
	res, err := s.cfg.Store.ApprovalList(r.Context(), store.ApprovalListParams{
		Tenant: approvalTenant(r, p), Status: status, RunID: q.Get("run_id"), Limit: limit, Cursor: cursor,
	})
	if err != nil {
		s.fail(w, r, badCursor(err, cursor))
		return
	}
	out := wire.ApprovalList{Approvals: []wire.ApprovalView{}, NextCursor: res.NextCursor}
	for _, a := range res.Approvals {
		out.Approvals = append(out.Approvals, approvalView(a))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleApprovalGet(w http.ResponseWriter, r *http.Request, p principal) {
	a, err := s.cfg.Store.ApprovalGetByID(r.Context(), store.ApprovalGetByIDParams{ID: r.PathValue("id"), Tenant: p.tenant})
	if errors.Is(err, store.ErrNotFound) {
		err = errNotFound("no approval %q", r.PathValue("id"))
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, approvalView(a))
}

func (s *Server) handleApprovalApprove(w http.ResponseWriter, r *http.Request, p principal) {
	s.decideApproval(w, r, p, true)
}

func (s *Server) handleApprovalDeny(w http.ResponseWriter, r *http.Request, p principal) {
	s.decideApproval(w, r, p, false)
}

func (s *Server) decideApproval(w http.ResponseWriter, r *http.Request, p principal, approve bool) {
	var req wire.ApprovalDecision
	if r.ContentLength != 0 {
		if err := decodeBody(r, &req); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	scope := store.ApprovalScope(req.Scope)
	switch {
	case scope != "" && scope != store.ApprovalScopeCall && scope != store.ApprovalScopeSession:
		s.fail(w, r, errUnprocessable("scope %q: use %q (this call) or %q (the same call for the rest of the run's session)",
			req.Scope, store.ApprovalScopeCall, store.ApprovalScopeSession))
		return
	case scope == store.ApprovalScopeSession && !approve:
		s.fail(w, r, errUnprocessable("scope %q goes with approve: a denial is for this call only", req.Scope))
		return
	}
	res, err := s.cfg.Store.ApprovalDecide(r.Context(), store.ApprovalDecideParams{
		ID: r.PathValue("id"), Tenant: p.tenant, Approve: approve, Reason: req.Reason, DecidedBy: p.who(), Scope: scope,
	})
	if errors.Is(err, store.ErrNotFound) {
		err = errNotFound("no approval %q", r.PathValue("id"))
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	decision := "denied"
	if approve {
		decision = "approved"
	}
	s.approvals.decisions.WithLabelValues(res.Approval.Tenant, decision).Inc()
	s.publishDecision(r.Context(), res)
	writeJSON(w, http.StatusOK, approvalView(res.Approval))
}

// publishDecision publishes a decision's event and, when it resumed the
// run, its turn again. A publish that fails leaves a running run without
// a message, which the stranded sweep finds.
func (s *Server) publishDecision(ctx context.Context, res store.ApprovalDecideResult) {
	if err := s.outbox.Decided(ctx, res); err != nil {
		s.log.Warn("publish an approval's decision", "run", res.Change.Run.ID, "approval", res.Approval.ID, "err", err)
	}
}

// ApprovalDecisions is agentfleet_approval_decisions_total, which the
// approvals sweep counts its expiries in.
func (s *Server) ApprovalDecisions() *prometheus.CounterVec { return s.approvals.decisions }

// ApprovalView is an approval as the API and its notifications show it.
func ApprovalView(a store.Approval) wire.ApprovalView { return approvalView(a) }

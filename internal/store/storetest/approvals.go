package storetest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/internal/rules"
)

// park parks running run id on call of its turn turn, which must park it.
func (b bundle) park(t *testing.T, id string, turn int, call agentfleet.ApprovalCall) store.Approval {
	t.Helper()
	res, err := b.s.ApprovalRequest(b.ctx, store.ApprovalRequestParams{RunID: id, Turn: turn, Call: call})
	require.NoError(t, err)
	require.True(t, res.Parked)
	return res.Approval
}

func (b bundle) approval(t *testing.T, id string) store.Approval {
	t.Helper()
	a, err := b.s.ApprovalGetByID(b.ctx, store.ApprovalGetByIDParams{ID: id})
	require.NoError(t, err)
	return a
}

// sessionRun creates a run of session and moves it to running.
func (b bundle) sessionRun(t *testing.T, tenant, session string) agentfleet.Run {
	t.Helper()
	r := b.run(t, store.RunCreateParams{Tenant: tenant, Message: "task", SessionID: session})
	return b.transition(t, r.ID, agentfleet.StatusRunning)
}

var postCall = agentfleet.ApprovalCall{Index: 2, Primitive: "http", Method: "POST", URL: "https://api.example.com/charges", Preview: `{"amount":5}`,
	Digest: digestOf(`amount=5`)}

// digestOf is a request digest, as the sandbox's are: a hex SHA-256.
func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func testApproval(t *testing.T, newStore NewStore) {
	t.Run("ParkDecideResume", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		now := rules.Now()
		res, err := b.s.ApprovalRequest(b.ctx, store.ApprovalRequestParams{RunID: r.ID, Turn: 1, Call: postCall, Timeout: time.Hour,
			NotifyURL: "https://hooks.example.com/approvals", Now: now})
		require.NoError(t, err)
		require.True(t, res.Parked)
		a := res.Approval
		require.NotEmpty(t, a.ID)
		require.Equal(t, postCall, a.ApprovalCall)
		require.Equal(t, store.ApprovalPending, a.Status)
		require.Equal(t, store.ApprovalScopeCall, a.Scope)
		require.Equal(t, ten.ID, a.Tenant)
		require.Equal(t, 1, a.Turn)
		require.Equal(t, now.Add(time.Hour), a.ExpiresAt)
		require.True(t, a.DecidedAt.IsZero())
		require.Equal(t, a, b.approval(t, a.ID))

		parked := res.Change.Run
		require.Equal(t, agentfleet.StatusWaitingApproval, parked.Status)
		require.Equal(t, 0, parked.Turn, "nothing of the turn is committed")
		require.Equal(t, parked, b.get(t, r.ID))
		require.Len(t, res.Change.Events, 1)
		ev := res.Change.Events[0]
		require.Equal(t, agentfleet.EventApprovalRequested, ev.Type)
		require.Equal(t, 1, ev.Turn)
		require.Equal(t, `{"amount":5}`, ev.Content)
		var args rules.ApprovalEventArgs
		require.NoError(t, json.Unmarshal(ev.Args, &args))
		require.Equal(t, a.ID, args.ID)
		require.Equal(t, "https://api.example.com/charges", args.URL)
		require.Equal(t, res.Change.Events, b.events(t, r.ID)[len(b.events(t, r.ID))-1:])
		n, err := b.s.RunCountActive(b.ctx, ten.ID)
		require.NoError(t, err)
		require.Zero(t, n, "a run waiting for approval does not count toward max_concurrent_runs")
		pending, err := b.s.ApprovalCountPending(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, pending[ten.ID])

		// Parked already: a second park (a repeated attempt) loses.
		_, err = b.s.ApprovalRequest(b.ctx, store.ApprovalRequestParams{RunID: r.ID, Turn: 1, Call: postCall})
		require.ErrorIs(t, err, store.ErrConflict)

		got, err := b.s.ApprovalGetForCall(b.ctx, store.ApprovalGetForCallParams{RunID: r.ID, Tenant: ten.ID, Turn: 1, Call: postCall})
		require.NoError(t, err)
		require.Equal(t, a, got)

		dec, err := b.s.ApprovalDecide(b.ctx, store.ApprovalDecideParams{ID: a.ID, Tenant: ten.ID, Approve: true, Reason: "fine", DecidedBy: "key ops"})
		require.NoError(t, err)
		require.True(t, dec.Woken)
		require.Equal(t, store.ApprovalApproved, dec.Approval.Status)
		require.Equal(t, "key ops", dec.Approval.DecidedBy)
		require.Equal(t, "fine", dec.Approval.Reason)
		require.False(t, dec.Approval.DecidedAt.IsZero())
		require.Equal(t, dec.Approval, b.approval(t, a.ID))
		require.Equal(t, agentfleet.StatusRunning, dec.Change.Run.Status)
		require.Equal(t, parked.Wake+1, dec.Change.Run.Wake, "the resumed turn's message id differs from the parked one")
		require.Equal(t, dec.Change.Run, b.get(t, r.ID))
		require.Len(t, dec.Change.Events, 1)
		require.Equal(t, agentfleet.EventApproved, dec.Change.Events[0].Type)
		requireSeqs(t, b.events(t, r.ID), 1)

		_, err = b.s.ApprovalDecide(b.ctx, store.ApprovalDecideParams{ID: a.ID, Approve: false, DecidedBy: "admin"})
		require.ErrorIs(t, err, store.ErrConflict, "deciding twice")
		require.Equal(t, dec.Approval, b.approval(t, a.ID), "the losing decision changed nothing")

		got, err = b.s.ApprovalGetForCall(b.ctx, store.ApprovalGetForCallParams{RunID: r.ID, Tenant: ten.ID, Turn: 1, Call: postCall})
		require.NoError(t, err)
		require.Equal(t, store.ApprovalApproved, got.Status)
		_, err = b.s.ApprovalGetForCall(b.ctx, store.ApprovalGetForCallParams{RunID: r.ID, Tenant: ten.ID, Turn: 1, Call: agentfleet.ApprovalCall{Index: 3, Primitive: "http"}})
		require.ErrorIs(t, err, store.ErrNotFound)
		pending, err = b.s.ApprovalCountPending(b.ctx)
		require.NoError(t, err)
		require.Zero(t, pending[ten.ID])
	})
	t.Run("BindsTheExactCall", func(t *testing.T) {
		// An approval is of the call at its index with its digest: the
		// turn run again making another call there (another body, say)
		// finds no approval of it, and parks on a new one.
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		a := b.park(t, r.ID, 1, postCall)
		_, err := b.s.ApprovalDecide(b.ctx, store.ApprovalDecideParams{ID: a.ID, Approve: true, DecidedBy: "admin"})
		require.NoError(t, err)

		changed := postCall
		changed.Digest, changed.Preview = digestOf("amount=999999"), `{"amount":999999}`
		_, err = b.s.ApprovalGetForCall(b.ctx, store.ApprovalGetForCallParams{RunID: r.ID, Tenant: ten.ID, Turn: 1, Call: changed})
		require.ErrorIs(t, err, store.ErrNotFound, "the approval of another request at the index is not this call's")
		unbound := postCall
		unbound.Digest = ""
		_, err = b.s.ApprovalGetForCall(b.ctx, store.ApprovalGetForCallParams{RunID: r.ID, Tenant: ten.ID, Turn: 1, Call: unbound})
		require.ErrorIs(t, err, store.ErrNotFound)

		again, err := b.s.ApprovalRequest(b.ctx, store.ApprovalRequestParams{RunID: r.ID, Turn: 1, Call: changed})
		require.NoError(t, err)
		require.True(t, again.Parked, "asked again: the run waits")
		require.NotEqual(t, a.ID, again.Approval.ID)
		require.Equal(t, changed, again.Approval.ApprovalCall)
		require.Equal(t, store.ApprovalPending, again.Approval.Status)
		require.Equal(t, agentfleet.StatusWaitingApproval, b.get(t, r.ID).Status)
		got, err := b.s.ApprovalGetForCall(b.ctx, store.ApprovalGetForCallParams{RunID: r.ID, Tenant: ten.ID, Turn: 1, Call: changed})
		require.NoError(t, err)
		require.Equal(t, again.Approval.ID, got.ID)
		got, err = b.s.ApprovalGetForCall(b.ctx, store.ApprovalGetForCallParams{RunID: r.ID, Tenant: ten.ID, Turn: 1, Call: postCall})
		require.NoError(t, err)
		require.Equal(t, a.ID, got.ID)
		require.Equal(t, store.ApprovalApproved, got.Status, "the first decision stands for its own request")
		page, err := b.s.ApprovalList(b.ctx, store.ApprovalListParams{RunID: r.ID, Status: store.ApprovalPending})
		require.NoError(t, err)
		require.Equal(t, []string{again.Approval.ID}, approvalIDs(page.Approvals))

		_, err = b.s.ApprovalRequest(b.ctx, store.ApprovalRequestParams{RunID: r.ID, Turn: 1,
			Call: agentfleet.ApprovalCall{Index: 1, Primitive: "http", Digest: "not-a-digest"}})
		require.ErrorIs(t, err, store.ErrInvalid)
	})
	t.Run("DecidedBeforeThePark", func(t *testing.T) {
		// Decided while its run was still running to it (the turn ran
		// again and met the call once more, or the decision came between
		// the call and the park): the park parks nothing and the turn is
		// due again.
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		a := b.park(t, r.ID, 1, postCall)
		dec, err := b.s.ApprovalDecide(b.ctx, store.ApprovalDecideParams{ID: a.ID, Approve: true, DecidedBy: "admin"})
		require.NoError(t, err)
		res, err := b.s.ApprovalRequest(b.ctx, store.ApprovalRequestParams{RunID: r.ID, Turn: 1, Call: postCall})
		require.NoError(t, err)
		require.False(t, res.Parked)
		require.Equal(t, store.ApprovalApproved, res.Approval.Status)
		require.Equal(t, agentfleet.StatusRunning, res.Change.Run.Status)
		require.Equal(t, dec.Change.Run.Wake+1, res.Change.Run.Wake)
		require.Empty(t, res.Change.Events)

		// A decision that finds the run running does not wake it.
		other := b.park(t, r.ID, 1, agentfleet.ApprovalCall{Index: 5, Primitive: "spawn"})
		b.transition(t, r.ID, agentfleet.StatusRunning)
		dec, err = b.s.ApprovalDecide(b.ctx, store.ApprovalDecideParams{ID: other.ID, Approve: false, Reason: "no", DecidedBy: "admin"})
		require.NoError(t, err)
		require.False(t, dec.Woken)
		require.Equal(t, agentfleet.EventDenied, dec.Change.Events[0].Type)
	})
	t.Run("ExpireAndRunEnded", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		now := rules.Now()
		res, err := b.s.ApprovalRequest(b.ctx, store.ApprovalRequestParams{RunID: r.ID, Turn: 1, Call: postCall, Timeout: time.Minute, Now: now})
		require.NoError(t, err)
		gone := b.started(t, ten.ID)
		g := b.park(t, gone.ID, 1, postCall)
		_, err = b.s.RunCancel(b.ctx, store.RunCancelParams{ID: gone.ID, Reason: "stop"})
		require.NoError(t, err)

		out, err := b.s.ApprovalExpire(b.ctx, store.ApprovalExpireParams{Now: now.Add(30 * time.Second)})
		require.NoError(t, err)
		require.Len(t, out, 1, "only the approval of the ended run is due before its time")
		require.Equal(t, g.ID, out[0].Approval.ID)
		require.Equal(t, store.ApprovalRunEnded, out[0].Approval.Reason)
		require.Equal(t, store.ApprovalDenied, out[0].Approval.Status)
		require.False(t, out[0].Woken)
		_, err = b.s.ApprovalDecide(b.ctx, store.ApprovalDecideParams{ID: g.ID, Approve: true, DecidedBy: "admin"})
		require.ErrorIs(t, err, store.ErrConflict)

		out, err = b.s.ApprovalExpire(b.ctx, store.ApprovalExpireParams{Now: now.Add(time.Minute)})
		require.NoError(t, err)
		require.Len(t, out, 1)
		e := out[0]
		require.Equal(t, res.Approval.ID, e.Approval.ID)
		require.Equal(t, store.ApprovalDenied, e.Approval.Status)
		require.Equal(t, store.ApprovalExpired, e.Approval.Reason)
		require.Equal(t, store.ApprovalBySystem, e.Approval.DecidedBy)
		require.True(t, e.Woken, "the run resumes, and its call throws")
		require.Equal(t, agentfleet.StatusRunning, b.get(t, r.ID).Status)
		require.Equal(t, agentfleet.EventDenied, e.Change.Events[0].Type)

		out, err = b.s.ApprovalExpire(b.ctx, store.ApprovalExpireParams{Now: now.Add(time.Hour)})
		require.NoError(t, err)
		require.Empty(t, out)
	})
	t.Run("SessionScope", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		other := b.tenant(t, store.TenantCreateParams{})
		first := b.sessionRun(t, ten.ID, "s1")
		a := b.park(t, first.ID, 1, postCall)
		_, err := b.s.ApprovalDecide(b.ctx, store.ApprovalDecideParams{ID: a.ID, Approve: false, Scope: store.ApprovalScopeSession, DecidedBy: "admin"})
		require.ErrorIs(t, err, store.ErrInvalid, "a denial grants nothing for the session")
		_, err = b.s.ApprovalDecide(b.ctx, store.ApprovalDecideParams{ID: a.ID, Approve: true, Scope: "forever", DecidedBy: "admin"})
		require.ErrorIs(t, err, store.ErrInvalid)
		dec, err := b.s.ApprovalDecide(b.ctx, store.ApprovalDecideParams{ID: a.ID, Approve: true, Scope: store.ApprovalScopeSession, DecidedBy: "admin"})
		require.NoError(t, err)
		require.Equal(t, store.ApprovalScopeSession, dec.Approval.Scope)
		require.Equal(t, "s1", dec.Approval.SessionID)

		// The same method and URL, later in the session: granted, whatever
		// the body (a grant binds method and URL), by fetch as by http.
		later := agentfleet.ApprovalCall{Index: 0, Primitive: postCall.Primitive, Method: postCall.Method, URL: postCall.URL, Digest: digestOf("amount=7")}
		got, err := b.s.ApprovalGetForCall(b.ctx, store.ApprovalGetForCallParams{RunID: first.ID, SessionID: "s1", Tenant: ten.ID, Turn: 4, Call: later})
		require.NoError(t, err)
		require.Equal(t, a.ID, got.ID)
		require.Equal(t, store.ApprovalApproved, got.Status)
		byFetch := later
		byFetch.Primitive = "fetch"
		got, err = b.s.ApprovalGetForCall(b.ctx, store.ApprovalGetForCallParams{RunID: first.ID, SessionID: "s1", Tenant: ten.ID, Turn: 4, Call: byFetch})
		require.NoError(t, err)
		require.Equal(t, a.ID, got.ID)
		// Another URL, another session, another tenant: not granted.
		for name, p := range map[string]store.ApprovalGetForCallParams{
			"url":     {RunID: first.ID, SessionID: "s1", Tenant: ten.ID, Turn: 4, Call: agentfleet.ApprovalCall{Primitive: "http", Method: "POST", URL: "https://api.example.com/refunds"}},
			"method":  {RunID: first.ID, SessionID: "s1", Tenant: ten.ID, Turn: 4, Call: agentfleet.ApprovalCall{Primitive: "http", Method: "PUT", URL: postCall.URL}},
			"session": {RunID: first.ID, SessionID: "s2", Tenant: ten.ID, Turn: 4, Call: later},
			"spawn":   {RunID: first.ID, SessionID: "s1", Tenant: ten.ID, Turn: 4, Call: agentfleet.ApprovalCall{Primitive: "spawn"}},
			"none":    {RunID: first.ID, Tenant: ten.ID, Turn: 4, Call: later},
			"tenant":  {RunID: first.ID, SessionID: "s1", Tenant: other.ID, Turn: 4, Call: later},
		} {
			_, err := b.s.ApprovalGetForCall(b.ctx, p)
			require.ErrorIs(t, err, store.ErrNotFound, name)
		}

		// A run without a session has no session to grant for.
		lone := b.started(t, ten.ID)
		l := b.park(t, lone.ID, 1, postCall)
		_, err = b.s.ApprovalDecide(b.ctx, store.ApprovalDecideParams{ID: l.ID, Approve: true, Scope: store.ApprovalScopeSession, DecidedBy: "admin"})
		require.ErrorIs(t, err, store.ErrInvalid)
		require.Equal(t, store.ApprovalPending, b.approval(t, l.ID).Status)
	})
	t.Run("TenantsAndLists", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		other := b.tenant(t, store.TenantCreateParams{})
		var ids []string
		for i := 0; i < 3; i++ {
			ids = append(ids, b.park(t, b.started(t, ten.ID).ID, 1, postCall).ID)
		}
		foreign := b.park(t, b.started(t, other.ID).ID, 1, postCall)
		_, err := b.s.ApprovalDecide(b.ctx, store.ApprovalDecideParams{ID: ids[0], Tenant: other.ID, Approve: true, DecidedBy: "x"})
		require.ErrorIs(t, err, store.ErrNotFound, "another tenant's approval")
		_, err = b.s.ApprovalGetByID(b.ctx, store.ApprovalGetByIDParams{ID: ids[0], Tenant: other.ID})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.ApprovalDecide(b.ctx, store.ApprovalDecideParams{ID: "nope", Approve: true})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.ApprovalDecide(b.ctx, store.ApprovalDecideParams{ID: ids[1], Approve: true, DecidedBy: "admin"})
		require.NoError(t, err)

		page, err := b.s.ApprovalList(b.ctx, store.ApprovalListParams{Tenant: ten.ID, Limit: 2})
		require.NoError(t, err)
		require.Equal(t, []string{ids[2], ids[1]}, approvalIDs(page.Approvals), "newest first")
		require.NotEmpty(t, page.NextCursor)
		page, err = b.s.ApprovalList(b.ctx, store.ApprovalListParams{Tenant: ten.ID, Limit: 2, Cursor: page.NextCursor})
		require.NoError(t, err)
		require.Equal(t, []string{ids[0]}, approvalIDs(page.Approvals))
		require.Empty(t, page.NextCursor)

		page, err = b.s.ApprovalList(b.ctx, store.ApprovalListParams{Tenant: ten.ID, Status: store.ApprovalPending})
		require.NoError(t, err)
		require.Equal(t, []string{ids[2], ids[0]}, approvalIDs(page.Approvals))
		page, err = b.s.ApprovalList(b.ctx, store.ApprovalListParams{Status: store.ApprovalPending})
		require.NoError(t, err)
		require.Contains(t, approvalIDs(page.Approvals), foreign.ID, "no tenant: every tenant's (the admin)")
		_, err = b.s.ApprovalList(b.ctx, store.ApprovalListParams{Status: "maybe"})
		require.ErrorIs(t, err, store.ErrInvalid)
	})
	t.Run("Fence", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		for name, p := range map[string]store.ApprovalRequestParams{
			"turn ahead": {RunID: r.ID, Turn: 2, Call: postCall},
			"committed":  {RunID: r.ID, Turn: 0, Call: postCall},
		} {
			_, err := b.s.ApprovalRequest(b.ctx, p)
			require.Error(t, err, name)
		}
		_, err := b.s.ApprovalRequest(b.ctx, store.ApprovalRequestParams{RunID: r.ID, Turn: 2, Call: postCall})
		require.ErrorIs(t, err, store.ErrConflict)
		_, err = b.s.ApprovalRequest(b.ctx, store.ApprovalRequestParams{RunID: "nope", Turn: 1, Call: postCall})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.ApprovalRequest(b.ctx, store.ApprovalRequestParams{RunID: r.ID, Turn: 1})
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = b.s.RunCancel(b.ctx, store.RunCancelParams{ID: r.ID, Reason: "stop"})
		require.NoError(t, err)
		_, err = b.s.ApprovalRequest(b.ctx, store.ApprovalRequestParams{RunID: r.ID, Turn: 1, Call: postCall})
		require.ErrorIs(t, err, store.ErrConflict, "a run to be cancelled is not parked")
		require.Equal(t, agentfleet.StatusRunning, b.get(t, r.ID).Status)
	})
	t.Run("Notify", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		now := rules.Now()
		res, err := b.s.ApprovalRequest(b.ctx, store.ApprovalRequestParams{RunID: b.started(t, ten.ID).ID, Turn: 1, Call: postCall,
			NotifyURL: "https://hooks.example.com/a", Now: now})
		require.NoError(t, err)
		quiet := b.park(t, b.started(t, ten.ID).ID, 1, postCall)
		require.Empty(t, quiet.NotifyState, "no callback URL, nothing to notify")

		claimed, err := b.s.ApprovalNotifyClaim(b.ctx, store.ApprovalNotifyClaimParams{Now: now, Limit: 10, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, res.Approval.ID, claimed[0].ID)
		require.Equal(t, "https://hooks.example.com/a", claimed[0].NotifyURL)
		again, err := b.s.ApprovalNotifyClaim(b.ctx, store.ApprovalNotifyClaimParams{Now: now, Limit: 10, Lease: time.Minute})
		require.NoError(t, err)
		require.Empty(t, again, "leased")

		require.NoError(t, b.s.ApprovalNotifyRecord(b.ctx, store.ApprovalNotifyRecordParams{ID: res.Approval.ID, State: store.CallbackPending,
			NextAt: now.Add(time.Second), Error: "503"}))
		claimed, err = b.s.ApprovalNotifyClaim(b.ctx, store.ApprovalNotifyClaimParams{Now: now.Add(2 * time.Second), Limit: 10, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, 1, claimed[0].NotifyAttempts)
		require.Equal(t, "503", claimed[0].NotifyError)
		require.NoError(t, b.s.ApprovalNotifyRecord(b.ctx, store.ApprovalNotifyRecordParams{ID: res.Approval.ID, State: store.CallbackDelivered}))
		claimed, err = b.s.ApprovalNotifyClaim(b.ctx, store.ApprovalNotifyClaimParams{Now: now.Add(time.Hour), Limit: 10, Lease: time.Minute})
		require.NoError(t, err)
		require.Empty(t, claimed)
		require.Equal(t, store.CallbackDelivered, b.approval(t, res.Approval.ID).NotifyState)
		require.ErrorIs(t, b.s.ApprovalNotifyRecord(b.ctx, store.ApprovalNotifyRecordParams{ID: "nope", State: store.CallbackFailed}), store.ErrNotFound)
	})
}

func approvalIDs(as []store.Approval) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.ID
	}
	return out
}

package storetest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Text a script or a model produced may hold anything: NUL (which
// PostgreSQL refuses in text and jsonb) and bytes that are not UTF-8. The
// store keeps it with each NUL and each invalid byte replaced by U+FFFD,
// in JSON values too (an escaped \u0000 becomes \ufffd), so that one
// turn's bytes can never fail a statement other turns share. What a
// client submits is refused instead, naming the field.

// dirty is script output as it may arrive: a NUL, a lone continuation
// byte, a truncated sequence, and clean text around them.
const dirty = "a\x00b\x80c\xe2\x82"

// dirtyClean is dirty as the store keeps it.
const dirtyClean = "a\uFFFDb\uFFFDc\uFFFD\uFFFD"

func testText(t *testing.T, newStore NewStore) {
	t.Run("TurnCommitCleaned", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "task"})
		b.transition(t, r.ID, agentfleet.StatusRunning)

		// Args and answer are raw JSON: a NUL can only come escaped,
		// invalid bytes only inside strings. Both stay valid JSON.
		args := json.RawMessage("{\"log\":\"x\\u0000y\",\"bin\":\"\x80\",\"ok\":\"\\\\u0000 is text\",\"pair\":\"\\ud83d\\ude00\",\"lone\":\"\\ud83d!\"}")
		res, err := b.s.TurnCommit(b.ctx, store.TurnCommitParams{
			RunID: r.ID, Turn: 1, Status: agentfleet.StatusRunning, Args: args,
			Steps: []agentfleet.Step{
				{Kind: agentfleet.StepModel, Content: dirty, Model: "m\x00"},
				{Kind: agentfleet.StepObservation, Content: "log: " + dirty},
			},
			Events: []agentfleet.Event{
				{Type: agentfleet.EventLog, Content: dirty, Summary: dirty, Args: json.RawMessage(`["\u0000"]`)},
			},
		})
		require.NoError(t, err)
		wantArgs := "{\"log\":\"x\\ufffdy\",\"bin\":\"\uFFFD\",\"ok\":\"\\\\u0000 is text\",\"pair\":\"\\ud83d\\ude00\",\"lone\":\"\\ufffd!\"}"
		require.JSONEq(t, wantArgs, string(res.Run.Args))
		require.Equal(t, wantArgs, string(res.Run.Args), "only what had to change changed")
		require.Equal(t, res.Run, b.get(t, r.ID))

		steps := b.steps(t, r.ID)
		require.Len(t, steps, 3)
		require.Equal(t, dirtyClean, steps[1].Content)
		require.Equal(t, "m\uFFFD", steps[1].Model)
		require.Equal(t, "log: "+dirtyClean, steps[2].Content)
		require.Equal(t, steps[1:], cleanTimes(res.Steps, steps[1:]), "the result holds the steps as stored")

		evs := b.events(t, r.ID)
		require.Len(t, evs, 1)
		require.Equal(t, dirtyClean, evs[0].Content)
		require.Equal(t, dirtyClean, evs[0].Summary)
		require.Equal(t, `["\ufffd"]`, string(evs[0].Args))
		require.Equal(t, evs, res.Events, "the events to publish are the ones stored")

		res, err = b.s.TurnCommit(b.ctx, store.TurnCommitParams{
			RunID: r.ID, Turn: 2, Status: agentfleet.StatusFailed, Error: "boom: " + dirty,
			Answer: json.RawMessage(`{"a":"\u0000"}`),
		})
		require.NoError(t, err)
		require.Equal(t, "boom: "+dirtyClean, res.Run.Error)
		require.Equal(t, `{"a":"\ufffd"}`, string(res.Run.Answer))
		require.Equal(t, res.Run, b.get(t, r.ID))
	})
	t.Run("TurnCommitManyCleaned", func(t *testing.T) {
		// One turn's bad bytes among others' good ones: every turn lands,
		// the bad one cleaned.
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		var ps []store.TurnCommitParams
		for i := range 4 {
			r := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "task"})
			b.transition(t, r.ID, agentfleet.StatusRunning)
			p := commitParams(r.ID, 1, agentfleet.StatusCompleted, "ok")
			if i == 2 {
				p.Steps[1].Content = dirty
				p.Answer = json.RawMessage(`"\u0000"`)
				p.Events[0].Content = dirty
			}
			ps = append(ps, p)
		}
		_, errs, err := b.s.TurnCommitMany(b.ctx, ps)
		require.NoError(t, err)
		for i, err := range errs {
			require.NoError(t, err, "commit %d", i)
		}
		bad := b.get(t, ps[2].RunID)
		require.Equal(t, agentfleet.StatusCompleted, bad.Status)
		require.Equal(t, `"\ufffd"`, string(bad.Answer))
		require.Equal(t, dirtyClean, b.steps(t, ps[2].RunID)[2].Content)
		require.Equal(t, dirtyClean, b.events(t, ps[2].RunID)[0].Content)
	})
	t.Run("OtherWritesCleaned", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "task"})
		b.transition(t, r.ID, agentfleet.StatusRunning)

		rep, err := b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: store.ModelReply{
			RunID: r.ID, Turn: 1, Content: "reply " + dirty, Model: "m\x80"}})
		require.NoError(t, err)
		require.Equal(t, "reply "+dirtyClean, rep.Reply.Content)
		got, err := b.s.ModelReplyGet(b.ctx, r.ID, 1)
		require.NoError(t, err)
		require.Equal(t, rep.Reply, got)
		require.Equal(t, "m\uFFFD", got.Model)

		appended, err := b.s.EventAppend(b.ctx, store.EventAppendParams{RunID: r.ID, Events: []agentfleet.Event{
			{Type: agentfleet.EventWarning, Content: dirty, Summary: dirty, Args: json.RawMessage(`{"k":"\u0000"}`)}}})
		require.NoError(t, err)
		require.Equal(t, dirtyClean, appended[0].Content)
		require.Equal(t, `{"k":"\ufffd"}`, string(appended[0].Args))
		require.Equal(t, appended, b.events(t, r.ID))

		tr, err := b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: r.ID, To: agentfleet.StatusFailed, Error: dirty,
			Answer: json.RawMessage(`"\u0000"`), Events: []agentfleet.Event{{Type: agentfleet.EventError, Content: dirty}}})
		require.NoError(t, err)
		require.Equal(t, dirtyClean, tr.Run.Error)
		require.Equal(t, `"\ufffd"`, string(tr.Run.Answer))
		require.Equal(t, dirtyClean, tr.Events[0].Content)
		require.Equal(t, tr.Run, b.get(t, r.ID))

		c := b.run(t, store.RunCreateParams{Tenant: ten.ID, Message: "task"})
		cr, err := b.s.RunCancel(b.ctx, store.RunCancelParams{ID: c.ID, Reason: dirty,
			Events: []agentfleet.Event{{Type: agentfleet.EventCancelled, Summary: dirty}}})
		require.NoError(t, err)
		require.Equal(t, dirtyClean, cr.Run.Error)
		require.Equal(t, dirtyClean, cr.Events[0].Summary)
		require.Equal(t, cr.Run, b.get(t, c.ID))

		p := b.started(t, ten.ID)
		a := b.park(t, p.ID, 1, agentfleet.ApprovalCall{Primitive: "http", Method: "POST", URL: "https://x", Preview: dirty})
		require.Equal(t, dirtyClean, a.Preview)
	})
	t.Run("SubmittedRefused", func(t *testing.T) {
		// What a client submits is refused, naming the field, before
		// anything is written.
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		for field, p := range map[string]store.RunCreateParams{
			"message":         {Message: "hi\x00"},
			"message ":        {Message: "hi\xff"},
			"metadata":        {Metadata: map[string]string{"k": "v\x00"}},
			"metadata key":    {Metadata: map[string]string{"k\x00": "v"}},
			"context":         {Context: json.RawMessage(`{"a":"\u0000"}`)},
			"context ":        {Context: json.RawMessage("{\"a\":\"\xff\"}")},
			"idempotency key": {IdempotencyKey: "k\x00"},
			"session id":      {SessionID: "s\x00"},
			"agent":           {Agent: "a\x00"},
		} {
			p.Tenant = ten.ID
			_, err := b.s.RunCreate(b.ctx, p)
			require.ErrorIs(t, err, store.ErrInvalid, field)
			require.Contains(t, err.Error(), strings.TrimSpace(field), "the error names the field")
		}
		list, err := b.s.RunList(b.ctx, store.RunListParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.Empty(t, list.Runs, "nothing was written")

		_, err = b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: ten.ID, Name: "w", Spec: agentfleet.AgentSpec{Persona: "be\x00good"}})
		require.ErrorIs(t, err, store.ErrInvalid)
		require.Contains(t, err.Error(), "system")
		_, err = b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: ten.ID, Name: "w", Spec: agentfleet.AgentSpec{Primitives: []string{"fetch\x00"}}})
		require.ErrorIs(t, err, store.ErrInvalid)
		require.Contains(t, err.Error(), "primitive")
		_, err = b.s.BatchAdmit(b.ctx, store.BatchAdmitParams{Tenant: ten.ID, Metadata: map[string]string{"k": "\x00"}})
		require.ErrorIs(t, err, store.ErrInvalid)
		require.Contains(t, err.Error(), "metadata")
		_, err = b.s.SkillPut(b.ctx, store.SkillPutParams{Tenant: ten.ID, Name: "s", Body: "x\x00"})
		require.ErrorIs(t, err, store.ErrInvalid)
		require.Contains(t, err.Error(), "body")
		_, err = b.s.TriggerCreate(b.ctx, store.TriggerCreateParams{Tenant: ten.ID, Scheme: "github", Secret: "s", Message: "\x00"})
		require.ErrorIs(t, err, store.ErrInvalid)
		require.Contains(t, err.Error(), "message")
		trig, err := b.s.TriggerCreate(b.ctx, store.TriggerCreateParams{Tenant: ten.ID, Scheme: "github", Secret: "s"})
		require.NoError(t, err)
		_, err = b.s.TriggerUpdate(b.ctx, store.TriggerUpdateParams{ID: trig.ID, Tenant: ten.ID, Events: &[]string{"push\x00"}})
		require.ErrorIs(t, err, store.ErrInvalid)
		require.Contains(t, err.Error(), "events")
		// A delivery log line keeps what a sender sent, cleaned.
		lines, err := b.s.TriggerDeliveryRecord(b.ctx, store.TriggerDeliveryRecordParams{Lines: []store.TriggerDelivery{
			{TriggerID: trig.ID, Delivery: "d\x00\xff", Outcome: store.DeliveryRejected, Reason: "bad\x00"},
		}})
		require.NoError(t, err)
		require.Equal(t, "d\uFFFD\uFFFD", lines[0].Delivery)
		require.Equal(t, "bad\uFFFD", lines[0].Reason)
	})
}

// cleanTimes returns got with each step's CreatedAt set to want's when
// they are the same instant (a result's times need not share a location).
func cleanTimes(got, want []agentfleet.Step) []agentfleet.Step {
	out := append([]agentfleet.Step(nil), got...)
	for i := range out {
		if i < len(want) && out[i].CreatedAt.Equal(want[i].CreatedAt) {
			out[i].CreatedAt = want[i].CreatedAt
		}
	}
	return out
}

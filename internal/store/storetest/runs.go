package storetest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

func testRunCreate(t *testing.T, newStore NewStore) {
	t.Run("Fields", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		_, err := b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: ten.ID, Name: "writer"})
		require.NoError(t, err)
		deadline := time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.FixedZone("x", 3600))
		res, err := b.s.RunCreate(b.ctx, store.RunCreateParams{
			Tenant: ten.ID, Agent: "writer", SessionID: "", Message: "write a haiku",
			Context: json.RawMessage(`{"lang": "en",  "n": 1}`), Metadata: map[string]string{"k": "v"},
			MaxTurns: 7, MaxTokens: 9000, Deadline: deadline, BatchID: "batch-1",
			Events: []agentfleet.Event{{Type: agentfleet.EventQueued, Summary: "queued"}, {Type: agentfleet.EventUser, Content: "write a haiku"}},
		})
		require.NoError(t, err)
		require.True(t, res.Created)
		require.True(t, res.Startable)
		r := res.Run
		id, err := uuid.Parse(r.ID)
		require.NoError(t, err, "generated ids are UUIDs")
		require.Equal(t, uuid.Version(7), id.Version(), "generated ids are time-ordered UUIDv7")
		require.Equal(t, agentfleet.Run{
			ID: r.ID, Tenant: ten.ID, Agent: "writer", AgentVersion: 1, Status: agentfleet.StatusQueued, Message: "write a haiku",
			Context:  json.RawMessage(`{"lang": "en",  "n": 1}`), // byte for byte
			Metadata: map[string]string{"k": "v"}, BatchID: "batch-1", MaxTurns: 7, MaxTokens: 9000,
			Deadline: deadline.UTC().Truncate(time.Microsecond), EventSeq: 2, CreatedAt: r.CreatedAt, UpdatedAt: r.CreatedAt,
		}, r)
		require.Equal(t, r, b.get(t, r.ID))

		require.Len(t, res.Events, 2)
		requireSeqs(t, res.Events, 1)
		for _, e := range res.Events {
			require.Equal(t, r.ID, e.RunID)
			require.Equal(t, ten.ID, e.Tenant)
			require.Equal(t, agentfleet.EventVersion, e.V)
			require.False(t, e.TS.IsZero())
		}
		require.Equal(t, res.Events, b.events(t, r.ID))

		// The trace starts with the task at turn 0.
		require.Equal(t, []agentfleet.Step{{RunID: r.ID, Turn: 0, Index: 0, Kind: agentfleet.StepUser, Content: "write a haiku", CreatedAt: r.CreatedAt}},
			b.steps(t, r.ID))

		def := b.run(t, store.RunCreateParams{Tenant: ten.ID, ID: "given-id_1"})
		require.Equal(t, "given-id_1", def.ID)
		require.Equal(t, agentfleet.DefaultAgent, def.Agent)
		require.Nil(t, def.Metadata)
		require.Nil(t, def.Context)
		require.True(t, def.Deadline.IsZero())
	})
	t.Run("Errors", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		b.run(t, store.RunCreateParams{Tenant: ten.ID, ID: "r1"})
		_, err := b.s.RunCreate(b.ctx, store.RunCreateParams{Tenant: ten.ID, ID: "r1"})
		require.ErrorIs(t, err, store.ErrConflict, "duplicate id")
		_, err = b.s.RunCreate(b.ctx, store.RunCreateParams{Tenant: "nobody"})
		require.ErrorIs(t, err, store.ErrNotFound)
		for name, p := range map[string]store.RunCreateParams{
			"no tenant":     {},
			"bad id":        {Tenant: ten.ID, ID: "a/b"},
			"bad context":   {Tenant: ten.ID, Context: json.RawMessage(`{`)},
			"neg max turns": {Tenant: ten.ID, MaxTurns: -1},
			"untyped event": {Tenant: ten.ID, Events: []agentfleet.Event{{Content: "x"}}},
		} {
			_, err := b.s.RunCreate(b.ctx, p)
			require.ErrorIs(t, err, store.ErrInvalid, name)
		}
		_, err = b.s.RunGetByID(b.ctx, store.RunGetByIDParams{ID: "nope"})
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("TenantScope", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		other := b.tenant(t, store.TenantCreateParams{})
		r := b.run(t, store.RunCreateParams{Tenant: ten.ID})
		got, err := b.s.RunGetByID(b.ctx, store.RunGetByIDParams{ID: r.ID, Tenant: ten.ID})
		require.NoError(t, err)
		require.Equal(t, r, got)
		_, err = b.s.RunGetByID(b.ctx, store.RunGetByIDParams{ID: r.ID, Tenant: other.ID})
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("Idempotency", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		other := b.tenant(t, store.TenantCreateParams{})
		p := store.RunCreateParams{Tenant: ten.ID, Message: "once", IdempotencyKey: "req-42", Events: []agentfleet.Event{{Type: agentfleet.EventQueued}}}
		first, err := b.s.RunCreate(b.ctx, p)
		require.NoError(t, err)
		require.True(t, first.Created)
		p.Message = "twice"
		again, err := b.s.RunCreate(b.ctx, p)
		require.NoError(t, err)
		require.False(t, again.Created)
		require.Equal(t, first.Run, again.Run, "the first run comes back")
		require.True(t, again.Startable, "still queued, so still startable")
		require.Empty(t, again.Events)
		require.Len(t, b.events(t, first.Run.ID), 1, "no new events")

		p.Tenant = other.ID
		elsewhere, err := b.s.RunCreate(b.ctx, p)
		require.NoError(t, err)
		require.True(t, elsewhere.Created, "keys are per tenant")
		require.NotEqual(t, first.Run.ID, elsewhere.Run.ID)
	})
	t.Run("IdempotencyConcurrent", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		const n = 8
		results, errs := atOnce(n, func(i int) (store.RunCreateResult, error) {
			return b.s.RunCreate(b.ctx, store.RunCreateParams{Tenant: ten.ID, IdempotencyKey: "same",
				Events: []agentfleet.Event{{Type: agentfleet.EventQueued}}})
		})
		created := 0
		for i := range n {
			require.NoError(t, errs[i])
			require.Equal(t, results[0].Run.ID, results[i].Run.ID)
			if results[i].Created {
				created++
			}
		}
		require.Equal(t, 1, created)
		require.Len(t, b.events(t, results[0].Run.ID), 1)
	})
	t.Run("CountActive", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		b.run(t, store.RunCreateParams{Tenant: ten.ID}) // queued: not active
		b.started(t, ten.ID)                            // running
		w := b.started(t, ten.ID)                       // waiting: holds no worker, not active
		b.transition(t, w.ID, agentfleet.StatusWaitingBudget)
		d := b.started(t, ten.ID) // ended
		b.transition(t, d.ID, agentfleet.StatusFailed)
		n, err := b.s.RunCountActive(b.ctx, ten.ID)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		counts, err := b.s.RunCountByStatus(b.ctx, ten.ID)
		require.NoError(t, err)
		require.Equal(t, map[agentfleet.RunStatus]int{
			agentfleet.StatusQueued: 1, agentfleet.StatusRunning: 1, agentfleet.StatusWaitingBudget: 1, agentfleet.StatusFailed: 1,
		}, counts)
		none, err := b.s.RunCountByStatus(b.ctx, "nobody")
		require.NoError(t, err)
		require.Empty(t, none)
	})
}

func testRunList(t *testing.T, newStore NewStore) {
	t.Run("PagesAndFilters", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		other := b.tenant(t, store.TenantCreateParams{})
		for _, n := range []string{"a", "b"} {
			_, err := b.s.AgentUpsert(b.ctx, store.AgentUpsertParams{Tenant: ten.ID, Name: n})
			require.NoError(t, err)
		}
		var ids []string // creation order
		for i := range 7 {
			agent := "a"
			if i%2 == 1 {
				agent = "b"
			}
			r := b.run(t, store.RunCreateParams{Tenant: ten.ID, Agent: agent, SessionID: fmt.Sprint("s", i%3)})
			ids = append(ids, r.ID)
		}
		b.transition(t, ids[2], agentfleet.StatusRunning)
		b.transition(t, ids[5], agentfleet.StatusCancelled)
		for range 2 {
			b.run(t, store.RunCreateParams{Tenant: other.ID})
		}

		// Newest first, over three pages of three.
		var got []string
		cursor := ""
		for page := 0; ; page++ {
			res, err := b.s.RunList(b.ctx, store.RunListParams{Tenant: ten.ID, Limit: 3, Cursor: cursor})
			require.NoError(t, err)
			require.LessOrEqual(t, len(res.Runs), 3)
			for _, r := range res.Runs {
				got = append(got, r.ID)
			}
			if res.NextCursor == "" {
				require.Equal(t, 2, page)
				break
			}
			cursor = res.NextCursor
		}
		want := make([]string, len(ids))
		for i, id := range ids {
			want[len(ids)-1-i] = id
		}
		require.Equal(t, want, got)

		// Oldest first.
		got = nil
		cursor = ""
		for {
			res, err := b.s.RunList(b.ctx, store.RunListParams{Tenant: ten.ID, Limit: 4, Cursor: cursor, Oldest: true})
			require.NoError(t, err)
			for _, r := range res.Runs {
				got = append(got, r.ID)
			}
			if cursor = res.NextCursor; cursor == "" {
				break
			}
		}
		require.Equal(t, ids, got)

		count := func(p store.RunListParams) int {
			t.Helper()
			res, err := b.s.RunList(b.ctx, p)
			require.NoError(t, err)
			return len(res.Runs)
		}
		require.Equal(t, 9, count(store.RunListParams{}), "empty tenant lists all")
		require.Equal(t, 4, count(store.RunListParams{Tenant: ten.ID, Agent: "a"}))
		require.Equal(t, 3, count(store.RunListParams{Tenant: ten.ID, SessionID: "s0"}))
		require.Equal(t, 1, count(store.RunListParams{Tenant: ten.ID, Status: []agentfleet.RunStatus{agentfleet.StatusRunning}}))
		require.Equal(t, 2, count(store.RunListParams{Tenant: ten.ID, Status: []agentfleet.RunStatus{agentfleet.StatusRunning, agentfleet.StatusCancelled}}))
		require.Equal(t, 5, count(store.RunListParams{Tenant: ten.ID, Status: []agentfleet.RunStatus{agentfleet.StatusQueued}}))
		require.Equal(t, 0, count(store.RunListParams{Tenant: "nobody"}))

		res, err := b.s.RunList(b.ctx, store.RunListParams{Tenant: ten.ID, Status: []agentfleet.RunStatus{agentfleet.StatusRunning}})
		require.NoError(t, err)
		require.Equal(t, b.get(t, ids[2]), res.Runs[0], "listed runs are whole")
		require.Empty(t, res.NextCursor)
	})
	t.Run("Errors", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		for range 3 {
			b.run(t, store.RunCreateParams{Tenant: ten.ID})
		}
		page, err := b.s.RunList(b.ctx, store.RunListParams{Tenant: ten.ID, Limit: 1})
		require.NoError(t, err)
		require.NotEmpty(t, page.NextCursor)
		_, err = b.s.RunList(b.ctx, store.RunListParams{Tenant: ten.ID, Cursor: page.NextCursor, Oldest: true})
		require.ErrorIs(t, err, store.ErrInvalid, "a cursor of the other order")
		_, err = b.s.RunList(b.ctx, store.RunListParams{Cursor: "!!not-a-cursor"})
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = b.s.RunList(b.ctx, store.RunListParams{Status: []agentfleet.RunStatus{"sleeping"}})
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = b.s.RunList(b.ctx, store.RunListParams{Limit: -1})
		require.ErrorIs(t, err, store.ErrInvalid)
	})
}

func testSession(t *testing.T, newStore NewStore) {
	t.Run("Order", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		create := func(session string) store.RunCreateResult {
			t.Helper()
			res, err := b.s.RunCreate(b.ctx, store.RunCreateParams{Tenant: ten.ID, SessionID: session})
			require.NoError(t, err)
			return res
		}
		r1, r2, r3 := create("chat"), create("chat"), create("chat")
		require.True(t, r1.Startable)
		require.False(t, r2.Startable)
		require.False(t, r3.Startable)
		require.True(t, create("").Startable, "no session")
		require.True(t, create("other").Startable, "another session")

		b.transition(t, r1.Run.ID, agentfleet.StatusRunning)
		p := commitParams(r1.Run.ID, 1, agentfleet.StatusCompleted, "done")
		p.Answer = json.RawMessage(`"ok"`)
		done, err := b.s.TurnCommit(b.ctx, p)
		require.NoError(t, err)
		require.NotNil(t, done.SessionNext, "the head ended: the next run is handed out")
		require.Equal(t, r2.Run.ID, done.SessionNext.ID)
		require.Equal(t, agentfleet.StatusQueued, done.SessionNext.Status)

		// r2 is the head now; cancelling it while queued hands out r3.
		c, err := b.s.RunCancel(b.ctx, store.RunCancelParams{ID: r2.Run.ID, Reason: "changed my mind"})
		require.NoError(t, err)
		require.True(t, c.Immediate)
		require.NotNil(t, c.SessionNext)
		require.Equal(t, r3.Run.ID, c.SessionNext.ID)

		// The last one ending hands out nothing.
		f, err := b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: r3.Run.ID, To: agentfleet.StatusFailed, Error: "boom"})
		require.NoError(t, err)
		require.Nil(t, f.SessionNext)
		require.True(t, create("chat").Startable, "every earlier run ended")
	})
	t.Run("NotHead", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		var ids []string
		for range 3 {
			ids = append(ids, b.run(t, store.RunCreateParams{Tenant: ten.ID, SessionID: "s"}).ID)
		}
		b.transition(t, ids[0], agentfleet.StatusRunning)
		// Ending a run that waits behind the head hands out nothing: the
		// head is still running.
		c, err := b.s.RunCancel(b.ctx, store.RunCancelParams{ID: ids[2]})
		require.NoError(t, err)
		require.True(t, c.Immediate)
		require.Nil(t, c.SessionNext)
		c, err = b.s.RunCancel(b.ctx, store.RunCancelParams{ID: ids[1]})
		require.NoError(t, err)
		require.Nil(t, c.SessionNext)
		done, err := b.s.TurnCommit(b.ctx, commitParams(ids[0], 1, agentfleet.StatusCompleted, "x"))
		require.NoError(t, err)
		require.Nil(t, done.SessionNext, "nothing queued behind it")
	})
	t.Run("ConcurrentCreate", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		const n = 8
		results, errs := atOnce(n, func(i int) (store.RunCreateResult, error) {
			return b.s.RunCreate(b.ctx, store.RunCreateParams{Tenant: ten.ID, SessionID: "race"})
		})
		var head string
		for i := range n {
			require.NoError(t, errs[i])
			if results[i].Startable {
				require.Empty(t, head, "two startable runs in one session")
				head = results[i].Run.ID
			}
		}
		require.NotEmpty(t, head, "no startable run")

		// Ending each head hands out the next, in creation order, each
		// exactly once.
		order, err := b.s.RunList(b.ctx, store.RunListParams{Tenant: ten.ID, SessionID: "race", Oldest: true})
		require.NoError(t, err)
		require.Len(t, order.Runs, n)
		require.Equal(t, head, order.Runs[0].ID, "the startable run is the oldest")
		for i := range n {
			require.Equal(t, order.Runs[i].ID, head)
			b.transition(t, head, agentfleet.StatusRunning)
			res, err := b.s.TurnCommit(b.ctx, commitParams(head, 1, agentfleet.StatusCompleted, "x"))
			require.NoError(t, err)
			if i == n-1 {
				require.Nil(t, res.SessionNext)
				break
			}
			require.NotNil(t, res.SessionNext)
			head = res.SessionNext.ID
		}
	})
	t.Run("CreateWhileHeadEnds", func(t *testing.T) {
		// A run created while the head ends is either startable or handed
		// out by the end: never stranded.
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		for i := range 10 {
			session := fmt.Sprint("s", i)
			h := b.run(t, store.RunCreateParams{Tenant: ten.ID, SessionID: session})
			b.transition(t, h.ID, agentfleet.StatusRunning)
			var created store.RunCreateResult
			var ended store.RunChangeResult
			var cerr, eerr error
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				created, cerr = b.s.RunCreate(b.ctx, store.RunCreateParams{Tenant: ten.ID, SessionID: session})
			}()
			go func() {
				defer wg.Done()
				ended, eerr = b.s.TurnCommit(b.ctx, commitParams(h.ID, 1, agentfleet.StatusCompleted, "x"))
			}()
			wg.Wait()
			require.NoError(t, cerr)
			require.NoError(t, eerr)
			handed := ended.SessionNext != nil && ended.SessionNext.ID == created.Run.ID
			require.True(t, created.Startable || handed, "round %d: the new run is stranded", i)
		}
	})
}

func testRunTransition(t *testing.T, newStore NewStore) {
	t.Run("Lifecycle", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.run(t, store.RunCreateParams{Tenant: ten.ID, Events: []agentfleet.Event{{Type: agentfleet.EventQueued}}})
		res, err := b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: r.ID, From: []agentfleet.RunStatus{agentfleet.StatusQueued},
			To: agentfleet.StatusRunning, Events: []agentfleet.Event{{Type: agentfleet.EventStarted}}})
		require.NoError(t, err)
		require.Equal(t, agentfleet.StatusRunning, res.Run.Status)
		require.Len(t, res.Events, 1)
		require.Equal(t, int64(2), res.Events[0].Seq)
		require.Equal(t, int64(2), res.Run.EventSeq)
		require.Equal(t, res.Run, b.get(t, r.ID))

		// Park and resume: the wake count makes the resumed turn's
		// message id new.
		b.transition(t, r.ID, agentfleet.StatusWaitingBudget)
		res, err = b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: r.ID, From: []agentfleet.RunStatus{agentfleet.StatusWaitingBudget},
			To: agentfleet.StatusQueued, IncrementWake: true})
		require.NoError(t, err)
		require.Equal(t, 1, res.Run.Wake)
		require.Equal(t, agentfleet.StatusQueued, res.Run.Status)
		b.transition(t, r.ID, agentfleet.StatusRunning)

		res, err = b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: r.ID, To: agentfleet.StatusCompleted, Answer: json.RawMessage(`{"a":1}`)})
		require.NoError(t, err)
		require.Equal(t, agentfleet.StatusCompleted, res.Run.Status)
		require.Equal(t, json.RawMessage(`{"a":1}`), res.Run.Answer)
		require.Nil(t, res.SessionNext)
	})
	t.Run("Errors", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		before := b.get(t, r.ID)
		_, err := b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: r.ID, From: []agentfleet.RunStatus{agentfleet.StatusQueued}, To: agentfleet.StatusRunning})
		require.ErrorIs(t, err, store.ErrConflict, "not in From")
		_, err = b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: r.ID, To: agentfleet.StatusQueued})
		require.ErrorIs(t, err, store.ErrInvalid, "running -> queued is illegal")
		_, err = b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: r.ID, To: "paused"})
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: "nope", To: agentfleet.StatusRunning})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: r.ID, To: agentfleet.StatusFailed,
			Events: []agentfleet.Event{{Type: ""}}})
		require.ErrorIs(t, err, store.ErrInvalid)
		require.Equal(t, before, b.get(t, r.ID), "failed transitions change nothing")

		f, err := b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: r.ID, To: agentfleet.StatusFailed, Error: "model unavailable"})
		require.NoError(t, err)
		require.Equal(t, "model unavailable", f.Run.Error)
		_, err = b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: r.ID, To: agentfleet.StatusRunning})
		require.ErrorIs(t, err, store.ErrConflict, "an ended run")
		_, err = b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: r.ID, From: []agentfleet.RunStatus{agentfleet.StatusFailed}, To: agentfleet.StatusRunning})
		require.ErrorIs(t, err, store.ErrInvalid, "terminal statuses are final")
		require.Equal(t, f.Run, b.get(t, r.ID))
	})
}

func testRunCancel(t *testing.T, newStore NewStore) {
	t.Run("Queued", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.run(t, store.RunCreateParams{Tenant: ten.ID, Events: []agentfleet.Event{{Type: agentfleet.EventQueued}}})
		res, err := b.s.RunCancel(b.ctx, store.RunCancelParams{ID: r.ID, Tenant: ten.ID, Reason: "user asked",
			Events: []agentfleet.Event{{Type: agentfleet.EventCancelled}, {Type: agentfleet.EventDone}}})
		require.NoError(t, err)
		require.True(t, res.Immediate)
		require.Equal(t, agentfleet.StatusCancelled, res.Run.Status)
		require.Equal(t, "user asked", res.Run.Error)
		requireSeqs(t, res.Events, 2)
		require.Equal(t, res.Run, b.get(t, r.ID))

		again, err := b.s.RunCancel(b.ctx, store.RunCancelParams{ID: r.ID, Reason: "again", Events: []agentfleet.Event{{Type: agentfleet.EventCancelled}}})
		require.NoError(t, err, "cancelling a cancelled run is a no-op")
		require.True(t, again.Immediate)
		require.Empty(t, again.Events)
		require.Equal(t, res.Run, again.Run)
		require.Len(t, b.events(t, r.ID), 3)
	})
	t.Run("Waiting", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		b.transition(t, r.ID, agentfleet.StatusWaitingApproval)
		res, err := b.s.RunCancel(b.ctx, store.RunCancelParams{ID: r.ID})
		require.NoError(t, err)
		require.True(t, res.Immediate)
		require.Equal(t, agentfleet.StatusCancelled, res.Run.Status)
	})
	t.Run("Running", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		res, err := b.s.RunCancel(b.ctx, store.RunCancelParams{ID: r.ID, Reason: "too slow", Events: []agentfleet.Event{{Type: agentfleet.EventCancelled}}})
		require.NoError(t, err)
		require.False(t, res.Immediate, "a running run stops at the next turn boundary")
		require.True(t, res.Run.CancelRequested)
		require.Equal(t, agentfleet.StatusRunning, res.Run.Status)
		require.Empty(t, res.Events)
		require.Equal(t, res.Run, b.get(t, r.ID))

		// The turn in flight still commits; the worker then finishes the
		// cancellation, and the run's error is the cancel's reason.
		c, err := b.s.TurnCommit(b.ctx, commitParams(r.ID, 1, agentfleet.StatusRunning, "t1"))
		require.NoError(t, err)
		require.True(t, c.Run.CancelRequested)
		require.Equal(t, 1, c.Run.Turn)
		c, err = b.s.TurnCommit(b.ctx, store.TurnCommitParams{RunID: r.ID, Turn: 2, Status: agentfleet.StatusCancelled})
		require.NoError(t, err)
		require.Equal(t, agentfleet.StatusCancelled, c.Run.Status)
		require.Equal(t, "too slow", c.Run.Error)
	})
	t.Run("Errors", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		other := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		_, err := b.s.RunCancel(b.ctx, store.RunCancelParams{ID: r.ID, Tenant: other.ID})
		require.ErrorIs(t, err, store.ErrNotFound, "another tenant's run")
		_, err = b.s.RunCancel(b.ctx, store.RunCancelParams{ID: "nope"})
		require.ErrorIs(t, err, store.ErrNotFound)
		b.transition(t, r.ID, agentfleet.StatusCompleted)
		_, err = b.s.RunCancel(b.ctx, store.RunCancelParams{ID: r.ID})
		require.ErrorIs(t, err, store.ErrConflict, "a run that ended otherwise")
		require.Equal(t, agentfleet.StatusCompleted, b.get(t, r.ID).Status)
	})
}

func testModelReply(t *testing.T, newStore NewStore) {
	t.Run("RecordOnce", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		at := time.Date(2025, 5, 6, 7, 8, 9, 987654321, time.UTC)
		reply := store.ModelReply{RunID: r.ID, Turn: 1, Content: "```javascript\nfunction run(a){}\n```", Model: "m1",
			Usage: agentfleet.Usage{PromptTokens: 100, CompletionTokens: 20}, UsageReported: true, CreatedAt: at}
		res, err := b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: reply})
		require.NoError(t, err)
		require.False(t, res.Existed)
		want := reply
		want.CreatedAt = at.Truncate(time.Microsecond)
		require.Equal(t, want, res.Reply)

		// A redelivered turn records again: the first reply comes back.
		dup := reply
		dup.Content = "something else"
		res, err = b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: dup})
		require.NoError(t, err)
		require.True(t, res.Existed)
		require.Equal(t, want, res.Reply)
		got, err := b.s.ModelReplyGet(b.ctx, r.ID, 1)
		require.NoError(t, err)
		require.Equal(t, want, got)
		_, err = b.s.ModelReplyGet(b.ctx, r.ID, 2)
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("Fence", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		rec := func(turn int) error {
			_, err := b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: store.ModelReply{RunID: r.ID, Turn: turn, Content: "x"}})
			return err
		}
		require.ErrorIs(t, rec(2), store.ErrConflict, "turn 1 is not committed")
		_, err := b.s.TurnCommit(b.ctx, commitParams(r.ID, 1, agentfleet.StatusRunning, "t1"))
		require.NoError(t, err)
		require.ErrorIs(t, rec(1), store.ErrConflict, "turn 1 is committed")
		require.NoError(t, rec(2))
		b.transition(t, r.ID, agentfleet.StatusFailed)
		require.ErrorIs(t, rec(2), store.ErrConflict, "the run ended")
		_, err = b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: store.ModelReply{RunID: "nope", Turn: 1}})
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, rec(0), store.ErrInvalid)
	})
	testModelReplyCharge(t, newStore)
}

// testModelReplyCharge: ModelReplyRecord with Charge settles in the same
// transaction as the reply insert, only when it records the reply.
func testModelReplyCharge(t *testing.T, newStore NewStore) {
	reply := func(runID string, turn int) store.ModelReply {
		return store.ModelReply{RunID: runID, Turn: turn, Content: "```javascript\nfunction run(a){}\n```", Model: "m1",
			Usage: agentfleet.Usage{PromptTokens: 120, CompletionTokens: 30}, UsageReported: true}
	}
	charge := func(r agentfleet.Reservation, prompt, completion int64) *store.BudgetSettleParams {
		p := settleParams(r, prompt, completion, day)
		return &p
	}
	t.Run("Charge", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 1000})
		r := b.started(t, ten.ID)
		res0 := b.reserve(t, ten.ID, 500, day)
		res, err := b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: reply(r.ID, 1), Charge: charge(res0, 120, 30)})
		require.NoError(t, err)
		require.False(t, res.Existed)
		require.NoError(t, res.ChargeErr)
		require.Equal(t, store.BudgetSettleResult{Charged: 150}, res.Settled)
		require.Equal(t, "m1", res.Reply.Model)
		st := b.budget(t, ten.ID, day)
		require.Equal(t, int64(150), st.Used)
		require.Zero(t, st.Reserved)
		_, err = b.s.BudgetSettle(b.ctx, settleParams(res0, 1, 1, day))
		require.ErrorIs(t, err, store.ErrNotFound, "the reservation was settled")
		rows, err := b.s.UsageList(b.ctx, store.UsageListParams{Tenant: ten.ID, GroupBy: "run"})
		require.NoError(t, err)
		require.Equal(t, []store.UsageRow{{Key: "run-1", Usage: agentfleet.Usage{PromptTokens: 120, CompletionTokens: 30}, Calls: 1}}, rows)

		// Redelivered: the reply exists, nothing is charged, the new
		// reservation is left for the caller.
		res1 := b.reserve(t, ten.ID, 200, day)
		again, err := b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: reply(r.ID, 1), Charge: charge(res1, 100, 100)})
		require.NoError(t, err)
		require.True(t, again.Existed)
		require.NoError(t, again.ChargeErr)
		require.Zero(t, again.Settled)
		require.Equal(t, res.Reply, again.Reply)
		st = b.budget(t, ten.ID, day)
		require.Equal(t, int64(150), st.Used)
		require.Equal(t, int64(200), st.Reserved)
		require.Equal(t, store.BudgetSettleResult{Charged: 200}, b.settle(t, res1, 100, 100, day), "the caller settles it separately")

		// The cap applies as in BudgetSettle.
		_, err = b.s.TurnCommit(b.ctx, commitParams(r.ID, 1, agentfleet.StatusRunning, "t1"))
		require.NoError(t, err)
		res2 := b.reserve(t, ten.ID, 600, day)
		capped, err := b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: reply(r.ID, 2), Charge: charge(res2, 700, 50)})
		require.NoError(t, err)
		require.NoError(t, capped.ChargeErr)
		require.Equal(t, store.BudgetSettleResult{Charged: 650, Overage: 100}, capped.Settled)
		st = b.budget(t, ten.ID, day)
		require.Equal(t, int64(1000), st.Used)
		require.Zero(t, st.Reserved)
	})
	t.Run("ChargeFenced", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 1000})
		r := b.started(t, ten.ID)
		held := b.reserve(t, ten.ID, 300, day)
		_, err := b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: reply(r.ID, 2), Charge: charge(held, 100, 0)})
		require.ErrorIs(t, err, store.ErrConflict, "turn 1 is not committed")
		_, err = b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: reply("nope", 1), Charge: charge(held, 100, 0)})
		require.ErrorIs(t, err, store.ErrNotFound)
		b.transition(t, r.ID, agentfleet.StatusFailed)
		_, err = b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: reply(r.ID, 1), Charge: charge(held, 100, 0)})
		require.ErrorIs(t, err, store.ErrConflict, "the run ended")
		st := b.budget(t, ten.ID, day)
		require.Zero(t, st.Used, "a fenced record charges nothing")
		require.Equal(t, int64(300), st.Reserved)
		_, err = b.s.ModelReplyGet(b.ctx, r.ID, 1)
		require.ErrorIs(t, err, store.ErrNotFound)
		b.settle(t, held, 100, 0, day) // still there for the caller
	})
	t.Run("ChargeExpired", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 1000})
		r := b.started(t, ten.ID)
		gone := b.reserve(t, ten.ID, 300, day)
		n, err := b.s.BudgetExpire(b.ctx, day.Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		res, err := b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: reply(r.ID, 1), Charge: charge(gone, 100, 0)})
		require.NoError(t, err, "the reply is not lost")
		require.False(t, res.Existed)
		require.ErrorIs(t, res.ChargeErr, store.ErrNotFound)
		require.Zero(t, res.Settled)
		got, err := b.s.ModelReplyGet(b.ctx, r.ID, 1)
		require.NoError(t, err)
		require.Equal(t, res.Reply, got)
		st := b.budget(t, ten.ID, day)
		require.Zero(t, st.Used)
		require.Zero(t, st.Reserved)
		rows, err := b.s.UsageList(b.ctx, store.UsageListParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.Empty(t, rows, "nothing was charged")

		// An unlimited charge for a tenant that does not exist fails the
		// same way, and keeps the reply.
		_, err = b.s.TurnCommit(b.ctx, commitParams(r.ID, 1, agentfleet.StatusRunning, "t1"))
		require.NoError(t, err)
		res, err = b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: reply(r.ID, 2),
			Charge: &store.BudgetSettleParams{Tenant: "nobody", Usage: agentfleet.Usage{PromptTokens: 1}, Now: day}})
		require.NoError(t, err)
		require.ErrorIs(t, res.ChargeErr, store.ErrNotFound)
		_, err = b.s.ModelReplyGet(b.ctx, r.ID, 2)
		require.NoError(t, err)
	})
	t.Run("ChargeUnlimited", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.started(t, ten.ID)
		res0 := b.reserve(t, ten.ID, 500, day)
		require.Empty(t, res0.ID)
		res, err := b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: reply(r.ID, 1), Charge: charge(res0, 700, 30)})
		require.NoError(t, err)
		require.NoError(t, res.ChargeErr)
		require.Equal(t, store.BudgetSettleResult{Charged: 730}, res.Settled, "unlimited: charged in full")
		st := b.budget(t, ten.ID, day)
		require.Equal(t, int64(730), st.Used)
		require.Zero(t, st.Reserved)
		again, err := b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: reply(r.ID, 1), Charge: charge(res0, 700, 30)})
		require.NoError(t, err)
		require.True(t, again.Existed)
		require.Zero(t, again.Settled)
		require.Equal(t, int64(730), b.budget(t, ten.ID, day).Used, "charged once")
	})
	t.Run("ChargeInvalid", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{TokenLimit: 1000})
		r := b.started(t, ten.ID)
		held := b.reserve(t, ten.ID, 300, day)
		for name, c := range map[string]*store.BudgetSettleParams{
			"negative usage":            charge(held, -1, 0),
			"no reservation, no tenant": {Usage: agentfleet.Usage{PromptTokens: 1}},
		} {
			_, err := b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: reply(r.ID, 1), Charge: c})
			require.ErrorIs(t, err, store.ErrInvalid, name)
		}
		_, err := b.s.ModelReplyGet(b.ctx, r.ID, 1)
		require.ErrorIs(t, err, store.ErrNotFound, "nothing was recorded")
		require.Equal(t, int64(300), b.budget(t, ten.ID, day).Reserved)
	})
	t.Run("ChargeConcurrent", func(t *testing.T) {
		// Workers race to record one turn, each charging its own
		// reservation: exactly one records and charges; the others see
		// Existed and their reservations are untouched.
		b := setup(t, newStore)
		for _, limit := range []int64{0, 100_000} {
			ten := b.tenant(t, store.TenantCreateParams{TokenLimit: limit})
			for round := range 3 {
				r := b.started(t, ten.ID)
				const n = 8
				holds := make([]agentfleet.Reservation, n)
				for i := range holds {
					holds[i] = b.reserve(t, ten.ID, 200, day)
				}
				results, errs := atOnce(n, func(i int) (store.ModelReplyRecordResult, error) {
					return b.s.ModelReplyRecord(b.ctx, store.ModelReplyRecordParams{ModelReply: reply(r.ID, 1), Charge: charge(holds[i], 100, 0)})
				})
				winner := -1
				for i := range n {
					require.NoError(t, errs[i])
					require.NoError(t, results[i].ChargeErr)
					if results[i].Existed {
						require.Zero(t, results[i].Settled)
						continue
					}
					require.Equal(t, -1, winner, "limit %d round %d: two records of one turn", limit, round)
					winner = i
					require.Equal(t, store.BudgetSettleResult{Charged: 100}, results[i].Settled)
				}
				require.NotEqual(t, -1, winner)
				for i := range n {
					if i == winner {
						continue
					}
					if holds[i].ID != "" {
						require.NoError(t, b.s.BudgetRelease(b.ctx, holds[i].ID), "a loser's reservation is intact")
					}
				}
			}
			st := b.budget(t, ten.ID, day)
			require.Equal(t, int64(300), st.Used, "limit %d: one charge per turn", limit)
			require.Zero(t, st.Reserved)
		}
	})
}

func testEvents(t *testing.T, newStore NewStore) {
	t.Run("DenseSeq", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		created, err := b.s.RunCreate(b.ctx, store.RunCreateParams{Tenant: ten.ID, SessionID: "sess",
			Events: []agentfleet.Event{{Type: agentfleet.EventQueued}, {Type: agentfleet.EventUser, Content: "hi"}}})
		require.NoError(t, err)
		id := created.Run.ID
		requireSeqs(t, created.Events, 1)

		ts := time.Date(2025, 1, 1, 0, 0, 0, 1500, time.UTC)
		appended, err := b.s.EventAppend(b.ctx, store.EventAppendParams{RunID: id, Events: []agentfleet.Event{
			{Type: agentfleet.EventWarning, Content: "slow", TS: ts, Turn: 3},
			{Type: agentfleet.EventLog, Args: json.RawMessage(`[1, 2]`), Tokens: &agentfleet.Tokens{Prompt: 0, Completion: 0}},
		}})
		require.NoError(t, err)
		requireSeqs(t, appended, 3)
		require.Equal(t, ts.Truncate(time.Microsecond), appended[0].TS)
		require.Equal(t, 3, appended[0].Turn)
		require.Equal(t, "sess", appended[0].SessionID)

		b.transition(t, id, agentfleet.StatusRunning)
		committed, err := b.s.TurnCommit(b.ctx, commitParams(id, 1, agentfleet.StatusRunning, "t1"))
		require.NoError(t, err)
		requireSeqs(t, committed.Events, 5)
		require.Equal(t, 1, committed.Events[0].Turn, "a commit's events default to its turn")
		tr, err := b.s.RunTransition(b.ctx, store.RunTransitionParams{ID: id, To: agentfleet.StatusCompleted,
			Events: []agentfleet.Event{{Type: agentfleet.EventDone}}})
		require.NoError(t, err)
		requireSeqs(t, tr.Events, 7)
		require.Equal(t, int64(7), tr.Run.EventSeq)

		all := b.events(t, id)
		requireSeqs(t, all, 1)
		var want []agentfleet.Event
		for _, evs := range [][]agentfleet.Event{created.Events, appended, committed.Events, tr.Events} {
			want = append(want, evs...)
		}
		require.Equal(t, want, all, "listed events are what the writes returned")
		require.Nil(t, all[0].Tokens)
		require.NotNil(t, all[3].Tokens, "zero tokens are not no tokens")

		after, err := b.s.EventListByRun(b.ctx, store.EventListByRunParams{RunID: id, AfterSeq: 4, Limit: 2})
		require.NoError(t, err)
		require.Equal(t, all[4:6], after)
		none, err := b.s.EventListByRun(b.ctx, store.EventListByRunParams{RunID: id, AfterSeq: 7})
		require.NoError(t, err)
		require.Empty(t, none)
	})
	t.Run("Errors", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.run(t, store.RunCreateParams{Tenant: ten.ID})
		_, err := b.s.EventAppend(b.ctx, store.EventAppendParams{RunID: "nope", Events: []agentfleet.Event{{Type: agentfleet.EventLog}}})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.EventAppend(b.ctx, store.EventAppendParams{RunID: r.ID, Events: []agentfleet.Event{{Type: agentfleet.EventLog, Args: json.RawMessage(`nope`)}}})
		require.ErrorIs(t, err, store.ErrInvalid)
		evs, err := b.s.EventAppend(b.ctx, store.EventAppendParams{RunID: r.ID})
		require.NoError(t, err)
		require.Empty(t, evs)
		require.Equal(t, int64(0), b.get(t, r.ID).EventSeq)
	})
	t.Run("ConcurrentAppend", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		r := b.run(t, store.RunCreateParams{Tenant: ten.ID})
		const n = 16
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = b.s.EventAppend(b.ctx, store.EventAppendParams{RunID: r.ID, Events: []agentfleet.Event{{Type: agentfleet.EventLog}, {Type: agentfleet.EventLog}}})
			}()
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		all := b.events(t, r.ID)
		require.Len(t, all, 2*n)
		requireSeqs(t, all, 1)
	})
}

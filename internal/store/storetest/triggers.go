package storetest

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/store"
)

func testTrigger(t *testing.T, newStore NewStore) {
	t.Run("CreateGetListUpdateDelete", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		other := b.tenant(t, store.TenantCreateParams{})
		t1, err := b.s.TriggerCreate(b.ctx, store.TriggerCreateParams{
			Tenant: ten.ID, Name: "reviews", Agent: "triage", Scheme: "github", Secret: "sealed-1",
			Message: "Review PR {{.payload.number}}", SessionID: "{{slug .payload.repo}}", Events: []string{"pull_request.opened"},
			MaxTurns: 5, MaxTokens: 9000, MaxBodyBytes: 2 << 20, Enabled: true, CallbackURL: "https://example.com/cb",
		})
		require.NoError(t, err)
		require.NotEmpty(t, t1.ID)
		require.Equal(t, store.Trigger{
			ID: t1.ID, Tenant: ten.ID, Name: "reviews", Agent: "triage", Scheme: "github", Secret: "sealed-1",
			Message: "Review PR {{.payload.number}}", SessionID: "{{slug .payload.repo}}", Events: []string{"pull_request.opened"},
			MaxTurns: 5, MaxTokens: 9000, MaxBodyBytes: 2 << 20, Enabled: true, CallbackURL: "https://example.com/cb",
			CreatedAt: t1.CreatedAt, UpdatedAt: t1.CreatedAt,
		}, t1)
		require.Equal(t, time.UTC, t1.CreatedAt.Location())

		got, err := b.s.TriggerGetByID(b.ctx, store.TriggerGetByIDParams{ID: t1.ID})
		require.NoError(t, err)
		require.Equal(t, t1, got)
		got, err = b.s.TriggerGetByID(b.ctx, store.TriggerGetByIDParams{ID: t1.ID, Tenant: ten.ID})
		require.NoError(t, err)
		require.Equal(t, t1, got)
		_, err = b.s.TriggerGetByID(b.ctx, store.TriggerGetByIDParams{ID: t1.ID, Tenant: other.ID})
		require.ErrorIs(t, err, store.ErrNotFound)

		// Defaults: the default agent, no events, disabled unless set.
		t2, err := b.s.TriggerCreate(b.ctx, store.TriggerCreateParams{ID: "trig-2", Tenant: ten.ID, Name: "b", Scheme: "standard", Secret: "sealed-2"})
		require.NoError(t, err)
		require.Equal(t, "default", t2.Agent)
		require.Nil(t, t2.Events)
		require.False(t, t2.Enabled)
		_, err = b.s.TriggerCreate(b.ctx, store.TriggerCreateParams{ID: "trig-2", Tenant: ten.ID, Name: "b", Scheme: "standard", Secret: "x"})
		require.ErrorIs(t, err, store.ErrConflict)

		// Newest first, paged; another tenant sees none.
		t3, err := b.s.TriggerCreate(b.ctx, store.TriggerCreateParams{Tenant: ten.ID, Name: "c", Scheme: "hmac", Secret: "sealed-3"})
		require.NoError(t, err)
		page, err := b.s.TriggerList(b.ctx, store.TriggerListParams{Tenant: ten.ID, Limit: 2})
		require.NoError(t, err)
		// By id, descending: generated ids are time-ordered, so newest
		// first; "trig-2", given, sorts before them.
		require.Equal(t, []store.Trigger{t2, t3}, page.Triggers)
		require.NotEmpty(t, page.NextCursor)
		rest, err := b.s.TriggerList(b.ctx, store.TriggerListParams{Tenant: ten.ID, Limit: 2, Cursor: page.NextCursor})
		require.NoError(t, err)
		require.Equal(t, []store.Trigger{t1}, rest.Triggers)
		all, err := b.s.TriggerList(b.ctx, store.TriggerListParams{Tenant: ten.ID})
		require.NoError(t, err)
		require.Len(t, all.Triggers, 3)
		require.Empty(t, all.NextCursor)
		require.Equal(t, append(page.Triggers, rest.Triggers...), all.Triggers)
		none, err := b.s.TriggerList(b.ctx, store.TriggerListParams{Tenant: other.ID})
		require.NoError(t, err)
		require.Empty(t, none.Triggers)
		_, err = b.s.TriggerList(b.ctx, store.TriggerListParams{Tenant: ten.ID, Cursor: "garbage!"})
		require.ErrorIs(t, err, store.ErrInvalid)

		// Update: only the set fields change; a new secret keeps the
		// old one as the previous secret until the grace ends.
		until := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Microsecond)
		up, err := b.s.TriggerUpdate(b.ctx, store.TriggerUpdateParams{
			ID: t1.ID, Tenant: ten.ID, Enabled: ptr(false), Events: &[]string{"push", "issues"}, Message: ptr("New {{.event}}"),
			Secret: ptr("sealed-1b"), PrevSecretUntil: until,
		})
		require.NoError(t, err)
		want := t1
		want.Enabled, want.Events, want.Message = false, []string{"push", "issues"}, "New {{.event}}"
		want.Secret, want.PrevSecret, want.PrevSecretUntil = "sealed-1b", "sealed-1", until
		want.UpdatedAt = up.UpdatedAt
		require.Equal(t, want, up)
		require.False(t, up.UpdatedAt.Before(t1.UpdatedAt))
		got, err = b.s.TriggerGetByID(b.ctx, store.TriggerGetByIDParams{ID: t1.ID})
		require.NoError(t, err)
		require.Equal(t, up, got)
		_, err = b.s.TriggerUpdate(b.ctx, store.TriggerUpdateParams{ID: t1.ID, Tenant: other.ID, Enabled: ptr(true)})
		require.ErrorIs(t, err, store.ErrNotFound)

		require.ErrorIs(t, b.s.TriggerDelete(b.ctx, store.TriggerDeleteParams{ID: t1.ID, Tenant: other.ID}), store.ErrNotFound)
		require.NoError(t, b.s.TriggerDelete(b.ctx, store.TriggerDeleteParams{ID: t1.ID, Tenant: ten.ID}))
		_, err = b.s.TriggerGetByID(b.ctx, store.TriggerGetByIDParams{ID: t1.ID})
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, b.s.TriggerDelete(b.ctx, store.TriggerDeleteParams{ID: t1.ID, Tenant: ten.ID}), store.ErrNotFound)
	})
	t.Run("Errors", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		for name, p := range map[string]store.TriggerCreateParams{
			"no tenant":     {Scheme: "github", Secret: "s"},
			"no scheme":     {Tenant: ten.ID, Secret: "s"},
			"no secret":     {Tenant: ten.ID, Scheme: "github"},
			"bad id":        {ID: "a.b", Tenant: ten.ID, Scheme: "github", Secret: "s"},
			"negative caps": {Tenant: ten.ID, Scheme: "github", Secret: "s", MaxTurns: -1},
		} {
			_, err := b.s.TriggerCreate(b.ctx, p)
			require.ErrorIs(t, err, store.ErrInvalid, name)
		}
		_, err := b.s.TriggerCreate(b.ctx, store.TriggerCreateParams{Tenant: "nobody", Scheme: "github", Secret: "s"})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.TriggerGetByID(b.ctx, store.TriggerGetByIDParams{ID: "nope"})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.TriggerUpdate(b.ctx, store.TriggerUpdateParams{ID: "nope", Tenant: ten.ID, Enabled: ptr(true)})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.TriggerUpdate(b.ctx, store.TriggerUpdateParams{ID: "nope", Tenant: ten.ID, Secret: ptr("")})
		require.ErrorIs(t, err, store.ErrInvalid)
	})
}

func testTriggerDelivery(t *testing.T, newStore NewStore) {
	t.Run("DigestClaim", func(t *testing.T) { testTriggerDigestClaim(t, newStore) })
	t.Run("RecordListPrune", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		trig, err := b.s.TriggerCreate(b.ctx, store.TriggerCreateParams{Tenant: ten.ID, Name: "t", Scheme: "github", Secret: "s", Enabled: true})
		require.NoError(t, err)
		at := time.Date(2026, 1, 2, 3, 4, 5, 678901000, time.UTC)
		got, err := b.s.TriggerDeliveryRecord(b.ctx, store.TriggerDeliveryRecordParams{Keep: 5, Lines: []store.TriggerDelivery{{
			TriggerID: trig.ID, Delivery: "d-0", ReceivedAt: at, Event: "pull_request", Action: "opened",
			Outcome: store.DeliveryAccepted, RunID: "run-0",
		}}})
		require.NoError(t, err)
		require.Len(t, got, 1)
		first := got[0]
		require.Equal(t, store.TriggerDelivery{
			ID: first.ID, TriggerID: trig.ID, Delivery: "d-0", ReceivedAt: at, Event: "pull_request", Action: "opened",
			Outcome: store.DeliveryAccepted, RunID: "run-0",
		}, first)
		// One at a time, then several in one call, another trigger's
		// among them.
		two, err := b.s.TriggerCreate(b.ctx, store.TriggerCreateParams{Tenant: ten.ID, Name: "u", Scheme: "hmac", Secret: "s"})
		require.NoError(t, err)
		line := func(i int) store.TriggerDelivery {
			l := store.TriggerDelivery{TriggerID: trig.ID, Delivery: fmt.Sprintf("d-%d", i), Outcome: store.DeliveryRejected, Reason: "no room"}
			if i == 11 {
				l.Payload = json.RawMessage(`{"n":11}`)
			}
			return l
		}
		for i := 1; i < 6; i++ {
			_, err := b.s.TriggerDeliveryRecord(b.ctx, store.TriggerDeliveryRecordParams{Keep: 5, Lines: []store.TriggerDelivery{line(i)}})
			require.NoError(t, err)
		}
		var batch []store.TriggerDelivery
		for i := 6; i < 12; i++ {
			batch = append(batch, line(i), store.TriggerDelivery{TriggerID: two.ID, Delivery: fmt.Sprintf("u-%d", i), Outcome: store.DeliveryIgnored})
		}
		got, err = b.s.TriggerDeliveryRecord(b.ctx, store.TriggerDeliveryRecordParams{Keep: 5, Lines: batch})
		require.NoError(t, err)
		require.Equal(t, deliveryIDs(batch), deliveryIDs(got), "in the order given")
		other, err := b.s.TriggerDeliveryList(b.ctx, store.TriggerDeliveryListParams{TriggerID: two.ID})
		require.NoError(t, err)
		require.Equal(t, []string{"u-11", "u-10", "u-9", "u-8", "u-7"}, deliveryIDs(other.Deliveries))
		// The last 5 are kept, newest first, without payloads.
		page, err := b.s.TriggerDeliveryList(b.ctx, store.TriggerDeliveryListParams{TriggerID: trig.ID, Limit: 3})
		require.NoError(t, err)
		require.Equal(t, []string{"d-11", "d-10", "d-9"}, deliveryIDs(page.Deliveries))
		require.Nil(t, page.Deliveries[0].Payload)
		require.False(t, page.Deliveries[0].ReceivedAt.IsZero())
		next, err := b.s.TriggerDeliveryList(b.ctx, store.TriggerDeliveryListParams{TriggerID: trig.ID, Limit: 3, Cursor: page.NextCursor})
		require.NoError(t, err)
		require.Equal(t, []string{"d-8", "d-7"}, deliveryIDs(next.Deliveries))
		require.Empty(t, next.NextCursor)

		// Filtered by delivery: with the payload.
		one, err := b.s.TriggerDeliveryList(b.ctx, store.TriggerDeliveryListParams{TriggerID: trig.ID, Delivery: "d-11"})
		require.NoError(t, err)
		require.Len(t, one.Deliveries, 1)
		require.JSONEq(t, `{"n":11}`, string(one.Deliveries[0].Payload))
		pruned, err := b.s.TriggerDeliveryList(b.ctx, store.TriggerDeliveryListParams{TriggerID: trig.ID, Delivery: "d-0"})
		require.NoError(t, err)
		require.Empty(t, pruned.Deliveries)

		_, err = b.s.TriggerDeliveryList(b.ctx, store.TriggerDeliveryListParams{TriggerID: trig.ID, Cursor: "nope!"})
		require.ErrorIs(t, err, store.ErrInvalid)

		// The log goes with its trigger.
		require.NoError(t, b.s.TriggerDelete(b.ctx, store.TriggerDeleteParams{ID: trig.ID, Tenant: ten.ID}))
		gone, err := b.s.TriggerDeliveryList(b.ctx, store.TriggerDeliveryListParams{TriggerID: trig.ID})
		require.NoError(t, err)
		require.Empty(t, gone.Deliveries)
	})
	t.Run("ConcurrentRecordsStayBounded", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		trig, err := b.s.TriggerCreate(b.ctx, store.TriggerCreateParams{Tenant: ten.ID, Name: "t", Scheme: "hmac", Secret: "s", Enabled: true})
		require.NoError(t, err)
		const keep, writers, each = 10, 8, 25
		concurrently(t, writers, func(w int) error {
			for i := range each {
				if _, err := b.s.TriggerDeliveryRecord(b.ctx, store.TriggerDeliveryRecordParams{Keep: keep, Lines: []store.TriggerDelivery{{
					TriggerID: trig.ID, Delivery: fmt.Sprintf("w%d-%d", w, i), Outcome: store.DeliveryAccepted,
				}}}); err != nil {
					return err
				}
			}
			return nil
		})
		all, err := b.s.TriggerDeliveryList(b.ctx, store.TriggerDeliveryListParams{TriggerID: trig.ID, Limit: 500})
		require.NoError(t, err)
		require.Len(t, all.Deliveries, keep, "concurrent records number their lines apart")
	})
	t.Run("Errors", func(t *testing.T) {
		b := setup(t, newStore)
		ten := b.tenant(t, store.TenantCreateParams{})
		trig, err := b.s.TriggerCreate(b.ctx, store.TriggerCreateParams{Tenant: ten.ID, Name: "t", Scheme: "hmac", Secret: "s"})
		require.NoError(t, err)
		_, err = b.s.TriggerDeliveryRecord(b.ctx, store.TriggerDeliveryRecordParams{Lines: []store.TriggerDelivery{
			{TriggerID: trig.ID, Delivery: "kept?", Outcome: store.DeliveryAccepted},
			{TriggerID: "nope", Outcome: store.DeliveryAccepted},
		}})
		require.ErrorIs(t, err, store.ErrNotFound)
		none, err := b.s.TriggerDeliveryList(b.ctx, store.TriggerDeliveryListParams{TriggerID: trig.ID})
		require.NoError(t, err)
		require.Empty(t, none.Deliveries, "a call lands whole or not at all")
		_, err = b.s.TriggerDeliveryRecord(b.ctx, store.TriggerDeliveryRecordParams{Lines: []store.TriggerDelivery{{TriggerID: "nope", Outcome: "lost"}}})
		require.ErrorIs(t, err, store.ErrInvalid)
	})
}

func deliveryIDs(ds []store.TriggerDelivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Delivery
	}
	return out
}

// testTriggerDigestClaim: the first delivery of a body holds its digest
// for the window, per trigger, in one call as across calls; a lapsed
// claim is taken anew; a trigger deleted takes its claims along.
func testTriggerDigestClaim(t *testing.T, newStore NewStore) {
	b := setup(t, newStore)
	ten := b.tenant(t, store.TenantCreateParams{})
	trig, err := b.s.TriggerCreate(b.ctx, store.TriggerCreateParams{Tenant: ten.ID, Name: "t", Scheme: "github", Secret: "s"})
	require.NoError(t, err)
	two, err := b.s.TriggerCreate(b.ctx, store.TriggerCreateParams{Tenant: ten.ID, Name: "u", Scheme: "github", Secret: "s"})
	require.NoError(t, err)
	digest := func(body string) []byte { d := sha256.Sum256([]byte(body)); return d[:] }
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	claim := func(at time.Time, window time.Duration, cs ...store.DigestClaim) []string {
		t.Helper()
		got, err := b.s.TriggerDigestClaim(b.ctx, store.TriggerDigestClaimParams{Claims: cs, At: at, Window: window})
		require.NoError(t, err)
		return got
	}
	c := func(trigger, body, delivery string) store.DigestClaim {
		return store.DigestClaim{TriggerID: trigger, Digest: digest(body), Delivery: delivery}
	}

	require.Equal(t, []string{"d-1"}, claim(t0, 0, c(trig.ID, "a", "d-1")))
	// A replay under a new id, and the sender's retry, find the first.
	require.Equal(t, []string{"d-1", "d-1"}, claim(t0.Add(time.Hour), 0, c(trig.ID, "a", "d-2"), c(trig.ID, "a", "d-1")))
	// Several in one call: a body twice in it is held by its first; the
	// same body in another trigger is that trigger's own.
	require.Equal(t, []string{"d-3", "d-1", "d-3", "u-1"},
		claim(t0.Add(2*time.Hour), 0, c(trig.ID, "b", "d-3"), c(trig.ID, "a", "d-4"), c(trig.ID, "b", "d-5"), c(two.ID, "a", "u-1")))
	// The default window is 72 h: held at 71 h, lapsed after 72 h.
	require.Equal(t, []string{"d-1"}, claim(t0.Add(71*time.Hour), 0, c(trig.ID, "a", "d-6")))
	require.Equal(t, []string{"d-7"}, claim(t0.Add(72*time.Hour+time.Second), 0, c(trig.ID, "a", "d-7")))
	require.Equal(t, []string{"d-7"}, claim(t0.Add(73*time.Hour), 0, c(trig.ID, "a", "d-8")))
	// A window of the caller's.
	require.Equal(t, []string{"d-9"}, claim(t0.Add(73*time.Hour+2*time.Minute), time.Minute, c(trig.ID, "a", "d-9")))
	require.Empty(t, claim(t0, 0))

	_, err = b.s.TriggerDigestClaim(b.ctx, store.TriggerDigestClaimParams{Claims: []store.DigestClaim{{TriggerID: trig.ID, Digest: []byte("short"), Delivery: "x"}}})
	require.ErrorIs(t, err, store.ErrInvalid)
	_, err = b.s.TriggerDigestClaim(b.ctx, store.TriggerDigestClaimParams{Claims: []store.DigestClaim{c("no-such-trigger", "a", "x")}})
	require.Error(t, err, "a claim of an unknown trigger")

	// Deleted and made again under the same id: its old claims are gone.
	require.NoError(t, b.s.TriggerDelete(b.ctx, store.TriggerDeleteParams{ID: two.ID, Tenant: ten.ID}))
	_, err = b.s.TriggerCreate(b.ctx, store.TriggerCreateParams{ID: two.ID, Tenant: ten.ID, Name: "u", Scheme: "github", Secret: "s"})
	require.NoError(t, err)
	require.Equal(t, []string{"u-2"}, claim(t0.Add(2*time.Hour), 0, c(two.ID, "a", "u-2")))
}

package drivertest

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

func exerciseTriggers(t *testing.T, open func(*testing.T) Backend) {
	ctx := context.Background()
	insert := func(t *testing.T, b Backend, id string, at time.Time) store.Trigger {
		t.Helper()
		tr, err := b.Driver.TriggerInsert(ctx, store.TriggerCreateParams{ID: id, Tenant: "t1", Name: "n-" + id, Agent: "default",
			Scheme: "github", Message: "m", Events: []string{"push"}, Secret: "s1", Enabled: true}, at)
		require.NoError(t, err)
		return tr
	}
	t.Run("CRUD", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		tenant(t, b, "t2")
		at := now()
		tr := insert(t, b, "tr1", at)
		require.Equal(t, store.Trigger{ID: "tr1", Tenant: "t1", Name: "n-tr1", Agent: "default", Scheme: "github", Message: "m",
			Events: []string{"push"}, Secret: "s1", Enabled: true, CreatedAt: at, UpdatedAt: at}, tr)
		insert(t, b, "tr2", at)
		got, err := b.Driver.TriggerGet(ctx, "tr1", "")
		require.NoError(t, err)
		require.Equal(t, tr, got)
		_, err = b.Driver.TriggerGet(ctx, "tr1", "t2")
		require.ErrorIs(t, err, store.ErrNotFound, "another tenant's")

		ts, err := b.Driver.TriggerList(ctx, "t1", "", 10)
		require.NoError(t, err)
		require.Len(t, ts, 2)
		require.Equal(t, "tr2", ts[0].ID)
		ts, err = b.Driver.TriggerList(ctx, "t1", "tr2", 10)
		require.NoError(t, err)
		require.Len(t, ts, 1)
		require.Equal(t, "tr1", ts[0].ID)

		name, secret, none := "renamed", "s2", []string{}
		later := at.Add(time.Second)
		up, err := b.Driver.TriggerUpdate(ctx, store.TriggerUpdateParams{ID: "tr1", Tenant: "t1", Name: &name, Secret: &secret, Events: &none},
			later.Add(time.Hour), later)
		require.NoError(t, err)
		require.Equal(t, "renamed", up.Name)
		require.Equal(t, "s2", up.Secret)
		require.Equal(t, "s1", up.PrevSecret, "the replaced secret")
		require.Equal(t, later.Add(time.Hour), up.PrevSecretUntil)
		require.Empty(t, up.Events)
		require.Equal(t, later, up.UpdatedAt)
		require.Equal(t, "m", up.Message, "unset fields stay")
		_, err = b.Driver.TriggerUpdate(ctx, store.TriggerUpdateParams{ID: "tr1", Tenant: "t2", Name: &name}, time.Time{}, later)
		require.ErrorIs(t, err, store.ErrNotFound)

		ok, err := b.Driver.TriggerDelete(ctx, "t2", "tr1")
		require.NoError(t, err)
		require.False(t, ok)
		ok, err = b.Driver.TriggerDelete(ctx, "t1", "tr1")
		require.NoError(t, err)
		require.True(t, ok)
	})
	t.Run("DeliveriesNumberAndKeep", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		at := now()
		insert(t, b, "tr1", at)
		insert(t, b, "tr2", at)
		var lines []store.TriggerDelivery
		for i := range 4 {
			trig := "tr1"
			if i == 2 {
				trig = "tr2"
			}
			lines = append(lines, store.TriggerDelivery{ID: fmt.Sprintf("l%d", i), TriggerID: trig, Delivery: fmt.Sprintf("d%d", i),
				ReceivedAt: at, Event: "push", Outcome: store.DeliveryRejected, Payload: []byte(`{"a":1}`)})
		}
		got, err := b.Driver.TriggerDeliveryInsert(ctx, lines, 2)
		require.NoError(t, err)
		require.Len(t, got, 4)
		require.Nil(t, got[0].Payload, "returned without payloads")
		rows, err := b.Driver.TriggerDeliveryList(ctx, driver.TriggerDeliveryListParams{TriggerID: "tr1", AfterN: -1, Limit: 10})
		require.NoError(t, err)
		require.Len(t, rows, 2, "tr1 keeps its newest two")
		require.Equal(t, int64(3), rows[0].N)
		require.Equal(t, "l3", rows[0].Line.ID)
		require.Equal(t, int64(2), rows[1].N)
		require.Nil(t, rows[0].Line.Payload, "a listing not by delivery has no payloads")
		rows, err = b.Driver.TriggerDeliveryList(ctx, driver.TriggerDeliveryListParams{TriggerID: "tr1", AfterN: 3, AfterID: "l3", Limit: 10})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		rows, err = b.Driver.TriggerDeliveryList(ctx, driver.TriggerDeliveryListParams{TriggerID: "tr2", Delivery: "d2", AfterN: -1, Limit: 10})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, int64(1), rows[0].N)
		require.JSONEq(t, `{"a":1}`, string(rows[0].Line.Payload))
	})
	t.Run("DigestClaims", func(t *testing.T) {
		b := open(t)
		tenant(t, b, "t1")
		at := now()
		insert(t, b, "tr1", at)
		g1, g2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
		holders, err := b.Driver.TriggerDigestUpsert(ctx, []string{"tr1"},
			[]store.DigestClaim{{TriggerID: "tr1", Digest: g1, Delivery: "a"}}, at, at.Add(-time.Hour))
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, holders)
		holders, err = b.Driver.TriggerDigestUpsert(ctx, []string{"tr1"},
			[]store.DigestClaim{{TriggerID: "tr1", Digest: g1, Delivery: "b"}, {TriggerID: "tr1", Digest: g2, Delivery: "b"}},
			at.Add(time.Minute), at.Add(-time.Hour))
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b"}, holders, "a claim still held keeps its delivery")
		holders, err = b.Driver.TriggerDigestUpsert(ctx, []string{"tr1"},
			[]store.DigestClaim{{TriggerID: "tr1", Digest: g1, Delivery: "c"}}, at.Add(2*time.Hour), at.Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, []string{"c"}, holders, "a lapsed claim is taken")
	})
}

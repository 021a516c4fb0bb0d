package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/store"
)

// An admission whose process died (neither committed nor aborted) is
// invisible, and an hour on the batch sweep deletes what it wrote: its
// run's idempotency key and its own are free again.
func TestBatchSweepDropsAbandonedAdmissions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "b.db")})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.TenantCreate(ctx, store.TenantCreateParams{ID: "acme"})
	require.NoError(t, err)
	res, err := s.BatchAdmit(ctx, store.BatchAdmitParams{Tenant: "acme", IdempotencyKey: "nightly"})
	require.NoError(t, err)
	require.NoError(t, res.Admission.Append(ctx, []store.BatchInput{{Index: 0, Message: "a", IdempotencyKey: "k"}}))

	_, err = s.BatchSweep(ctx, store.BatchSweepParams{Now: time.Now()})
	require.NoError(t, err)
	taken, err := s.RunCreate(ctx, store.RunCreateParams{Tenant: "acme", Message: "m", IdempotencyKey: "k"})
	require.NoError(t, err)
	require.False(t, taken.Created, "within the hour the admission keeps what it wrote")

	_, err = s.BatchSweep(ctx, store.BatchSweepParams{Now: time.Now().Add(2 * time.Hour)})
	require.NoError(t, err)
	created, err := s.RunCreate(ctx, store.RunCreateParams{Tenant: "acme", Message: "m", IdempotencyKey: "k"})
	require.NoError(t, err)
	require.True(t, created.Created)
	again, err := s.BatchAdmit(ctx, store.BatchAdmitParams{Tenant: "acme", IdempotencyKey: "nightly"})
	require.NoError(t, err)
	require.NotNil(t, again.Admission)
	require.NoError(t, again.Admission.Abort(ctx))
}

package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
)

// The contract suite runs from internal/store; these tests cover the pool
// wiring only.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Open's Config maps onto the pool: MaxConns sizes it (over the URL's
// pool_max_conns), the session settings go in the startup parameters, and
// the URL's other pool settings still apply.
func TestPoolConfig(t *testing.T) {
	const url = "postgres://u@localhost/db?pool_max_conns=3&pool_max_conn_lifetime=5m"
	pc, err := postgres.PoolConfig(postgres.Config{URL: url, Schema: "Tenant_1"})
	require.NoError(t, err)
	require.EqualValues(t, postgres.MaxConnsDefault, pc.MaxConns)
	require.Equal(t, 5*time.Minute, pc.MaxConnLifetime)
	rp := pc.ConnConfig.RuntimeParams
	require.Equal(t, `"Tenant_1"`, rp["search_path"])
	require.Equal(t, "UTC", rp["timezone"])
	require.Equal(t, "agentfleet", rp["application_name"])
	require.NotContains(t, rp, "pool_max_conns", "pool settings must not reach the server")

	pc, err = postgres.PoolConfig(postgres.Config{URL: "postgres://u@localhost/db?application_name=dispatcher", MaxConns: 2})
	require.NoError(t, err)
	require.EqualValues(t, 2, pc.MaxConns)
	require.NotContains(t, pc.ConnConfig.RuntimeParams, "search_path", "no schema: the server's search_path")
	require.Equal(t, "dispatcher", pc.ConnConfig.RuntimeParams["application_name"])

	_, err = postgres.PoolConfig(postgres.Config{URL: url, MaxConns: 1 << 31})
	require.ErrorContains(t, err, "too large")
}

// Every pooled connection, not only the first, has the store's session
// settings; the pool never opens more than MaxConns; and a connection the
// server dropped while it sat idle is replaced, not handed out.
func TestPool(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const maxConns = 3
	s, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: schema, MaxConns: maxConns})
	require.NoError(t, err)
	defer s.Close()

	pids := map[uint32]bool{}
	var releases []func()
	releaseAll := func() {
		for _, release := range releases {
			release()
		}
		releases = nil
	}
	// Close waits for taken connections to come back: give them back
	// first even when the test fails while holding them.
	defer releaseAll()
	for range maxConns {
		x, release, err := postgres.AcquireSession(ctx, s)
		require.NoError(t, err)
		releases = append(releases, release)
		pids[x.PID] = true
		require.Equal(t, schema, x.Schema)
		require.Equal(t, pgx.Identifier{schema}.Sanitize(), x.SearchPath)
		require.Equal(t, "UTC", x.TimeZone)
		require.Equal(t, "agentfleet", x.AppName)
	}
	require.Len(t, pids, maxConns)

	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	_, _, err = postgres.AcquireSession(short, s)
	cancelShort()
	require.ErrorIs(t, err, context.DeadlineExceeded, "a connection beyond MaxConns")

	releaseAll()

	// Kill every pooled backend behind the pool's back, as a server
	// restart would; after a second idle each is pinged, found dead and
	// replaced.
	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	for pid := range pids {
		_, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, int32(pid))
		require.NoError(t, err)
	}
	time.Sleep(1100 * time.Millisecond)
	_, err = s.TenantCreate(ctx, store.TenantCreateParams{ID: "after-restart"})
	require.NoError(t, err)

	require.NoError(t, s.Close())
	_, err = s.TenantGetByID(ctx, "after-restart")
	require.Error(t, err, "a call after Close")
	require.False(t, errors.Is(err, store.ErrNotFound))
}

// A run's steps, events and model replies have no foreign key to it (their
// checks were most of a turn commit's cost); a trigger deletes them with
// the run instead, whatever the deleting session's search_path, and a
// deletion that cascades from a tenant reaches them too.
func TestRunDeletionTakesItsChildren(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: schema})
	require.NoError(t, err)
	defer s.Close()
	runOf := map[string]string{}
	for _, ten := range []string{"gone", "kept"} {
		_, err := s.TenantCreate(ctx, store.TenantCreateParams{ID: ten})
		require.NoError(t, err)
		for range 2 {
			r, err := s.RunCreate(ctx, store.RunCreateParams{Tenant: ten, Message: "task",
				Events: []agentfleet.Event{{Type: agentfleet.EventQueued}}})
			require.NoError(t, err)
			_, err = s.TurnLoad(ctx, store.TurnLoadParams{RunID: r.Run.ID, Turn: 1})
			require.NoError(t, err)
			_, err = s.ModelReplyRecord(ctx, store.ModelReplyRecordParams{ModelReply: store.ModelReply{
				RunID: r.Run.ID, Turn: 1, Content: "reply", Model: "m"}})
			require.NoError(t, err)
			_, err = s.TurnCommit(ctx, store.TurnCommitParams{RunID: r.Run.ID, Turn: 1, Status: agentfleet.StatusRunning,
				Args: []byte(`{}`), Steps: []agentfleet.Step{{Kind: agentfleet.StepModel, Content: "reply", Model: "m"}},
				Events: []agentfleet.Event{{Type: agentfleet.EventModelCall}}})
			require.NoError(t, err)
			runOf[r.Run.ID] = ten
		}
	}

	// Another session, on another search_path, deletes one tenant.
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `SET search_path = public`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `DELETE FROM `+pgx.Identifier{schema, "tenants"}.Sanitize()+` WHERE id = 'gone'`)
	require.NoError(t, err)

	for _, table := range []string{"steps", "events", "model_replies"} {
		rows, err := conn.Query(ctx, `SELECT run_id, count(*) FROM `+pgx.Identifier{schema, table}.Sanitize()+` GROUP BY run_id`)
		require.NoError(t, err)
		counts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
			run string
			n   int64
		}, error) {
			var x struct {
				run string
				n   int64
			}
			return x, r.Scan(&x.run, &x.n)
		})
		require.NoError(t, err)
		left := map[string]bool{}
		for _, c := range counts {
			require.Equal(t, "kept", runOf[c.run], "%s: a row of run %s is left", table, c.run)
			require.Positive(t, c.n)
			left[c.run] = true
		}
		require.Len(t, left, 2, "%s: the kept tenant's runs keep theirs", table)
	}
}

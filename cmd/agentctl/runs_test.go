package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
	"github.com/agentfleet/agentfleet/wire"
)

// cliFixture is a tenant "acme" of an API on SQLite and embedded NATS
// (no workers), the environment agentctl reads set to it.
type cliFixture struct {
	ctx      context.Context
	st       *sqlite.Store
	c        *client.Client
	agentctl func(args ...string) (code int, stdout, stderr string)
}

func newCLIFixture(t *testing.T) cliFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	b := bustest.Connect(t, bustest.StartServer(t))
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "cli.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	srv, err := api.New(api.Config{Store: st, Bus: b, AdminToken: "admin", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	tv, err := client.New(hs.URL, "admin").CreateTenant(ctx, wire.TenantRequest{ID: "acme"})
	require.NoError(t, err)
	t.Setenv("AGENTFLEET_URL", hs.URL)
	t.Setenv("AGENTFLEET_TOKEN", tv.APIKey)
	return cliFixture{ctx: ctx, st: st, c: client.New(hs.URL, tv.APIKey), agentctl: func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(ctx, args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}}
}

// agentctl runs rm deletes an ended run through the API, and says why it
// cannot when the run has not ended.
func TestRunsRm(t *testing.T) {
	f := newCLIFixture(t)
	ctx, st, c, agentctl := f.ctx, f.st, f.c, f.agentctl
	queued, err := c.CreateRun(ctx, wire.RunCreateRequest{Message: "m"})
	require.NoError(t, err)
	code, _, stderr := agentctl("runs", "rm", queued.ID)
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "cancel it first")

	_, err = st.RunCancel(ctx, store.RunCancelParams{ID: queued.ID, Events: []agentfleet.Event{{Type: agentfleet.EventCancelled}}})
	require.NoError(t, err)
	code, stdout, _ := agentctl("runs", "rm", queued.ID)
	require.Equal(t, exitOK, code)
	require.Equal(t, "run "+queued.ID+" deleted\n", stdout)
	_, err = c.GetRun(ctx, queued.ID)
	require.True(t, client.IsNotFound(err), "got %v", err)

	code, _, stderr = agentctl("runs", "rm")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "runs rm takes one RUN id")
}

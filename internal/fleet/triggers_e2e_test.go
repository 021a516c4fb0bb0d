package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/bus/bustest"
	"github.com/agentfleet/agentfleet/internal/fleet"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/postgres"
	"github.com/agentfleet/agentfleet/internal/store/postgres/pgtest"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
	"github.com/agentfleet/agentfleet/internal/webhook"
	"github.com/agentfleet/agentfleet/wire"
)

// testSecrets is the test fleets' AGENTFLEET_SECRETS_KEY.
var testSecrets = func() *secrets.Box {
	b, err := secrets.ParseKey(secrets.NewKey())
	if err != nil {
		panic(err)
	}
	return b
}()

// sendHook signs body as a GitHub sender would and posts it to tv's hook.
func sendHook(t *testing.T, c *client.Client, tv wire.TriggerView, secret, delivery, event string, body []byte) client.HookResult {
	t.Helper()
	h, err := webhook.Sign(webhook.Scheme(tv.Scheme), secret, body, delivery, event, time.Now())
	require.NoError(t, err)
	res, err := c.SendHook(t.Context(), tv.URL, h, body)
	require.NoError(t, err)
	return res
}

// A GitHub delivery, over real HTTP, starts a run that the workers
// complete; its metadata and queued event name the trigger and the
// delivery; the dispatcher's metrics listener counts it. On SQLite and
// on PostgreSQL.
func TestFleetWebhookStartsARun(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			o := fleetOptions{responder: threeTurns}
			if backend == "postgres" {
				o.store = pgtest.Open(t)
			}
			f := setupFleetWith(t, o)
			tv, err := f.tenant.CreateTrigger(f.ctx, wire.TriggerRequest{
				Name: new("numbers"), Scheme: new("github"), Events: &[]string{"issues.opened"},
				Message: new("compute {{.payload.issue.number}}"), SessionID: new("{{slug .payload.repository.full_name}}"),
			})
			require.NoError(t, err)
			body := []byte(`{"action":"opened","issue":{"number":20},"repository":{"full_name":"acme/numbers"}}`)
			res := sendHook(t, apiClient(t, f.dispatcher.URL(), ""), tv, tv.Secret, "gh-1", "issues", body)
			require.Equal(t, http.StatusAccepted, res.Status)
			run := f.wait(res.Answer.RunID, 30*time.Second)
			require.Equal(t, agentfleet.StatusCompleted, run.Status, run.Error)
			require.JSONEq(t, `"result 41"`, string(run.Answer))
			require.Equal(t, "acme-numbers", run.SessionID)
			require.Equal(t, map[string]string{"trigger": tv.ID, "delivery": "gh-1", "event": "issues.opened"}, run.Metadata)
			queued := f.events(run.ID)[0]
			require.Equal(t, agentfleet.EventQueued, queued.Type)
			var args map[string]string
			require.NoError(t, json.Unmarshal(queued.Args, &args))
			require.Equal(t, tv.ID, args["trigger"])
			require.Equal(t, "gh-1", args["delivery"])
			f.requireStreamMatchesStore(run)

			metrics := httpGet(t, f.dispatcher.MetricsURL())
			require.Contains(t, metrics, `agentfleet_webhook_deliveries_total{outcome="accepted",scheme="github"} 1`)
			require.Contains(t, metrics, `agentfleet_webhook_intake_seconds_count{scheme="github"} 1`)
		})
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// restartable returns start, which runs a dispatcher (with the test
// secrets, and cfg as mod leaves it) on a store of backend ("sqlite" or
// "postgres"), opened again each time, and one NATS server, until the
// stop it returns: a restart as a dispatcher process makes one.
func restartable(t *testing.T, backend string, mod func(*fleet.DispatcherConfig)) func() (*fleet.Dispatcher, func()) {
	var open func(ctx context.Context) (store.Store, error)
	if backend == "postgres" {
		url, schema := pgtest.Schema(t)
		open = func(ctx context.Context) (store.Store, error) {
			return postgres.Open(ctx, postgres.Config{URL: url, Schema: schema})
		}
	} else {
		path := filepath.Join(t.TempDir(), "fleet.db")
		open = func(ctx context.Context) (store.Store, error) { return sqlite.Open(ctx, sqlite.Config{Path: path}) }
	}
	emb := bustest.StartServer(t)
	b := bustest.Connect(t, emb)
	return func() (*fleet.Dispatcher, func()) {
		t.Helper()
		st, err := open(t.Context())
		require.NoError(t, err)
		cfg := fleet.DispatcherConfig{
			Listen: "127.0.0.1:0", AdminToken: "admin-secret", Store: st, Bus: b, Secrets: testSecrets,
			Logger: slog.New(slog.DiscardHandler),
		}
		if mod != nil {
			mod(&cfg)
		}
		d, err := fleet.NewDispatcher(cfg)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); _ = d.Run(ctx) }()
		stopped := false
		stop := func() {
			if !stopped {
				stopped = true
				cancel()
				<-done
				_ = st.Close()
			}
		}
		t.Cleanup(stop)
		return d, stop
	}
}

// A sender's retry of a delivery after the dispatcher restarted (store
// reopened, caches gone) answers the run the first delivery started:
// 200, the same run id, and no second run. On SQLite and on PostgreSQL.
func TestFleetWebhookRetryAfterRestartIsTheSameRun(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			start := restartable(t, backend, nil)
			ctx := t.Context()
			d1, stop1 := start()
			tv, err := apiClient(t, d1.URL(), "admin-secret").CreateTenant(ctx, wire.TenantRequest{ID: "acme"})
			require.NoError(t, err)
			tenant := apiClient(t, d1.URL(), tv.APIKey)
			trig, err := tenant.CreateTrigger(ctx, wire.TriggerRequest{Name: new("t"), Scheme: new("github")})
			require.NoError(t, err)
			body := []byte(`{"action":"opened","number":1}`)
			first := sendHook(t, apiClient(t, d1.URL(), ""), trig, trig.Secret, "retried-1", "pull_request", body)
			require.Equal(t, http.StatusAccepted, first.Status)
			stop1()

			d2, stop2 := start()
			defer stop2()
			again := sendHook(t, apiClient(t, d2.URL(), ""), trig, trig.Secret, "retried-1", "pull_request", body)
			require.Equal(t, http.StatusOK, again.Status)
			require.Equal(t, first.Answer.RunID, again.Answer.RunID)
			tenant = apiClient(t, d2.URL(), tv.APIKey)
			runs, err := tenant.ListRuns(ctx, client.ListRunsParams{})
			require.NoError(t, err)
			require.Len(t, runs.Runs, 1, "no second run")
			log, err := tenant.ListDeliveries(ctx, trig.ID, 0, "")
			require.NoError(t, err)
			var outcomes []string
			for _, d := range log.Deliveries {
				outcomes = append(outcomes, fmt.Sprintf("%s %s %s", d.Delivery, d.Outcome, d.RunID))
			}
			require.Equal(t, []string{
				"retried-1 duplicate " + first.Answer.RunID,
				"retried-1 accepted " + first.Answer.RunID,
			}, outcomes)
		})
	}
}

// The hook takes no bearer token and needs none; the trigger endpoints
// take only a tenant key.
func TestFleetWebhookAuth(t *testing.T) {
	f := setupFleet(t, threeTurns, 0)
	tv, err := f.tenant.CreateTrigger(f.ctx, wire.TriggerRequest{Name: new("t"), Scheme: new("hmac"), Message: new("compute 1")})
	require.NoError(t, err)
	_, err = apiClient(t, f.dispatcher.URL(), "").ListTriggers(f.ctx, 0, "")
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusUnauthorized, apiErr.Status)
	res := sendHook(t, apiClient(t, f.dispatcher.URL(), "not-a-key"), tv, tv.Secret, "h1", "", []byte(`{}`))
	require.Equal(t, http.StatusAccepted, res.Status)
	require.True(t, strings.HasPrefix(tv.URL, "/v1/hooks/"))
}

// A signed GitHub body replayed under a new delivery id after the
// dispatcher restarted (caches gone: the store holds the digest) answers
// 200 with the first delivery's run and starts none. On SQLite and on
// PostgreSQL.
func TestFleetWebhookReplayUnderNewDeliveryID(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			start := restartable(t, backend, nil)
			ctx := t.Context()
			d1, stop1 := start()
			tv, err := apiClient(t, d1.URL(), "admin-secret").CreateTenant(ctx, wire.TenantRequest{ID: "acme"})
			require.NoError(t, err)
			trig, err := apiClient(t, d1.URL(), tv.APIKey).CreateTrigger(ctx, wire.TriggerRequest{Name: new("t"), Scheme: new("github")})
			require.NoError(t, err)
			body := []byte(`{"action":"opened","number":1}`)
			first := sendHook(t, apiClient(t, d1.URL(), ""), trig, trig.Secret, "orig-1", "pull_request", body)
			require.Equal(t, http.StatusAccepted, first.Status)
			stop1()

			d2, stop2 := start()
			defer stop2()
			hook := apiClient(t, d2.URL(), "")
			for _, id := range []string{"replay-1", "replay-2"} {
				again := sendHook(t, hook, trig, trig.Secret, id, "pull_request", body)
				require.Equal(t, http.StatusOK, again.Status, id)
				require.Equal(t, first.Answer.RunID, again.Answer.RunID, id)
			}
			runs, err := apiClient(t, d2.URL(), tv.APIKey).ListRuns(ctx, client.ListRunsParams{})
			require.NoError(t, err)
			require.Len(t, runs.Runs, 1, "no second run")
		})
	}
}

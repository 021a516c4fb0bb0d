package fleet_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/egress"
	"github.com/agentfleet/agentfleet/internal/fleet"
	"github.com/agentfleet/agentfleet/internal/webhook"
	"github.com/agentfleet/agentfleet/wire"
)

// testEgress lets the test fleets' callbacks reach receivers on loopback,
// as AGENTFLEET_EGRESS_ALLOW=127.0.0.1 would.
var testEgress = egress.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}

// callbackReceiver records the callbacks it gets and answers each with
// the status status() gives.
type callbackReceiver struct {
	srv    *httptest.Server
	got    chan receivedCallback
	status atomic.Int32
}

type receivedCallback struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, status int) *callbackReceiver {
	rc := &callbackReceiver{got: make(chan receivedCallback, 16)}
	rc.status.Store(int32(status))
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.got <- receivedCallback{header: r.Header.Clone(), body: b}
		w.WriteHeader(int(rc.status.Load()))
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *callbackReceiver) next(t *testing.T) receivedCallback {
	t.Helper()
	select {
	case c := <-rc.got:
		return c
	case <-time.After(20 * time.Second):
		t.Fatal("no callback arrived")
		panic("unreachable")
	}
}

// requireSigned checks a callback's Standard Webhooks signature under the
// tenant's callback secret, and its webhook-id.
func requireSigned(t *testing.T, c receivedCallback, secret, runID string) agentfleet.Run {
	t.Helper()
	require.NoError(t, webhook.Verify(webhook.Standard, []string{secret}, c.header, c.body, time.Now()))
	require.Equal(t, "run_"+runID+"_end", c.header.Get(webhook.HeaderStandardID))
	var run agentfleet.Run
	require.NoError(t, json.Unmarshal(c.body, &run))
	require.Equal(t, runID, run.ID)
	return run
}

// A run with a callback_url: when it completes its final view is POSTed,
// signed under the tenant's callback secret (made with the tenant, shown
// once); a failed attempt is tried again with the same webhook-id, and
// both attempts are in the run's view.
func TestFleetRunCallback(t *testing.T) {
	f := setupFleet(t, threeTurns, 0)
	tv, err := f.admin.CreateTenant(f.ctx, wire.TenantRequest{ID: "cb"})
	require.NoError(t, err)
	require.Regexp(t, `^whsec_`, tv.CallbackSecret)
	c := apiClient(t, f.dispatcher.URL(), tv.APIKey)
	rc := newReceiver(t, http.StatusServiceUnavailable)

	run, err := c.CreateRun(f.ctx, wire.RunCreateRequest{Message: "compute 5", CallbackURL: rc.srv.URL + "/done"})
	require.NoError(t, err)
	first := rc.next(t)
	rc.status.Store(http.StatusNoContent)
	second := rc.next(t)
	for _, cb := range []receivedCallback{first, second} {
		got := requireSigned(t, cb, tv.CallbackSecret, run.ID)
		require.Equal(t, agentfleet.StatusCompleted, got.Status)
		require.JSONEq(t, `"result 11"`, string(got.Answer))
	}
	require.Equal(t, first.body, second.body)

	view := waitDelivered(t, c, run.ID)
	require.Equal(t, 2, view.Callback.Attempts)
	require.Equal(t, http.StatusServiceUnavailable, view.Callback.Log[0].Status)
	require.Contains(t, view.Callback.Log[0].Error, "503")
	require.Equal(t, http.StatusNoContent, view.Callback.Log[1].Status)
	require.Empty(t, view.Callback.Log[1].Error)
	require.Contains(t, httpGet(t, f.dispatcher.MetricsURL()), `agentfleet_callbacks_total{outcome="delivered"} 1`)

	// A rotated secret signs the callbacks from then on.
	rot, err := c.RotateCallbackSecret(f.ctx, "cb")
	require.NoError(t, err)
	require.NotEqual(t, tv.CallbackSecret, rot.CallbackSecret)
	run2, err := c.CreateRun(f.ctx, wire.RunCreateRequest{Message: "compute 1", CallbackURL: rc.srv.URL})
	require.NoError(t, err)
	requireSigned(t, rc.next(t), rot.CallbackSecret, run2.ID)
	_, err = apiClient(t, f.dispatcher.URL(), f.tenant.Token).RotateCallbackSecret(f.ctx, "cb")
	require.True(t, client.IsNotFound(err), "another tenant's: %v", err)

	// A trigger's callback_url goes with the runs it starts.
	trig, err := c.CreateTrigger(f.ctx, wire.TriggerRequest{Name: new("t"), Scheme: new("hmac"), Message: new("compute 2"), CallbackURL: new(rc.srv.URL)})
	require.NoError(t, err)
	res := sendHook(t, apiClient(t, f.dispatcher.URL(), ""), trig, trig.Secret, "d1", "", []byte(`{}`))
	requireSigned(t, rc.next(t), rot.CallbackSecret, res.Answer.RunID)
}

// The guard refuses a callback_url on loopback unless the operator
// allowed it, and says how.
func TestFleetRunCallbackGuard(t *testing.T) {
	d, _ := restartable(t, "sqlite", nil)()
	tv, err := apiClient(t, d.URL(), "admin-secret").CreateTenant(t.Context(), wire.TenantRequest{ID: "acme"})
	require.NoError(t, err)
	c := apiClient(t, d.URL(), tv.APIKey)
	for _, u := range []string{"http://127.0.0.1:9/cb", "http://localhost:9/cb", "http://10.1.2.3/cb"} {
		_, err = c.CreateRun(t.Context(), wire.RunCreateRequest{Message: "x", CallbackURL: u})
		var apiErr *client.Error
		require.ErrorAs(t, err, &apiErr, u)
		require.Equal(t, http.StatusUnprocessableEntity, apiErr.Status, u)
		require.Contains(t, apiErr.Message, "blocked by the network guard", u)
		require.Contains(t, apiErr.Message, "AGENTFLEET_EGRESS_ALLOW", u)
	}
	// A metadata address is refused too, and no allow-list would open it.
	for _, u := range []string{"http://169.254.169.254/latest", "http://168.63.129.16/machine", "http://[fd20:ce::254]/", "http://169.254.170.23/v1/credentials"} {
		_, err = c.CreateRun(t.Context(), wire.RunCreateRequest{Message: "x", CallbackURL: u})
		var apiErr *client.Error
		require.ErrorAs(t, err, &apiErr, u)
		require.Equal(t, http.StatusUnprocessableEntity, apiErr.Status, u)
		require.Contains(t, apiErr.Message, "is a cloud metadata address, which nothing opens", u)
		require.NotContains(t, apiErr.Message, "AGENTFLEET_EGRESS_ALLOW", u)
	}
	_, err = c.CreateRun(t.Context(), wire.RunCreateRequest{Message: "x", CallbackURL: "ftp://example.com/"})
	require.ErrorContains(t, err, "absolute http")
}

// waitDelivered waits until a run's callback is recorded delivered: the
// receiver has the request before the dispatcher records its answer.
func waitDelivered(t *testing.T, c *client.Client, runID string) wire.RunView {
	t.Helper()
	var v wire.RunView
	require.Eventually(t, func() bool {
		var err error
		v, err = c.GetRunView(t.Context(), runID)
		return err == nil && v.Callback != nil && v.Callback.State == "delivered"
	}, 10*time.Second, 5*time.Millisecond, "callback of run %s", runID)
	return v
}

// The callback outbox is durable: an attempt that failed before the
// dispatcher stopped is made again by the next one. On SQLite and on
// PostgreSQL.
func TestFleetRunCallbackSurvivesARestart(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			start := restartable(t, backend, func(c *fleet.DispatcherConfig) {
				c.Egress, c.CallbackInterval, c.CallbackBackoff = testEgress, 20*time.Millisecond, 10*time.Millisecond
			})
			ctx := t.Context()
			rc := newReceiver(t, http.StatusInternalServerError)

			d1, stop1 := start()
			tv, err := apiClient(t, d1.URL(), "admin-secret").CreateTenant(ctx, wire.TenantRequest{ID: "acme"})
			require.NoError(t, err)
			c := apiClient(t, d1.URL(), tv.APIKey)
			// No worker runs: the run ends by being cancelled.
			run, err := c.CreateRun(ctx, wire.RunCreateRequest{Message: "wait", CallbackURL: rc.srv.URL})
			require.NoError(t, err)
			_, err = c.CancelRun(ctx, run.ID)
			require.NoError(t, err)
			requireSigned(t, rc.next(t), tv.CallbackSecret, run.ID)
			// The failed attempt is recorded (the receiver has the
			// request before its answer is), then the dispatcher stops.
			require.Eventually(t, func() bool {
				v, err := c.GetRunView(ctx, run.ID)
				return err == nil && v.Callback != nil && v.Callback.Attempts > 0
			}, 10*time.Second, 5*time.Millisecond)
			stop1()
			rc.status.Store(http.StatusOK)
			for len(rc.got) > 0 {
				<-rc.got // attempts made before the stop
			}

			d2, stop2 := start()
			defer stop2()
			got := requireSigned(t, rc.next(t), tv.CallbackSecret, run.ID)
			require.Equal(t, agentfleet.StatusCancelled, got.Status)
			v := waitDelivered(t, apiClient(t, d2.URL(), tv.APIKey), run.ID)
			require.GreaterOrEqual(t, v.Callback.Attempts, 2)
			last := v.Callback.Log[len(v.Callback.Log)-1]
			require.Equal(t, http.StatusOK, last.Status)
			require.Equal(t, http.StatusInternalServerError, v.Callback.Log[0].Status)
		})
	}
}

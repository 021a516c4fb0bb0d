package api_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/webhook"
	"github.com/agentfleet/agentfleet/wire"
)

// The intake's guards (docs/api.md, "Webhook triggers"): a GitHub body replayed under a new
// delivery id, an hmac id changed, a timestamp far ahead, a stranger
// flooding the log, unknown ids, and the per-tenant stream cap and the
// server's timeouts.

func (e *env) runCount(tenant string) int {
	e.t.Helper()
	list, err := e.store.RunList(e.ctx, store.RunListParams{Tenant: tenant})
	require.NoError(e.t, err)
	return len(list.Runs)
}

// A signed GitHub body sent again under a new delivery id is the first
// delivery's run: 200 naming it, no second run, the log saying why. A
// different body under the new id is a run of its own.
func TestHookGitHubReplayUnderNewDeliveryID(t *testing.T) {
	e := newEnv(t, withSecrets(nil))
	key := e.tenant("acme")
	tv := e.createTrigger(key, map[string]any{"name": "gh", "scheme": "github", "message": "Issue {{.payload.n}}"})
	body := []byte(`{"action":"opened","n":1}`)
	first := decode[wire.HookAnswer](t, e.signed(tv, tv.Secret, "d-1", "issues", body), http.StatusAccepted)
	for _, id := range []string{"d-2", "d-3", "d-1"} {
		again := decode[wire.HookAnswer](t, e.signed(tv, tv.Secret, id, "issues", body), http.StatusOK)
		require.Equal(t, first.RunID, again.RunID, "delivery %s", id)
		require.Equal(t, id, again.Delivery)
	}
	require.Equal(t, 1, e.runCount("acme"), "one run from one signed body")
	ds := e.deliveries(key, tv.ID)
	require.Equal(t, "d-3", ds[1].Delivery)
	require.Equal(t, "duplicate", ds[1].Outcome)
	require.Equal(t, first.RunID, ds[1].RunID)
	require.Contains(t, ds[1].Reason, "d-1")
	require.Contains(t, ds[1].Reason, "replay")

	other := decode[wire.HookAnswer](t, e.signed(tv, tv.Secret, "d-2", "issues", []byte(`{"action":"opened","n":2}`)), http.StatusAccepted)
	require.NotEqual(t, first.RunID, other.RunID)
	// The test endpoint's deliveries, the tenant's own, are not deduped
	// on their body.
	for range 2 {
		decode[wire.HookAnswer](t, e.do("POST", "/v1/triggers/"+tv.ID+"/test", key,
			map[string]any{"event": "issues", "payload": map[string]any{"action": "opened", "n": 9}}), http.StatusAccepted)
	}
	require.Equal(t, 4, e.runCount("acme"))
}

// hmac signs its id and timestamp with the body: a captured delivery
// sent again under another id is refused, and starts nothing.
func TestHookHMACSignsItsID(t *testing.T) {
	e := newEnv(t, withSecrets(nil))
	key := e.tenant("acme")
	tv := e.createTrigger(key, map[string]any{"name": "h", "scheme": "hmac"})
	body := []byte(`{"ok":true}`)
	h, err := webhook.Sign(webhook.HMAC, tv.Secret, body, "h-1", "", time.Now())
	require.NoError(t, err)
	require.NotEmpty(t, h.Get("X-Agentfleet-Id"))
	require.NotEmpty(t, h.Get("X-Agentfleet-Timestamp"))
	require.True(t, strings.HasPrefix(h.Get("X-Agentfleet-Signature"), "sha256="))
	decode[wire.HookAnswer](t, e.hook(tv.ID, h, body), http.StatusAccepted)
	for _, id := range []string{"h-2", "h-3"} {
		h.Set("X-Agentfleet-Id", id)
		requireError(t, e.hook(tv.ID, h, body), http.StatusUnauthorized, "bad_signature", "X-Agentfleet-Signature")
	}
	require.Equal(t, 1, e.runCount("acme"))
}

// A correctly signed delivery stamped far in the future (a time.Duration
// would saturate) is refused naming its timestamp header, for every
// timestamped scheme, and starts nothing.
func TestHookFarFutureTimestamp(t *testing.T) {
	e := newEnv(t, withSecrets(nil))
	key := e.tenant("acme")
	far := time.Unix(99999999999, 0)
	for _, tc := range []struct{ scheme, header string }{
		{"standard", webhook.HeaderStandardTime},
		{"stripe", webhook.HeaderStripeSignature},
		{"hmac", "X-Agentfleet-Timestamp"},
	} {
		tv := e.createTrigger(key, map[string]any{"name": tc.scheme, "scheme": tc.scheme})
		body := []byte(`{"id":"evt_far","type":"x"}`)
		h, err := webhook.Sign(webhook.Scheme(tc.scheme), tv.Secret, body, "far-1", "x", far)
		require.NoError(t, err)
		requireError(t, e.hook(tv.ID, h, body), http.StatusUnauthorized, "bad_signature", tc.header, "timestamp")
	}
	require.Zero(t, e.runCount("acme"))
}

// unloggedCount is agentfleet_webhook_refusals_unlogged_total{scheme}.
func unloggedCount(t *testing.T, reg *prometheus.Registry, scheme string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "agentfleet_webhook_refusals_unlogged_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == scheme {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A stranger's flood of refused deliveries leaves at most 60 lines a
// minute in the trigger's log, the rest counted, so the lines of the
// deliveries that counted survive; the unsigned ones are refused
// before their body is read.
func TestHookRefusalsCannotFlushTheLog(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, withSecrets(reg), func(c *api.Config) { c.DeliveryLogKeep = 100 })
	key := e.tenant("acme")
	tv := e.createTrigger(key, map[string]any{"name": "gh", "scheme": "github", "max_body_bytes": 1024})
	for i := range 5 {
		decode[wire.HookAnswer](t, e.signed(tv, tv.Secret, fmt.Sprintf("ok-%d", i), "push", fmt.Appendf(nil, `{"n":%d}`, i)), http.StatusAccepted)
	}
	const flood = 150
	for i := range flood {
		h := http.Header{webhook.HeaderGitHubDelivery: {fmt.Sprintf("bad-%d", i)}, webhook.HeaderGitHubEvent: {"push"}}
		if i%2 == 0 {
			h.Set(webhook.HeaderGitHubSignature, "sha256="+strings.Repeat("0", 64))
		}
		requireError(t, e.hook(tv.ID, h, []byte(`{"n":"forged"}`)), http.StatusUnauthorized, "bad_signature")
	}
	page := decode[wire.DeliveryList](t, e.do("GET", "/v1/triggers/"+tv.ID+"/deliveries?limit=500", key, nil), http.StatusOK)
	var rejected, accepted int
	for _, d := range page.Deliveries {
		switch d.Outcome {
		case "rejected":
			rejected++
		case "accepted":
			accepted++
		}
	}
	require.Equal(t, 60, rejected, "at most 60 refusals a minute are logged")
	require.Equal(t, 5, accepted, "the accepted deliveries' lines survive")
	require.Equal(t, float64(flood-60), unloggedCount(t, reg, "github"))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	require.NoError(t, err)
	require.Empty(t, problems)
	require.Equal(t, float64(flood), hookCount(t, reg, "github", "rejected"), "every refusal is counted")
	require.Zero(t, e.runCount("acme")-5)

	// Unsigned, with a body over the limit: refused for its signature,
	// unread.
	h := http.Header{webhook.HeaderGitHubDelivery: {"big"}, webhook.HeaderGitHubEvent: {"push"}}
	requireError(t, e.hook(tv.ID, h, bytes.Repeat([]byte("x"), 64<<10)), http.StatusUnauthorized, "bad_signature", "missing")
	// Signed, declaring a length over the limit: 413 before the read.
	big := bytes.Repeat([]byte("x"), 2048)
	var hs http.Header
	hs, err = webhook.Sign(webhook.GitHub, tv.Secret, big, "big-2", "push", time.Now())
	require.NoError(t, err)
	requireError(t, e.hook(tv.ID, hs, big), http.StatusRequestEntityTooLarge, "payload_too_large", "max_body_bytes")
}

// triggerLookups counts the store's trigger lookups by id.
type triggerLookups struct {
	store.Store
	n atomic.Int64
}

func (c *triggerLookups) TriggerGetByID(ctx context.Context, p store.TriggerGetByIDParams) (store.Trigger, error) {
	c.n.Add(1)
	return c.Store.TriggerGetByID(ctx, p)
}

// An unknown hook id costs one store lookup, then is refused from the
// cache; a trigger made under that id later is found once the short
// unknown TTL passes (one made through this dispatcher's API at once).
func TestHookUnknownIDCached(t *testing.T) {
	box, err := secrets.ParseKey(secrets.NewKey())
	require.NoError(t, err)
	var cs *triggerLookups
	e := newEnv(t, func(c *api.Config) {
		cs = &triggerLookups{Store: c.Store}
		c.Store, c.Secrets, c.UnknownKeyTTL = cs, box, 300*time.Millisecond
	})
	key := e.tenant("acme")
	const id = "0190aaaa-0000-7000-8000-000000000001"
	for range 3 {
		requireError(t, e.hook(id, http.Header{}, []byte(`{}`)), http.StatusNotFound, "not_found")
	}
	require.Equal(t, int64(1), cs.n.Load(), "one lookup for three deliveries to an unknown id")
	requireError(t, e.hook(strings.Repeat("x", 200), http.Header{}, []byte(`{}`)), http.StatusNotFound, "not_found")
	require.Equal(t, int64(1), cs.n.Load(), "no lookup for an id that cannot be a trigger's")

	// Made behind the API's back (as on another dispatcher).
	secret := "a-secret-of-the-test-0123"
	sealed, err := box.Seal(secret, id)
	require.NoError(t, err)
	_, err = e.store.TriggerCreate(e.ctx, store.TriggerCreateParams{ID: id, Tenant: "acme", Name: "late", Scheme: "hmac", Secret: sealed, Enabled: true, Message: "late"})
	require.NoError(t, err)
	tv := wire.TriggerView{ID: id, Scheme: "hmac"}
	require.Eventually(t, func() bool {
		return e.signed(tv, secret, "late-1", "", []byte(`{}`)).status == http.StatusAccepted
	}, 5*time.Second, 50*time.Millisecond)

	// Through the API: known at once, though its id was never seen.
	made := e.createTrigger(key, map[string]any{"name": "now", "scheme": "hmac"})
	decode[wire.HookAnswer](t, e.signed(made, made.Secret, "now-1", "", []byte(`{}`)), http.StatusAccepted)
}

// A tenant holds at most AGENTFLEET_TENANT_STREAMS (64) event streams and
// ?wait polls at once: the 65th is 429 with Retry-After, while another
// tenant still gets its stream, and a closed stream makes room.
func TestTenantStreamCap(t *testing.T) {
	e := newEnv(t)
	acme, other := e.tenant("acme"), e.tenant("other")
	streams := make([]*sseStream, 0, api.TenantStreamsDefault)
	for i := range api.TenantStreamsDefault {
		path := "/v1/events"
		if i%2 == 1 {
			path += "?after=0"
		}
		s := e.openEvents(acme, path)
		s.position()
		streams = append(streams, s)
	}
	r := e.tryStream(acme, "/v1/events")
	requireError(t, r, http.StatusTooManyRequests, "too_many_streams", "AGENTFLEET_TENANT_STREAMS", "64")
	require.Equal(t, "5", r.header.Get("Retry-After"))
	run := e.createRun(acme, map[string]any{"message": "hi"})
	requireError(t, e.tryStream(acme, "/v1/runs/"+run.ID+"/events"), http.StatusTooManyRequests, "too_many_streams")
	e.openEvents(other, "/v1/events").position()

	_ = streams[0].resp.Body.Close()
	require.Eventually(t, func() bool { return e.tryStream(acme, "/v1/events").status == http.StatusOK },
		waitFor, 20*time.Millisecond, "a closed stream makes room")
}

// tryStream opens a stream and answers its status, with the body of a
// refusal; an open stream is closed at once.
func (e *env) tryStream(key, path string) reply {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, waitFor)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+path, nil)
	require.NoError(e.t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode, header: resp.Header}
	if r.status != http.StatusOK {
		r.body, err = io.ReadAll(resp.Body)
		require.NoError(e.t, err)
	}
	return r
}

// The API's HTTP server sets read, write and idle timeouts, and an event
// stream outlives them: each of its writes gets a deadline of its own.
func TestServerTimeoutsSpareStreams(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e := newEnv(t, func(c *api.Config) { c.ReadTimeout, c.WriteTimeout = timeout, timeout })
	def := newEnv(t).api.HTTPServer()
	require.Equal(t, api.ReadTimeoutDefault, def.ReadTimeout)
	require.Equal(t, api.WriteTimeoutDefault, def.WriteTimeout)
	require.Equal(t, api.IdleTimeoutDefault, def.IdleTimeout)
	require.NotZero(t, def.ReadHeaderTimeout)

	hs := e.api.HTTPServer()
	require.Equal(t, timeout, hs.WriteTimeout)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	base := "http://" + ln.Addr().String()

	key := e.tenant("acme")
	req, err := http.NewRequestWithContext(e.ctx, "GET", base+"/v1/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	s := &sseStream{t: t, resp: resp, rd: bufio.NewReader(resp.Body)}
	s.position()
	start := time.Now()
	for i := 0; time.Since(start) < 6*timeout; i++ {
		time.Sleep(timeout / 2) // the stream is idle between events
		run := e.createRun(key, map[string]any{"message": fmt.Sprintf("n %d", i)})
		e.publishTurn(run.ID)
		for {
			_, ev := s.tenantFrame()
			if ev.RunID == run.ID && ev.Terminal() {
				break
			}
		}
	}
	// A plain request on the same server still answers.
	r, err := http.Get(base + "/healthz")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	require.Equal(t, http.StatusOK, r.StatusCode)
}

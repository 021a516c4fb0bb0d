package api_test

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/webhook"
	"github.com/agentfleet/agentfleet/wire"
)

// withSecrets gives the server a secrets key (and a metrics registry).
func withSecrets(reg *prometheus.Registry) func(*api.Config) {
	return func(c *api.Config) {
		box, _ := secrets.ParseKey(secrets.NewKey())
		c.Secrets = box
		if reg != nil {
			c.Registerer = reg
		}
	}
}

func (e *env) createTrigger(key string, body map[string]any) wire.TriggerView {
	e.t.Helper()
	return decode[wire.TriggerView](e.t, e.do("POST", "/v1/triggers", key, body), http.StatusCreated)
}

// hook posts a delivery to a trigger's hook with exactly these headers
// and body.
func (e *env) hook(id string, h http.Header, body []byte) reply {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.ctx, "POST", e.srv.URL+"/v1/hooks/"+id, bytes.NewReader(body))
	require.NoError(e.t, err)
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return reply{status: resp.StatusCode, header: resp.Header, body: data}
}

// signed posts body to trigger tv signed under secret as its scheme's
// sender would.
func (e *env) signed(tv wire.TriggerView, secret, delivery, event string, body []byte) reply {
	e.t.Helper()
	h, err := webhook.Sign(webhook.Scheme(tv.Scheme), secret, body, delivery, event, time.Now())
	require.NoError(e.t, err)
	return e.hook(tv.ID, h, body)
}

func (e *env) deliveries(key, id string) []wire.DeliveryView {
	e.t.Helper()
	return decode[wire.DeliveryList](e.t, e.do("GET", "/v1/triggers/"+id+"/deliveries", key, nil), http.StatusOK).Deliveries
}

func TestTriggerNeedsTheSecretsKey(t *testing.T) {
	e := newEnv(t)
	key := e.tenant("acme")
	r := e.do("POST", "/v1/triggers", key, map[string]any{"name": "x", "scheme": "github"})
	requireError(t, r, http.StatusServiceUnavailable, "secrets_key_missing", "AGENTFLEET_SECRETS_KEY", "openssl rand -base64 32")
	// Everything else still works.
	e.createRun(key, map[string]any{"message": "hi"})
}

func TestTriggerCRUD(t *testing.T) {
	e := newEnv(t, withSecrets(nil))
	key, other := e.tenant("acme"), e.tenant("other")

	gh := e.createTrigger(key, map[string]any{"name": "reviews", "scheme": "github", "events": []string{"pull_request.opened"},
		"message": "Review PR {{.payload.number}}", "session_id": "{{slug .payload.repository.full_name}}", "max_turns": 7})
	require.Len(t, gh.Secret, 64, "a generated secret, shown once")
	require.Equal(t, "/v1/hooks/"+gh.ID, gh.URL)
	require.Equal(t, "default", gh.Agent)
	require.True(t, gh.Enabled)
	require.Equal(t, int64(api.HookBodyDefault), gh.MaxBodyBytes)
	std := e.createTrigger(key, map[string]any{"name": "std", "scheme": "standard"})
	require.True(t, strings.HasPrefix(std.Secret, "whsec_"))
	given := e.createTrigger(key, map[string]any{"name": "mine", "scheme": "hmac", "secret": "a-secret-of-my-own-choosing"})
	require.Empty(t, given.Secret, "a secret the user gave is not echoed")

	got := decode[wire.TriggerView](t, e.do("GET", "/v1/triggers/"+gh.ID, key, nil), http.StatusOK)
	require.Empty(t, got.Secret)
	require.Equal(t, []string{"pull_request.opened"}, got.Events)
	requireError(t, e.do("GET", "/v1/triggers/"+gh.ID, other, nil), http.StatusNotFound, "not_found")

	page := decode[wire.TriggerList](t, e.do("GET", "/v1/triggers?limit=2", key, nil), http.StatusOK)
	require.Equal(t, []string{given.ID, std.ID}, triggerIDs(page.Triggers), "newest first")
	rest := decode[wire.TriggerList](t, e.do("GET", "/v1/triggers?limit=2&cursor="+page.NextCursor, key, nil), http.StatusOK)
	require.Equal(t, []string{gh.ID}, triggerIDs(rest.Triggers))
	require.Empty(t, rest.NextCursor)
	requireError(t, e.do("GET", "/v1/triggers?cursor=zzz", key, nil), http.StatusBadRequest, "bad_request", "cursor")
	require.Empty(t, decode[wire.TriggerList](t, e.do("GET", "/v1/triggers", other, nil), http.StatusOK).Triggers)

	// Update: only what is given; rotate shows the new secret once.
	up := decode[wire.TriggerView](t, e.do("PATCH", "/v1/triggers/"+gh.ID, key, map[string]any{"enabled": false}), http.StatusOK)
	require.False(t, up.Enabled)
	require.Equal(t, 7, up.MaxTurns)
	rot := decode[wire.TriggerView](t, e.do("PATCH", "/v1/triggers/"+gh.ID, key, map[string]any{"rotate_secret": true}), http.StatusOK)
	require.Len(t, rot.Secret, 64)
	require.NotEqual(t, gh.Secret, rot.Secret)
	require.NotNil(t, rot.PreviousSecretExpiresAt)
	require.WithinDuration(t, time.Now().Add(api.SecretGrace), *rot.PreviousSecretExpiresAt, time.Minute)
	requireError(t, e.do("PATCH", "/v1/triggers/"+gh.ID, key, map[string]any{"scheme": "stripe"}), http.StatusUnprocessableEntity, "unprocessable", "scheme cannot change")
	requireError(t, e.do("PATCH", "/v1/triggers/"+gh.ID, other, map[string]any{"enabled": true}), http.StatusNotFound, "not_found")

	// Bad input names what is wrong.
	for _, tc := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"name": "x"}, "scheme is required"},
		{map[string]any{"name": "x", "scheme": "gitlab"}, "not one of"},
		{map[string]any{"scheme": "github"}, "name is required"},
		{map[string]any{"name": "x", "scheme": "github", "message": "{{.payload.x"}, "message template"},
		{map[string]any{"name": "x", "scheme": "github", "session_id": "{{range .payload.a}}{{range .payload.b}}{{end}}{{end}}"}, "session_id template"},
		{map[string]any{"name": "x", "scheme": "github", "secret": "short"}, "secret"},
		{map[string]any{"name": "x", "scheme": "standard", "secret": "whsec_!!"}, "secret"},
		{map[string]any{"name": "x", "scheme": "github", "agent": "nobody"}, "unknown agent"},
		{map[string]any{"name": "x", "scheme": "github", "events": []string{"a b"}}, "events entry"},
		{map[string]any{"name": "x", "scheme": "github", "max_body_bytes": 26 << 20}, "max_body_bytes"},
	} {
		requireError(t, e.do("POST", "/v1/triggers", key, tc.body), http.StatusUnprocessableEntity, "unprocessable", tc.want)
	}
	requireError(t, e.do("POST", "/v1/triggers", adminToken, map[string]any{"name": "x", "scheme": "github"}),
		http.StatusUnprocessableEntity, "unprocessable", "API key")

	r := e.do("DELETE", "/v1/triggers/"+gh.ID, other, nil)
	requireError(t, r, http.StatusNotFound, "not_found")
	r = e.do("DELETE", "/v1/triggers/"+gh.ID, key, nil)
	require.Equal(t, http.StatusNoContent, r.status, r)
	requireError(t, e.do("GET", "/v1/triggers/"+gh.ID, key, nil), http.StatusNotFound, "not_found")
	requireError(t, e.hook(gh.ID, http.Header{}, []byte("{}")), http.StatusNotFound, "not_found")
}

func triggerIDs(ts []wire.TriggerView) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

// TestHookGitHub walks a GitHub trigger through every answer of the
// intake.
func TestHookGitHub(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, withSecrets(reg))
	key := e.tenant("acme")
	tv := e.createTrigger(key, map[string]any{"name": "reviews", "scheme": "github", "events": []string{"pull_request.opened"},
		"message": "Review PR {{.payload.number}}: {{.payload.pull_request.title}}", "session_id": "{{slug .payload.repository.full_name}}"})
	secret := tv.Secret
	pr := []byte(`{"action":"opened","number":42,"pull_request":{"title":"Fix it"},"repository":{"full_name":"Acme/Web"}}`)

	t.Run("accepted, then the retry gets the same run", func(t *testing.T) {
		e := e.sub(t)
		r := e.signed(tv, secret, "d-1", "pull_request", pr)
		ans := decode[wire.HookAnswer](t, r, http.StatusAccepted)
		require.Equal(t, "d-1", ans.Delivery)
		require.NotEmpty(t, ans.RunID)
		run := e.getRun(key, ans.RunID)
		require.Equal(t, "Review PR 42: Fix it", run.Message)
		require.Equal(t, "acme-web", run.SessionID)
		require.JSONEq(t, string(pr), string(run.Context))
		require.Equal(t, map[string]string{"trigger": tv.ID, "delivery": "d-1", "event": "pull_request.opened"}, run.Metadata)
		evs := e.storedEvents(run.ID)
		require.Equal(t, agentfleet.EventQueued, evs[0].Type)
		require.JSONEq(t, `{"trigger":"`+tv.ID+`","delivery":"d-1","event":"pull_request.opened"}`, string(evs[0].Args))

		again := decode[wire.HookAnswer](t, e.signed(tv, secret, "d-1", "pull_request", pr), http.StatusOK)
		require.Equal(t, ans.RunID, again.RunID)
		list, err := e.store.RunList(e.ctx, store.RunListParams{Tenant: "acme"})
		require.NoError(t, err)
		require.Len(t, list.Runs, 1)
	})
	t.Run("form-encoded payload", func(t *testing.T) {
		e := e.sub(t)
		body := []byte("payload=" + url.QueryEscape(string(pr)))
		h, err := webhook.Sign(webhook.GitHub, secret, body, "d-form", "pull_request", time.Now())
		require.NoError(t, err)
		h.Set("Content-Type", "application/x-www-form-urlencoded")
		ans := decode[wire.HookAnswer](t, e.hook(tv.ID, h, body), http.StatusAccepted)
		require.JSONEq(t, string(pr), string(e.getRun(key, ans.RunID).Context))
	})
	t.Run("ping and other events are ignored", func(t *testing.T) {
		e := e.sub(t)
		ans := decode[wire.HookAnswer](t, e.signed(tv, secret, "d-ping", "ping", []byte(`{"zen":"Keep it logically awesome."}`)), http.StatusOK)
		require.Equal(t, "d-ping", ans.Delivery)
		require.Contains(t, ans.Ignored, "ping")
		require.Empty(t, ans.RunID)
		labeled := []byte(`{"action":"labeled","number":42}`)
		ans = decode[wire.HookAnswer](t, e.signed(tv, secret, "d-label", "pull_request", labeled), http.StatusOK)
		require.Contains(t, ans.Ignored, "pull_request.labeled")
	})
	t.Run("bad signatures", func(t *testing.T) {
		e := e.sub(t)
		r := e.signed(tv, "the-wrong-secret-entirely", "d-bad", "pull_request", pr)
		msg := requireError(t, r, http.StatusUnauthorized, "bad_signature", webhook.HeaderGitHubSignature, "does not match")
		require.NotContains(t, msg, secret)
		h := http.Header{webhook.HeaderGitHubDelivery: {"d-unsigned"}, webhook.HeaderGitHubEvent: {"pull_request"}}
		requireError(t, e.hook(tv.ID, h, []byte("garbage, unsigned")), http.StatusUnauthorized, "bad_signature", webhook.HeaderGitHubSignature, "missing")
		// A tampered body.
		hs, err := webhook.Sign(webhook.GitHub, secret, pr, "d-tamper", "pull_request", time.Now())
		require.NoError(t, err)
		requireError(t, e.hook(tv.ID, hs, append([]byte(nil), bytes.Replace(pr, []byte("42"), []byte("43"), 1)...)), http.StatusUnauthorized, "bad_signature")
		// Nothing was stored for them but a log line each, and the
		// sender's correctly signed retry still works (a body of its
		// own: d-1's would be a replay of d-1).
		pr44 := bytes.Replace(pr, []byte("42"), []byte("44"), 1)
		ans := decode[wire.HookAnswer](t, e.signed(tv, secret, "d-bad", "pull_request", pr44), http.StatusAccepted)
		require.NotEmpty(t, ans.RunID)
	})
	t.Run("malformed JSON after a valid signature", func(t *testing.T) {
		e := e.sub(t)
		requireError(t, e.signed(tv, secret, "d-json", "pull_request", []byte(`{"action":`)), http.StatusBadRequest, "bad_request", "not JSON")
	})
	t.Run("a template that fails is not deduped", func(t *testing.T) {
		e := e.sub(t)
		noTitle := []byte(`{"action":"opened","number":7,"repository":{"full_name":"Acme/Web"}}`)
		requireError(t, e.signed(tv, secret, "d-tpl", "pull_request", noTitle), http.StatusUnprocessableEntity, "unprocessable", "pull_request")
		// The user fixes the template; the sender's retry goes through.
		decode[wire.TriggerView](t, e.do("PATCH", "/v1/triggers/"+tv.ID, key, map[string]any{"message": "Review PR {{.payload.number}}"}), http.StatusOK)
		ans := decode[wire.HookAnswer](t, e.signed(tv, secret, "d-tpl", "pull_request", noTitle), http.StatusAccepted)
		require.Equal(t, "Review PR 7", e.getRun(key, ans.RunID).Message)
	})
	t.Run("body over the limit", func(t *testing.T) {
		e := e.sub(t)
		small := e.createTrigger(key, map[string]any{"name": "small", "scheme": "github", "max_body_bytes": 100})
		requireError(t, e.signed(small, small.Secret, "d-big", "push", []byte(`{"pad":"`+strings.Repeat("x", 200)+`"}`)),
			http.StatusRequestEntityTooLarge, "payload_too_large", "max_body_bytes")
	})
	t.Run("disabled and unknown triggers", func(t *testing.T) {
		e := e.sub(t)
		off := e.createTrigger(key, map[string]any{"name": "off", "scheme": "github", "enabled": false})
		requireError(t, e.signed(off, off.Secret, "d-off", "push", []byte(`{}`)), http.StatusNotFound, "not_found")
		requireError(t, e.hook("no-such-trigger", http.Header{}, []byte(`{}`)), http.StatusNotFound, "not_found")
	})
	t.Run("the delivery log", func(t *testing.T) {
		e := e.sub(t)
		ds := e.deliveries(key, tv.ID)
		byDelivery := map[string][]wire.DeliveryView{}
		for _, d := range ds {
			byDelivery[d.Delivery] = append(byDelivery[d.Delivery], d)
		}
		outcomes := func(id string) []string {
			var out []string
			for _, d := range byDelivery[id] {
				out = append(out, d.Outcome)
			}
			return out
		}
		require.Equal(t, []string{"duplicate", "accepted"}, outcomes("d-1"), "newest first")
		require.Equal(t, []string{"ignored"}, outcomes("d-ping"))
		require.Equal(t, []string{"accepted", "rejected"}, outcomes("d-bad"))
		require.Equal(t, []string{"rejected"}, outcomes("d-unsigned"))
		require.Equal(t, []string{"failed"}, outcomes("d-json"))
		require.Equal(t, []string{"accepted", "failed"}, outcomes("d-tpl"))
		bad := byDelivery["d-unsigned"][0]
		require.Contains(t, bad.Reason, "X-Hub-Signature-256 is missing")
		require.Contains(t, bad.Reason, "headers: ")
		require.Contains(t, bad.Reason, "X-Github-Delivery")
		require.NotContains(t, bad.Reason, "garbage", "never the body")
		require.Empty(t, bad.RunID)
		require.Contains(t, byDelivery["d-tpl"][1].Reason, `"pull_request"`)
		acc := byDelivery["d-1"][1]
		require.NotEmpty(t, acc.RunID)
		require.Equal(t, "pull_request.opened", acc.Event)
		require.False(t, acc.ReceivedAt.IsZero())

		page := decode[wire.DeliveryList](t, e.do("GET", "/v1/triggers/"+tv.ID+"/deliveries?limit=3", key, nil), http.StatusOK)
		require.Len(t, page.Deliveries, 3)
		next := decode[wire.DeliveryList](t, e.do("GET", "/v1/triggers/"+tv.ID+"/deliveries?limit=3&cursor="+page.NextCursor, key, nil), http.StatusOK)
		require.Equal(t, ds[3:6], next.Deliveries)

		// d-1, d-form, d-bad's retry, d-tpl's retry.
		require.Equal(t, 4.0, hookCount(t, reg, "github", "accepted"))
		require.Equal(t, 1.0, hookCount(t, reg, "github", "duplicate"))
		require.GreaterOrEqual(t, hookCount(t, reg, "github", "rejected"), 3.0)
	})
}

// hookCount is agentfleet_webhook_deliveries_total{scheme,outcome}.
func hookCount(t *testing.T, reg *prometheus.Registry, scheme, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "agentfleet_webhook_deliveries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["scheme"] == scheme && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestHookSchemes delivers through each other scheme: accepted, the
// retry deduped, a stale timestamp refused naming its header.
func TestHookSchemes(t *testing.T) {
	e := newEnv(t, withSecrets(nil))
	key := e.tenant("acme")
	stale := time.Now().Add(-webhook.Tolerance - time.Minute)
	for _, tc := range []struct {
		scheme, event, header string
		body                  []byte
		delivery              string // what the intake reads as the delivery id
	}{
		{"standard", "user.created", webhook.HeaderStandardTime, []byte(`{"type":"user.created","data":{"id":1}}`), "msg_1"},
		{"stripe", "invoice.paid", webhook.HeaderStripeSignature, []byte(`{"id":"evt_1","type":"invoice.paid"}`), "evt_1"},
		{"hmac", "build", "", []byte(`{"ok":true}`), "h-1"},
	} {
		t.Run(tc.scheme, func(t *testing.T) {
			e := e.sub(t)
			tv := e.createTrigger(key, map[string]any{"name": tc.scheme, "scheme": tc.scheme, "events": []string{tc.event},
				"message": "Handle {{.event}} {{.delivery}}"})
			ans := decode[wire.HookAnswer](t, e.signed(tv, tv.Secret, tc.delivery, tc.event, tc.body), http.StatusAccepted)
			require.Equal(t, tc.delivery, ans.Delivery)
			run := e.getRun(key, ans.RunID)
			require.Equal(t, "Handle "+tc.event+" "+tc.delivery, run.Message)
			again := decode[wire.HookAnswer](t, e.signed(tv, tv.Secret, tc.delivery, tc.event, tc.body), http.StatusOK)
			require.Equal(t, ans.RunID, again.RunID)
			ign := decode[wire.HookAnswer](t, e.signed(tv, tv.Secret, tc.delivery+"-x", "other.event", []byte(`{"id":"evt_x","type":"other.event"}`)), http.StatusOK)
			require.NotEmpty(t, ign.Ignored)
			if tc.header != "" {
				h, err := webhook.Sign(webhook.Scheme(tc.scheme), tv.Secret, tc.body, tc.delivery+"-old", tc.event, stale)
				require.NoError(t, err)
				requireError(t, e.hook(tv.ID, h, tc.body), http.StatusUnauthorized, "bad_signature", tc.header, "timestamp")
			}
		})
	}
}

// TestHookRotatedSecretGrace: after a rotation both secrets are accepted
// (until the grace ends); a secret rotated out twice is not.
func TestHookRotatedSecretGrace(t *testing.T) {
	e := newEnv(t, withSecrets(nil))
	key := e.tenant("acme")
	tv := e.createTrigger(key, map[string]any{"name": "r", "scheme": "hmac"})
	first := tv.Secret
	rot := decode[wire.TriggerView](t, e.do("PATCH", "/v1/triggers/"+tv.ID, key, map[string]any{"rotate_secret": true}), http.StatusOK)
	decode[wire.HookAnswer](t, e.signed(tv, first, "old", "", []byte(`{}`)), http.StatusAccepted)
	decode[wire.HookAnswer](t, e.signed(tv, rot.Secret, "new", "", []byte(`{"n":1}`)), http.StatusAccepted)
	mine := "my-third-secret-value-0123"
	decode[wire.TriggerView](t, e.do("PATCH", "/v1/triggers/"+tv.ID, key, map[string]any{"secret": mine}), http.StatusOK)
	requireError(t, e.signed(tv, first, "older", "", []byte(`{"n":2}`)), http.StatusUnauthorized, "bad_signature")
	decode[wire.HookAnswer](t, e.signed(tv, rot.Secret, "grace", "", []byte(`{"n":3}`)), http.StatusAccepted)
	decode[wire.HookAnswer](t, e.signed(tv, mine, "newest", "", []byte(`{"n":4}`)), http.StatusAccepted)
}

func TestRedeliverAndTest(t *testing.T) {
	e := newEnv(t, withSecrets(nil))
	key := e.tenant("acme")
	tv := e.createTrigger(key, map[string]any{"name": "gh", "scheme": "github", "message": "PR {{.payload.number}} ({{.event}}.{{.action}})"})
	pr := []byte(`{"action":"opened","number":9}`)
	first := decode[wire.HookAnswer](t, e.signed(tv, tv.Secret, "d-9", "pull_request", pr), http.StatusAccepted)

	// A redelivery is a new run of the same payload.
	re := decode[wire.HookAnswer](t, e.do("POST", "/v1/triggers/"+tv.ID+"/deliveries/d-9/redeliver", key, nil), http.StatusAccepted)
	require.Equal(t, "d-9", re.Delivery)
	require.NotEqual(t, first.RunID, re.RunID)
	run := e.getRun(key, re.RunID)
	require.Equal(t, "PR 9 (pull_request.opened)", run.Message)
	require.JSONEq(t, string(pr), string(run.Context))
	ds := e.deliveries(key, tv.ID)
	require.Equal(t, "accepted", ds[0].Outcome)
	require.Equal(t, "redelivered from the log", ds[0].Reason)
	requireError(t, e.do("POST", "/v1/triggers/"+tv.ID+"/deliveries/nope/redeliver", key, nil), http.StatusNotFound, "not_found", "nope")
	decode[wire.HookAnswer](t, e.signed(tv, tv.Secret, "d-ping", "ping", []byte(`{}`)), http.StatusOK)
	requireError(t, e.do("POST", "/v1/triggers/"+tv.ID+"/deliveries/d-ping/redeliver", key, nil), http.StatusConflict, "conflict", "only accepted")

	// The test endpoint signs server-side and goes through the intake.
	test := decode[wire.HookAnswer](t, e.do("POST", "/v1/triggers/"+tv.ID+"/test", key,
		map[string]any{"event": "pull_request", "payload": map[string]any{"action": "opened", "number": 10}}), http.StatusAccepted)
	require.True(t, strings.HasPrefix(test.Delivery, "test-"))
	require.Equal(t, "PR 10 (pull_request.opened)", e.getRun(key, test.RunID).Message)
	ping := decode[wire.HookAnswer](t, e.do("POST", "/v1/triggers/"+tv.ID+"/test", key, map[string]any{"event": "ping"}), http.StatusOK)
	require.Contains(t, ping.Ignored, "ping")
	requireError(t, e.do("POST", "/v1/triggers/"+tv.ID+"/test", key, map[string]any{"event": "push"}), http.StatusUnprocessableEntity, "unprocessable", "number")

	st := e.createTrigger(key, map[string]any{"name": "st", "scheme": "stripe", "message": "Stripe {{.event}} {{.payload.id}}"})
	stAns := decode[wire.HookAnswer](t, e.do("POST", "/v1/triggers/"+st.ID+"/test", key, map[string]any{"event": "invoice.paid"}), http.StatusAccepted)
	require.Equal(t, "Stripe invoice.paid "+stAns.Delivery, e.getRun(key, stAns.RunID).Message)
}

// A tenant at its max_queued_runs: the delivery is refused 429 with
// Retry-After and logged rejected with its payload; once there is room,
// redelivering it from the log starts its run, and the sender's own
// retry of it later finds that run.
func TestHookTenantWithoutRoom(t *testing.T) {
	e := newEnv(t, withSecrets(nil))
	r := e.do("POST", "/v1/tenants", adminToken, map[string]any{"id": "small", "max_queued_runs": 1})
	key := decode[wire.TenantView](t, r, http.StatusCreated).APIKey
	tv := e.createTrigger(key, map[string]any{"name": "t", "scheme": "github", "message": "Issue {{.payload.n}}"})
	first := decode[wire.HookAnswer](t, e.signed(tv, tv.Secret, "d-1", "issues", []byte(`{"n":1}`)), http.StatusAccepted)

	full := e.signed(tv, tv.Secret, "d-2", "issues", []byte(`{"n":2}`))
	requireError(t, full, http.StatusTooManyRequests, "too_many_runs")
	require.NotEmpty(t, full.header.Get("Retry-After"))
	ds := e.deliveries(key, tv.ID)
	require.Equal(t, "d-2", ds[0].Delivery)
	require.Equal(t, "rejected", ds[0].Outcome)
	require.NotEmpty(t, ds[0].Reason)
	requireError(t, e.do("POST", "/v1/triggers/"+tv.ID+"/deliveries/d-2/redeliver", key, nil), http.StatusTooManyRequests, "too_many_runs")

	decode[agentfleet.Run](t, e.do("POST", "/v1/runs/"+first.RunID+"/cancel", key, nil), http.StatusAccepted)
	re := decode[wire.HookAnswer](t, e.do("POST", "/v1/triggers/"+tv.ID+"/deliveries/d-2/redeliver", key, nil), http.StatusAccepted)
	require.Equal(t, "Issue 2", e.getRun(key, re.RunID).Message)
	retry := decode[wire.HookAnswer](t, e.signed(tv, tv.Secret, "d-2", "issues", []byte(`{"n":2}`)), http.StatusOK)
	require.Equal(t, re.RunID, retry.RunID, "the sender's retry finds the redelivered run")
}

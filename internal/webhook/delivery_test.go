package webhook

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	pr := `{"action":"opened","number":12345678901,"pull_request":{"title":"Fix it"}}`
	for _, tc := range []struct {
		name                  string
		scheme                Scheme
		h                     map[string]string
		body                  string
		id, event, action, pl string
		err                   string
	}{
		{name: "github json", scheme: GitHub, h: map[string]string{HeaderGitHubDelivery: "g1", HeaderGitHubEvent: "pull_request"},
			body: pr, id: "g1", event: "pull_request", action: "opened", pl: pr},
		{name: "github form", scheme: GitHub,
			h:    map[string]string{HeaderGitHubDelivery: "g2", HeaderGitHubEvent: "pull_request", "Content-Type": "application/x-www-form-urlencoded"},
			body: "payload=" + url.QueryEscape(pr), id: "g2", event: "pull_request", action: "opened", pl: pr},
		{name: "github form without payload", scheme: GitHub,
			h:    map[string]string{HeaderGitHubDelivery: "g3", HeaderGitHubEvent: "push", "Content-Type": "application/x-www-form-urlencoded"},
			body: "other=1", err: "no payload field"},
		{name: "github not json", scheme: GitHub, h: map[string]string{HeaderGitHubDelivery: "g4", HeaderGitHubEvent: "push"}, body: "{oops", err: "not JSON"},
		{name: "github no event", scheme: GitHub, h: map[string]string{HeaderGitHubDelivery: "g5"}, body: "{}", err: HeaderGitHubEvent},
		{name: "standard type", scheme: Standard, h: map[string]string{HeaderStandardID: "msg_1"}, body: `{"type":"user.created"}`,
			id: "msg_1", event: "user.created", pl: `{"type":"user.created"}`},
		{name: "stripe id and type", scheme: Stripe, body: `{"id":"evt_9","type":"invoice.paid"}`, id: "evt_9", event: "invoice.paid", pl: `{"id":"evt_9","type":"invoice.paid"}`},
		{name: "stripe without id", scheme: Stripe, body: `{"type":"invoice.paid"}`, err: "no id"},
		{name: "hmac headers", scheme: HMAC, h: map[string]string{HeaderHMACDelivery: "h1", HeaderHMACEvent: "build"}, body: `{"ok":true}`, id: "h1", event: "build", pl: `{"ok":true}`},
		{name: "hmac text", scheme: HMAC, h: map[string]string{HeaderHMACDelivery: "h2"}, body: "Hello, World!", id: "h2", pl: `"Hello, World!"`},
		{name: "hmac digest id", scheme: HMAC, body: "{}", id: "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", pl: "{}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := hdr()
			for k, v := range tc.h {
				h.Set(k, v)
			}
			d, err := Parse(tc.scheme, h, []byte(tc.body))
			if tc.err != "" {
				var fe *FormatError
				require.ErrorAs(t, err, &fe)
				require.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.id, d.ID)
			require.Equal(t, tc.event, d.Event)
			require.Equal(t, tc.action, d.Action)
			require.JSONEq(t, tc.pl, string(d.Payload))
		})
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		events        []string
		event, action string
		want          bool
	}{
		{nil, "push", "", true},
		{[]string{"*"}, "push", "", true},
		{[]string{"push"}, "push", "", true},
		{[]string{"pull_request"}, "pull_request", "labeled", true},
		{[]string{"pull_request.opened"}, "pull_request", "opened", true},
		{[]string{"pull_request.opened"}, "pull_request", "labeled", false},
		{[]string{"pull_request.opened"}, "pull_request", "", false},
		{[]string{"issues", "pull_request.opened"}, "push", "", false},
	} {
		require.Equal(t, tc.want, Match(tc.events, tc.event, tc.action), "%v %s.%s", tc.events, tc.event, tc.action)
	}
}

func TestTemplate(t *testing.T) {
	d, err := Parse(GitHub, hdr(HeaderGitHubDelivery, "g1", HeaderGitHubEvent, "pull_request"),
		[]byte(`{"action":"opened","number":12345678901,"repository":{"full_name":"Acme/Web App"},"labels":["a","b"]}`))
	require.NoError(t, err)
	data := Data{Payload: d.Data, Event: d.Event, Action: d.Action, Delivery: d.ID, Trigger: "reviews"}

	tpl, err := ParseTemplate("message", `Review PR {{.payload.number}} of {{.payload.repository.full_name}} ({{.event}}.{{.action}}, {{.delivery}}, {{.trigger}}){{range .payload.labels}} #{{.}}{{end}}`)
	require.NoError(t, err)
	out, err := tpl.Execute(data, 0, 0)
	require.NoError(t, err)
	require.Equal(t, "Review PR 12345678901 of Acme/Web App (pull_request.opened, g1, reviews) #a #b", out)

	sess, err := ParseTemplate("session_id", `{{slug .payload.repository.full_name}}-{{.payload.number}}`)
	require.NoError(t, err)
	out, err = sess.Execute(data, 0, 0)
	require.NoError(t, err)
	require.Equal(t, "acme-web-app-12345678901", out)

	// A field the payload lacks fails the delivery, naming it.
	missing, err := ParseTemplate("message", `PR {{.payload.pull_request.title}}`)
	require.NoError(t, err)
	_, err = missing.Execute(data, 0, 0)
	require.ErrorContains(t, err, `"pull_request"`)

	// Output past the limit fails.
	long, err := ParseTemplate("message", `{{range .payload.labels}}{{$.payload.repository.full_name}}{{end}}`)
	require.NoError(t, err)
	_, err = long.Execute(data, 10, 0)
	require.ErrorContains(t, err, "passed 10 bytes")

	for text, want := range map[string]string{
		`{{.payload.x`: "message template",
		`{{range .payload.a}}{{range .payload.b}}{{end}}{{end}}`: "range inside a range",
		`{{range 1000000000}}{{end}}`:                            "range over a number",
		`{{define "x"}}y{{end}}{{template "x"}}`:                 "not allowed",
		`{{nosuchfunc .payload}}`:                                "not defined",
		strings.Repeat("x", MaxTemplateLen+1):                    "at most",
	} {
		_, err := ParseTemplate("message", text)
		require.ErrorContains(t, err, want, text)
	}
}

func TestTemplateTimeLimit(t *testing.T) {
	// A payload big enough that writing it element by element takes
	// longer than a nanosecond budget.
	items := make([]any, 10000)
	for i := range items {
		items[i] = "item"
	}
	tpl, err := ParseTemplate("message", `{{range .payload}}{{.}}{{end}}`)
	require.NoError(t, err)
	_, err = tpl.Execute(Data{Payload: items}, 1<<20, time.Nanosecond)
	require.ErrorContains(t, err, "took longer than")
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"acme/Web App#12": "acme-web-app-12",
		"--x--":           "x",
		"ÄÖ ok":           "ok",
		"":                "",
		"a_b-c":           "a_b-c",
	} {
		require.Equal(t, want, Slug(in), in)
	}
	require.Len(t, Slug(strings.Repeat("ab", 100)), 64)
}

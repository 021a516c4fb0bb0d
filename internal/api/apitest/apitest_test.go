package apitest_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/api/apitest"
)

// recorder is a test whose failures are noted, not reported.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

const run = `{"id":"r1","tenant":"acme","agent":"default","status":"queued","message":"hi","turns":0,
 "usage":{"prompt_tokens":0,"completion_tokens":0},"data_bytes_carried":0,
 "created_at":"2026-01-02T15:04:05Z","updated_at":"2026-01-02T15:04:05Z"%s}`

func TestTransportReportsWhatTheDocumentDoesNotDescribe(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, body := 200, ""
		switch r.URL.Query().Get("case") {
		case "valid":
			body = fmt.Sprintf(run, "")
		case "missing":
			body = `{"id":"r1"}`
		case "extra":
			body = fmt.Sprintf(run, `,"surprise":1`)
		case "format":
			body = strings.Replace(fmt.Sprintf(run, ""), `"created_at":"2026-01-02T15:04:05Z"`, `"created_at":"yesterday"`, 1)
		case "status":
			status, body = 201, fmt.Sprintf(run, "")
		case "error":
			status, body = 404, `{"error":{"code":"not_found","message":"no run"}}`
		case "bad-error":
			status, body = 404, `{"oops":1}`
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name string
		want string // "" when nothing is wrong
	}{
		{"valid", ""},
		{"missing", "required"},
		{"extra", "surprise"},
		{"format", "date-time"},
		{"status", "documents no 201"},
		{"error", ""},
		{"bad-error", "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			c := &http.Client{Transport: apitest.Transport(rec, nil)}
			resp, err := c.Get(srv.URL + "/v1/runs/r1?case=" + tc.name)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.NotEmpty(t, body, "the caller still reads the body")
			if tc.want == "" {
				require.Empty(t, rec.errs)
				return
			}
			require.Len(t, rec.errs, 1)
			require.Contains(t, rec.errs[0], "GET /v1/runs/r1?case="+tc.name)
			require.Contains(t, rec.errs[0], tc.want)
		})
	}
}

func TestTransportPassesAnEventStreamOn(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "id: 1\nevent: queued\ndata: {}\n\n")
		w.(http.Flusher).Flush()
		<-release // the stream stays open: the transport must not wait for its end
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	rec := &recorder{TB: t}
	c := &http.Client{Transport: apitest.Transport(rec, nil)}
	resp, err := c.Get(srv.URL + "/v1/runs/r1/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "id: 1\n", line)
	require.Empty(t, rec.errs)
}

func TestTransportAllowsWhatIsNotTheAPI(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/", "/console/app.js":
			_, _ = io.WriteString(w, "<!doctype html>")
		case "/nope":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"error":{"code":"not_found","message":"no such endpoint"}}`)
		default:
			_, _ = io.WriteString(w, "{}")
		}
	}))
	t.Cleanup(srv.Close)
	rec := &recorder{TB: t}
	c := &http.Client{Transport: apitest.Transport(rec, nil)}
	for _, path := range []string{"/", "/console/app.js", "/nope", "/v1/undocumented"} {
		resp, err := c.Get(srv.URL + path)
		require.NoError(t, err)
		_ = resp.Body.Close()
	}
	require.Len(t, rec.errs, 1, "only the undocumented API path: %v", rec.errs)
	require.Contains(t, rec.errs[0], "no path /v1/undocumented")
}

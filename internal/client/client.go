// Package client is the Go client of the dispatcher's HTTP API, used by
// agentctl, the bench command and the end-to-end tests. It speaks only
// HTTP: runs, tenants and their API keys, webhook triggers (and sending
// signed deliveries to their hooks), and run events over Server-Sent
// Events, resuming with Last-Event-ID when a stream breaks.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/api"
)

// Client calls one dispatcher.
type Client struct {
	BaseURL string
	Token   string
	HTTP    *http.Client
}

// New returns a client for baseURL authenticating with token.
func New(baseURL, token string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, HTTP: &http.Client{}}
}

// Error is an error response of the API.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter is the answer's Retry-After, when it sent one in
	// seconds (a 429 for a tenant at its max_queued_runs does).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (HTTP %d %s)", e.Message, e.Status, e.Code)
}

// IsNotFound reports whether err is a 404 from the API.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return decodeError(resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s response: %w", method, path, err)
	}
	return nil
}

func decodeError(resp *http.Response) error {
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{Status: resp.StatusCode, Code: "http_error", Message: strings.TrimSpace(string(raw))}
	if json.Unmarshal(raw, &body) == nil && body.Error.Code != "" {
		e.Code, e.Message = body.Error.Code, body.Error.Message
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// CreateRun submits a run.
func (c *Client) CreateRun(ctx context.Context, req api.RunCreateRequest) (agentfleet.Run, error) {
	var run agentfleet.Run
	err := c.do(ctx, http.MethodPost, "/v1/runs", req, &run)
	return run, err
}

// GetRun reads a run.
func (c *Client) GetRun(ctx context.Context, id string) (agentfleet.Run, error) {
	var run agentfleet.Run
	err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, &run)
	return run, err
}

// ListRunsParams filters GET /v1/runs.
type ListRunsParams struct {
	Status    []agentfleet.RunStatus
	Agent     string
	SessionID string
	// ParentRunID lists that run's children.
	ParentRunID string
	Limit       int
	Cursor      string
}

// ListRuns lists runs, newest first.
func (c *Client) ListRuns(ctx context.Context, p ListRunsParams) (api.RunList, error) {
	q := url.Values{}
	if len(p.Status) > 0 {
		ss := make([]string, len(p.Status))
		for i, s := range p.Status {
			ss[i] = string(s)
		}
		q.Set("status", strings.Join(ss, ","))
	}
	if p.Agent != "" {
		q.Set("agent", p.Agent)
	}
	if p.SessionID != "" {
		q.Set("session_id", p.SessionID)
	}
	if p.ParentRunID != "" {
		q.Set("parent_run_id", p.ParentRunID)
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	var out api.RunList
	err := c.do(ctx, http.MethodGet, "/v1/runs?"+q.Encode(), nil, &out)
	return out, err
}

// CancelRun cancels a run.
func (c *Client) CancelRun(ctx context.Context, id string) (agentfleet.Run, error) {
	var run agentfleet.Run
	err := c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/cancel", nil, &run)
	return run, err
}

// DeleteRun deletes an ended run with its trace. A run that has not ended
// is an *Error with Status 409 (cancel it first).
func (c *Client) DeleteRun(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/runs/"+url.PathEscape(id), nil, nil)
}

// CreateTenant creates a tenant (admin token); the view carries the
// tenant's API key, shown this once.
func (c *Client) CreateTenant(ctx context.Context, req api.TenantRequest) (api.TenantView, error) {
	var out api.TenantView
	err := c.do(ctx, http.MethodPost, "/v1/tenants", req, &out)
	return out, err
}

// GetTenant reads a tenant with its budget.
func (c *Client) GetTenant(ctx context.Context, id string) (api.TenantView, error) {
	var out api.TenantView
	err := c.do(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(id), nil, &out)
	return out, err
}

// UpdateTenant changes a tenant's settings (admin token).
func (c *Client) UpdateTenant(ctx context.Context, id string, req api.TenantRequest) (api.TenantView, error) {
	var out api.TenantView
	err := c.do(ctx, http.MethodPut, "/v1/tenants/"+url.PathEscape(id), req, &out)
	return out, err
}

// Usage reads a tenant's settled usage grouped by "model" or "run".
func (c *Client) Usage(ctx context.Context, tenant, groupBy string) (api.UsageReport, error) {
	var out api.UsageReport
	err := c.do(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(tenant)+"/usage?group_by="+url.QueryEscape(groupBy), nil, &out)
	return out, err
}

// CreateKey makes tenant another API key (the admin token, or the
// tenant's own key); the view carries the key, shown this once.
func (c *Client) CreateKey(ctx context.Context, tenant, name string) (api.APIKeyView, error) {
	var out api.APIKeyView
	err := c.do(ctx, http.MethodPost, "/v1/tenants/"+url.PathEscape(tenant)+"/keys", api.APIKeyRequest{Name: name}, &out)
	return out, err
}

// ListKeysParams pages GET /v1/tenants/{id}/keys.
type ListKeysParams struct {
	Limit  int
	Cursor string
}

// ListKeys lists a tenant's keys, newest first: ids, names, when made and
// last used, never the keys.
func (c *Client) ListKeys(ctx context.Context, tenant string, p ListKeysParams) (api.APIKeyList, error) {
	q := url.Values{}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	var out api.APIKeyList
	err := c.do(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(tenant)+"/keys?"+q.Encode(), nil, &out)
	return out, err
}

// RevokeKey revokes one of tenant's keys, named by its id; every
// dispatcher refuses it from then on.
func (c *Client) RevokeKey(ctx context.Context, tenant, keyID string) error {
	return c.do(ctx, http.MethodDelete, "/v1/tenants/"+url.PathEscape(tenant)+"/keys/"+url.PathEscape(keyID), nil, nil)
}

// ErrStopEvents may be returned by an Events callback to stop early
// without an error.
var ErrStopEvents = errors.New("stop events")

// Events streams a run's events after afterSeq to fn, in seq order, until
// the terminal event, ctx ends, or fn returns an error. A broken stream is
// resumed with Last-Event-ID, so fn sees every event exactly once.
func (c *Client) Events(ctx context.Context, runID string, afterSeq int64, fn func(agentfleet.Event) error) error {
	last := afterSeq
	backoff := 100 * time.Millisecond
	for {
		done, cbErr, err := c.eventStream(ctx, runID, &last, fn)
		switch {
		case done || errors.Is(cbErr, ErrStopEvents):
			return nil
		case cbErr != nil:
			return cbErr
		case ctx.Err() != nil:
			return ctx.Err()
		}
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Status < 500 {
			return err
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// eventStream reads one SSE connection: done is true after the terminal
// event, cbErr is what fn returned, err what broke the stream.
func (c *Client) eventStream(ctx context.Context, runID string, last *int64, fn func(agentfleet.Event) error) (done bool, cbErr, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/v1/runs/"+url.PathEscape(runID)+"/events", nil)
	if err != nil {
		return false, nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if *last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return false, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return false, nil, decodeError(resp)
	}
	if resp.StatusCode == http.StatusNoContent {
		// Resumed at or past the run's terminal event: nothing more.
		return true, nil, nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if len(data) == 0 {
				continue
			}
			var ev agentfleet.Event
			if err := json.Unmarshal(data, &ev); err != nil {
				return false, nil, fmt.Errorf("decode event: %w", err)
			}
			data = data[:0]
			if ev.Seq <= *last {
				continue
			}
			*last = ev.Seq
			if err := fn(ev); err != nil {
				return false, err, nil
			}
			if ev.Terminal() {
				return true, nil, nil
			}
		case bytes.HasPrefix(line, []byte("data:")):
			data = append(data, bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))...)
		}
	}
	if err := sc.Err(); err != nil {
		return false, nil, err
	}
	return false, nil, io.ErrUnexpectedEOF
}

// Wait follows a run's events until it ends, then returns the run.
func (c *Client) Wait(ctx context.Context, runID string) (agentfleet.Run, error) {
	if err := c.Events(ctx, runID, 0, func(agentfleet.Event) error { return nil }); err != nil {
		return agentfleet.Run{}, err
	}
	return c.GetRun(ctx, runID)
}

// CreateTrigger creates a webhook trigger; the view carries its secret
// when the server generated it, shown this once.
func (c *Client) CreateTrigger(ctx context.Context, req api.TriggerRequest) (api.TriggerView, error) {
	var out api.TriggerView
	err := c.do(ctx, http.MethodPost, "/v1/triggers", req, &out)
	return out, err
}

// GetTrigger reads a trigger.
func (c *Client) GetTrigger(ctx context.Context, id string) (api.TriggerView, error) {
	var out api.TriggerView
	err := c.do(ctx, http.MethodGet, "/v1/triggers/"+url.PathEscape(id), nil, &out)
	return out, err
}

// ListTriggers lists the tenant's triggers, newest first.
func (c *Client) ListTriggers(ctx context.Context, limit int, cursor string) (api.TriggerList, error) {
	var out api.TriggerList
	err := c.do(ctx, http.MethodGet, "/v1/triggers?"+pageQuery(limit, cursor).Encode(), nil, &out)
	return out, err
}

// UpdateTrigger changes the fields req sets.
func (c *Client) UpdateTrigger(ctx context.Context, id string, req api.TriggerRequest) (api.TriggerView, error) {
	var out api.TriggerView
	err := c.do(ctx, http.MethodPatch, "/v1/triggers/"+url.PathEscape(id), req, &out)
	return out, err
}

// DeleteTrigger deletes a trigger and its delivery log.
func (c *Client) DeleteTrigger(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/triggers/"+url.PathEscape(id), nil, nil)
}

// ListDeliveries pages a trigger's delivery log, newest first.
func (c *Client) ListDeliveries(ctx context.Context, id string, limit int, cursor string) (api.DeliveryList, error) {
	var out api.DeliveryList
	err := c.do(ctx, http.MethodGet, "/v1/triggers/"+url.PathEscape(id)+"/deliveries?"+pageQuery(limit, cursor).Encode(), nil, &out)
	return out, err
}

// Redeliver starts a new run from a logged delivery.
func (c *Client) Redeliver(ctx context.Context, id, delivery string) (api.HookAnswer, error) {
	var out api.HookAnswer
	err := c.do(ctx, http.MethodPost, "/v1/triggers/"+url.PathEscape(id)+"/deliveries/"+url.PathEscape(delivery)+"/redeliver", nil, &out)
	return out, err
}

// TestTrigger has the server sign a delivery and run it through the
// intake.
func (c *Client) TestTrigger(ctx context.Context, id string, req api.TriggerTestRequest) (api.HookAnswer, error) {
	var out api.HookAnswer
	err := c.do(ctx, http.MethodPost, "/v1/triggers/"+url.PathEscape(id)+"/test", req, &out)
	return out, err
}

// HookResult is a hook's answer: its status and body.
type HookResult struct {
	Status int
	Answer api.HookAnswer
}

// SendHook posts a signed delivery to a hook URL (absolute, or a path on
// BaseURL), with no bearer token: the signature in header is the
// credential. A 4xx or 5xx is an *Error.
func (c *Client) SendHook(ctx context.Context, hookURL string, header http.Header, body []byte) (HookResult, error) {
	if strings.HasPrefix(hookURL, "/") {
		hookURL = c.BaseURL + hookURL
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hookURL, bytes.NewReader(body))
	if err != nil {
		return HookResult{}, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return HookResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return HookResult{Status: resp.StatusCode}, decodeError(resp)
	}
	out := HookResult{Status: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&out.Answer); err != nil {
		return out, fmt.Errorf("decode the hook's answer: %w", err)
	}
	return out, nil
}

func pageQuery(limit int, cursor string) url.Values {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	return q
}

// GetRunView reads a run with its callback's state, when it has one.
func (c *Client) GetRunView(ctx context.Context, id string) (api.RunView, error) {
	var out api.RunView
	err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, &out)
	return out, err
}

// RotateCallbackSecret replaces a tenant's callback secret; the answer
// carries the new one, shown this once.
func (c *Client) RotateCallbackSecret(ctx context.Context, tenant string) (api.CallbackSecretView, error) {
	var out api.CallbackSecretView
	err := c.do(ctx, http.MethodPost, "/v1/tenants/"+url.PathEscape(tenant)+"/callback-secret", nil, &out)
	return out, err
}

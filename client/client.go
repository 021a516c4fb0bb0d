// Package client is the Go client of the dispatcher's HTTP API: what a Go
// service needs to submit and follow runs, and what agentctl, the bench
// command and the end-to-end tests use. It speaks only
// HTTP: runs, tenants and their API keys, secrets, webhook triggers (and sending
// signed deliveries to their hooks), and events over Server-Sent Events
// (a run's, or every run's of a tenant), resuming with Last-Event-ID when
// a stream breaks. Request and answer bodies are package wire's types.
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
	"github.com/agentfleet/agentfleet/wire"
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
func (c *Client) CreateRun(ctx context.Context, req wire.RunCreateRequest) (agentfleet.Run, error) {
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

// RunSteps reads a run's trace, its side-effect journal included; turn,
// when not negative, narrows it to that turn (0: the run's message).
func (c *Client) RunSteps(ctx context.Context, id string, turn int) (wire.RunSteps, error) {
	path := "/v1/runs/" + url.PathEscape(id) + "/steps"
	if turn >= 0 {
		path += "?turn=" + strconv.Itoa(turn)
	}
	var out wire.RunSteps
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out, err
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
func (c *Client) ListRuns(ctx context.Context, p ListRunsParams) (wire.RunList, error) {
	q := pageQuery(p.Limit, p.Cursor)
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
	var out wire.RunList
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
func (c *Client) CreateTenant(ctx context.Context, req wire.TenantRequest) (wire.TenantView, error) {
	var out wire.TenantView
	err := c.do(ctx, http.MethodPost, "/v1/tenants", req, &out)
	return out, err
}

// GetTenant reads a tenant with its budget.
func (c *Client) GetTenant(ctx context.Context, id string) (wire.TenantView, error) {
	var out wire.TenantView
	err := c.do(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(id), nil, &out)
	return out, err
}

// UpdateTenant changes a tenant's settings (admin token).
func (c *Client) UpdateTenant(ctx context.Context, id string, req wire.TenantRequest) (wire.TenantView, error) {
	var out wire.TenantView
	err := c.do(ctx, http.MethodPut, "/v1/tenants/"+url.PathEscape(id), req, &out)
	return out, err
}

// Usage reads a tenant's settled usage grouped by "model" or "run".
func (c *Client) Usage(ctx context.Context, tenant, groupBy string) (wire.UsageReport, error) {
	var out wire.UsageReport
	err := c.do(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(tenant)+"/usage?group_by="+url.QueryEscape(groupBy), nil, &out)
	return out, err
}

// CreateKey makes tenant another API key (the admin token, or a key of
// the tenant's with the admin scope); the view carries the key, shown
// this once. scopes are what it may do ("admin", "submit", "read"); none
// gives it all three.
func (c *Client) CreateKey(ctx context.Context, tenant, name string, scopes ...string) (wire.APIKeyView, error) {
	var out wire.APIKeyView
	err := c.do(ctx, http.MethodPost, "/v1/tenants/"+url.PathEscape(tenant)+"/keys", wire.APIKeyRequest{Name: name, Scopes: scopes}, &out)
	return out, err
}

// ListKeysParams pages GET /v1/tenants/{id}/keys.
type ListKeysParams struct {
	Limit  int
	Cursor string
}

// ListKeys lists a tenant's keys, newest first: ids, names, when made and
// last used, never the keys.
func (c *Client) ListKeys(ctx context.Context, tenant string, p ListKeysParams) (wire.APIKeyList, error) {
	var out wire.APIKeyList
	err := c.do(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(tenant)+"/keys?"+pageQuery(p.Limit, p.Cursor).Encode(), nil, &out)
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
//
// While a turn's model reply streams, fn also sees its response_chunk
// events (Seq 0, Index and Text set) as they arrive, between the stored
// ones; they are not stored, so a chunk sent while the stream was broken
// is missed, and the turn's model_call event carries the whole reply.
func (c *Client) Events(ctx context.Context, runID string, afterSeq int64, fn func(agentfleet.Event) error) error {
	last := afterSeq
	return follow(ctx, func() (bool, bool, error, error) {
		before := last
		done, cbErr, err := c.eventStream(ctx, runID, &last, fn)
		return last != before, done, cbErr, err
	})
}

// follow calls stream, one connection of an event stream, again after
// each break until it is done, its callback failed, ctx ended or the API
// refused it (a 4xx). It backs off between connections that brought
// nothing new.
func follow(ctx context.Context, stream func() (progress, done bool, cbErr, err error)) error {
	const backoffMin = 100 * time.Millisecond
	backoff := backoffMin
	for {
		progress, done, cbErr, err := stream()
		if progress {
			backoff = backoffMin
		}
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

// openSSE opens an event stream at path, resuming after lastID when it
// is not empty.
func (c *Client) openSSE(ctx context.Context, path, lastID string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// eventStream reads one SSE connection: done is true after the terminal
// event, cbErr is what fn returned, err what broke the stream.
func (c *Client) eventStream(ctx context.Context, runID string, last *int64, fn func(agentfleet.Event) error) (done bool, cbErr, err error) {
	lastID := ""
	if *last > 0 {
		lastID = strconv.FormatInt(*last, 10)
	}
	resp, err := c.openSSE(ctx, "/v1/runs/"+url.PathEscape(runID)+"/events", lastID)
	if err != nil {
		return false, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		// Resumed at or past the run's terminal event: nothing more.
		return true, nil, nil
	}
	err = readSSE(resp.Body, func(_ string, data []byte) (bool, error) {
		if len(data) == 0 {
			return false, nil
		}
		var ev agentfleet.Event
		if err := json.Unmarshal(data, &ev); err != nil {
			return false, fmt.Errorf("decode event: %w", err)
		}
		if ev.Type == agentfleet.EventResponseChunk && ev.Seq == 0 {
			// A streamed piece of a model reply: not stored, without an
			// id, so it moves no resume point (a resumed stream does
			// not bring it again).
			if cbErr = fn(ev); cbErr != nil {
				return true, nil
			}
			return false, nil
		}
		if ev.Seq <= *last {
			return false, nil
		}
		*last = ev.Seq
		if cbErr = fn(ev); cbErr != nil {
			return true, nil
		}
		done = ev.Terminal()
		return done, nil
	})
	if done || cbErr != nil {
		return done, cbErr, nil
	}
	return false, nil, err
}

// readSSE reads an event stream, calling block with each block's id and
// data (empty for a block with an id alone) until it says stop or fails.
// A stream that ends before block said stop is io.ErrUnexpectedEOF.
func readSSE(r io.Reader, block func(id string, data []byte) (stop bool, err error)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var id string
	var data []byte
	seen := false
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if !seen {
				continue
			}
			stop, err := block(id, data)
			if err != nil || stop {
				return err
			}
			id, data, seen = "", data[:0], false
		case bytes.HasPrefix(line, []byte("data:")):
			data, seen = append(data, bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))...), true
		case bytes.HasPrefix(line, []byte("id:")):
			id, seen = string(bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("id:")), []byte(" "))), true
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}

// TenantEventsParams selects what GET /v1/events streams.
type TenantEventsParams struct {
	// Tenant, with the admin token, follows one tenant (empty: every
	// tenant). A tenant's key follows its own tenant whatever it says.
	Tenant string
	// After resumes after a position (a TenantEvent's Pos). Zero starts
	// with the events published from now on, unless FromOldest.
	After uint64
	// FromOldest, with After zero, starts with the oldest event the
	// fleet's events stream keeps.
	FromOldest bool
}

// TenantEvent is an event of GET /v1/events with its position in the
// fleet's events stream, which TenantEventsParams.After resumes after.
type TenantEvent struct {
	Pos   uint64
	Event agentfleet.Event
}

// TenantEvents streams the events of every run of the caller's tenant to
// fn, in the order the fleet stored them, until ctx ends or fn returns an
// error (ErrStopEvents stops without one). A broken stream is resumed
// after the last position seen, so no event is lost; an event the fleet
// published again after a crash may come twice, with the same run id and
// seq, which a caller that must not see it twice remembers.
func (c *Client) TenantEvents(ctx context.Context, p TenantEventsParams, fn func(TenantEvent) error) error {
	lastID := ""
	if p.After > 0 || p.FromOldest {
		lastID = strconv.FormatUint(p.After, 10)
	}
	path := "/v1/events"
	if p.Tenant != "" {
		path += "?tenant=" + url.QueryEscape(p.Tenant)
	}
	return follow(ctx, func() (bool, bool, error, error) {
		before := lastID
		resp, err := c.openSSE(ctx, path, lastID)
		if err != nil {
			return false, false, nil, err
		}
		defer resp.Body.Close()
		var cbErr error
		err = readSSE(resp.Body, func(id string, data []byte) (bool, error) {
			pos, err := strconv.ParseUint(id, 10, 64)
			if err != nil {
				return false, fmt.Errorf("event stream position %q: %w", id, err)
			}
			lastID = id
			if len(data) == 0 {
				return false, nil // the position the stream starts after
			}
			var ev agentfleet.Event
			if err := json.Unmarshal(data, &ev); err != nil {
				return false, fmt.Errorf("decode event: %w", err)
			}
			cbErr = fn(TenantEvent{Pos: pos, Event: ev})
			return cbErr != nil, nil
		})
		return lastID != before, false, cbErr, err
	})
}

// ListTenantsParams pages GET /v1/tenants.
type ListTenantsParams struct {
	Limit  int
	Cursor string
}

// ListTenants lists tenants with their budgets, newest first (the admin
// token); a tenant's key lists its own tenant alone.
func (c *Client) ListTenants(ctx context.Context, p ListTenantsParams) (wire.TenantList, error) {
	var out wire.TenantList
	err := c.do(ctx, http.MethodGet, "/v1/tenants?"+pageQuery(p.Limit, p.Cursor).Encode(), nil, &out)
	return out, err
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
func (c *Client) CreateTrigger(ctx context.Context, req wire.TriggerRequest) (wire.TriggerView, error) {
	var out wire.TriggerView
	err := c.do(ctx, http.MethodPost, "/v1/triggers", req, &out)
	return out, err
}

// GetTrigger reads a trigger.
func (c *Client) GetTrigger(ctx context.Context, id string) (wire.TriggerView, error) {
	var out wire.TriggerView
	err := c.do(ctx, http.MethodGet, "/v1/triggers/"+url.PathEscape(id), nil, &out)
	return out, err
}

// ListTriggers lists the tenant's triggers, newest first.
func (c *Client) ListTriggers(ctx context.Context, limit int, cursor string) (wire.TriggerList, error) {
	var out wire.TriggerList
	err := c.do(ctx, http.MethodGet, "/v1/triggers?"+pageQuery(limit, cursor).Encode(), nil, &out)
	return out, err
}

// UpdateTrigger changes the fields req sets.
func (c *Client) UpdateTrigger(ctx context.Context, id string, req wire.TriggerRequest) (wire.TriggerView, error) {
	var out wire.TriggerView
	err := c.do(ctx, http.MethodPatch, "/v1/triggers/"+url.PathEscape(id), req, &out)
	return out, err
}

// DeleteTrigger deletes a trigger and its delivery log.
func (c *Client) DeleteTrigger(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/triggers/"+url.PathEscape(id), nil, nil)
}

// ListDeliveries pages a trigger's delivery log, newest first.
func (c *Client) ListDeliveries(ctx context.Context, id string, limit int, cursor string) (wire.DeliveryList, error) {
	var out wire.DeliveryList
	err := c.do(ctx, http.MethodGet, "/v1/triggers/"+url.PathEscape(id)+"/deliveries?"+pageQuery(limit, cursor).Encode(), nil, &out)
	return out, err
}

// Redeliver starts a new run from a logged delivery.
func (c *Client) Redeliver(ctx context.Context, id, delivery string) (wire.HookAnswer, error) {
	var out wire.HookAnswer
	err := c.do(ctx, http.MethodPost, "/v1/triggers/"+url.PathEscape(id)+"/deliveries/"+url.PathEscape(delivery)+"/redeliver", nil, &out)
	return out, err
}

// TestTrigger has the server sign a delivery and run it through the
// intake.
func (c *Client) TestTrigger(ctx context.Context, id string, req wire.TriggerTestRequest) (wire.HookAnswer, error) {
	var out wire.HookAnswer
	err := c.do(ctx, http.MethodPost, "/v1/triggers/"+url.PathEscape(id)+"/test", req, &out)
	return out, err
}

// HookResult is a hook's answer: its status and body.
type HookResult struct {
	Status int
	Answer wire.HookAnswer
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
func (c *Client) GetRunView(ctx context.Context, id string) (wire.RunView, error) {
	var out wire.RunView
	err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, &out)
	return out, err
}

// RotateCallbackSecret replaces a tenant's callback secret; the answer
// carries the new one, shown this once.
func (c *Client) RotateCallbackSecret(ctx context.Context, tenant string) (wire.CallbackSecretView, error) {
	var out wire.CallbackSecretView
	err := c.do(ctx, http.MethodPost, "/v1/tenants/"+url.PathEscape(tenant)+"/callback-secret", nil, &out)
	return out, err
}

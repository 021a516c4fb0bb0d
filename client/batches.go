package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/agentfleet/agentfleet/wire"
)

// BatchSubmitParams are a JSONL batch's settings (query parameters of
// POST /v1/batches); the inputs are the body.
type BatchSubmitParams struct {
	Agent          string
	MaxConcurrent  int
	MaxTurns       int
	MaxTokens      int64
	IdempotencyKey string
	CallbackURL    string
	Metadata       map[string]string
}

// SubmitBatch posts inputs, JSONL (one input object a line), as a batch,
// streaming the body.
func (c *Client) SubmitBatch(ctx context.Context, p BatchSubmitParams, inputs io.Reader) (wire.Batch, error) {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" && v != "0" {
			q.Set(k, v)
		}
	}
	set("agent", p.Agent)
	set("max_concurrent", strconv.Itoa(p.MaxConcurrent))
	set("max_turns", strconv.Itoa(p.MaxTurns))
	set("max_tokens", strconv.FormatInt(p.MaxTokens, 10))
	set("idempotency_key", p.IdempotencyKey)
	set("callback_url", p.CallbackURL)
	for k, v := range p.Metadata {
		q.Set("metadata."+k, v)
	}
	resp, err := c.send(ctx, http.MethodPost, "/v1/batches?"+q.Encode(), "application/x-ndjson", inputs)
	if err != nil {
		return wire.Batch{}, err
	}
	defer resp.Body.Close()
	var out wire.Batch
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("decode POST /v1/batches response: %w", err)
	}
	return out, nil
}

// CreateBatch posts a batch as one JSON body.
func (c *Client) CreateBatch(ctx context.Context, req wire.BatchCreateRequest) (wire.Batch, error) {
	var out wire.Batch
	err := c.do(ctx, http.MethodPost, "/v1/batches", req, &out)
	return out, err
}

// GetBatch reads a batch with its counts and usage.
func (c *Client) GetBatch(ctx context.Context, id string) (wire.Batch, error) {
	var out wire.Batch
	err := c.do(ctx, http.MethodGet, "/v1/batches/"+url.PathEscape(id), nil, &out)
	return out, err
}

// ListBatches pages the caller's batches, newest first.
func (c *Client) ListBatches(ctx context.Context, limit int, cursor string) (wire.BatchList, error) {
	var out wire.BatchList
	err := c.do(ctx, http.MethodGet, "/v1/batches?"+pageQuery(limit, cursor).Encode(), nil, &out)
	return out, err
}

// CancelBatch cancels every run of a batch not yet ended.
func (c *Client) CancelBatch(ctx context.Context, id string) (wire.Batch, error) {
	var out wire.Batch
	err := c.do(ctx, http.MethodPost, "/v1/batches/"+url.PathEscape(id)+"/cancel", nil, &out)
	return out, err
}

// RetryBatch submits a batch's failed inputs again as a new batch.
func (c *Client) RetryBatch(ctx context.Context, id string) (wire.Batch, error) {
	var out wire.Batch
	err := c.do(ctx, http.MethodPost, "/v1/batches/"+url.PathEscape(id)+"/retry", nil, &out)
	return out, err
}

// BatchResults calls fn with each result line of a batch in input order,
// from index after+1 on (after -1: from the first). With wait, lines come
// as their runs end, until the last.
func (c *Client) BatchResults(ctx context.Context, id string, after int, wait bool, fn func(wire.BatchResult) error) error {
	q := url.Values{}
	q.Set("after", strconv.Itoa(after))
	if wait {
		q.Set("wait", "true")
	}
	resp, err := c.send(ctx, http.MethodGet, "/v1/batches/"+url.PathEscape(id)+"/results?"+q.Encode(), "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var r wire.BatchResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return fmt.Errorf("decode a result line of batch %s: %w", id, err)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return sc.Err()
}

// send makes a request with a raw body and returns a 2xx response (the
// caller closes its body), or the API's error.
func (c *Client) send(ctx context.Context, method, path, contentType string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
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

// Plain completions: encoded, sent and decoded here rather than by the
// SDK, whose per-call work cost more than the rest of the call.

package openaiwire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/openai/openai-go/v3"

	"github.com/agentfleet/agentfleet"
)

// Complete sends req and returns the whole reply.
func (c *Client) Complete(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
	params, err := c.params(req)
	if err != nil {
		return agentfleet.ModelResponse{}, err
	}
	// The request is sent, and the reply decoded, here, with the URL
	// and headers the SDK would use (sdkRequest): the SDK's reflective
	// encoder, its decoder (which keeps every field's raw JSON) and its
	// per-call request building cost more than the rest of the call
	// (BenchmarkComplete).
	body, err := encodeRequest(plainRequestOf(req, params))
	if err != nil {
		return agentfleet.ModelResponse{}, fmt.Errorf("model request: %w", err)
	}
	var out plainReply
	err = c.retry(ctx, func(ctx context.Context, raw **http.Response) error {
		reply, err := c.post(ctx, body, raw)
		if err != nil {
			return err
		}
		out = plainReply{}
		if err := json.Unmarshal(reply, &out); err != nil {
			// A 200 whose body is not a completion is a gateway
			// glitch; treat it like a transport error.
			return fmt.Errorf("reply is not a chat completion: %w", err)
		}
		if len(out.Choices) == 0 {
			return errors.New("reply has no choices")
		}
		return nil
	})
	if err != nil {
		return agentfleet.ModelResponse{}, c.wrap(params, err)
	}
	msg := out.Choices[0].Message
	content := msg.Content
	if content == "" {
		// A refusal is the model's answer; with no code block the loop
		// takes it as the final one.
		content = msg.Refusal
	}
	var prompt, completion int64
	if u := out.Usage; u != nil {
		prompt, completion = u.PromptTokens, u.CompletionTokens
	}
	resp := c.response(req, params, content, out.Model, prompt, completion, out.Usage != nil)
	resp.FinishReason = out.Choices[0].FinishReason
	return resp, nil
}

// post sends one plain completion request and returns the reply's body.
// A reply with an error status is left in *raw, its body read into
// memory, for retry to classify; the error returned then only says that
// it failed.
func (c *Client) post(ctx context.Context, body []byte, raw **http.Response) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.completions, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	var resp *http.Response
	if c.transport != nil {
		// Straight to the transport, with the headers every request
		// shares: a RoundTripper does not change its request, while
		// http.Client.Do copies the headers of every request (the SDK's
		// eleven, a map too large for Go's small-map case) for redirects
		// a completion never gets: 2 KiB and 13 allocations a call
		// (BenchmarkComplete). A redirect is an error here.
		req.Header = c.completionHeader
		resp, err = c.transport.RoundTrip(req)
	} else {
		// A caller's client: its own timeout, jar and redirect policy.
		req.Header = c.completionHeader.Clone()
		resp, err = c.http.Do(req)
	}
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		resp.Body = io.NopCloser(bytes.NewReader(b))
		*raw = resp
		return nil, fmt.Errorf("%s %s: status %d", req.Method, c.completions, resp.StatusCode)
	}
	return io.ReadAll(resp.Body)
}

// plainRequest is the body of a plain (not streamed) chat completion: the
// fields params sets, in the wire's names.
type plainRequest struct {
	Model          string         `json:"model"`
	Messages       []plainMessage `json:"messages"`
	MaxTokens      int64          `json:"max_tokens,omitempty"`
	Temperature    *float64       `json:"temperature,omitempty"`
	ResponseFormat *plainFormat   `json:"response_format,omitempty"`
}

type plainMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type plainFormat struct {
	Type string `json:"type"`
}

// encodeRequest encodes r as JSON without HTML escaping: json.Marshal
// writes every <, > and & as a six-byte \u escape, and the prompt's
// TypeScript declarations are full of them (Record<string, string>).
// Nothing renders this body as HTML.
func encodeRequest(r plainRequest) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// plainRequestOf is req as params (already checked) would send it.
func plainRequestOf(req agentfleet.ModelRequest, params openai.ChatCompletionNewParams) plainRequest {
	r := plainRequest{Model: string(params.Model), Messages: make([]plainMessage, len(req.Messages))}
	for i, m := range req.Messages {
		r.Messages[i] = plainMessage{Role: m.Role, Content: m.Content}
	}
	if req.MaxTokens > 0 {
		r.MaxTokens = int64(req.MaxTokens)
	}
	r.Temperature = req.Temperature
	if req.JSON {
		r.ResponseFormat = &plainFormat{Type: "json_object"}
	}
	return r
}

// plainReply is what Complete reads of a chat completion.
type plainReply struct {
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content string `json:"content"`
			Refusal string `json:"refusal"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
}

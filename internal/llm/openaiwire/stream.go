// Streamed completions, sent and read by the SDK, retried only until the
// first delta reached the caller.

package openaiwire

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/agentfleet/agentfleet"
)

// Stream sends req with streaming on, hands each content delta to fn as it
// arrives, and finally calls fn with a Done chunk carrying the assembled
// response. Usage is asked for with stream_options.include_usage; a
// provider that ignores it gets an estimate and UsageReported=false.
//
// fn runs on the caller's goroutine; an error from it ends the call with
// that error. If the call fails after deltas were delivered, the returned
// response holds the text that arrived, with estimated usage, so the
// caller can still account for what the provider charged.
func (c *Client) Stream(ctx context.Context, req agentfleet.ModelRequest, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error) {
	if fn == nil {
		fn = func(agentfleet.ModelChunk) error { return nil }
	}
	params, err := c.params(req)
	if err != nil {
		return agentfleet.ModelResponse{}, err
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	var resp agentfleet.ModelResponse
	err = c.retry(ctx, func(ctx context.Context, raw **http.Response) error {
		var err error
		resp, err = c.streamOnce(ctx, req, params, raw, fn)
		return err
	})
	if err != nil {
		return resp, c.wrap(params, err)
	}
	return resp, nil
}

// streamOnce is one streamed attempt. Errors after the first delta are
// final: the caller has seen the text and a retry would repeat it.
func (c *Client) streamOnce(ctx context.Context, req agentfleet.ModelRequest, params openai.ChatCompletionNewParams,
	raw **http.Response, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error) {
	sent := c.oa.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(raw))
	if err := sent.Err(); err != nil || *raw == nil {
		_ = sent.Close()
		if err == nil {
			err = fmt.Errorf("%w: no response", ErrTruncated)
		}
		return agentfleet.ModelResponse{}, err
	}
	// The SDK sent the request (its auth, headers and middleware); its
	// stream has read nothing yet. The events are read by the SDK's own
	// stream reader over the same body, decoded into the few fields we
	// use: ChatCompletionChunk's reflective decoder costs more than the
	// rest of a turn when a reply comes in dozens of small chunks.
	stream := ssestream.NewStream[wireChunk](ssestream.NewDecoder(*raw), nil)
	defer stream.Close()

	var (
		content      strings.Builder
		model        string
		usage        wireUsage
		reported     bool
		finished     bool
		finishReason string
	)
	partial := func() agentfleet.ModelResponse {
		return c.response(req, params, content.String(), model, 0, 0, false)
	}
	for stream.Next() {
		chunk := stream.Current()
		if chunk.Model != "" {
			model = chunk.Model
		}
		if chunk.Usage != nil {
			usage, reported = *chunk.Usage, true
		}
		for _, choice := range chunk.Choices {
			if choice.Index != 0 {
				continue // we never ask for n > 1
			}
			if choice.FinishReason != "" {
				finished, finishReason = true, choice.FinishReason
			}
			d := choice.Delta.Content
			if d == "" {
				d = choice.Delta.Refusal
			}
			if d == "" {
				continue
			}
			content.WriteString(d)
			if err := fn(agentfleet.ModelChunk{Delta: d}); err != nil {
				return partial(), final(fmt.Errorf("stream consumer: %w", err))
			}
		}
	}
	if err := stream.Err(); err != nil {
		if content.Len() > 0 {
			return partial(), final(fmt.Errorf("stream broke after %d bytes: %w", content.Len(), err))
		}
		return agentfleet.ModelResponse{}, err
	}
	if !finished {
		// The SDK ends a stream quietly when the body ends, [DONE] or
		// not; only a finish_reason says the model was done.
		err := fmt.Errorf("%w: stream ended after %d bytes without a finish_reason", ErrTruncated, content.Len())
		if content.Len() > 0 {
			return partial(), final(err)
		}
		return agentfleet.ModelResponse{}, err
	}
	resp := c.response(req, params, content.String(), model, usage.PromptTokens, usage.CompletionTokens, reported)
	resp.FinishReason = finishReason
	if err := fn(agentfleet.ModelChunk{Done: true, Response: resp}); err != nil {
		return resp, final(fmt.Errorf("stream consumer: %w", err))
	}
	return resp, nil
}

// wireChunk is the part of a chat.completion.chunk a stream reads.
type wireChunk struct {
	Model   string `json:"model"`
	Choices []struct {
		Index int64 `json:"index"`
		Delta struct {
			Content string `json:"content"`
			Refusal string `json:"refusal"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	// Usage is set on the chunk that carries it (include_usage).
	Usage *wireUsage `json:"usage"`
}

type wireUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// Streamed completions, sent and read by the SDK, retried only until the
// first delta reached the caller.

package openaiwire

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/tidwall/gjson"

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
	// The SDK sent the request (its auth, headers and middleware); the
	// events are read by its SSE decoder over the same body and decoded
	// here, by one pass of gjson over each event's few fields: the SDK's
	// reflective ChatCompletionChunk decoder, and even encoding/json into
	// a small struct, cost more than the rest of a turn when a reply comes
	// in dozens of small chunks.
	stream := ssestream.NewDecoder(*raw)
	if stream == nil {
		return agentfleet.ModelResponse{}, fmt.Errorf("%w: no response body", ErrTruncated)
	}
	defer stream.Close()

	var (
		content      strings.Builder
		model        string
		usage        wireUsage
		reported     bool
		finished     bool
		finishReason string
		chunk        wireChunk
	)
	partial := func() agentfleet.ModelResponse {
		return c.response(req, params, content.String(), model, 0, 0, false)
	}
	var decodeErr error
	for stream.Next() {
		ev := stream.Event()
		if bytes.HasPrefix(ev.Data, []byte("[DONE]")) {
			break
		}
		if decodeErr = chunk.decode(ev); decodeErr != nil {
			break
		}
		if chunk.Model != "" {
			model = chunk.Model
		}
		if chunk.HasUsage {
			usage, reported = chunk.Usage, true
		}
		for _, choice := range chunk.Choices {
			if choice.Index != 0 {
				continue // we never ask for n > 1
			}
			if choice.FinishReason != "" {
				finished, finishReason = true, choice.FinishReason
			}
			d := choice.Content
			if d == "" {
				d = choice.Refusal
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
	if decodeErr != nil {
		if content.Len() > 0 {
			return partial(), final(fmt.Errorf("stream broke after %d bytes: %w", content.Len(), decodeErr))
		}
		return agentfleet.ModelResponse{}, decodeErr
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
	Model   string
	Choices []wireChoice
	// Usage is set on the chunk that carries it (include_usage).
	Usage    wireUsage
	HasUsage bool
}

type wireChoice struct {
	Index                          int64
	Content, Refusal, FinishReason string
}

type wireUsage struct {
	PromptTokens     int64
	CompletionTokens int64
}

// decode reads one event's chunk into c (reusing its choices): an error
// event, or data that is not a JSON object, is an error, as the SDK's
// stream makes them.
func (c *wireChunk) decode(ev ssestream.Event) error {
	if !gjson.ValidBytes(ev.Data) {
		return fmt.Errorf("a stream event is not JSON: %.80q", ev.Data)
	}
	doc := gjson.ParseBytes(ev.Data)
	if !doc.IsObject() {
		return fmt.Errorf("a stream event is not a JSON object: %.80q", ev.Data)
	}
	c.Model, c.Choices, c.Usage, c.HasUsage = "", c.Choices[:0], wireUsage{}, false
	var streamErr error
	doc.ForEach(func(key, v gjson.Result) bool {
		switch key.Str {
		case "error":
			streamErr = &ssestream.StreamError{Message: "received error while streaming: " + v.String(), Event: ev}
			return false
		case "model":
			c.Model = v.String()
		case "choices":
			v.ForEach(func(_, ch gjson.Result) bool {
				var w wireChoice
				ch.ForEach(func(k, f gjson.Result) bool {
					switch k.Str {
					case "index":
						w.Index = f.Int()
					case "finish_reason":
						w.FinishReason = f.String()
					case "delta":
						f.ForEach(func(dk, dv gjson.Result) bool {
							switch dk.Str {
							case "content":
								w.Content = dv.String()
							case "refusal":
								w.Refusal = dv.String()
							}
							return true
						})
					}
					return true
				})
				c.Choices = append(c.Choices, w)
				return true
			})
		case "usage":
			if v.IsObject() {
				c.HasUsage = true
				c.Usage = wireUsage{PromptTokens: v.Get("prompt_tokens").Int(), CompletionTokens: v.Get("completion_tokens").Int()}
			}
		}
		return true
	})
	return streamErr
}

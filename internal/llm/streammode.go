package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/llm/openaiwire"
)

// EnvStream selects whether a turn's model call streams (StreamMode).
const EnvStream = "AGENTFLEET_MODEL_STREAM"

// StreamMode says whether model calls stream on the wire.
type StreamMode string

const (
	// StreamAuto streams, and falls back to a plain call for a model
	// whose provider refuses a streamed request, remembering that it
	// did. The zero StreamMode is StreamAuto.
	StreamAuto StreamMode = "auto"
	// StreamOn always streams: a provider that refuses fails the call.
	StreamOn StreamMode = "on"
	// StreamOff never streams: Stream is a plain call that delivers
	// only the Done chunk.
	StreamOff StreamMode = "off"
)

// ParseStreamMode reads a value of AGENTFLEET_MODEL_STREAM ("" is auto).
func ParseStreamMode(s string) (StreamMode, error) {
	switch m := StreamMode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return StreamAuto, nil
	case StreamAuto, StreamOn, StreamOff:
		return m, nil
	}
	return "", fmt.Errorf("%s=%q: use auto (stream, plain calls where the provider refuses), on or off", EnvStream, s)
}

// WithStreamMode returns c with its Stream following mode. With auto, a
// streamed call that fails before its first delta with an answer a
// retry cannot change (a 4xx other than 408 and 429, or a reply that is
// not a stream) is made again as a plain call; when that one succeeds,
// the provider refuses streaming for that model, and its later calls go
// plain at once.
func WithStreamMode(c Client, mode StreamMode) Client {
	switch mode {
	case StreamOn:
		return c
	case StreamOff:
		return plainStream{c}
	}
	return &autoStream{c: c}
}

// plainStream streams nothing.
type plainStream struct{ Client }

func (p plainStream) Stream(ctx context.Context, req agentfleet.ModelRequest, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error) {
	resp, err := p.Complete(ctx, req)
	if err != nil || fn == nil {
		return resp, err
	}
	return resp, fn(agentfleet.ModelChunk{Done: true, Response: resp})
}

type autoStream struct {
	c       Client
	refused sync.Map // model name -> struct{}: its provider refuses streaming
}

func (a *autoStream) Complete(ctx context.Context, req agentfleet.ModelRequest) (agentfleet.ModelResponse, error) {
	return a.c.Complete(ctx, req)
}

func (a *autoStream) Stream(ctx context.Context, req agentfleet.ModelRequest, fn func(agentfleet.ModelChunk) error) (agentfleet.ModelResponse, error) {
	if _, ok := a.refused.Load(req.Model); ok {
		return plainStream{a.c}.Stream(ctx, req, fn)
	}
	deltas := 0
	resp, err := a.c.Stream(ctx, req, func(ch agentfleet.ModelChunk) error {
		if !ch.Done {
			deltas++
		}
		if fn == nil {
			return nil
		}
		return fn(ch)
	})
	if err == nil || deltas > 0 || ctx.Err() != nil || !refusesStreaming(err) {
		return resp, err
	}
	resp, perr := plainStream{a.c}.Stream(ctx, req, fn)
	if perr == nil {
		a.refused.Store(req.Model, struct{}{})
	}
	return resp, perr
}

// refusesStreaming says whether a streamed call's failure before any
// delta may be the provider's refusal to stream: a 4xx a retry cannot
// change, or a reply that ended without being a stream.
func refusesStreaming(err error) bool {
	var hs interface{ HTTPStatus() int }
	if errors.As(err, &hs) {
		s := hs.HTTPStatus()
		return s >= 400 && s < 500 && s != http.StatusRequestTimeout && s != http.StatusTooManyRequests &&
			s != http.StatusUnauthorized && s != http.StatusForbidden
	}
	return errors.Is(err, openaiwire.ErrTruncated)
}

// Unwrap returns the client WithStreamMode wrapped (c itself when it
// wraps none): what New built, for a caller that needs its own methods.
func Unwrap(c Client) Client {
	switch w := c.(type) {
	case plainStream:
		return w.Client
	case *autoStream:
		return w.c
	}
	return c
}

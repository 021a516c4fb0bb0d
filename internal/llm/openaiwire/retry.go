package openaiwire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
)

// retry runs attempt until it succeeds, fails for good, or runs out of
// attempts. Each attempt gets its own CallTimeout; the caller's ctx bounds
// them all and is checked before anything else, so a cancelled run never
// waits for a backoff or a provider.
//
// attempt receives a slot for the raw HTTP response. openai-go fills it
// even when it returns an error, which is how the status, the headers
// (Retry-After) and the body of a failed call are read without depending
// on how the SDK decodes error bodies: gateways send plain text or
// non-OpenAI JSON often enough.
func (c *Client) retry(ctx context.Context, attempt func(ctx context.Context, raw **http.Response) error) error {
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		var raw *http.Response
		err := attempt(actx, &raw)
		timedOut := errors.Is(actx.Err(), context.DeadlineExceeded)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctxErr(ctx)
		}
		err, retryable, wait := c.classify(err, raw, timedOut)
		if !retryable {
			return err
		}
		if n >= c.cfg.MaxAttempts {
			return fmt.Errorf("%w after %d attempts: %w", ErrRetriesExhausted, n, err)
		}
		if wait < 0 {
			wait = backoff(c.cfg.BackoffBase, c.cfg.BackoffCap, n-1, c.cfg.Jitter)
		} else if wait > c.cfg.MaxRetryAfter {
			// Holding a worker slot for minutes helps no one: give the
			// decision back to the caller, who can park the run.
			return fmt.Errorf("provider asks to wait %s, more than the %s we wait in a call: %w", wait, c.cfg.MaxRetryAfter, err)
		}
		if dl, ok := ctx.Deadline(); ok && c.cfg.Now().Add(wait).After(dl) {
			return fmt.Errorf("next attempt in %s would pass the caller's deadline: %w", wait, err)
		}
		if serr := c.cfg.Sleep(ctx, wait); serr != nil {
			return serr
		}
	}
}

// classify turns an attempt's failure into the error to report, whether it
// is worth another attempt, and how long the provider asked us to wait
// (negative when it did not say, so the backoff decides).
func (c *Client) classify(err error, raw *http.Response, timedOut bool) (_ error, retryable bool, wait time.Duration) {
	var fe *finalError
	isFinal := errors.As(err, &fe)
	switch {
	case raw != nil && raw.StatusCode >= 300: // a redirect is not followed (see post)
		apiErr := c.apiError(raw)
		wait = -1
		if d, ok := retryAfter(raw.Header, c.cfg.Now()); ok {
			apiErr.RetryAfter = d
			wait = d
		}
		return apiErr, apiErr.Retryable(), wait
	case timedOut:
		if isFinal {
			return fmt.Errorf("%w: no complete reply within %s: %w", ErrCallTimeout, c.cfg.CallTimeout, fe.err), false, -1
		}
		return fmt.Errorf("%w: no complete reply within %s", ErrCallTimeout, c.cfg.CallTimeout), true, -1
	case agentfleet.OutOfDescriptors(err):
		// This process cannot open a connection: trying again at once
		// only spins. The worker hands the turn back and takes fewer.
		return fmt.Errorf("%w: connect to the model: %w", agentfleet.ErrExhausted, err), false, -1
	default:
		// Transport errors: connection refused or reset, a body cut
		// off, a stream that died before its first token.
		return err, !isFinal, -1
	}
}

// maxErrorBody bounds what is read of an error body; a provider's message
// fits in far less, and an HTML error page must not flood a log.
const maxErrorBody = 64 << 10

// apiError reads the provider's explanation from a failed response.
func (c *Client) apiError(raw *http.Response) *APIError {
	e := &APIError{StatusCode: raw.StatusCode, Host: c.host}
	if raw.Body == nil {
		return e
	}
	body, _ := io.ReadAll(io.LimitReader(raw.Body, maxErrorBody))
	_ = raw.Body.Close()
	e.Message, e.Type, e.Code = providerMessage(body)
	return e
}

// providerMessage extracts the explanation from an error body in the shapes
// OpenAI-wire providers use: {"error":{"message","type","code"}} (OpenAI,
// OpenRouter, Groq, together), {"error":"..."} (Ollama, some proxies),
// {"message":"..."} or {"detail":"..."} (vLLM, FastAPI gateways), and
// anything else as trimmed text.
func providerMessage(body []byte) (msg, typ, code string) {
	var shaped struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &shaped) == nil {
		var inner struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		}
		var s string
		switch {
		case len(shaped.Error) > 0 && json.Unmarshal(shaped.Error, &inner) == nil && inner.Message != "":
			return clip(inner.Message), inner.Type, strings.Trim(string(inner.Code), `"`)
		case len(shaped.Error) > 0 && json.Unmarshal(shaped.Error, &s) == nil && s != "":
			return clip(s), "", ""
		case shaped.Message != "":
			return clip(shaped.Message), "", ""
		case len(shaped.Detail) > 0:
			if json.Unmarshal(shaped.Detail, &s) == nil {
				return clip(s), "", ""
			}
			return clip(string(shaped.Detail)), "", ""
		}
	}
	return clip(strings.TrimSpace(string(body))), "", ""
}

// clip keeps a message short enough for an error string.
func clip(s string) string {
	const max = 500
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// retryAfter reads how long the provider asked us to wait: retry-after-ms
// (OpenAI's precise variant) first, then Retry-After as delay-seconds or
// as an HTTP-date relative to now. A date in the past means "now".
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && !math.IsNaN(ms) {
			return clampDuration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs < 0 || math.IsNaN(secs) {
			return 0, false
		}
		return clampDuration(secs * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// clampDuration converts without overflowing: an absurd Retry-After must
// read as "very long" (and so not be waited for), not wrap negative.
func clampDuration(ns float64) time.Duration {
	if ns >= math.MaxInt64 || math.IsInf(ns, 1) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ns)
}

// backoff is exponential backoff with full jitter: a uniform wait in
// [0, min(capDelay, base*2^retry)]. Full jitter spreads the retries of many
// workers hit by the same outage, instead of having them return in waves.
func backoff(base, capDelay time.Duration, retry int, jitter func(time.Duration) time.Duration) time.Duration {
	d := base
	for i := 0; i < retry && d < capDelay; i++ {
		d *= 2
	}
	return jitter(min(d, capDelay))
}

// fullJitter draws uniformly from [0, limit].
func fullJitter(limit time.Duration) time.Duration {
	if limit <= 0 {
		return 0
	}
	return rand.N(limit + 1)
}

// sleep waits d or until ctx is done, whichever comes first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctxErr(ctx)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctxErr(ctx)
	case <-t.C:
		return nil
	}
}

// ctxErr is ctx's error, joined with its cause when the canceller gave
// one, so that both errors.Is(err, context.Canceled) and a check for the
// caller's own cause hold. Nil while ctx is live.
func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

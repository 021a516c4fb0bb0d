package openaiwire

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

var (
	// ErrRetriesExhausted wraps the last error of a call that failed on
	// every attempt it was allowed. The provider may be down or
	// overloaded; trying the turn again later is reasonable.
	ErrRetriesExhausted = errors.New("retries exhausted")
	// ErrCallTimeout marks an attempt that got no complete reply within
	// Config.CallTimeout. It is retried like a transport error.
	ErrCallTimeout = errors.New("model call timed out")
	// ErrTruncated marks a reply that ended before the provider said it
	// was finished (a stream closed without a finish_reason). A cut-off
	// script must never be executed as if it were whole.
	ErrTruncated = errors.New("model reply truncated")
)

// APIError is an HTTP error status from the provider, with the provider's
// own explanation. Callers branch on it with errors.As: StatusCode 401/403
// means the key is wrong, 400 means the request (model name, parameters) is,
// and RetryAfter says when a rate limit that outlasted our patience lifts.
type APIError struct {
	// StatusCode is the HTTP status the provider answered with.
	StatusCode int
	// Message is the provider's explanation (error.message of the
	// OpenAI error body, or the start of whatever body it sent).
	Message string
	// Type and Code are the provider's error classification when it
	// sends one ("invalid_request_error", "model_not_found", ...).
	Type string
	Code string
	// RetryAfter is how long the provider asked us to wait (Retry-After
	// or retry-after-ms); zero when it did not say.
	RetryAfter time.Duration
	// Host is the provider's host: which gateway refused. The error
	// text leaves it out because Client's errors name it already.
	Host string
}

// HTTPStatus is the status the provider answered with: how telemetry
// and metrics classify a failed call without knowing this type.
func (e *APIError) HTTPStatus() int { return e.StatusCode }

func (e *APIError) Error() string {
	msg := fmt.Sprintf("provider answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Code != "" {
		msg += " (" + e.Code + ")"
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return msg
}

// Retryable reports whether the same request may succeed later: rate
// limits (429) and server errors (5xx). Every other 4xx is the request's
// own fault and would fail the same way again, so it is never retried.
func (e *APIError) Retryable() bool {
	return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
}

// finalError marks an attempt's error that must not be retried even though
// its kind usually is: a stream that already handed deltas to the caller
// cannot be replayed without showing them twice.
type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }
func (e *finalError) Unwrap() error { return e.err }

func final(err error) error { return &finalError{err: err} }

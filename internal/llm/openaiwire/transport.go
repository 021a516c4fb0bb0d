// The HTTP side of a Client: the URL and headers captured from the SDK
// once, and the transport that sends a body in one write.

package openaiwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// sdkRequest returns the URL and the headers the SDK, configured with
// opts, sends a plain completion with: its own headers, the key, and the
// environment's OPENAI_ORG_ID, OPENAI_PROJECT_ID and
// OPENAI_CUSTOM_HEADERS. Complete sends its requests itself with these:
// the SDK rebuilds them for every call, through a chain of options and
// wrappers that cost a worker more CPU than the HTTP exchange it wraps
// (BenchmarkComplete).
func sdkRequest(opts []option.RequestOption) (endpoint string, header http.Header, err error) {
	var sent *http.Request
	capture := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
	})}
	oa := openai.NewClient(append(opts, option.WithHTTPClient(capture))...)
	var reply []byte
	if err := oa.Post(context.Background(), "chat/completions", nil, &reply, option.WithRequestBody("application/json", []byte("{}"))); err != nil {
		return "", nil, fmt.Errorf("prepare requests: %w", err)
	}
	if sent == nil {
		return "", nil, errors.New("prepare requests: the SDK sent no request")
	}
	header = sent.Header.Clone()
	header.Del("Content-Length")
	return sent.URL.String(), header, nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func newTransport() http.RoundTripper {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		// Someone wrapped the default transport (tracing): keep theirs.
		return http.DefaultTransport
	}
	t = t.Clone()
	t.MaxIdleConnsPerHost = maxIdleConnsPerHost
	return inMemoryBody{t}
}

// inMemoryBody sends a request's body from the bytes it was made of. The
// SDK wraps every body in a reader of its own (streamed calls still go
// through it), and net/http writes the headers of a body it cannot see is
// in memory in a system call of their own, before the body: two writes
// per call, and two reads on the other side, for what fits in one.
type inMemoryBody struct{ next http.RoundTripper }

func (t inMemoryBody) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.GetBody == nil || r.ContentLength <= 0 {
		return t.next.RoundTrip(r)
	}
	body, err := r.GetBody()
	if err != nil {
		return t.next.RoundTrip(r)
	}
	// A RoundTripper closes the body it was given and leaves the request
	// as it was: send a shallow copy carrying the fresh body.
	r.Body.Close()
	fresh := *r
	fresh.Body = body
	return t.next.RoundTrip(&fresh)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// transport.
func (t inMemoryBody) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Package apitest holds the dispatcher's real HTTP answers, in tests,
// against the API's OpenAPI document (internal/api/openapi.json):
// Transport is an http.RoundTripper that validates every response it
// carries (status, headers and body) and fails the test that made the
// request, naming the call, what did not match and where in the
// document. The api package's tests and the fleet's end-to-end tests
// send their requests through it, so a response the document does not
// describe fails CI.
//
// It validates responses only: the tests send malformed requests on
// purpose, and what the server answers them is what must match.
package apitest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	vderrors "github.com/pb33f/libopenapi-validator/errors"

	"github.com/agentfleet/agentfleet/internal/api"
)

// document is the parsed OpenAPI document with its validator, built once
// per test process: parsing it and compiling its schemas is the costly
// part, and every Transport shares it.
var document = sync.OnceValues(func() (*openAPI, error) {
	doc, err := libopenapi.NewDocument(api.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("parse internal/api/openapi.json: %w", err)
	}
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
	if len(errs) > 0 {
		return nil, fmt.Errorf("build the model of internal/api/openapi.json: %w", errors.Join(errs...))
	}
	if ok, errs := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("internal/api/openapi.json is not a valid OpenAPI 3.1 document:\n%s", describe(errs))
	}
	var raw struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &raw); err != nil {
		return nil, fmt.Errorf("decode internal/api/openapi.json: %w", err)
	}
	d := &openAPI{v: v, statuses: map[string]map[string]map[string]json.RawMessage{}}
	for path, item := range raw.Paths {
		d.statuses[path] = map[string]map[string]json.RawMessage{}
		for method, op := range item {
			if method == "parameters" {
				continue
			}
			var o struct {
				Responses map[string]json.RawMessage `json:"responses"`
			}
			if err := json.Unmarshal(op, &o); err != nil {
				return nil, fmt.Errorf("decode %s %s in internal/api/openapi.json: %w", method, path, err)
			}
			d.statuses[path][method] = o.Responses
		}
	}
	return d, nil
})

type openAPI struct {
	v validator.Validator
	// statuses are the responses each operation lists, by path
	// template and method.
	statuses map[string]map[string]map[string]json.RawMessage
}

// documents reports whether the operation a request to method and path
// calls lists status itself, not through its default response.
func (d *openAPI) documents(method, path string, status int) bool {
	for tmpl, item := range d.statuses {
		if !pathMatches(tmpl, path) {
			continue
		}
		if op, ok := item[strings.ToLower(method)]; ok {
			_, listed := op[strconv.Itoa(status)]
			return listed
		}
	}
	return false
}

// hasPath reports whether path fits one of the document's paths.
func (d *openAPI) hasPath(path string) bool {
	for tmpl := range d.statuses {
		if pathMatches(tmpl, path) {
			return true
		}
	}
	return false
}

// isError reports whether body is the API's error answer,
// {"error":{"code","message"}}.
func isError(body []byte) bool {
	var e struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	return json.Unmarshal(body, &e) == nil && e.Error != nil && e.Error.Code != "" && e.Error.Message != ""
}

// pathMatches reports whether path fits the path template tmpl, whose
// "{name}" segments match any one segment.
func pathMatches(tmpl, path string) bool {
	ts, ps := strings.Split(tmpl, "/"), strings.Split(path, "/")
	if len(ts) != len(ps) {
		return false
	}
	for i, t := range ts {
		if !(strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") && ps[i] != "") && t != ps[i] {
			return false
		}
	}
	return true
}

// Validator returns the validator of the API's document, failing t if
// the document does not parse or is not valid OpenAPI 3.1.
func Validator(t testing.TB) validator.Validator {
	t.Helper()
	d, err := document()
	if err != nil {
		t.Fatal(err)
	}
	return d.v
}

// Transport returns a RoundTripper that sends requests through next
// (http.DefaultTransport when nil) and validates each response against
// the API's document, reporting a mismatch with t.Errorf. An event
// stream's status and headers are checked when it opens; its body is
// passed on untouched.
func Transport(t testing.TB, next http.RoundTripper) http.RoundTripper {
	t.Helper()
	if next == nil {
		next = http.DefaultTransport
	}
	d, err := document()
	if err != nil {
		t.Fatal(err)
	}
	return &transport{t: t, d: d, next: next}
}

type transport struct {
	t    testing.TB
	d    *openAPI
	next http.RoundTripper
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := tr.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if msg := tr.check(req, resp); msg != "" {
		tr.t.Errorf("%s", msg)
	}
	return resp, nil
}

// CloseIdleConnections lets httptest.Server.Close and http.Client reach
// the wrapped transport's idle connections.
func (tr *transport) CloseIdleConnections() {
	if c, ok := tr.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// check validates resp and says what is wrong ("" when nothing is). The
// body is read in full and put back, except an event stream's, which
// would never end.
func (tr *transport) check(req *http.Request, resp *http.Response) string {
	call := fmt.Sprintf("%s %s answered %d", req.Method, req.URL.RequestURI(), resp.StatusCode)
	checked := resp
	var body []byte
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mediaType == "text/event-stream" {
		cp := *resp
		cp.Body = http.NoBody
		checked = &cp
	} else if resp.Body != nil {
		var err error
		body, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil {
			return fmt.Sprintf("%s: read the body to validate it: %v", call, err)
		}
		cp := *resp
		cp.Body = io.NopCloser(bytes.NewReader(body))
		checked = &cp
	}
	var problems []string
	if !tr.d.hasPath(req.URL.Path) {
		// Not the API's: the console's pages and assets, or any other
		// path, which is a 404 in the API's error shape.
		switch {
		case req.URL.Path == "/" && resp.StatusCode < 300, strings.HasPrefix(req.URL.Path, "/console/"):
			return ""
		case resp.StatusCode == http.StatusNotFound && isError(body):
			return ""
		}
		return fmt.Sprintf("%s, and internal/api/openapi.json has no path %s: document it, or answer 404 {\"error\":{\"code\",\"message\"}}\nbody: %s", call, req.URL.Path, body)
	}
	if ok, errs := tr.d.v.ValidateHttpResponse(req, checked); !ok {
		problems = append(problems, describe(errs))
	}
	if resp.StatusCode < 300 && !tr.d.documents(req.Method, req.URL.Path, resp.StatusCode) {
		problems = append(problems, fmt.Sprintf("the operation documents no %d response (only the default, for errors): add it", resp.StatusCode))
	}
	if len(problems) == 0 {
		return ""
	}
	msg := fmt.Sprintf("%s, which internal/api/openapi.json does not describe:\n%s", call, strings.Join(problems, "\n"))
	if len(body) > 0 {
		const show = 2000
		b := string(body)
		if len(b) > show {
			b = b[:show] + "..."
		}
		msg += "\nbody: " + b
	}
	return msg
}

// describe lays validation errors out one per line, with the schema
// failures under each.
func describe(errs []*vderrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "- %s: %s", e.Message, e.Reason)
		if e.SpecPath != "" {
			fmt.Fprintf(&b, " (document: %s)", e.SpecPath)
		}
		b.WriteByte('\n')
		for _, f := range e.SchemaValidationErrors {
			loc := f.FieldPath
			if loc == "" {
				loc = "/" + strings.Join(f.InstancePath, "/")
			}
			fmt.Fprintf(&b, "    at %s: %s (schema: %s)\n", loc, f.Reason, f.KeywordLocation)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

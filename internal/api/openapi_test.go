package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/api"
)

// notAPI are the routes the server registers that the OpenAPI document
// leaves out, with why.
var notAPI = map[string]string{
	"GET /{$}":      "the web console's page (HTML)",
	"GET /console/": "the web console's assets",
	"GET /metrics":  "a 404 pointing at the metrics listener, which serves them",
	"/":             "the 404 of every other path",
}

// documentedRoutes are the OpenAPI document's operations as mux patterns
// ("GET /v1/runs/{id}").
func documentedRoutes(t *testing.T, doc []byte) []string {
	t.Helper()
	var d struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(doc, &d))
	require.Equal(t, "3.1.0", d.OpenAPI)
	var out []string
	for path, item := range d.Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options":
				out = append(out, strings.ToUpper(method)+" "+path)
			}
		}
	}
	sort.Strings(out)
	return out
}

func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.Console = http.NotFoundHandler() })
	var registered []string
	for _, p := range e.api.Routes() {
		if _, skip := notAPI[p]; !skip {
			registered = append(registered, p)
		}
	}
	sort.Strings(registered)
	documented := documentedRoutes(t, api.OpenAPI())
	for _, r := range registered {
		if !slices.Contains(documented, r) {
			t.Errorf("route %q is registered (internal/api/server.go) but not in internal/api/openapi.json: document it", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(registered, d) {
			t.Errorf("internal/api/openapi.json documents %q, which the server does not register", d)
		}
	}
	for p := range notAPI {
		if !slices.Contains(e.api.Routes(), p) {
			t.Errorf("notAPI names %q, which the server no longer registers: drop it", p)
		}
	}
}

// TestOpenAPIDocumentIsKeptTidy holds the document to the form that lets
// several hands add to it without conflicts: two-space indentation, and
// paths in sorted order.
func TestOpenAPIDocumentIsKeptTidy(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("openapi.json")
	require.NoError(t, err)
	var compact, tidy bytes.Buffer
	require.NoError(t, json.Compact(&compact, raw))
	require.NoError(t, json.Indent(&tidy, compact.Bytes(), "", "  "))
	tidy.WriteByte('\n')
	require.True(t, bytes.Equal(tidy.Bytes(), raw), "internal/api/openapi.json is not indented with two spaces (python3 -m json.tool --indent 2 keeps the order)")

	var paths []string
	for _, m := range regexp.MustCompile(`(?m)^    "(/[^"]*)": \{`).FindAllSubmatch(raw, -1) {
		paths = append(paths, string(m[1]))
	}
	require.NotEmpty(t, paths)
	require.True(t, slices.IsSorted(paths), "the paths of internal/api/openapi.json are not in sorted order: %v", paths)
}

func TestOpenAPIDocumentIsServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do("GET", "/v1/openapi.json", "", nil)
	require.Equal(t, http.StatusOK, r.status, "answer: %s", r)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	require.Equal(t, api.OpenAPI(), r.body)
}

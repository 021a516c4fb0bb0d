package console_test

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/console"
)

func get(t *testing.T, srv *httptest.Server, path string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestHeaders: the page and every asset carry the policy and nosniff,
// with the type a module script needs; a known asset answers 304 while
// its ETag holds; an unknown one is 404, with the headers too.
func TestHeaders(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(console.Handler())
	t.Cleanup(srv.Close)
	for path, ctype := range map[string]string{
		"/":                       "text/html; charset=utf-8",
		"/console/js/main.js":     "text/javascript; charset=utf-8",
		"/console/style.css":      "text/css; charset=utf-8",
		"/console/favicon.svg":    "image/svg+xml",
		"/console/no-such-thing":  "text/plain; charset=utf-8",
		"/console/index.html":     "text/plain; charset=utf-8", // the page is served at / only
		"/console/../console.go":  "text/plain; charset=utf-8",
		"/console/js/../../x.txt": "text/plain; charset=utf-8",
	} {
		resp := get(t, srv, path)
		require.Equal(t, ctype, resp.Header.Get("Content-Type"), path)
		require.Equal(t, console.ContentSecurityPolicy, resp.Header.Get("Content-Security-Policy"), path)
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), path)
		require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), path)
		if strings.HasPrefix(ctype, "text/plain") {
			require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
			continue
		}
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		etag := resp.Header.Get("ETag")
		require.NotEmpty(t, etag, path)
		require.Equal(t, http.StatusNotModified, get(t, srv, path, "If-None-Match", etag).StatusCode, path)
	}
	csp := console.ContentSecurityPolicy
	require.Contains(t, csp, "script-src 'self';", "no 'unsafe-inline', no 'unsafe-eval'")
	require.NotContains(t, csp, "unsafe")
	require.Contains(t, csp, "default-src 'none'")
}

// TestAssetsAreSafe holds the assets to what the policy and the
// text-only rule need: no inline script, handler or style in the page,
// and no script that writes HTML or evaluates strings.
func TestAssetsAreSafe(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(console.Handler())
	t.Cleanup(srv.Close)
	page, err := io.ReadAll(get(t, srv, "/").Body)
	require.NoError(t, err)
	for _, script := range regexp.MustCompile(`(?is)<script\b[^>]*>`).FindAllString(string(page), -1) {
		require.Contains(t, script, ` src="/console/`, "only scripts from the console's assets: %s", script)
	}
	require.NotRegexp(t, `(?i)\son[a-z]+\s*=`, string(page), "no inline event handler")
	require.NotRegexp(t, `(?i)\sstyle\s*=`, string(page), "no inline style")
	require.NotRegexp(t, `(?i)<script\b[^>]*>[^<]+</script>`, string(page), "no inline script")

	forbidden := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setAttribute\(\s*'style'|\.cssText`)
	err = filepath.WalkDir("assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".js" {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		require.Empty(t, forbidden.FindAllString(string(src), -1), "%s writes HTML or evaluates text", path)
		return nil
	})
	require.NoError(t, err)
}

// Package console is the web console the dispatcher serves at /: live
// runs, a run turn by turn, tenants and their budgets. Its assets are
// plain ES modules, a stylesheet and one HTML page, embedded in the
// binary; nothing is built on the user's machine.
//
// The console is static: it holds no data and needs no authentication to
// load. It signs in with a tenant key or the admin token, kept in the
// tab's sessionStorage and sent as an Authorization header to the API on
// the same origin, never in a URL or a cookie. It reads Server-Sent
// Events through fetch, since EventSource cannot send that header.
//
// What tenants and models wrote reaches the page as text only (the
// scripts build nodes with textContent, never HTML), and every answer
// here carries a Content-Security-Policy that allows scripts, styles and
// connections from this origin alone: no inline script, no inline event
// handler, no eval.
//
// The charts (a run's timeline, a tenant's usage, a batch's progress, the
// fleet's slots) are drawn by uPlot, vendored as released on npm
// (assets/vendor: uPlot.iife.min.js, uPlot.min.css and its MIT licence)
// and loaded as a classic script before the modules; it draws on a canvas
// and styles through the CSSOM, so the policy holds it as it holds the
// console's own scripts. js/charts.js is the console's only user of it.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

// ContentSecurityPolicy is sent with every answer of the console.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// AssetPrefix is the path the assets are served under; the page itself
// is served at /.
const AssetPrefix = "/console/"

type asset struct {
	body  []byte
	etag  string
	ctype string
}

// Handler serves the console: / is the page, /console/... its assets.
// Every answer, a 404 included, carries the security headers.
func Handler() http.Handler {
	files, err := load(assets)
	if err != nil {
		// The assets are compiled in; failing to read them is a bug.
		panic(fmt.Sprintf("console: %v", err))
	}
	return &handler{files: files}
}

func load(fsys fs.FS) (map[string]asset, error) {
	files := map[string]asset{}
	err := fs.WalkDir(fsys, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ctype := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) {
		case ".js":
			// Module scripts need a JavaScript type; with nosniff the
			// browser trusts nothing else, whatever the host's mime table.
			ctype = "text/javascript; charset=utf-8"
		case ".html":
			ctype = "text/html; charset=utf-8"
		case ".css":
			ctype = "text/css; charset=utf-8"
		case ".svg":
			ctype = "image/svg+xml"
		}
		files[strings.TrimPrefix(p, "assets/")] = asset{body: body, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, ctype: ctype}
		return nil
	})
	if _, ok := files["index.html"]; err == nil && !ok {
		err = fmt.Errorf("assets have no index.html")
	}
	return files, err
}

type handler struct {
	files map[string]asset
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", ContentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "no-referrer")
	name := "index.html"
	if r.URL.Path != "/" {
		name = strings.TrimPrefix(r.URL.Path, AssetPrefix)
		if name == r.URL.Path || name == "index.html" {
			name = ""
		}
	}
	a, ok := h.files[name]
	if !ok {
		http.Error(w, "no such console asset: "+r.URL.Path, http.StatusNotFound)
		return
	}
	// Assets change only with the binary: the browser revalidates each
	// time and gets a 304 while the ETag holds.
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("ETag", a.etag)
	hdr.Set("Content-Type", a.ctype)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
}

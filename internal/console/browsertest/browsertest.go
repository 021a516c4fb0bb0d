// Package browsertest drives a headless Chromium for the console's tests:
// the only importer of chromedp. A test starts a Browser, opens Pages and
// acts on them through a few helpers that fail the test with what they
// waited for; nothing outside this package sees a chromedp type.
//
// Chromium comes from the machine (Debian's chromium package; CI installs
// it when it is missing). Without it a test is skipped, unless
// AGENTFLEET_REQUIRE_INTEGRATION=1 (as in CI), which makes it fail. It is
// started headless, without a sandbox (tests run as root in CI), without
// any network of its own (no background, update or sync traffic) and
// with a fresh profile.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Environment variables.
const (
	// EnvChromium names the browser binary; unset, the first of
	// chromium, chromium-browser, google-chrome on PATH.
	EnvChromium = "AGENTFLEET_CHROMIUM"
	// EnvRequire=1 turns a missing browser into a failure.
	EnvRequire = "AGENTFLEET_REQUIRE_INTEGRATION"
)

// Timeout bounds each wait of a Page helper.
const Timeout = 20 * time.Second

// Browser is one Chromium process.
type Browser struct {
	ctx context.Context
}

// Find returns the browser binary, or "" when there is none.
func Find() string {
	if p := os.Getenv(EnvChromium); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Start starts Chromium for t, or skips t without one (fails it under
// AGENTFLEET_REQUIRE_INTEGRATION=1). It stops when t ends.
func Start(t testing.TB) *Browser {
	t.Helper()
	path := Find()
	if path == "" {
		msg := "no Chromium: install Debian's chromium (apt-get install -y chromium) or set " + EnvChromium
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s (%s=1 requires the browser tests)", msg, EnvRequire)
		}
		t.Skip(msg)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return &Browser{ctx: ctx}
}

// Page is one tab. Its console messages are kept, and the page records
// every Content-Security-Policy violation in window.__cspViolations
// from its first script on.
type Page struct {
	t   testing.TB
	ctx context.Context

	mu       sync.Mutex
	messages []string // "<type>: <text>"
}

// violations is run before any script of every document the page loads.
const violations = `window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', (e) =>
  window.__cspViolations.push(e.violatedDirective + ' ' + (e.blockedURI || '') + ' ' + (e.sample || '')));`

// NewPage opens a tab, closed when t ends.
func (b *Browser) NewPage(t testing.TB) *Page {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	p := &Page{t: t, ctx: ctx}
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: violations}); err != nil {
		cancel()
		t.Fatalf("open a tab: %v", err)
	}
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			p.mu.Lock()
			p.messages = append(p.messages, string(m.Type)+": "+m.Text)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return p
}

func (p *Page) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("%s: %v\nconsole: %s", what, err, strings.Join(p.Messages(), "\n"))
	}
}

// Navigate loads url.
func (p *Page) Navigate(url string) {
	p.t.Helper()
	p.do("navigate to "+url, chromedp.Navigate(url))
}

// Type types text into the element sel (a CSS selector) finds.
func (p *Page) Type(sel, text string) {
	p.t.Helper()
	p.do("type into "+sel, chromedp.SendKeys(chromedp.CSS(sel), text, chromedp.NodeVisible))
}

// Click clicks the element sel finds, once it is visible. A live page
// may redraw the element between finding and clicking it; the click is
// then tried again on the element sel finds now.
func (p *Page) Click(sel string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	for {
		err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
		if err == nil {
			return
		}
		if !nodeGone(err) || ctx.Err() != nil {
			p.t.Fatalf("click %s: %v\nconsole: %s", sel, err, strings.Join(p.Messages(), "\n"))
		}
	}
}

// nodeGone reports whether err says the node found was removed from the
// document before the action on it ran.
func nodeGone(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Could not find node with given id") ||
		strings.Contains(msg, "No node with given id") ||
		strings.Contains(msg, "Node is detached")
}

// WaitVisible waits until sel finds a visible element.
func (p *Page) WaitVisible(sel string) {
	p.t.Helper()
	p.do("wait for "+sel+" to be visible", chromedp.WaitVisible(chromedp.CSS(sel)))
}

// WaitJS waits until the JavaScript expression is truthy; what says what
// it means when it never is.
func (p *Page) WaitJS(what, expr string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(Timeout))); err != nil {
		p.t.Fatalf("wait until %s (%s): %v\nconsole: %s", what, expr, err, strings.Join(p.Messages(), "\n"))
	}
}

// WaitText waits until the text of the first element sel finds contains
// want.
func (p *Page) WaitText(sel, want string) {
	p.t.Helper()
	p.WaitJS(fmt.Sprintf("%s shows %q", sel, want),
		fmt.Sprintf(`(document.querySelector(%q)?.textContent || '').includes(%q)`, sel, want))
}

// Eval evaluates the JavaScript expression and decodes its value.
func Eval[T any](p *Page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// Text is the text content of the first element sel finds ("" for none).
func (p *Page) Text(sel string) string {
	p.t.Helper()
	return Eval[string](p, fmt.Sprintf(`document.querySelector(%q)?.textContent || ''`, sel))
}

// Screenshot saves the viewport as <dir>/<name>.png and returns the path.
func (p *Page) Screenshot(dir, name string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatalf("save screenshot: %v", err)
	}
	return path
}

// Messages are the page's console messages so far, as "<type>: <text>";
// uncaught exceptions have the type "exception".
func (p *Page) Messages() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.messages...)
}

// CSPViolations are the Content-Security-Policy violations the current
// document reported.
func (p *Page) CSPViolations() []string {
	p.t.Helper()
	return Eval[[]string](p, `window.__cspViolations || []`)
}

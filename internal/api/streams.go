package api

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// What holds a request open, and the HTTP server's timeouts. Every
// request is bounded by the server's read, write and idle timeouts, but
// an event stream or a ?wait poll lives as long as its client wants: each
// of its writes gets WriteTimeout of its own, so a stream outlives the
// timeouts while a client that stops reading is still cut off. (The read
// deadline ends with the body: the server clears it once it watches the
// connection for a close.) Such requests are counted per tenant and
// capped at Config.TenantStreams; beyond it a request is 429 with
// Retry-After.

// Defaults of the stream cap and the server's timeouts.
const (
	TenantStreamsDefault = 64
	ReadTimeoutDefault   = time.Minute
	WriteTimeoutDefault  = time.Minute
	IdleTimeoutDefault   = 2 * time.Minute
	readHeaderTimeout    = 10 * time.Second
	// longBodyTimeout bounds reading and answering a request whose body
	// may be large (a batch of up to AGENTFLEET_BATCH_MAX_BYTES).
	longBodyTimeout = 15 * time.Minute
	// streamRetryAfter is the Retry-After of a stream refused for the
	// cap, in seconds.
	streamRetryAfter = 5
	// adminStreams counts the admin token's streams, apart from every
	// tenant's (no tenant id is empty).
	adminStreams = ""
)

func (c *Config) streamDefaults() error {
	if c.TenantStreams < 0 || c.ReadTimeout < 0 || c.WriteTimeout < 0 || c.IdleTimeout < 0 {
		return errors.New("api: TenantStreams, ReadTimeout, WriteTimeout and IdleTimeout must not be negative (zero selects the default)")
	}
	c.TenantStreams = cmp.Or(c.TenantStreams, TenantStreamsDefault)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, ReadTimeoutDefault)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, WriteTimeoutDefault)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, IdleTimeoutDefault)
	return nil
}

// HTTPServer is the http.Server that serves s, with its timeouts.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: min(readHeaderTimeout, s.cfg.ReadTimeout),
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
	}
}

// streamGate counts the open streams of each tenant.
type streamGate struct {
	mu   sync.Mutex
	open map[string]int
}

func (g *streamGate) acquire(key string, limit int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open[key] >= limit {
		return false
	}
	if g.open == nil {
		g.open = map[string]int{}
	}
	g.open[key]++
	return true
}

func (g *streamGate) release(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open[key]--; g.open[key] <= 0 {
		delete(g.open, key)
	}
}

// always and waits say which requests of an endpoint are held open.
func always(*http.Request) bool { return true }

func waits(r *http.Request) bool {
	v, _ := strconv.ParseBool(r.URL.Query().Get("wait"))
	return v
}

// stream serves h as a stream whose writes each get their own deadline;
// a request that held says is held open also counts toward its tenant's
// cap.
func (s *Server) stream(held func(*http.Request) bool, h handler) handler {
	return func(w http.ResponseWriter, r *http.Request, p principal) {
		sw := &streamWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout}
		if !held(r) {
			h(sw, r, p)
			return
		}
		key, who := p.tenant, "tenant "+p.tenant
		if p.admin {
			key, who = adminStreams, "the admin token"
		}
		if !s.streams.acquire(key, s.cfg.TenantStreams) {
			w.Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
			s.fail(w, r, &apiError{status: http.StatusTooManyRequests, code: "too_many_streams", msg: fmt.Sprintf(
				"%s has %d event streams and ?wait polls open, the most it may have at once (AGENTFLEET_TENANT_STREAMS): close one, or try again in %d s",
				who, s.cfg.TenantStreams, streamRetryAfter)})
			return
		}
		defer s.streams.release(key)
		h(sw, r, p)
	}
}

// streamWriter moves the connection's write deadline before each write:
// a stream lives as long as it writes, and a write its client does not
// take within the timeout ends it.
type streamWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (w *streamWriter) extend() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout)) }

func (w *streamWriter) WriteHeader(code int) {
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

func (w *streamWriter) Write(b []byte) (int, error) {
	w.extend()
	return w.ResponseWriter.Write(b)
}

func (w *streamWriter) Flush() {
	w.extend()
	_ = w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// longBody gives a request whose body may be large (a batch) deadlines
// of its own for reading it and answering.
func (s *Server) longBody(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		deadline := time.Now().Add(longBodyTimeout)
		_ = rc.SetReadDeadline(deadline)
		_ = rc.SetWriteDeadline(deadline)
		h(w, r)
	}
}

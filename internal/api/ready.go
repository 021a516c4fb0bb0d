package api

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
)

const (
	readyTimeout = 3 * time.Second
	// readyLogEvery is how often a failing readiness check may log its
	// cause: a probe every second must not write a line every second.
	readyLogEvery = time.Minute
)

// readyAnswer is /readyz's body: which checks pass, never why one fails
// (the probe needs no key, and a driver's error can name hosts, users or
// schemas).
type readyAnswer struct {
	Status string            `json:"status"` // ok, unavailable
	Checks map[string]string `json:"checks"` // check: ok, failing
}

// handleReady is 200 only when the store and NATS are usable. Both are
// checked, at once, so the answer names every check that fails.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	checks := []struct {
		name  string
		check func(context.Context) error
	}{
		{"store", func(ctx context.Context) error {
			_, err := s.cfg.Store.TenantList(ctx, store.TenantListParams{Limit: 1})
			return err
		}},
		{"nats", s.cfg.Bus.Ready},
	}
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() { errs[i] = c.check(ctx) })
	}
	wg.Wait()
	status, answer := http.StatusOK, readyAnswer{Status: "ok", Checks: map[string]string{}}
	for i, c := range checks {
		answer.Checks[c.name] = "ok"
		if errs[i] != nil {
			status, answer.Status, answer.Checks[c.name] = http.StatusServiceUnavailable, "unavailable", "failing"
			s.readyLog.failed(s.log, c.name, errs[i])
		}
	}
	writeJSON(w, status, answer)
}

// readyLog logs the causes of failing readiness checks, each check at
// most once per readyLogEvery, with the count of failures not logged.
type readyLog struct {
	mu     sync.Mutex
	checks map[string]*readyLogged
}

type readyLogged struct {
	at       time.Time
	unlogged int
}

func (l *readyLog) failed(log *slog.Logger, check string, err error) {
	l.mu.Lock()
	if l.checks == nil {
		l.checks = map[string]*readyLogged{}
	}
	c := l.checks[check]
	if c == nil {
		c = &readyLogged{}
		l.checks[check] = c
	}
	now := time.Now()
	if !c.at.IsZero() && now.Sub(c.at) < readyLogEvery {
		c.unlogged++
		l.mu.Unlock()
		return
	}
	unlogged := c.unlogged
	c.at, c.unlogged = now, 0
	l.mu.Unlock()
	log.Warn("readiness check failing", "check", check, "err", err, "failures_not_logged", unlogged)
}

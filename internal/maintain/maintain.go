// Package maintain owns the dispatcher's background services: the
// stranded-run sweep, the children, batch and approvals sweeps, the
// callback sender and retention, one per file. Each is a Service; the
// dispatcher starts them together with Run and stops them with its
// context. A service that only one dispatcher of a fleet may run (the
// sweeps that change runs) checks Leading, the scheduler's lease, before
// each pass; the ones whose work is claimed in the store (callbacks,
// notifications, requeues deduplicated by message id) run everywhere.
// Rekey (rekey.go) is no service: internal/api runs it on request.
//
// What a sweep's store change owes the bus is published through
// internal/outbox. The package knows nothing of HTTP: internal/api
// serves, this package works in the background.
package maintain

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/outbox"
	"github.com/agentfleet/agentfleet/internal/store"
)

// Service is one background job of the dispatcher. Run works until ctx
// ends and then returns nil, or returns the error that stopped it.
type Service interface {
	Run(ctx context.Context) error
}

// Func is a Service of a function (the scheduler's Run, the keeper's).
type Func func(ctx context.Context) error

func (f Func) Run(ctx context.Context) error { return f(ctx) }

// Run runs services until ctx ends and every one has returned, and
// returns their errors joined.
func Run(ctx context.Context, services ...Service) error {
	var wg sync.WaitGroup
	errs := make([]error, len(services))
	for i, s := range services {
		wg.Go(func() { errs[i] = s.Run(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Leading reports whether this process leads the fleet's scheduling (the
// scheduler's Leading); nil means it always does (one dispatcher).
type Leading func() bool

// Now reports whether this process leads now.
func (l Leading) Now() bool { return l == nil || l() }

// every calls pass each interval until ctx ends, logging what it returns
// as what the service named what failed at.
func every(ctx context.Context, interval time.Duration, log *slog.Logger, what string, pass func(ctx context.Context) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := pass(ctx); err != nil && ctx.Err() == nil {
			log.Warn(what, "err", err)
		}
	}
}

// leader wraps pass so that it runs only while leading.
func leader(leading Leading, pass func(ctx context.Context) error) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if !leading.Now() {
			return nil
		}
		return pass(ctx)
	}
}

// sweep is what the services that change runs share: their log, and the
// outbox they publish what the changes owe through.
type sweep struct {
	log    *slog.Logger
	outbox outbox.Outbox
}

func newSweep(st store.Store, b *bus.Bus, log *slog.Logger) sweep {
	log = logger(log)
	return sweep{log: log, outbox: outbox.Outbox{Bus: b, Store: st, Log: log}}
}

// logger is log, or one that discards.
func logger(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

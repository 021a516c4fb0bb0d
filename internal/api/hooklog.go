// The intake's delivery log: its lines and its GitHub body digest claims,
// each written in groups of the deliveries answered at once, and the
// pacing of the refusals it logs.

package api

import (
	"context"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
)

// logCall is one delivery log line waiting for its group's write.
type logCall struct {
	ctx  context.Context
	line store.TriggerDelivery
	err  error
}

// recordDelivery writes one log line, in one store call with the lines
// of the deliveries answered at the same time. A group that fails is
// written line by line, so one line's trigger deleted meanwhile fails
// only that line.
func (s *Server) recordDelivery(ctx context.Context, line store.TriggerDelivery) error {
	c := &logCall{ctx: ctx, line: line}
	s.hooks.log.Do(c, hookLogBatchMax, func(calls []*logCall) {
		lines := make([]store.TriggerDelivery, len(calls))
		for i, c := range calls {
			lines[i] = c.line
		}
		// The group serves every caller: no one caller's context
		// may cut it short.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
		defer cancel()
		_, err := s.cfg.Store.TriggerDeliveryRecord(bctx, store.TriggerDeliveryRecordParams{Lines: lines, Keep: s.hooks.keep})
		if err == nil || len(calls) == 1 {
			for _, c := range calls {
				c.err = err
			}
			return
		}
		for _, c := range calls {
			_, c.err = s.cfg.Store.TriggerDeliveryRecord(bctx, store.TriggerDeliveryRecordParams{Lines: []store.TriggerDelivery{c.line}, Keep: s.hooks.keep})
		}
	})
	return c.err
}

// claimCall is one delivery's digest claim waiting for its group's write.
type claimCall struct {
	claim  store.DigestClaim
	holder string
	err    error
}

// claimDigest claims a delivery's body digest and returns the delivery
// that holds it: this one, or the first of that body within the window.
// Concurrent claims share one store call, and a group that fails is
// claimed one by one, as the log's lines are.
func (s *Server) claimDigest(ctx context.Context, claim store.DigestClaim) (string, error) {
	c := &claimCall{claim: claim}
	s.hooks.claims.Do(c, hookLogBatchMax, func(calls []*claimCall) {
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
		defer cancel()
		run := func(calls []*claimCall) error {
			claims := make([]store.DigestClaim, len(calls))
			for i, c := range calls {
				claims[i] = c.claim
			}
			holders, err := s.cfg.Store.TriggerDigestClaim(bctx, store.TriggerDigestClaimParams{Claims: claims, Window: s.hooks.window})
			for i, c := range calls {
				if c.err = err; err == nil {
					c.holder = holders[i]
				}
			}
			return err
		}
		if err := run(calls); err != nil && len(calls) > 1 {
			for _, c := range calls {
				_ = run([]*claimCall{c})
			}
		}
	})
	return c.holder, c.err
}

// refusalBudget lets each trigger's log take refusalsPerMinute refused
// deliveries per minute, counted from the first of the minute.
type refusalBudget struct {
	mu sync.Mutex
	m  map[string]*refusalWindow
}

type refusalWindow struct {
	start time.Time
	n     int
}

// refusalTriggersMax is how many triggers' windows the budget holds
// before it drops the windows that ended.
const refusalTriggersMax = 10_000

// allow reports whether trigger's log may take one more refusal at now.
func (b *refusalBudget) allow(trigger string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.m[trigger]
	if w == nil || now.Sub(w.start) >= time.Minute {
		if b.m == nil {
			b.m = map[string]*refusalWindow{}
		}
		if w == nil && len(b.m) >= refusalTriggersMax {
			for id, o := range b.m {
				if now.Sub(o.start) >= time.Minute {
					delete(b.m, id)
				}
			}
		}
		w = &refusalWindow{start: now}
		b.m[trigger] = w
	}
	if w.n >= refusalsPerMinute {
		return false
	}
	w.n++
	return true
}

package worker

import (
	"context"
	"fmt"

	"github.com/agentfleet/agentfleet/internal/store"
)

// committer group-commits turns: concurrent turns hand their commits to
// one goroutine, which writes everything that queued up while the previous
// batch was in flight in a single TurnCommitMany transaction. An idle
// worker commits a lone turn at once (no timer, no added latency); a busy
// one amortises a transaction over up to max turns, which is what lets a
// store that does a few thousand transactions a second commit more turns
// than that.
type committer struct {
	store store.Store
	max   int
	reqs  chan commitReq
}

type commitReq struct {
	ctx   context.Context
	p     store.TurnCommitParams
	reply chan commitReply
}

type commitReply struct {
	res store.RunChangeResult
	err error
}

func newCommitter(s store.Store, max int) *committer {
	return &committer{store: s, max: max, reqs: make(chan commitReq)}
}

// commit commits one turn through the current batch.
func (c *committer) commit(ctx context.Context, p store.TurnCommitParams) (store.RunChangeResult, error) {
	req := commitReq{ctx: ctx, p: p, reply: make(chan commitReply, 1)}
	select {
	case c.reqs <- req:
	case <-ctx.Done():
		return store.RunChangeResult{}, ctx.Err()
	}
	// Once handed over, wait for the outcome even if ctx ends: the
	// batch may land, and the caller must know whether it did.
	r := <-req.reply
	return r.res, r.err
}

// run serves commits until ctx ends. Callers must have stopped calling
// commit by then.
func (c *committer) run(ctx context.Context) {
	batch := make([]commitReq, 0, c.max)
	params := make([]store.TurnCommitParams, 0, c.max)
	for {
		batch, params = batch[:0], params[:0]
		select {
		case req := <-c.reqs:
			batch = append(batch, req)
		case <-ctx.Done():
			return
		}
	fill:
		for len(batch) < c.max {
			select {
			case req := <-c.reqs:
				batch = append(batch, req)
			default:
				break fill
			}
		}
		for _, r := range batch {
			params = append(params, r.p)
		}
		// The batch is written with a context of its own: one caller
		// giving up must not abort the others' commits.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		var results []store.RunChangeResult
		var errs []error
		var err error
		if len(params) == 1 {
			var res store.RunChangeResult
			res, err = c.store.TurnCommit(wctx, params[0])
			results, errs = []store.RunChangeResult{res}, []error{err}
			err = nil
		} else {
			results, errs, err = c.store.TurnCommitMany(wctx, params)
		}
		cancel()
		for i, r := range batch {
			switch {
			case err != nil:
				r.reply <- commitReply{err: fmt.Errorf("commit batch of %d turns: %w", len(batch), err)}
			default:
				r.reply <- commitReply{res: results[i], err: errs[i]}
			}
		}
	}
}

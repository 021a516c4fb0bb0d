package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
)

// committer group-commits turns: concurrent turns hand their commits to
// one goroutine, which writes everything that queued up while the previous
// batch was in flight in a single TurnCommitMany transaction. An idle
// worker commits a lone turn at once (no timer, no added latency); a busy
// one amortises a transaction over up to max turns, which is what lets a
// store that does a few thousand transactions a second commit more turns
// than that.
//
// Waiting for the previous batch alone gathers little: a commit takes a
// few hundred microseconds, and a worker turning over a thousand turns a
// second hands over one or two in that time, so most batches held one
// turn and paid a whole transaction for it. When commits arrive faster
// than one per lingerGap on average, the committer also lingers up to
// lingerMax for a batch of lingerBatch before it writes. An idle worker's
// commits are far apart and never wait, and a batch that large already
// goes at once.
type committer struct {
	store store.Store
	max   int
	reqs  chan commitReq
	// gap is the moving average of the time between commit requests;
	// last is when the latest arrived.
	gap  time.Duration
	last time.Time
}

// lingerMax bounds how long a commit waits for company, and lingerBatch
// is the batch it waits for: one that large already goes at once.
// lingerGap is the average time between commits under which it waits
// (two or more others are then due within lingerMax).
const (
	lingerMax   = 2 * time.Millisecond
	lingerBatch = 16
	lingerGap   = lingerMax / 2
)

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
	return &committer{store: s, max: max, reqs: make(chan commitReq), gap: lingerMax}
}

// arrived updates the average gap between commit requests.
func (c *committer) arrived(now time.Time) {
	if !c.last.IsZero() {
		c.gap += (now.Sub(c.last) - c.gap) / 8
	}
	c.last = now
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
			c.arrived(time.Now())
			batch = append(batch, req)
		case <-ctx.Done():
			return
		}
	fill:
		for len(batch) < c.max {
			select {
			case req := <-c.reqs:
				c.arrived(time.Now())
				batch = append(batch, req)
			default:
				break fill
			}
		}
		if len(batch) < min(c.max, lingerBatch) && c.gap < lingerGap {
			c.linger(ctx, &batch)
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

// linger adds to batch the commits that arrive within lingerMax, until it
// holds lingerBatch.
func (c *committer) linger(ctx context.Context, batch *[]commitReq) {
	t := time.NewTimer(lingerMax)
	defer t.Stop()
	for len(*batch) < min(c.max, lingerBatch) {
		select {
		case req := <-c.reqs:
			c.arrived(time.Now())
			*batch = append(*batch, req)
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

package worker

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet/internal/group"
	"github.com/agentfleet/agentfleet/internal/store"
)

// committer group-commits turns: a turn's commit that arrives while a
// batch is being written waits, and the next batch carries every commit
// that queued meanwhile, as one TurnCommitMany transaction (group.Queue).
// An idle worker commits a lone turn at once; a busy one amortises a
// transaction over up to max turns, which is what lets a store that does
// a few thousand transactions a second commit more turns than that.
//
// Waiting for the previous batch alone gathers little: a commit takes a
// few hundred microseconds, and a worker turning over a thousand turns a
// second hands over one or two in that time, so most batches held one
// turn and paid a whole transaction for it. So the queue lingers up to
// commitLinger for more while commits come fast (group.Queue.Linger); an
// idle worker's commits are far apart and never wait.
type committer struct {
	store   store.Store
	max     int
	q       group.Queue[*commitReq]
	metrics *Metrics
}

// commitLinger bounds how long a batch waits for company.
const commitLinger = 2 * time.Millisecond

type commitReq struct {
	ctx context.Context
	p   store.TurnCommitParams
	res store.RunChangeResult
	err error
}

func newCommitter(s store.Store, max int, m *Metrics) *committer {
	c := &committer{store: s, max: max, metrics: m}
	c.q.Linger = commitLinger
	return c
}

// commit commits one turn through the current batch. Once the batch it is
// in is written, it reports the outcome even if ctx has ended meanwhile:
// the batch may have landed, and the caller must know whether it did.
func (c *committer) commit(ctx context.Context, p store.TurnCommitParams) (store.RunChangeResult, error) {
	req := &commitReq{ctx: ctx, p: p}
	c.q.Do(req, c.max, c.write)
	return req.res, req.err
}

// write commits a batch. A commit whose caller gave up before the batch
// began is left out.
func (c *committer) write(reqs []*commitReq) {
	batch := make([]*commitReq, 0, len(reqs))
	params := make([]store.TurnCommitParams, 0, len(reqs))
	for _, r := range reqs {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			continue
		}
		batch = append(batch, r)
		params = append(params, r.p)
	}
	if len(batch) == 0 {
		return
	}
	// The batch is written with a context of its own: one caller giving
	// up must not abort the others' commits.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), storeTimeout)
	defer cancel()
	if len(batch) == 1 {
		batch[0].res, batch[0].err = c.store.TurnCommit(wctx, params[0])
		return
	}
	results, errs, err := c.store.TurnCommitMany(wctx, params)
	if err != nil {
		// One bad member (bytes the database refuses, say) fails the
		// whole statement: commit each alone, so it fails only itself.
		// The turn fence makes this safe should the batch have landed
		// after all: a repeat then loses its fence and is told so.
		c.metrics.batchSplit()
		for _, r := range batch {
			r.res, r.err = c.store.TurnCommit(wctx, r.p)
		}
		return
	}
	for i, r := range batch {
		r.res, r.err = results[i], errs[i]
	}
}

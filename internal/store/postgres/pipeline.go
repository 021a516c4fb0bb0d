package postgres

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet/internal/group"
)

// pipeline shares round trips between concurrent calls. A worker runs
// many turns at once, and each turn's load and reply record is a round
// trip and (when it writes) a commit with its WAL flush. Calls that arrive
// while a pipeline is on the wire queue up, and the next pipeline carries
// them all: one round trip and one commit for the lot. A lone call goes
// out at once, as it would alone: no timer, no added latency when idle.
//
// A pipeline is one transaction, committed once every call has read its
// results; one failing statement or reader rolls it all back, and then
// each call is run again on its own, so one call's error is never
// another's. A call's queue and read functions must therefore be safe to
// run more than once (as for exec.batch). The calls of a pipeline are
// sorted by their order key: run rows are locked before tenant rows, and
// tenant rows by id, so two pipelines cannot deadlock.
type pipeline struct {
	calls group.Queue[*pipeCall]
	// shared counts the pipelines that carried more than one call, and
	// the calls they carried (tests read them).
	shared, sharedCalls atomic.Int64
	// merged counts the calls that shared set-based statements in a
	// committed pipeline (tests read it).
	merged atomic.Int64
}

// pipeCall is one call's part of a pipeline: the statements it queues
// and the reader of their results, in order.
type pipeCall struct {
	ctx context.Context
	// order sorts the calls of a pipeline, so its row locks are taken
	// in the store's one order (see the package doc).
	order string
	queue func(b *pgx.Batch)
	read  func(br pgx.BatchResults) error
	// merge, when set, lets this call share set-based statements with
	// the other calls of its pipeline that have the same merger; arg is
	// what the merger reads and fills. queue and read stay the call's
	// own, for a pipeline it is alone in and for its run alone.
	merge *pipeMerger
	arg   any
	err   error
}

// pipeMerger runs several calls of one kind as set-based statements: one
// statement over arrays costs Postgres far less than one per call, even
// in one round trip. Its read fails the whole pipeline (which then runs
// every call alone) for any outcome it does not handle itself, such as a
// missing row.
type pipeMerger struct {
	// key names the row a call works on: of calls with one key, only
	// the first is merged, and the others run by their own statements
	// after it (two loads of one run, say, must not both start it).
	key   func(c *pipeCall) string
	queue func(b *pgx.Batch, calls []*pipeCall)
	read  func(br pgx.BatchResults, calls []*pipeCall) error
}

// pipeUnit is what a pipeline queues and reads as one: a call, or calls
// merged.
type pipeUnit struct {
	calls []*pipeCall
	merge *pipeMerger // nil: calls holds one call, run by its own statements
}

// pipeUnits groups the sorted calls of a pipeline into units. A merged
// unit sits where the first of its calls did: mergeable calls lock rows
// of one kind, so the store's lock order holds.
func pipeUnits(calls []*pipeCall) []pipeUnit {
	units := make([]pipeUnit, 0, len(calls))
	at := map[*pipeMerger]int{}
	keys := map[string]bool{}
	for _, c := range calls {
		if c.merge == nil || keys[c.merge.key(c)] {
			units = append(units, pipeUnit{calls: []*pipeCall{c}})
			continue
		}
		keys[c.merge.key(c)] = true
		i, ok := at[c.merge]
		if !ok {
			at[c.merge] = len(units)
			units = append(units, pipeUnit{calls: []*pipeCall{c}, merge: c.merge})
			continue
		}
		units[i].calls = append(units[i].calls, c)
	}
	for i, u := range units {
		if u.merge != nil && len(u.calls) == 1 {
			units[i].merge = nil
		}
	}
	return units
}

// Order keys of pipelined calls: by the rows they lock, run rows first.
const (
	pipeOrderNew    = "0 " // locks no existing row
	pipeOrderRun    = "1 "
	pipeOrderTenant = "2 "
)

// pipelineLinger is how long a pipeline waits for more calls when they
// come fast (group.Queue.Linger). A pipeline's round trip is short, so
// waiting only for the one ahead gathered few calls at a worker's pace:
// production bench, 3 alternating pairs, PostgreSQL CPU per turn 280-298
// -> 242-273 us with 1 ms, and 2 ms gained little more.
const pipelineLinger = time.Millisecond

// pipelineMax bounds the calls in one pipeline, so its transaction stays
// short.
const pipelineMax = 64

// pipelineTimeout bounds a shared pipeline: no single caller's context
// may cut short a transaction that serves others.
const pipelineTimeout = 30 * time.Second

// pipelined runs one call through the shared pipeline and returns its
// error, mapped like exec.batch's. The call's caller may wait for the
// pipeline ahead of it to finish, even past its ctx: the pipeline it is
// in may already have landed, and its caller must know.
func (s *Store) pipelined(ctx context.Context, order string, queue func(b *pgx.Batch), read func(br pgx.BatchResults) error) error {
	return s.pipelinedMerge(ctx, order, queue, read, nil, nil)
}

// pipelinedMerge is pipelined for a call that merge may run together with
// others of its kind, as set-based statements over their args.
func (s *Store) pipelinedMerge(ctx context.Context, order string, queue func(b *pgx.Batch), read func(br pgx.BatchResults) error, merge *pipeMerger, arg any) error {
	c := &pipeCall{ctx: ctx, order: order, queue: queue, read: read, merge: merge, arg: arg}
	s.pipe.calls.Do(c, pipelineMax, s.runPipeline)
	return c.err
}

// runPipeline runs calls as one pipeline, or each on its own after the
// pipeline failed.
func (s *Store) runPipeline(calls []*pipeCall) {
	live := make([]*pipeCall, 0, len(calls))
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			continue
		}
		live = append(live, c)
	}
	alone := func(c *pipeCall) {
		c.err = exec{s: s}.batch(c.ctx, func() *pgx.Batch {
			b := &pgx.Batch{}
			c.queue(b)
			return b
		}, c.read)
	}
	if len(live) == 1 {
		alone(live[0])
		return
	}
	if len(live) == 0 {
		return
	}
	slices.SortStableFunc(live, func(a, b *pipeCall) int { return strings.Compare(a.order, b.order) })
	ctx, cancel := context.WithTimeout(context.Background(), pipelineTimeout)
	defer cancel()
	// committed: the commit was sent, so the pipeline's outcome (landed,
	// or unknown when the commit failed) is every call's.
	committed := false
	merged := 0
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		// An explicit transaction, committed only once every reader
		// has its results: a reader that fails leaves nothing behind,
		// even when its statement succeeded.
		units := pipeUnits(live)
		merged = 0
		b := &pgx.Batch{}
		b.Queue("begin")
		for _, u := range units {
			if u.merge != nil {
				merged += len(u.calls)
				u.merge.queue(b, u.calls)
			} else {
				u.calls[0].queue(b)
			}
		}
		br := conn.SendBatch(ctx, b)
		_, err := br.Exec()
		for i := 0; err == nil && i < len(units); i++ {
			// After a failed reader the results no longer line up
			// with theirs: stop reading.
			if u := units[i]; u.merge != nil {
				err = u.merge.read(br, u.calls)
			} else {
				err = u.calls[0].read(br)
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_, _ = conn.Exec(ctx, "rollback") // a broken connection is not reused
			return err
		}
		// A failed commit leaves the outcome unknown: every call fails
		// as a single call would, and none may run again here.
		committed = true
		_, err = conn.Exec(ctx, "commit")
		return err
	})
	if committed {
		if err == nil {
			s.pipe.shared.Add(1)
			s.pipe.sharedCalls.Add(int64(len(live)))
			s.pipe.merged.Add(int64(merged))
		}
		for _, c := range live {
			c.err = mapErr(err)
		}
		return
	}
	// Rolled back (or never sent): each call runs on its own.
	for _, c := range live {
		alone(c)
	}
}

package driver

import (
	"context"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
)

// TurnCommitter holds the coarse primitive under the rules' TurnCommit and
// TurnCommitMany: a set of turn commits applied in one write (on
// PostgreSQL one pipeline, one statement per wave of distinct runs; on
// SQLite one write of the group commit), and the read that tells why a
// commit lost its fence.
type TurnCommitter interface {
	// TurnCommitApply applies the commits ps, validated and filled in by
	// rules.TurnCommit, in one transaction and in order: a run named
	// twice advances turn by turn. Each is fenced: its run has committed
	// exactly Turn-1 turns and may move to its Status. One that passes
	// updates its run (turn, status, args and answer unless empty, error
	// or else a cancellation's reason, usage, carried bytes, children,
	// the wait, event seq and updated at, which is now; a run parked
	// for children that have all ended stays running) and inserts its
	// steps and its events numbered after the run's event seq. One that
	// fails (its run missing, ended, at another turn, or not allowed the
	// move) writes nothing and is lost (Applied false); the others still
	// apply. out[i] is what became of ps[i]. An error is the whole set's:
	// nothing of it was written.
	TurnCommitApply(ctx context.Context, ps []store.TurnCommitParams, now time.Time) (out []TurnApplied, err error)
	// TurnCommitRunsGet reads the runs ids names that exist, as they are
	// now (a missing one is left out): why lost commits did nothing.
	TurnCommitRunsGet(ctx context.Context, ids []string) ([]RunRow, error)
}

// TurnApplied is what TurnCommitApply did with one commit.
type TurnApplied struct {
	// Applied is false when the commit lost its fence: nothing of it was
	// written, and the rest is zero.
	Applied bool
	// Run is the run as the commit left it.
	Run RunRow
	// LastSeq is the event seq the commit's events follow.
	LastSeq int64
	// Head, when the commit ended a run of a session, is the session's
	// oldest unfinished run once the whole set has applied (nil if it
	// has none), read under the session's lock where the backend has one.
	Head *RunRow
}

package rules

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// Sessions are read from their runs: there is no session row to keep in
// step with a run's commits, so a run without a session costs nothing.

// sessionListStart is the position before every session: a first page
// lists those updated before it.
var sessionListStart = time.Date(9999, time.December, 31, 0, 0, 0, 0, time.UTC)

func (s *Store) SessionList(ctx context.Context, p store.SessionListParams) (store.SessionListResult, error) {
	p, after, err := SessionList(p)
	if err != nil {
		return store.SessionListResult{}, err
	}
	ss, err := s.d.SessionList(ctx, p.Tenant, p.Agent, after, p.Limit+1)
	if err != nil {
		return store.SessionListResult{}, fmt.Errorf("list sessions of %s: %w", p.Tenant, err)
	}
	var res store.SessionListResult
	if len(ss) > p.Limit {
		ss = ss[:p.Limit]
		res.NextCursor = EncodeSessionCursor(ss[len(ss)-1])
	}
	res.Sessions = ss
	return res, nil
}

// SessionList validates p and fills its defaults; it returns the
// position the listing continues after.
func SessionList(p store.SessionListParams) (store.SessionListParams, driver.SessionPos, error) {
	var err error
	if p.Tenant == "" {
		return p, driver.SessionPos{}, Invalidf("session list: tenant is required")
	}
	if p.Limit, err = PageLimit("session list", p.Limit); err != nil {
		return p, driver.SessionPos{}, err
	}
	if err := checkTexts("session list: tenant", p.Tenant, "session list: agent", p.Agent); err != nil {
		return p, driver.SessionPos{}, err
	}
	if p.Cursor == "" {
		return p, driver.SessionPos{UpdatedAt: sessionListStart}, nil
	}
	pos, err := DecodeSessionCursor(p.Cursor)
	return p, pos, err
}

// EncodeSessionCursor returns the cursor that continues after x.
func EncodeSessionCursor(x store.Session) string {
	return base64.RawURLEncoding.EncodeToString([]byte("s" + strconv.FormatInt(x.UpdatedAt.UnixMicro(), 10) + ":" + x.ID))
}

// DecodeSessionCursor returns the position a session cursor continues
// after.
func DecodeSessionCursor(cursor string) (driver.SessionPos, error) {
	bad := Invalidf("session cursor %q is malformed: pass the NextCursor of the previous page", cursor)
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(raw) == 0 || raw[0] != 's' {
		return driver.SessionPos{}, bad
	}
	micros, id, ok := strings.Cut(string(raw[1:]), ":")
	at, err := strconv.ParseInt(micros, 10, 64)
	if !ok || err != nil || id == "" || CheckText("session cursor", id) != nil {
		return driver.SessionPos{}, bad
	}
	return driver.SessionPos{UpdatedAt: time.UnixMicro(at).UTC(), ID: id}, nil
}

// sessionNamed validates the tenant and id of one session.
func sessionNamed(what, tenant, id string) error {
	if tenant == "" || id == "" {
		return Invalidf("%s: tenant and session id are required", what)
	}
	return checkTexts(what+": tenant", tenant, what+": session id", id)
}

// SessionGet reads the session, its runs and its checkpoint on one
// snapshot.
func (s *Store) SessionGet(ctx context.Context, p store.SessionGetParams) (store.SessionDetail, error) {
	if err := sessionNamed("get session", p.Tenant, p.ID); err != nil {
		return store.SessionDetail{}, err
	}
	var d store.SessionDetail
	err := s.d.Read(ctx, func(x driver.Executor) error {
		var err error
		if d.Session, err = x.SessionGet(ctx, p.Tenant, p.ID); err != nil {
			return err
		}
		rs, err := x.SessionRuns(ctx, p.Tenant, p.ID, store.SessionRunsMax)
		if err != nil {
			return err
		}
		d.RunList = make([]agentfleet.Run, len(rs))
		for i, r := range rs {
			d.RunList[len(rs)-1-i] = r.Run
		}
		d.Checkpoint, err = x.SessionCheckpoint(ctx, p.Tenant, p.ID)
		return err
	})
	if err != nil {
		return store.SessionDetail{}, fmt.Errorf("get session %s of %s: %w", p.ID, p.Tenant, err)
	}
	return d, nil
}

// SessionDelete deletes every run of the session in one transaction,
// under the session's lock, once none is unfinished.
func (s *Store) SessionDelete(ctx context.Context, p store.SessionDeleteParams) (int, error) {
	if err := sessionNamed("delete session", p.Tenant, p.ID); err != nil {
		return 0, err
	}
	var n int
	err := s.d.Tx(ctx, func(x driver.Executor) error {
		rs, err := x.SessionLock(ctx, p.Tenant, p.ID)
		if err != nil {
			return err
		}
		if len(rs) == 0 {
			return store.ErrNotFound
		}
		if i := slices.IndexFunc(rs, func(r driver.RunStatus) bool { return !r.Status.Terminal() }); i >= 0 {
			return fmt.Errorf("%w: its run %s is %s: a session is deleted once all its runs have ended; cancel it first",
				store.ErrConflict, rs[i].ID, rs[i].Status)
		}
		n, err = x.SessionDeleteEnded(ctx, p.Tenant, p.ID)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete session %s of %s: %w", p.ID, p.Tenant, err)
	}
	return n, nil
}

// Session scans SessionCols.
func (s Scans) Session(sc Scanner) (store.Session, error) {
	var x store.Session
	err := sc.Scan(&x.ID, &x.Tenant, &x.Agent, &x.Runs, &x.LastRunID, &x.LastStatus, &x.Usage.PromptTokens,
		&x.Usage.CompletionTokens, s.Time(&x.CreatedAt), s.Time(&x.UpdatedAt))
	return x, err
}

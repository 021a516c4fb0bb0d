// Package rules is the store's semantics, written once for both backends:
// the Store type (store.go) implements store.Store over the primitives of
// a driver.Driver, noun by noun, and beside it lives what the backends
// still implementing a noun themselves decide in Go rather than in SQL:
// parameter validation and defaults, identifiers and timestamps, the
// legal status transitions, budget window arithmetic and the ledger
// maths, cursors, API key hashing, and text hygiene (text.go: no NUL or
// invalid UTF-8 reaches either backend). What the backends' SQL shares is
// here too: the column lists and row scans (scan.go) and the statements
// alike in both schemas (sql.go).
//
// Keeping these in one place is what lets the SQLite and Postgres backends
// agree to the bit on the values they return, which the contract suite
// (store/storetest) checks. It is internal to internal/store: callers see
// only the store.Store interface and its params.
package rules

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/google/uuid"
)

// Defaults both backends apply.
const (
	// ReservationLeaseDefault is how long a reservation lives when the
	// caller names no lease: long enough for a slow model call, short
	// enough that a dead worker's hold comes back within the window.
	ReservationLeaseDefault = 15 * time.Minute
	// RunListLimitDefault and RunListLimitMax bound one page of RunList.
	RunListLimitDefault = 50
	RunListLimitMax     = 1000
	// WindowDefault is the window of a tenant created without one.
	WindowDefault = agentfleet.WindowDay
	// UsageGroupByDefault groups UsageList when GroupBy is empty.
	UsageGroupByDefault = "model"
)

// Time normalises a timestamp to what both backends can store exactly: UTC
// with microsecond precision (Postgres keeps no more). The zero time stays
// zero.
func Time(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

// Now is the store's clock when the caller gives no time.
func Now() time.Time { return Time(time.Now()) }

// NowOr returns t normalised, or Now when t is zero.
func NowOr(t time.Time) time.Time {
	if t.IsZero() {
		return Now()
	}
	return Time(t)
}

// NewID returns a time-ordered UUIDv7, so ids sort roughly by creation and
// index inserts stay local.
func NewID() string {
	// NewV7 fails only when the system's random source does, which the
	// runtime treats as fatal anyway.
	return uuid.Must(uuid.NewV7()).String()
}

// idPattern admits what may appear as one token of a NATS subject and of a
// URL path: tenant and run ids end up in both (af.runq.<tenant>.<run>).
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// CheckID reports whether id is usable as a tenant, run, batch or
// reservation id.
func CheckID(what, id string) error {
	if !idPattern.MatchString(id) {
		return Invalidf("%s %q: use 1 to 128 letters, digits, '-' or '_', starting with a letter or digit", what, id)
	}
	return nil
}

// Invalidf returns an error wrapping store.ErrInvalid.
func Invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", store.ErrInvalid, fmt.Sprintf(format, args...))
}

// NewAPIKeyID returns a fresh public id for an API key: "key_" and 32 hex
// digits, as migration 0004 gave the keys it found.
func NewAPIKeyID() string {
	return "key_" + strings.ReplaceAll(uuid.NewString(), "-", "")
}

// APIKeyTouchEvery is how stale a key's LastUsedAt may grow before a
// lookup writes it again: one write a minute per key in use, not one per
// request.
const APIKeyTouchEvery = time.Minute

// APIKeyTouchDue reports whether a lookup at now writes a key's last use.
func APIKeyTouchDue(lastUsed, now time.Time) bool {
	return lastUsed.IsZero() || now.Sub(lastUsed) >= APIKeyTouchEvery
}

// HashAPIKey is what the store keeps of an API key: hex SHA-256. Keys are
// random and long, so a fast unsalted hash is enough to make a leaked table
// useless while keeping lookup a single indexed equality.
func HashAPIKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Statuses lists every run status; Terminal those a run never leaves.
var (
	Statuses = []agentfleet.RunStatus{
		agentfleet.StatusQueued, agentfleet.StatusRunning, agentfleet.StatusCompleted,
		agentfleet.StatusFailed, agentfleet.StatusCancelled, agentfleet.StatusMaxTurns,
		agentfleet.StatusWaitingBudget, agentfleet.StatusWaitingApproval, agentfleet.StatusWaitingChildren,
	}
	Terminal = filterStatuses(agentfleet.RunStatus.Terminal)
	// Active are the statuses of a run that started and has not ended.
	Active = filterStatuses(func(s agentfleet.RunStatus) bool { return s == agentfleet.StatusRunning || s.Waiting() })
	// Unfinished are the statuses a tenant's queue cap counts: queued or
	// active.
	Unfinished = filterStatuses(func(s agentfleet.RunStatus) bool { return !s.Terminal() })
)

func filterStatuses(keep func(agentfleet.RunStatus) bool) []agentfleet.RunStatus {
	var out []agentfleet.RunStatus
	for _, s := range Statuses {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// SQLList renders statuses as a SQL literal list ('a','b'), for queries
// whose status sets are fixed by the domain. The values are compile-time
// constants, never user input.
func SQLList(ss []agentfleet.RunStatus) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = "'" + string(s) + "'"
	}
	return strings.Join(q, ",")
}

// TransitionPairs lists every legal "from>to" pair per
// agentfleet.RunStatus.CanTransition, so SQL can check a transition with
// one array membership test and the domain stays the only definition.
var TransitionPairs = func() []string {
	var out []string
	for _, from := range Statuses {
		for _, to := range Statuses {
			if from.CanTransition(to) {
				out = append(out, string(from)+">"+string(to))
			}
		}
	}
	return out
}()

// CommitFrom lists, per status a commit moves a run to, the statuses the
// run may be in (",a,b,", for a membership test by instr): not ended,
// and allowed to make that move.
var CommitFrom = func() map[agentfleet.RunStatus]string {
	m := map[agentfleet.RunStatus]string{}
	for _, to := range Statuses {
		list := ","
		for _, from := range Statuses {
			if !from.Terminal() && from.CanTransition(to) {
				list += string(from) + ","
			}
		}
		m[to] = list
	}
	return m
}()

// CheckCommitFence decides, from a run as it is now, why a fenced write for
// turn failed or whether it may proceed: ErrConflict when the run already
// ended or committed another number of turns, ErrInvalid when the status
// change is illegal.
func CheckCommitFence(run agentfleet.Run, turn int, to agentfleet.RunStatus) error {
	if run.Status.Terminal() {
		return fmt.Errorf("%w: run %s already ended (%s)", store.ErrConflict, run.ID, run.Status)
	}
	if run.Turn != turn-1 {
		return fmt.Errorf("%w: run %s has committed %d turns, not %d", store.ErrConflict, run.ID, run.Turn, turn-1)
	}
	if to != "" && !run.Status.CanTransition(to) {
		return Invalidf("run %s cannot go from %s to %s", run.ID, run.Status, to)
	}
	return nil
}

// CheckTransition decides a RunTransition against the run as it is now.
func CheckTransition(run agentfleet.Run, from []agentfleet.RunStatus, to agentfleet.RunStatus) error {
	if len(from) == 0 {
		if run.Status.Terminal() {
			return fmt.Errorf("%w: run %s already ended (%s)", store.ErrConflict, run.ID, run.Status)
		}
	} else if !containsStatus(from, run.Status) {
		return fmt.Errorf("%w: run %s is %s, not one of %v", store.ErrConflict, run.ID, run.Status, from)
	}
	if !run.Status.CanTransition(to) {
		return Invalidf("run %s cannot go from %s to %s", run.ID, run.Status, to)
	}
	return nil
}

func containsStatus(ss []agentfleet.RunStatus, s agentfleet.RunStatus) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// CheckJSON reports whether raw is empty or a valid JSON value.
func CheckJSON(what string, raw json.RawMessage) error {
	if len(raw) > 0 && !json.Valid(raw) {
		return Invalidf("%s is not valid JSON", what)
	}
	return nil
}

// NullJSON maps an empty raw value to nil, so "absent" has one form.
func NullJSON(raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return nil
	}
	return raw
}

// EncodeMetadata stores a string map as JSON; empty is nil (SQL NULL).
func EncodeMetadata(m map[string]string) []byte {
	if len(m) == 0 {
		return nil
	}
	b, _ := json.Marshal(m) // a map of strings always marshals
	return b
}

// DecodeMetadata reverses EncodeMetadata.
func DecodeMetadata(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode metadata: %w", err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// EncodeStrings stores a string list as JSON, keeping nil (SQL NULL) apart
// from empty ("[]"): for an agent's primitives nil means the default set
// and empty means none.
func EncodeStrings(ss []string) []byte {
	if ss == nil {
		return nil
	}
	b, _ := json.Marshal(ss)
	return b
}

// DecodeStrings reverses EncodeStrings.
func DecodeStrings(b []byte) ([]string, error) {
	if b == nil {
		return nil, nil
	}
	ss := []string{}
	if err := json.Unmarshal(b, &ss); err != nil {
		return nil, fmt.Errorf("decode string list: %w", err)
	}
	return ss, nil
}

// Cursors are opaque to callers: base64 of the direction and the position
// (the run's insertion sequence) of the last run on the page.

// EncodeCursor returns the cursor that continues after the run at seq.
func EncodeCursor(oldest bool, seq int64) string {
	dir := "n"
	if oldest {
		dir = "o"
	}
	return base64.RawURLEncoding.EncodeToString([]byte(dir + strconv.FormatInt(seq, 10)))
}

// TenantPos is where a tenant listing continues: after the tenant made
// at CreatedAt (microseconds) with ID, newest first.
type TenantPos struct {
	CreatedAt int64
	ID        string
}

// EncodeTenantCursor returns the cursor that continues after t.
func EncodeTenantCursor(t agentfleet.Tenant) string {
	return base64.RawURLEncoding.EncodeToString([]byte("t" + strconv.FormatInt(t.CreatedAt.UnixMicro(), 10) + ":" + t.ID))
}

// DecodeTenantCursor returns the position a tenant cursor continues after.
func DecodeTenantCursor(cursor string) (TenantPos, error) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	micros, id, ok := strings.Cut(strings.TrimPrefix(string(raw), "t"), ":")
	if err != nil || len(raw) == 0 || raw[0] != 't' || !ok {
		return TenantPos{}, Invalidf("tenant cursor %q is malformed: pass the NextCursor of the previous page", cursor)
	}
	at, err := strconv.ParseInt(micros, 10, 64)
	if err != nil || CheckID("tenant cursor id", id) != nil {
		return TenantPos{}, Invalidf("tenant cursor %q is malformed: pass the NextCursor of the previous page", cursor)
	}
	return TenantPos{CreatedAt: at, ID: id}, nil
}

// DecodeCursor returns the position a cursor continues after; a cursor
// from a listing in the other direction is invalid.
func DecodeCursor(cursor string, oldest bool) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(raw) < 2 {
		return 0, Invalidf("cursor %q is malformed: pass the NextCursor of the previous page", cursor)
	}
	want := byte('n')
	if oldest {
		want = 'o'
	}
	if raw[0] != want {
		return 0, Invalidf("cursor %q belongs to a listing in the other order", cursor)
	}
	seq, err := strconv.ParseInt(string(raw[1:]), 10, 64)
	if err != nil || seq < 0 {
		return 0, Invalidf("cursor %q is malformed: pass the NextCursor of the previous page", cursor)
	}
	return seq, nil
}

// PageLimit is a list's page size: RunListLimitDefault for zero, at most
// RunListLimitMax.
func PageLimit(what string, limit int) (int, error) {
	if limit < 0 {
		return 0, Invalidf("%s: limit must not be negative", what)
	}
	if limit == 0 {
		return RunListLimitDefault, nil
	}
	return min(limit, RunListLimitMax), nil
}

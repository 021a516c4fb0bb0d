// Package driver declares the seam between the store's rules and its SQL
// backends: an Executor of NounVerb primitives, each one statement (or the
// fewest a backend needs for one logical read or write), and a Driver that
// runs them on its pool or inside one transaction.
//
// The rules above it (internal/store/internal/rules: validation,
// transitions, fences, paging, the order of writes) are written once and
// implement store.Store; a backend (store/postgres, store/sqlite) holds
// only connection setup, migrations and the SQL of these primitives (the
// statements alike in both schemas, and the row scans, written once in
// rules: sql.go, scan.go). A
// primitive decides nothing: it reads or writes what it is told, maps its
// backend's errors onto store's sentinels (a missing row is
// store.ErrNotFound, a duplicate store.ErrConflict) and returns values
// normalised as the store returns them (UTC, microseconds).
//
// Every primitive is held to the contract suite in driver/drivertest,
// which each backend runs.
package driver

import "context"

// Driver is a backend as the rules see it. The embedded Executor runs
// each call on the pool as its own statement (for SQLite: reads on the
// read pool, writes as their own write transaction).
type Driver interface {
	Executor
	Recorder
	BudgetDriver
	RunCreator
	TurnLoader
	TurnCommitter
	Reserver
	Admitter
	// Tx runs fn in one transaction: every primitive fn calls on x sees
	// the others' writes, and they commit together when fn returns nil
	// or roll back together when it returns an error (which Tx returns).
	// A backend may run fn more than once (PostgreSQL retries a
	// deadlock victim), so fn must be safe to repeat and must not keep x.
	Tx(ctx context.Context, fn func(x Executor) error) error
	// Read runs fn's reads on one snapshot where the backend keeps reads
	// apart from its writer (SQLite's read transaction), else on the
	// pool. fn must not write.
	Read(ctx context.Context, fn func(x Executor) error) error
}

// Executor is every primitive, grouped by noun (one file each).
type Executor interface {
	TenantExecutor
	AgentExecutor
	CallbackExecutor
	TriggerExecutor
	RunExecutor
	ApprovalExecutor
	BatchExecutor
	BudgetExecutor
	SecretExecutor
	SessionExecutor
	SkillExecutor
}

// Package drivertest is the contract every store driver's primitives must
// pass (driver.Executor), run by each backend's tests as
// TestDriver/<noun>/<case>. Where store/storetest holds the store's
// behaviour as callers see it, this suite holds each primitive to its
// doc: what it reads, what it writes, what a missing row is, and that a
// transaction commits or rolls back whole.
//
// It knows no backend: it is handed a function that opens a fresh
// database as a driver and as a store.Store over the same data (the store
// makes fixtures the primitives under test need, such as tenants).
package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// Backend is one fresh database as the suite sees it.
type Backend struct {
	Driver driver.Driver
	// Store is the store over the same database, for fixtures.
	Store store.Store
}

// Exercise runs the suite; open returns a fresh, empty Backend.
func Exercise(t *testing.T, open func(t *testing.T) Backend) {
	for name, fn := range map[string]func(*testing.T, func(*testing.T) Backend){
		"Tx":         exerciseTx,
		"Agents":     exerciseAgents,
		"Tenants":    exerciseTenants,
		"Callbacks":  exerciseCallbacks,
		"Triggers":   exerciseTriggers,
		"Runs":       exerciseRuns,
		"Approvals":  exerciseApprovals,
		"Batches":    exerciseBatches,
		"Budget":     exerciseBudget,
		"Reads":      exerciseReads,
		"Notify":     exerciseApprovalNotify,
		"RunCreate":  exerciseRunCreate,
		"TurnLoad":   exerciseTurnLoad,
		"TurnCommit": exerciseTurnCommit,
		"Reserve":    exerciseReserve,
		"Admit":      exerciseAdmit,
		"Secrets":    exerciseSecrets,
		"Sessions":   exerciseSessions,
		"Skills":     exerciseSkills,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, open)
		})
	}
}

// tenant creates a tenant through the store, with its default agent.
func tenant(t *testing.T, b Backend, id string) {
	t.Helper()
	_, err := b.Store.TenantCreate(context.Background(), store.TenantCreateParams{ID: id})
	require.NoError(t, err)
}

// now is a timestamp as the store keeps it.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

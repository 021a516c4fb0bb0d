package rules

import "github.com/agentfleet/agentfleet/internal/store/driver"

// Store is the store's semantics written once over a driver.Driver: for
// each noun that has moved behind the driver seam it validates the
// params, runs the driver's primitives (in one transaction where the
// call writes more than one row or reads before it writes) and wraps
// their errors with what was asked. A backend embeds it and implements
// the nouns that have not moved yet itself.
//
// Moved: agents (agent.go).
type Store struct {
	d driver.Driver
}

// NewStore returns the semantics over d.
func NewStore(d driver.Driver) *Store { return &Store{d: d} }

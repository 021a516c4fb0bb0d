package store

// SecretPutParams create or replace a tenant's secret. Sealed is the
// value as secrets.Box sealed it (the store never sees a value), KeyID
// the key it is sealed under. Header and Format default to
// agentfleet.SecretHeaderDefault and SecretFormatDefault.
type SecretPutParams struct {
	Tenant, Name   string
	Sealed, KeyID  string
	Hosts          []string
	Header, Format string
	Expose         bool
}

// SealedSecret is a secret with its sealed value, for the worker that
// opens it.
type SealedSecret struct {
	Tenant, Name  string
	Sealed, KeyID string
}

// SealedKind names where a sealed value is kept.
type SealedKind string

const (
	SealedSecretValue   SealedKind = "secret"       // a tenant's secret (Owner tenant, Name the secret)
	SealedTrigger       SealedKind = "trigger"      // a trigger's secret (Owner the trigger id)
	SealedTriggerPrev   SealedKind = "trigger_prev" // a trigger's previous secret (Owner the trigger id)
	SealedCallbackValue SealedKind = "callback"     // a tenant's callback secret (Owner the tenant)
)

// SealedRef names one sealed value the store keeps.
type SealedRef struct {
	Kind        SealedKind
	Owner, Name string
}

// Sealed is one sealed value the store keeps, with where.
type Sealed struct {
	Ref    SealedRef
	Sealed string
}

// SealedListParams page through every sealed value: those after After
// (the zero ref: from the first) in (kind, owner, name) order, bytewise,
// at most Limit (zero: 100; at most 1000). A page's last Ref is the next
// page's After; an empty page is the end.
type SealedListParams struct {
	After SealedRef
	Limit int
}

// SealedReplaceParams swap one sealed value for its resealing: Old must
// still be what is kept (else ErrConflict, nothing changed); KeyID is
// New's key, kept beside a secret's value.
type SealedReplaceParams struct {
	Ref      SealedRef
	Old, New string
	KeyID    string
}

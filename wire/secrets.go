package wire

import "github.com/agentfleet/agentfleet"

// SecretRequest is the body of PUT /v1/secrets/{name}: the whole secret,
// its value included (required: a PUT replaces the secret). Header and
// Format left out take agentfleet.SecretHeaderDefault and
// SecretFormatDefault. No answer carries the value back.
type SecretRequest struct {
	Value  string   `json:"value"`
	Hosts  []string `json:"hosts"`
	Header string   `json:"header,omitempty"`
	Format string   `json:"format,omitempty"`
	Expose bool     `json:"expose,omitempty"`
}

// SecretList is a page of GET /v1/secrets, by name.
type SecretList struct {
	Secrets    []agentfleet.Secret `json:"secrets"`
	NextCursor string              `json:"next_cursor,omitempty"`
}

// SealedRef names one sealed value the store keeps: Kind is secret,
// trigger, trigger_prev or callback; Owner the tenant (secret,
// callback) or the trigger id; Name the secret's name.
type SealedRef struct {
	Kind  string `json:"kind"`
	Owner string `json:"owner"`
	Name  string `json:"name,omitempty"`
}

// RekeyReport is the answer of POST /v1/secrets/rekey: how many sealed
// values were sealed again under the current key (KeyID), how many were
// under it already, and those that open under no key the dispatcher
// holds (left as they are).
type RekeyReport struct {
	KeyID     string      `json:"key_id"`
	Rewritten int         `json:"rewritten"`
	Current   int         `json:"current"`
	Unopened  []SealedRef `json:"unopened"`
}

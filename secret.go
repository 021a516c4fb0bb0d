package agentfleet

import "time"

// Secret is a tenant's named credential as the API shows it: everything
// but its value, which only the worker opens, for the requests of the
// runs whose agent names it.
type Secret struct {
	Tenant string `json:"tenant"`
	Name   string `json:"name"`
	// Hosts are the hosts whose HTTPS requests get the secret's header:
	// lower-case host names, compared with the request's host
	// lower-cased, without port or trailing dot. "*.example.com" names
	// every host below example.com (a.example.com, a.b.example.com),
	// not example.com itself.
	Hosts []string `json:"hosts"`
	// Header is the request header the secret is sent in
	// (SecretHeaderDefault when none is given), and Format its value,
	// with {value} where the secret goes (SecretFormatDefault).
	Header string `json:"header"`
	Format string `json:"format"`
	// Expose lets a script read the value with secret(name).
	Expose bool `json:"expose"`
	// Version counts the secret's writes, from 1.
	Version int `json:"version"`
	// KeyID names the key the value is sealed under.
	KeyID     string    `json:"key_id"`
	CreatedAt time.Time `json:"created"`
	UpdatedAt time.Time `json:"updated"`
}

// The header and format of a secret that names none.
const (
	SecretHeaderDefault = "Authorization"
	SecretFormatDefault = "Bearer {value}"
)

// OpenSecret is a secret with its value, as the worker holds it for a
// turn. It is never stored, published or shown.
type OpenSecret struct {
	Secret
	Value string
}

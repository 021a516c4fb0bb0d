// Package wire holds the JSON shapes of agentfleet's HTTP API: the
// request bodies the server accepts and the views it answers with, beside
// the domain types of package agentfleet (Run, Event, ...) that the API
// returns as they are.
//
// The server (internal/api) and the Go client (package client) both
// speak these types, so a field added here is added to both. It holds no
// behaviour and imports nothing but the standard library and package
// agentfleet.
package wire

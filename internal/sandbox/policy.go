package sandbox

import (
	"context"
	"encoding/json"
)

// Decision is a Policy's verdict on one primitive call.
type Decision int

const (
	// Allow lets the call proceed.
	Allow Decision = iota
	// Deny fails the call: the script sees an Error (name "PolicyError")
	// it may catch; uncaught, the turn fails with kind denied.
	Deny
	// NeedsApproval would park the call for a human. Approvals are not
	// implemented yet, so the script sees a PolicyError
	// "<primitive> needs approval: <reason>; approvals are not enabled yet"
	// and, uncaught, the turn fails with kind denied.
	NeedsApproval
)

func (d Decision) String() string {
	switch d {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	case NeedsApproval:
		return "needs_approval"
	}
	return "unknown"
}

// Call is one host primitive call as a Policy sees it.
type Call struct {
	// Primitive is the primitive's name: "fetch", "http", "ai", "aiJSON".
	Primitive string
	// Args is the call's arguments as JSON: {"method","url","headers"}
	// for fetch and http (the body is left out), {"prompt"} or
	// {"prompt","schema"} for ai and aiJSON.
	Args   json.RawMessage
	Tenant string
	RunID  string
}

// Policy decides every host primitive call: each call of fetch, http, ai
// and aiJSON passes exactly one Check, in the parent process, before it
// does anything. Pure primitives (log, parseUrl, markdown, ...) do no I/O;
// they are governed only by being enabled (ExecRequest.Primitives).
// Check must be safe for concurrent use.
type Policy interface {
	Check(ctx context.Context, call Call) (Decision, string)
}

// PolicyFunc adapts a function to a Policy.
type PolicyFunc func(ctx context.Context, call Call) (Decision, string)

// Check calls f.
func (f PolicyFunc) Check(ctx context.Context, call Call) (Decision, string) { return f(ctx, call) }

// DefaultPolicy allows every call. What it does not relax is the network
// guard, which fetch and http apply whatever the policy says (loopback,
// private, link-local, metadata and other non-public addresses are
// blocked; see NetworkConfig.Allow).
var DefaultPolicy Policy = PolicyFunc(func(context.Context, Call) (Decision, string) { return Allow, "" })

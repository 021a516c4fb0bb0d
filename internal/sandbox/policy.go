package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// Decision is a Policy's verdict on one primitive call.
type Decision int

const (
	// Allow lets the call proceed.
	Allow Decision = iota
	// Deny fails the call: the script sees an Error (name "PolicyError")
	// it may catch; uncaught, the turn fails with kind denied.
	Deny
	// NeedsApproval parks the call for a person, as a match of the
	// agent's approve rules does (ExecRequest.Approve): approved, it
	// proceeds; denied, it throws a PolicyError with the reason; not
	// decided yet, the turn ends waiting (ExecResult.Approval).
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
	// for fetch and http (the body left out; the method upper-case, the
	// URL canonical, as sent), {"prompt"} or {"prompt","schema"} for ai
	// and aiJSON.
	Args   json.RawMessage
	Tenant string
	RunID  string
	// Turn is the turn executing; Index counts its host calls from 0 in
	// the order the script makes them, so a deterministic script run
	// again makes the same call at the same index.
	Turn  int
	Index int
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

// Approve rules: an agent's approve list names the host calls that need a
// person's yes before they go out. A rule is
//
//	*                      every host call (fetch, http, ai, aiJSON, spawn)
//	fetch, http            every fetch or http call (the two are one: an HTTP request)
//	ai, aiJSON, spawn      every call of it
//	http.post, fetch:POST  an HTTP request with that method, however the script
//	                       made it (fetch with {method}, or the http module's
//	                       method); "del" is DELETE, and the same for every method
//
//	api:billing.createRefund  that operation of the agent's OpenAPI module
//	                       billing (require('api:billing'))
//	api:billing.*          every operation of it
//	mcp:github.create_issue  that tool of the agent's MCP server github
//	                       (require('mcp:github'))
//	mcp:github.*           every tool of it; a tool with readOnlyHint
//	                       needs approval only from a rule naming it exactly
//
// (an operation's call is an HTTP request too, which the fetch rules
// cover by its method and URL), optionally followed by a space and a URL
// pattern, where * stands for any run of characters ("http.post https://api.example.com/*"; "*
// https://*.internal/*"). A pattern is matched against the request's
// canonical URL (canonicalURL), itself canonicalized as far as its
// wildcards allow, and without regard to case; it applies to fetch and
// http only.

// approveRule is one parsed approve rule; empty fields match anything.
type approveRule struct {
	// prim is "", "fetch" (every HTTP request: fetch and http), "ai",
	// "aiJSON" or "spawn".
	prim   string
	method string
	url    string
	// tool is the operation pattern of an "api" rule ("billing.*"), or
	// the tool pattern of an "mcp" rule ("github.*").
	tool string
}

// approvable are the primitives a rule may name.
var approvable = []string{"fetch", "http", "ai", "aiJSON", "spawn", "api:<module>.<operation>", "mcp:<server>.<tool>"}

// opNameRE is what an approve rule may name an operation by.
var opNameRE = regexp.MustCompile(`^[A-Za-z0-9_.$-]{1,128}$`)

func parseApproveRule(s string) (approveRule, error) {
	head, pattern, _ := strings.Cut(strings.TrimSpace(s), " ")
	pattern = strings.TrimSpace(pattern)
	var r approveRule
	if spec, ok := strings.CutPrefix(head, "api:"); ok {
		mod, op, _ := strings.Cut(spec, ".")
		if !moduleNameRE.MatchString(mod) || op == "" || (op != "*" && !opNameRE.MatchString(op)) {
			return r, fmt.Errorf("approve rule %q: name an operation of an OpenAPI module as api:<module>.<operationId> or api:<module>.*", s)
		}
		r.prim, r.tool = "api", spec
	} else if spec, ok := strings.CutPrefix(head, "mcp:"); ok {
		srv, tool, _ := strings.Cut(spec, ".")
		if !moduleNameRE.MatchString(srv) || tool == "" || (tool != "*" && !opNameRE.MatchString(tool)) {
			return r, fmt.Errorf("approve rule %q: name a tool of an MCP server as mcp:<server>.<tool> or mcp:<server>.*", s)
		}
		if pattern != "" {
			return r, fmt.Errorf("approve rule %q: an MCP tool has no URL", s)
		}
		r.prim, r.tool = "mcp", spec
	} else if head != "*" {
		name, method, hasMethod := strings.Cut(head, ".")
		if !hasMethod {
			name, method, hasMethod = strings.Cut(head, ":")
		}
		if !slices.Contains(approvable, name) {
			return r, fmt.Errorf("approve rule %q: %q is not a primitive that can need approval (use one of %s, or *)", s, name, strings.Join(approvable, ", "))
		}
		r.prim = httpClass(name)
		if hasMethod {
			if r.prim != "fetch" {
				return r, fmt.Errorf("approve rule %q: only fetch and http calls have a method", s)
			}
			r.method = strings.ToUpper(method)
			if r.method == "DEL" {
				r.method = http.MethodDelete
			}
			if r.method == "" || strings.IndexFunc(r.method, func(c rune) bool { return c < 'A' || c > 'Z' }) >= 0 {
				return r, fmt.Errorf("approve rule %q: the method must be letters (POST, PUT, DELETE, ...)", s)
			}
		}
	}
	if pattern != "" {
		if r.prim != "" && r.prim != "fetch" && r.prim != "api" {
			return r, fmt.Errorf("approve rule %q: only fetch and http calls have a URL (api: operations too)", s)
		}
		if strings.ContainsAny(pattern, " \t") {
			return r, fmt.Errorf("approve rule %q: give at most one URL pattern", s)
		}
		canon, err := canonicalPattern(pattern)
		if err != nil {
			return r, fmt.Errorf("approve rule %q: %w", s, err)
		}
		r.url = canon
	}
	return r, nil
}

// httpClass names fetch and http alike ("fetch"): an approve rule covers
// an HTTP request whichever of the two made it.
func httpClass(primitive string) string {
	if primitive == "http" || strings.HasPrefix(primitive, "api:") {
		return "fetch"
	}
	return primitive
}

// CheckApproveRules says what is wrong with an agent's approve list, or
// returns nil.
func CheckApproveRules(rules []string) error {
	for _, s := range rules {
		if _, err := parseApproveRule(s); err != nil {
			return err
		}
	}
	return nil
}

// matches reports whether the call falls under r: primitive as called,
// method upper-case and url canonical (both empty for ai, aiJSON and
// spawn).
func (r approveRule) matches(primitive, method, url string) bool {
	switch {
	case r.prim == "api":
		tool, ok := strings.CutPrefix(primitive, "api:")
		if !ok || !globMatch(r.tool, tool) {
			return false
		}
	case r.prim == "mcp":
		tool, ok := strings.CutPrefix(primitive, "mcp:")
		if !ok || !globMatch(r.tool, tool) {
			return false
		}
	case r.prim != "" && r.prim != httpClass(primitive):
		return false
	}
	switch {
	case r.method != "" && r.method != method:
		return false
	case r.url != "":
		return url != "" && globMatch(strings.ToLower(r.url), strings.ToLower(url))
	}
	return true
}

// needsApproval reports whether one of rules covers the call. A rule that
// does not parse covers every call: the agents API refuses such rules, so
// one here was stored by other means, and failing closed is the safe way.
func needsApproval(rules []string, primitive, method, url string) bool {
	for _, s := range rules {
		r, err := parseApproveRule(s)
		if err != nil || r.matches(primitive, method, url) {
			return true
		}
	}
	return false
}

// needsMCPApproval reports whether rules cover a call of tool on the
// MCP server: as any call, except that a read-only tool (readOnlyHint)
// needs a rule naming it exactly (mcp:<server>.<tool>).
func needsMCPApproval(rules []string, server, tool string, readOnly bool) bool {
	primitive := "mcp:" + server + "." + tool
	if !readOnly {
		return needsApproval(rules, primitive, "", "")
	}
	for _, s := range rules {
		r, err := parseApproveRule(s)
		if err != nil || (r.prim == "mcp" && r.tool == server+"."+tool) {
			return true
		}
	}
	return false
}

// globMatch matches s against pattern, where * is any run of characters.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

// Package egress owns the fleet's guard on outbound connections: which
// hosts and addresses a connection made on a tenant's behalf may reach.
// By default only the public internet. Every connection is checked on
// the address it actually dials, at connect time, redirects included:
// there is one dialer, and it is guarded. Who may open what:
//
//   - An agent's egress (ParseAgentEntries) opens private ranges only:
//     RFC 1918, carrier-grade NAT (100.64.0.0/10) and unique local
//     (fc00::/7) addresses.
//   - The operator's allow-list (AGENTFLEET_EGRESS_ALLOW, ParseAllow)
//     opens those and the rest of the blocked ranges (loopback included),
//     fleet-wide.
//   - Nothing opens a cloud metadata address: all of link-local
//     (169.254.0.0/16, fe80::/10) and the metadata services elsewhere.
//
// A host-name entry opens the name, not whatever it resolves to: the
// addresses it resolves to are held to its owner's ranges. The sandbox's
// fetch and http and the dispatcher's run callbacks and approval
// notifications dial through it.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The guard works in two places (docs/ARCHITECTURE.md §10, SSRF):
//
//   - Up front, on the URL (and on every redirect's URL): only http and
//     https; host names that name the local machine or a metadata service
//     are refused, and so are IP literals in a blocked range or written in
//     a non-canonical form (127.1, 2130706433, 0x7f000001, 017700000001,
//     [::ffff:127.0.0.1]). Those forms are refused even when they would
//     name a public address: resolvers disagree about them, and a model
//     has no reason to write them. This is for clear messages.
//   - At connect time, in the dialer's Control hook, on the address the
//     socket is about to connect to, with the host name it was resolved
//     from. This is the check that matters: it covers DNS names that
//     resolve (or re-resolve, DNS rebinding) to a blocked address,
//     allowed names included, and redirects to such names, since every
//     connection, redirected or not, is dialled through it.

// BlockedError is a connection or URL refused by the guard.
type BlockedError struct {
	Target string // what was refused: an address or a host name
	Reason string // why, as "is a loopback address"
	// Metadata is set for a cloud metadata address or service, which no
	// allow-list opens (a message should not suggest one).
	Metadata bool
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("blocked by the network guard: %s %s", e.Target, e.Reason)
}

// Resolver resolves a host name to addresses; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Entries are allow-list entries, parsed: IP addresses and CIDRs as
// prefixes, host names ("billing.internal", "*.corp.example" for its
// subdomains) as written.
type Entries struct {
	Prefixes []netip.Prefix
	Hosts    []string
}

// Config configures a Guard.
type Config struct {
	// Allow and AllowHosts are the operator's allow-list, fleet-wide
	// (AGENTFLEET_EGRESS_ALLOW): addresses, and host names whose
	// addresses, the guard lets through although they are in a blocked
	// range, loopback included (127.0.0.1/32 for a test server), cloud
	// metadata excepted.
	Allow      []netip.Prefix
	AllowHosts []string
	// Agent is an agent's egress: it opens private addresses only
	// (RFC 1918, 100.64.0.0/10, fc00::/7), whatever it names. Use
	// ParseAgentEntries to refuse what it could never open.
	Agent Entries
	// Resolver resolves host names; nil means net.DefaultResolver. The
	// guard checks the addresses it returns at connect time, so a
	// resolver cannot route around it.
	Resolver Resolver
	// DenyPrivate refuses every blocked range whatever Allow, AllowHosts
	// and Agent say (AGENTFLEET_EGRESS_PRIVATE=deny).
	DenyPrivate bool
}

// Guard dials only what its configuration allows.
type Guard struct {
	allow      []netip.Prefix // the operator's
	allowHosts []string       // the operator's, lower case, no trailing dot
	agent      []netip.Prefix
	agentHosts []string
	resolver   Resolver
	// dialer is the only dialer: its ControlContext checks every
	// address it connects to (checkDial).
	dialer net.Dialer
}

// dialHostKey carries, in a dial's context, the host name its address
// was resolved from, for the Control hook.
type dialHostKey struct{}

// New returns the guard of cfg.
func New(cfg Config) *Guard {
	g := &Guard{resolver: cfg.Resolver}
	if !cfg.DenyPrivate {
		g.allow = cfg.Allow
		g.allowHosts = normalizeHosts(cfg.AllowHosts)
		g.agent = cfg.Agent.Prefixes
		g.agentHosts = normalizeHosts(cfg.Agent.Hosts)
	}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	g.dialer = net.Dialer{
		Timeout:   10 * time.Second,
		KeepAlive: 30 * time.Second,
		ControlContext: func(ctx context.Context, _, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return &BlockedError{Target: address, Reason: "is not an IP address and port"}
			}
			host, _ := ctx.Value(dialHostKey{}).(string)
			return g.checkDial(host, ap.Addr())
		},
	}
	return g
}

func normalizeHosts(hosts []string) []string {
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		out = append(out, strings.TrimSuffix(strings.ToLower(h), "."))
	}
	return out
}

// HTTPClient returns a client whose every connection goes through the
// guard: no proxy (an environment proxy would connect on the caller's
// behalf, past the guard), no cookie jar (nothing carries over between
// requests or tenants), and at most maxRedirects redirects (negative:
// none), each checked.
func (g *Guard) HTTPClient(maxRedirects int) *http.Client {
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            g.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           64,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        60 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if maxRedirects < 0 {
				return http.ErrUseLastResponse
			}
			if len(via) > maxRedirects {
				return fmt.Errorf("stopped after %d redirects", maxRedirects)
			}
			if _, err := g.CheckURL(req.URL.String()); err != nil {
				return fmt.Errorf("redirect to %s: %w", req.URL.Redacted(), err)
			}
			return nil
		},
	}
}

// DialContext connects to address ("host:port") through the guard, for
// anything that is not HTTPClient's: it resolves the host itself and
// dials each address as a literal, so the Control hook sees exactly what
// is connected to, and from which name.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", address, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("dial %s: bad port: %w", address, err)
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		if err := g.checkHost(host); err != nil {
			return nil, err
		}
		addrs, err = g.resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("resolve %s: no addresses", host)
		}
		ctx = context.WithValue(ctx, dialHostKey{}, host)
	}
	var blocked, other error
	for _, a := range addrs {
		conn, err := g.dialer.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		var be *BlockedError
		if errors.As(err, &be) {
			if blocked == nil {
				blocked = be
			}
		} else if other == nil {
			other = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	// A reachable-but-failing public address is the more useful message;
	// otherwise say why the guard refused.
	if other != nil {
		return nil, other
	}
	return nil, blocked
}

// CheckURL parses raw and applies the up-front rules: an absolute http
// or https URL whose host is not refused on its face.
func (g *Guard) CheckURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid URL %q: %w", raw, URLErrorCause(err))
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "":
		return nil, fmt.Errorf("invalid URL %q: use an absolute http:// or https:// URL", raw)
	default:
		return nil, fmt.Errorf("invalid URL %q: only http and https URLs can be fetched, not %s:", raw, u.Scheme)
	}
	host := u.Hostname()
	if host == "" {
		return nil, fmt.Errorf("invalid URL %q: no host", raw)
	}
	if err := g.checkHost(host); err != nil {
		return nil, err
	}
	return u, nil
}

// URLErrorCause drops the *url.Error wrapping of err, which repeats the
// URL a message already quotes.
func URLErrorCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// checkHost applies the up-front rules to a URL's host (brackets removed).
func (g *Guard) checkHost(host string) error {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Is4In6() {
			return &BlockedError{Target: "[" + h + "]", Reason: fmt.Sprintf("is an IPv4-mapped IPv6 address (= %s); write IPv4 addresses in dotted-decimal form", a.Unmap())}
		}
		return g.CheckAddr(a)
	}
	if a, ok := parseLegacyIPv4(h); ok {
		return &BlockedError{Target: host, Reason: fmt.Sprintf("is a non-canonical IPv4 address (= %s); write IPv4 addresses in dotted-decimal form like 93.184.215.14", a)}
	}
	if looksNumeric(h) {
		return &BlockedError{Target: host, Reason: "is not a valid IPv4 address or host name"}
	}
	// Only the operator can open the local machine by name; an agent's
	// "localhost" would resolve to loopback, which it cannot open.
	if matchHost(g.allowHosts, h) {
		return nil
	}
	return checkHostName(h)
}

// matchHost reports whether patterns (normalized) name host.
func matchHost(patterns []string, host string) bool {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	for _, a := range patterns {
		if a == h || strings.HasPrefix(a, "*.") && strings.HasSuffix(h, a[1:]) {
			return true
		}
	}
	return false
}

// CheckAddr is the connect-time rule for an IP literal: a public
// address, or one in a blocked range an entry opens (never metadata).
func (g *Guard) CheckAddr(a netip.Addr) error { return g.checkDial("", a) }

// checkDial is the connect-time rule for a connection to a, resolved
// from host ("" for an IP literal): public addresses pass; metadata
// never does; a private address passes when any entry opens it (the
// agent's prefixes or, for host, its names); any other blocked address
// only when the operator's does.
func (g *Guard) checkDial(host string, a netip.Addr) error {
	a = a.WithZone("")
	class, reason := classify(a)
	switch class {
	case classPublic:
		return nil
	case classMetadata:
		return &BlockedError{Target: a.String(), Reason: reason + ", which nothing opens", Metadata: true}
	}
	if containsAddr(g.allow, a) || host != "" && matchHost(g.allowHosts, host) {
		return nil
	}
	agentNamed := containsAddr(g.agent, a) || host != "" && matchHost(g.agentHosts, host)
	if class == classPrivate && agentNamed {
		return nil
	}
	if host != "" {
		reason += fmt.Sprintf(" (%s resolves to it)", host)
	}
	if agentNamed {
		reason += "; an agent's egress opens private addresses only, and the operator's AGENTFLEET_EGRESS_ALLOW the rest"
	}
	return &BlockedError{Target: a.String(), Reason: reason}
}

func containsAddr(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) || (a.Is4In6() && p.Contains(a.Unmap())) {
			return true
		}
	}
	return false
}

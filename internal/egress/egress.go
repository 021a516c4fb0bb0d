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
	"regexp"
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

// ParseAllow reads the operator's allow-list, AGENTFLEET_EGRESS_ALLOW:
// host names, IP addresses and CIDRs, separated by commas or spaces. An
// entry that names only cloud metadata is refused: nothing opens it (a
// wider range that holds some is taken, less those).
func ParseAllow(list string) (Config, error) {
	var c Config
	for _, e := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		p, host, err := parseEntry(e)
		switch {
		case err != nil:
			return Config{}, err
		case host != "":
			if err := metadataName(host); err != nil {
				return Config{}, err
			}
			c.AllowHosts = append(c.AllowHosts, host)
		default:
			if why, ok := metadataOnly(p); ok {
				return Config{}, fmt.Errorf("egress allow-list entry %q %s, which nothing opens", e, why)
			}
			c.Allow = append(c.Allow, p)
		}
	}
	return c, nil
}

// ParseEntries reads allow-list entries one by one, each a host name, an
// IP address or a CIDR, checking their form only: what they may open is
// decided by whose they are (Config.Allow or Config.Agent) when the guard
// dials.
func ParseEntries(entries []string) (Entries, error) {
	var c Entries
	for _, e := range entries {
		p, host, err := parseEntry(e)
		if err != nil {
			return Entries{}, err
		}
		if host != "" {
			c.Hosts = append(c.Hosts, host)
		} else {
			c.Prefixes = append(c.Prefixes, p)
		}
	}
	return c, nil
}

// parseEntry reads one entry: a prefix (an IP address is one of its
// length), or else a host name.
func parseEntry(e string) (netip.Prefix, string, error) {
	if p, err := netip.ParsePrefix(e); err == nil {
		return p.Masked(), "", nil
	}
	if a, err := netip.ParseAddr(e); err == nil {
		a = a.WithZone("")
		return netip.PrefixFrom(a, a.BitLen()), "", nil
	}
	if !hostPattern.MatchString(e) {
		return netip.Prefix{}, "", fmt.Errorf("egress allow-list entry %q is not a host name (\"billing.internal\", \"*.corp.example\"), an IP address or a CIDR (\"10.0.0.0/8\")", e)
	}
	return netip.Prefix{}, e, nil
}

var hostPattern = regexp.MustCompile(`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\.?$`)

// agentRangesHint names what an agent's egress can open, for messages.
const agentRangesHint = "an agent's egress opens private ranges only (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, fc00::/7); loopback and the rest open only fleet-wide, by the operator (AGENTFLEET_EGRESS_ALLOW)"

// ParseAgentEntries reads an agent's egress, refusing every entry that
// would open more than an agent may reach: an IP or CIDR outside the
// private ranges or holding a metadata address, a name of the local
// machine or of a metadata service, a name that spells such an address
// (169.254.169.254.nip.io), a wildcard over a whole top-level domain. The
// guard holds an agent's entries to the private ranges when it dials
// anyway (an agent stored before these checks included); this is for a
// clear refusal when the agent is defined.
func ParseAgentEntries(entries []string) (Entries, error) {
	var c Entries
	for _, e := range entries {
		p, host, err := parseEntry(e)
		if err != nil {
			return Entries{}, err
		}
		if host == "" {
			if err := checkAgentPrefix(p); err != nil {
				return Entries{}, fmt.Errorf("egress entry %q %v", e, err)
			}
			c.Prefixes = append(c.Prefixes, p)
			continue
		}
		if err := checkAgentHost(host); err != nil {
			return Entries{}, fmt.Errorf("egress entry %q %v", e, err)
		}
		c.Hosts = append(c.Hosts, host)
	}
	return c, nil
}

// checkAgentPrefix says why an agent's prefix is refused: it must lie in
// one private range and hold no metadata address.
func checkAgentPrefix(p netip.Prefix) error {
	if p.Addr().Is4In6() {
		return errors.New("is IPv4-mapped IPv6: write IPv4 addresses and ranges as 10.1.0.0/16")
	}
	for _, r := range privateRanges {
		if r.Bits() <= p.Bits() && r.Contains(p.Addr()) {
			for _, m := range metadataList {
				switch {
				case !p.Contains(m):
				case p.IsSingleIP():
					return errors.New("is a cloud metadata address, which nothing opens")
				default:
					return fmt.Errorf("holds the cloud metadata address %s, which nothing opens: name a narrower range", m)
				}
			}
			return nil
		}
	}
	if why, ok := metadataOnly(p); ok {
		return fmt.Errorf("%s, which nothing opens", why)
	}
	class, reason := classify(p.Addr())
	switch {
	case p.IsSingleIP() && class == classPublic:
		return errors.New("is a public address, which needs no entry")
	case p.IsSingleIP():
		return fmt.Errorf("%s: %s", reason, agentRangesHint)
	}
	for _, m := range metadataList {
		if p.Contains(m) {
			return fmt.Errorf("holds the cloud metadata address %s, which nothing opens", m)
		}
	}
	if class == classLocal {
		return fmt.Errorf("holds %s, which %s: %s", p.Addr(), reason, agentRangesHint)
	}
	return fmt.Errorf("reaches past the private ranges: %s", agentRangesHint)
}

// checkAgentHost says why an agent's host-name entry is refused.
func checkAgentHost(host string) error {
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	var be *BlockedError
	if errors.As(checkHostName(strings.TrimPrefix(name, "*.")), &be) {
		if be.Metadata {
			return errors.New("names a cloud metadata service, which nothing opens")
		}
		return fmt.Errorf("names the local machine: %s", agentRangesHint)
	}
	if strings.HasPrefix(name, "*") && !strings.Contains(strings.TrimPrefix(name, "*."), ".") {
		return errors.New("is too wide: a wildcard names the subdomains of a domain (\"*.corp.example\")")
	}
	if a, ok := spelledIPv4(name); ok {
		switch class, reason := classify(a); class {
		case classMetadata:
			return fmt.Errorf("spells the address %s, which %s: nothing opens it", a, reason)
		case classLocal:
			return fmt.Errorf("spells the address %s, which %s: %s", a, reason, agentRangesHint)
		}
	}
	return nil
}

// metadataOnly reports whether p is metadata and nothing else: one
// metadata address, or a prefix within a link-local range.
func metadataOnly(p netip.Prefix) (string, bool) {
	if p.IsSingleIP() {
		class, reason := classify(p.Addr())
		return reason, class == classMetadata
	}
	for _, r := range blockedRanges {
		if r.class == classMetadata && r.prefix.Bits() <= p.Bits() && r.prefix.Contains(p.Addr()) {
			return fmt.Sprintf("is link-local (%s), where cloud metadata services answer", r.prefix), true
		}
	}
	return "", false
}

// spelledIPv4 finds an IPv4 address spelled in a host name's labels, as
// wildcard DNS services resolve them (169.254.169.254.nip.io,
// 127-0-0-1.sslip.io). A clear refusal, not the guard: the guard checks
// whatever a name resolves to when it dials.
func spelledIPv4(name string) (netip.Addr, bool) {
	labels := strings.Split(name, ".")
	for i := 0; i+4 <= len(labels); i++ {
		if a, err := netip.ParseAddr(strings.Join(labels[i:i+4], ".")); err == nil {
			return a, true
		}
	}
	for _, l := range labels {
		parts := strings.Split(l, "-")
		for i := 0; i+4 <= len(parts); i++ {
			if a, err := netip.ParseAddr(strings.Join(parts[i:i+4], ".")); err == nil {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
}

// metadataName refuses an entry that names a cloud metadata service.
func metadataName(h string) error {
	err := checkHostName(strings.TrimPrefix(strings.TrimSuffix(strings.ToLower(h), "."), "*."))
	var be *BlockedError
	if errors.As(err, &be) && be.Metadata {
		return fmt.Errorf("egress entry %q names a cloud metadata service, which nothing opens", h)
	}
	return nil
}

// checkHostName refuses names that stand for this machine or a cloud
// metadata service. Other names are checked when their addresses are
// dialled.
func checkHostName(host string) error {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	switch {
	case h == "localhost" || strings.HasSuffix(h, ".localhost") ||
		h == "localhost.localdomain" || h == "ip6-localhost" || h == "ip6-loopback":
		return &BlockedError{Target: host, Reason: "names the local machine"}
	case h == "metadata.google.internal" || h == "metadata.goog" || h == "metadata" ||
		h == "instance-data" || h == "instance-data.ec2.internal":
		return &BlockedError{Target: host, Reason: "is a cloud metadata service", Metadata: true}
	}
	return nil
}

// addrClass is who may open an address.
type addrClass int

const (
	classPublic   addrClass = iota // no entry needed
	classPrivate                   // an agent's entry or the operator's
	classLocal                     // the operator's only: loopback, multicast, ...
	classMetadata                  // nobody
)

type blockedRange struct {
	prefix netip.Prefix
	class  addrClass
	reason string
}

var (
	// metadataList are the cloud metadata services' addresses: all of
	// link-local is refused too (blockedRanges), these are named for
	// their message and for those outside it.
	metadataList = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, Oracle, ...
		netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
		netip.MustParseAddr("169.254.170.23"),  // AWS EKS pod identity
		netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
		netip.MustParseAddr("fd20:ce::254"),    // GCP metadata over IPv6
		netip.MustParseAddr("168.63.129.16"),   // Azure wire server
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	}
	metadataAddrs = func() map[netip.Addr]bool {
		m := map[netip.Addr]bool{}
		for _, a := range metadataList {
			m[a] = true
		}
		return m
	}()
	// privateRanges are what an agent's egress can open.
	privateRanges = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("100.64.0.0/10"),
		netip.MustParsePrefix("fc00::/7"),
	}
	// Order matters where ranges nest: the first match names the reason.
	blockedRanges = []blockedRange{
		{netip.MustParsePrefix("0.0.0.0/8"), classLocal, "is an unspecified (\"this network\") address"},
		{netip.MustParsePrefix("10.0.0.0/8"), classPrivate, "is a private address"},
		{netip.MustParsePrefix("100.64.0.0/10"), classPrivate, "is a carrier-grade NAT address"},
		{netip.MustParsePrefix("127.0.0.0/8"), classLocal, "is a loopback address"},
		{netip.MustParsePrefix("169.254.0.0/16"), classMetadata, "is a link-local address (where cloud metadata services answer)"},
		{netip.MustParsePrefix("172.16.0.0/12"), classPrivate, "is a private address"},
		{netip.MustParsePrefix("192.0.0.0/24"), classLocal, "is an IETF protocol address"},
		{netip.MustParsePrefix("192.0.2.0/24"), classLocal, "is a documentation address"},
		{netip.MustParsePrefix("192.168.0.0/16"), classPrivate, "is a private address"},
		{netip.MustParsePrefix("198.18.0.0/15"), classLocal, "is a benchmarking address"},
		{netip.MustParsePrefix("198.51.100.0/24"), classLocal, "is a documentation address"},
		{netip.MustParsePrefix("203.0.113.0/24"), classLocal, "is a documentation address"},
		{netip.MustParsePrefix("224.0.0.0/4"), classLocal, "is a multicast address"},
		{netip.MustParsePrefix("255.255.255.255/32"), classLocal, "is the broadcast address"},
		{netip.MustParsePrefix("240.0.0.0/4"), classLocal, "is a reserved address"},
		{netip.MustParsePrefix("::/128"), classLocal, "is the unspecified address"},
		{netip.MustParsePrefix("::1/128"), classLocal, "is a loopback address"},
		{netip.MustParsePrefix("::/96"), classLocal, "is an IPv4-compatible address (deprecated)"},
		{netip.MustParsePrefix("64:ff9b:1::/48"), classLocal, "is a local-use NAT64 address"},
		{netip.MustParsePrefix("100::/64"), classLocal, "is a discard-only address"},
		{netip.MustParsePrefix("2001::/32"), classLocal, "is a Teredo address"},
		{netip.MustParsePrefix("2001:db8::/32"), classLocal, "is a documentation address"},
		{netip.MustParsePrefix("fc00::/7"), classPrivate, "is a private (unique local) address"},
		{netip.MustParsePrefix("fe80::/10"), classMetadata, "is a link-local address (where cloud metadata services answer)"},
		{netip.MustParsePrefix("fec0::/10"), classLocal, "is a site-local address"},
		{netip.MustParsePrefix("ff00::/8"), classLocal, "is a multicast address"},
	}
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// classify says who may open a and, unless it is public, why it is
// blocked. Addresses that embed an IPv4 address (mapped, NAT64, 6to4)
// are judged by the address they embed.
func classify(a netip.Addr) (addrClass, string) {
	if metadataAddrs[a] {
		return classMetadata, "is a cloud metadata address"
	}
	if a.Is4In6() {
		return embedded(a.Unmap(), " (IPv4-mapped)")
	}
	b := a.As16()
	switch {
	case nat64Prefix.Contains(a):
		return embedded(netip.AddrFrom4([4]byte(b[12:16])), " (via NAT64)")
	case sixToFour.Contains(a):
		return embedded(netip.AddrFrom4([4]byte(b[2:6])), " (via 6to4)")
	}
	for _, r := range blockedRanges {
		if r.prefix.Contains(a) {
			return r.class, r.reason
		}
	}
	return classPublic, ""
}

func embedded(a netip.Addr, how string) (addrClass, string) {
	class, reason := classify(a)
	if class == classPublic {
		return class, ""
	}
	return class, reason + how
}

// parseLegacyIPv4 parses the inet_aton forms of an IPv4 address that are
// not dotted-decimal: 1 to 4 parts, each decimal, octal (leading 0) or hex
// (0x), the last part filling the remaining bytes (127.1, 2130706433,
// 0x7f000001, 017700000001, 0177.0.0.1).
func parseLegacyIPv4(h string) (netip.Addr, bool) {
	parts := strings.Split(h, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var vals [4]uint64
	for i, p := range parts {
		if p == "" {
			return netip.Addr{}, false
		}
		base := 10
		switch {
		case strings.HasPrefix(p, "0x"):
			p, base = p[2:], 16
			if p == "" {
				p = "0"
			}
		case len(p) > 1 && p[0] == '0':
			p, base = p[1:], 8
		}
		v, err := strconv.ParseUint(p, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	n := len(parts)
	var ip uint64
	for i := 0; i < n-1; i++ {
		if vals[i] > 255 {
			return netip.Addr{}, false
		}
		ip |= vals[i] << (8 * (3 - i))
	}
	last := vals[n-1]
	if last >= 1<<(8*(5-n)) {
		return netip.Addr{}, false
	}
	ip |= last
	return netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)}), true
}

// looksNumeric reports whether a host's last label is a number, which
// makes it an IPv4 address to a URL parser (WHATWG): if it did not parse
// as one, it is invalid rather than a name.
func looksNumeric(h string) bool {
	last := h[strings.LastIndexByte(h, '.')+1:]
	if last == "" {
		return false
	}
	if strings.HasPrefix(last, "0x") {
		last = last[2:]
		for _, c := range last {
			if !strings.ContainsRune("0123456789abcdef", c) {
				return false
			}
		}
		return true
	}
	for _, c := range last {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

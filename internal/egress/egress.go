// Package egress owns the fleet's guard on outbound connections: which
// hosts and addresses a connection made on a tenant's behalf may reach.
// By default only the public internet: loopback, private, link-local,
// CGNAT, multicast and cloud metadata addresses are refused, decided on
// the resolved address at connect time, redirects included, unless the
// operator's allow-list opens them. The sandbox's fetch and http and the
// dispatcher's run callbacks dial through it.
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

// The guard keeps connections on the public internet (docs/ARCHITECTURE.md
// §10, SSRF). It works in two places:
//
//   - Up front, on the URL (and on every redirect's URL): only http and
//     https; host names that name the local machine or a metadata service
//     are refused, and so are IP literals in a blocked range or written in
//     a non-canonical form (127.1, 2130706433, 0x7f000001, 017700000001,
//     [::ffff:127.0.0.1]). Those forms are refused even when they would
//     name a public address: resolvers disagree about them, and a model
//     has no reason to write them. This is for clear messages.
//   - At connect time, in the dialer's Control hook, on the resolved
//     address the socket is about to connect to. This is the check that
//     matters: it covers DNS names that resolve (or re-resolve, DNS
//     rebinding) to a blocked address and redirects to such names, since
//     every connection, redirected or not, is dialled through it.

// BlockedError is a connection or URL refused by the guard.
type BlockedError struct {
	Target string // what was refused: an address or a host name
	Reason string // why, as "is a loopback address"
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("blocked by the network guard: %s %s", e.Target, e.Reason)
}

// Resolver resolves a host name to addresses; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Guard.
type Config struct {
	// Allow lists addresses the guard lets through although they are in
	// a blocked range, e.g. 127.0.0.1/32 for a test server or a private
	// service the fleet is meant to reach.
	Allow []netip.Prefix
	// AllowHosts lists host names reached whatever they resolve to
	// ("billing.internal"; "*.corp.example" for its subdomains).
	AllowHosts []string
	// Resolver resolves host names; nil means net.DefaultResolver. The
	// guard checks the addresses it returns at connect time, so a
	// resolver cannot route around it.
	Resolver Resolver
	// DenyPrivate refuses every blocked range whatever Allow and
	// AllowHosts say, and whatever is added to them
	// (AGENTFLEET_EGRESS_PRIVATE=deny).
	DenyPrivate bool
}

// With returns c allowing what o allows too (an agent's egress added to
// the fleet's). DenyPrivate in either holds for the result.
func (c Config) With(o Config) Config {
	c.Allow = append(append([]netip.Prefix(nil), c.Allow...), o.Allow...)
	c.AllowHosts = append(append([]string(nil), c.AllowHosts...), o.AllowHosts...)
	c.DenyPrivate = c.DenyPrivate || o.DenyPrivate
	return c
}

// Guard dials only what its configuration allows.
type Guard struct {
	allow      []netip.Prefix
	allowHosts []string
	resolver   Resolver
	dialer     net.Dialer
	// open dials an allowed host's addresses, unchecked.
	open net.Dialer
}

// New returns the guard of cfg.
func New(cfg Config) *Guard {
	if cfg.DenyPrivate {
		cfg.Allow, cfg.AllowHosts = nil, nil
	}
	g := &Guard{allow: cfg.Allow, resolver: cfg.Resolver}
	for _, h := range cfg.AllowHosts {
		g.allowHosts = append(g.allowHosts, strings.TrimSuffix(strings.ToLower(h), "."))
	}
	g.open = net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	g.dialer = net.Dialer{
		Timeout:   10 * time.Second,
		KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return &BlockedError{Target: address, Reason: "is not an IP address and port"}
			}
			return g.CheckAddr(ap.Addr())
		},
	}
	return g
}

// HTTPClient returns a client whose every connection goes through the
// guard: no proxy (an environment proxy would connect on the caller's
// behalf, past the guard), no cookie jar (nothing carries over between
// requests or tenants), and at most maxRedirects redirects (negative:
// none), each checked.
func (g *Guard) HTTPClient(maxRedirects int) *http.Client {
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            g.dialContext,
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

// dialContext resolves the host itself and dials each address as a
// literal, so the Control hook sees exactly what is connected to.
func (g *Guard) dialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", address, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("dial %s: bad port: %w", address, err)
	}
	var addrs []netip.Addr
	dialer := &g.dialer
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		if g.hostAllowed(host) {
			dialer = &g.open
		} else if err := checkHostName(host); err != nil {
			return nil, err
		}
		addrs, err = g.resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("resolve %s: no addresses", host)
		}
	}
	var blocked, other error
	for _, a := range addrs {
		conn, err := dialer.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
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
	if g.hostAllowed(h) {
		return nil
	}
	return checkHostName(h)
}

// hostAllowed reports whether the operator's allow-list names host.
func (g *Guard) hostAllowed(host string) bool {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	for _, a := range g.allowHosts {
		if a == h || strings.HasPrefix(a, "*.") && strings.HasSuffix(h, a[1:]) {
			return true
		}
	}
	return false
}

// ParseAllow reads an allow-list such as AGENTFLEET_EGRESS_ALLOW: host
// names, IP addresses and CIDRs, separated by commas or spaces.
func ParseAllow(list string) (Config, error) {
	return ParseEntries(strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }))
}

// ParseEntries reads allow-list entries one by one (an agent's egress):
// each a host name, an IP address or a CIDR.
func ParseEntries(entries []string) (Config, error) {
	var c Config
	for _, e := range entries {
		if p, err := netip.ParsePrefix(e); err == nil {
			c.Allow = append(c.Allow, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(e); err == nil {
			c.Allow = append(c.Allow, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		if !hostPattern.MatchString(e) {
			return Config{}, fmt.Errorf("egress allow-list entry %q is not a host name (\"billing.internal\", \"*.corp.example\"), an IP address or a CIDR (\"10.0.0.0/8\")", e)
		}
		c.AllowHosts = append(c.AllowHosts, e)
	}
	return c, nil
}

var hostPattern = regexp.MustCompile(`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\.?$`)

// ParseAgentEntries reads an agent's egress: ParseEntries, less what no
// tenant may open, the cloud metadata services (an entry that names one,
// or a range that holds one of their addresses).
func ParseAgentEntries(entries []string) (Config, error) {
	c, err := ParseEntries(entries)
	if err != nil {
		return c, err
	}
	for _, p := range c.Allow {
		for a := range metadataAddrs {
			if p.Contains(a) {
				return Config{}, fmt.Errorf("egress entry %s holds the cloud metadata address %s, which no agent may reach: name a narrower range", p, a)
			}
		}
	}
	for _, h := range c.AllowHosts {
		if strings.HasPrefix(h, "*") && !strings.Contains(strings.TrimPrefix(h, "*."), ".") {
			return Config{}, fmt.Errorf("egress entry %q is too wide: a wildcard names the subdomains of a domain (\"*.corp.example\")", h)
		}
		if err := checkHostName(strings.TrimPrefix(h, "*.")); err != nil {
			var be *BlockedError
			if errors.As(err, &be) && strings.Contains(be.Reason, "metadata") {
				return Config{}, fmt.Errorf("egress entry %q names a cloud metadata service, which no agent may reach", h)
			}
		}
	}
	return c, nil
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
		return &BlockedError{Target: host, Reason: "is a cloud metadata service"}
	}
	return nil
}

// CheckAddr is the connect-time rule: a blocked range unless Allow lists
// it.
func (g *Guard) CheckAddr(a netip.Addr) error {
	a = a.WithZone("")
	for _, p := range g.allow {
		if p.Contains(a) || (a.Is4In6() && p.Contains(a.Unmap())) {
			return nil
		}
	}
	if reason := blockedReason(a); reason != "" {
		return &BlockedError{Target: a.String(), Reason: reason}
	}
	return nil
}

type blockedRange struct {
	prefix netip.Prefix
	reason string
}

var (
	metadataAddrs = map[netip.Addr]bool{
		netip.MustParseAddr("169.254.169.254"): true, // AWS, GCP, Azure, ...
		netip.MustParseAddr("169.254.170.2"):   true, // AWS ECS task metadata
		netip.MustParseAddr("fd00:ec2::254"):   true, // AWS IMDS over IPv6
		netip.MustParseAddr("100.100.100.200"): true, // Alibaba Cloud
	}
	// Order matters where ranges nest: the first match names the reason.
	blockedRanges = []blockedRange{
		{netip.MustParsePrefix("0.0.0.0/8"), "is an unspecified (\"this network\") address"},
		{netip.MustParsePrefix("10.0.0.0/8"), "is a private address"},
		{netip.MustParsePrefix("100.64.0.0/10"), "is a carrier-grade NAT address"},
		{netip.MustParsePrefix("127.0.0.0/8"), "is a loopback address"},
		{netip.MustParsePrefix("169.254.0.0/16"), "is a link-local address"},
		{netip.MustParsePrefix("172.16.0.0/12"), "is a private address"},
		{netip.MustParsePrefix("192.0.0.0/24"), "is an IETF protocol address"},
		{netip.MustParsePrefix("192.0.2.0/24"), "is a documentation address"},
		{netip.MustParsePrefix("192.168.0.0/16"), "is a private address"},
		{netip.MustParsePrefix("198.18.0.0/15"), "is a benchmarking address"},
		{netip.MustParsePrefix("198.51.100.0/24"), "is a documentation address"},
		{netip.MustParsePrefix("203.0.113.0/24"), "is a documentation address"},
		{netip.MustParsePrefix("224.0.0.0/4"), "is a multicast address"},
		{netip.MustParsePrefix("255.255.255.255/32"), "is the broadcast address"},
		{netip.MustParsePrefix("240.0.0.0/4"), "is a reserved address"},
		{netip.MustParsePrefix("::/128"), "is the unspecified address"},
		{netip.MustParsePrefix("::1/128"), "is a loopback address"},
		{netip.MustParsePrefix("::/96"), "is an IPv4-compatible address (deprecated)"},
		{netip.MustParsePrefix("64:ff9b:1::/48"), "is a local-use NAT64 address"},
		{netip.MustParsePrefix("100::/64"), "is a discard-only address"},
		{netip.MustParsePrefix("2001::/32"), "is a Teredo address"},
		{netip.MustParsePrefix("2001:db8::/32"), "is a documentation address"},
		{netip.MustParsePrefix("fc00::/7"), "is a private (unique local) address"},
		{netip.MustParsePrefix("fe80::/10"), "is a link-local address"},
		{netip.MustParsePrefix("fec0::/10"), "is a site-local address"},
		{netip.MustParsePrefix("ff00::/8"), "is a multicast address"},
	}
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// blockedReason says why a is not a public address, or "" if it is.
// Addresses that embed an IPv4 address (mapped, NAT64, 6to4) are judged by
// the address they embed.
func blockedReason(a netip.Addr) string {
	if metadataAddrs[a] {
		return "is a cloud metadata address"
	}
	if a.Is4In6() {
		if r := blockedReason(a.Unmap()); r != "" {
			return r + " (IPv4-mapped)"
		}
		return ""
	}
	b := a.As16()
	switch {
	case nat64Prefix.Contains(a):
		if r := blockedReason(netip.AddrFrom4([4]byte(b[12:16]))); r != "" {
			return r + " (via NAT64)"
		}
		return ""
	case sixToFour.Contains(a):
		if r := blockedReason(netip.AddrFrom4([4]byte(b[2:6]))); r != "" {
			return r + " (via 6to4)"
		}
		return ""
	}
	for _, r := range blockedRanges {
		if r.prefix.Contains(a) {
			return r.reason
		}
	}
	return ""
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

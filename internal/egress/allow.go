// The allow-lists: the operator's (AGENTFLEET_EGRESS_ALLOW) and an
// agent's egress entries, parsed and held to what each may open.

package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

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

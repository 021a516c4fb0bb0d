// Who may open what: the blocked address ranges and their classes, the
// names that stand for this machine or a metadata service, and the
// legacy spellings of IPv4 addresses that would slip past them.

package egress

import (
	"net/netip"
	"strconv"
	"strings"
)

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

package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// Canonical URLs: the one spelling of a fetch or http request's URL that
// approve rules match, approvals show and bind, and the request is sent
// to, so that a script cannot dodge a rule by writing the same URL
// another way (RFC 3986 §6.2.2 and §6.2.3): scheme and host lower-cased,
// a non-ASCII host in IDNA ASCII form, trailing dots of the host and the
// scheme's default port removed, percent-encoding normalized (unreserved
// characters decoded, other escapes in upper-case hex), dot segments
// removed, an empty path made "/", the fragment (never sent) dropped.
// IPv4 addresses in other than dotted-decimal form and IPv4-mapped IPv6
// addresses are left as written: the network guard refuses them.

// errUserinfo refuses a URL with a user name or password before any rule
// or network: "https://user@host/" is the host's URL spelled otherwise,
// and a credential in a URL ends up in logs and approvals.
var errUserinfo = errors.New("a URL with a user name or password (user@host) is refused; send credentials in a header such as Authorization")

// canonicalURL is raw in canonical form, or why it cannot be fetched.
func canonicalURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("invalid URL %q: %w", raw, unwrapURLError(err))
	}
	switch u.Scheme {
	case "http", "https":
	case "":
		return "", fmt.Errorf("invalid URL %q: use an absolute http:// or https:// URL", raw)
	default:
		return "", fmt.Errorf("invalid URL %q: only http and https URLs can be fetched, not %s:", raw, u.Scheme)
	}
	if u.User != nil {
		return "", errUserinfo
	}
	if u.Opaque != "" || u.Host == "" {
		return "", fmt.Errorf("invalid URL %q: no host; use an absolute http:// or https:// URL", raw)
	}
	host, err := canonicalHost(u.Hostname())
	if err != nil {
		return "", fmt.Errorf("invalid URL %q: %w", raw, err)
	}
	port, err := canonicalPort(u.Scheme, u.Port())
	if err != nil {
		return "", fmt.Errorf("invalid URL %q: %w", raw, err)
	}
	path, err := normalizePercent(u.EscapedPath(), pathChar)
	if err != nil {
		return "", fmt.Errorf("invalid URL %q: %w", raw, err)
	}
	query, err := normalizePercent(u.RawQuery, queryChar)
	if err != nil {
		return "", fmt.Errorf("invalid URL %q: %w", raw, err)
	}
	var b strings.Builder
	b.WriteString(u.Scheme)
	b.WriteString("://")
	b.WriteString(joinHostPort(host, port))
	b.WriteString(cmpOr(removeDotSegments(path), "/"))
	if query != "" {
		b.WriteByte('?')
		b.WriteString(query)
	}
	return b.String(), nil
}

// canonicalHost lower-cases a host (brackets removed), drops its
// trailing dots, writes a non-ASCII name in IDNA ASCII form and an IPv6
// address in RFC 5952 form.
func canonicalHost(h string) (string, error) {
	if strings.Contains(h, ":") {
		a, err := netip.ParseAddr(h)
		if err != nil {
			return "", fmt.Errorf("host [%s] is not an IPv6 address", h)
		}
		return a.String(), nil
	}
	h = strings.TrimRight(h, ".")
	if h == "" {
		return "", errors.New("no host")
	}
	if !isASCII(h) {
		a, err := idna.Lookup.ToASCII(h)
		if err != nil {
			return "", fmt.Errorf("host %q is not a valid international domain name: %w", h, err)
		}
		h = a
	}
	return strings.ToLower(h), nil
}

// canonicalPort is port without leading zeros, empty when it is the
// scheme's default (or was given empty, "host:").
func canonicalPort(scheme, port string) (string, error) {
	if port == "" {
		return "", nil
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q is not a port number (1 to 65535)", port)
	}
	if scheme == "http" && n == 80 || scheme == "https" && n == 443 {
		return "", nil
	}
	return strconv.Itoa(n), nil
}

func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == "" {
		return host
	}
	return host + ":" + port
}

// normalizePercent decodes the escapes of unreserved characters in s,
// writes the others in upper-case hex, and escapes what keep does not
// allow as it is.
func normalizePercent(s string, keep func(byte) bool) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return "", fmt.Errorf("invalid escape %q", s[i:min(i+3, len(s))])
			}
			d := unhex(s[i+1])<<4 | unhex(s[i+2])
			if unreserved(d) {
				b.WriteByte(d)
			} else {
				writeEscape(&b, d)
			}
			i += 2
		case keep(c):
			b.WriteByte(c)
		default:
			writeEscape(&b, c)
		}
	}
	return b.String(), nil
}

func writeEscape(b *strings.Builder, c byte) {
	const hex = "0123456789ABCDEF"
	b.WriteByte('%')
	b.WriteByte(hex[c>>4])
	b.WriteByte(hex[c&15])
}

// removeDotSegments is RFC 3986 §5.2.4's algorithm on an absolute path.
func removeDotSegments(p string) string {
	if !strings.Contains(p, ".") {
		return p
	}
	in := strings.Split(p, "/")
	out := make([]string, 0, len(in))
	for i, seg := range in {
		last := i == len(in)-1
		switch seg {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, seg)
		}
	}
	return strings.Join(out, "/")
}

// unreserved: RFC 3986's ALPHA / DIGIT / "-" / "." / "_" / "~".
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// pathChar is what a path holds unescaped: pchar and "/".
func pathChar(c byte) bool {
	return unreserved(c) || strings.IndexByte("!$&'()*+,;=:@/", c) >= 0
}

// queryChar is what a query holds unescaped.
func queryChar(c byte) bool { return pathChar(c) || c == '?' }

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// canonicalPattern is an approve rule's URL pattern in canonical form,
// as far as its wildcards leave it a URL: scheme and host as a URL's
// (each label without a * in IDNA ASCII form), the default port removed,
// percent-encoding and dot segments of the path normalized. A pattern
// that is no URL ("*.internal*") is only lower-cased. A user name in the
// pattern is refused: such URLs never go out.
func canonicalPattern(p string) (string, error) {
	scheme, rest, ok := strings.Cut(p, "://")
	if !ok {
		return strings.ToLower(p), nil
	}
	scheme = strings.ToLower(scheme)
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if strings.Contains(authority, "@") {
		return "", errors.New("a URL pattern cannot have a user name or password: URLs with one are refused, never sent")
	}
	host, port := authority, ""
	if i := strings.LastIndexByte(authority, ':'); i >= 0 && !strings.Contains(authority[i:], "]") {
		host, port = authority[:i], authority[i+1:]
	}
	var err error
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") && !strings.Contains(host, "*") {
		if host, err = canonicalHost(host[1 : len(host)-1]); err != nil {
			return "", err
		}
	} else if host, err = canonicalHostPattern(host); err != nil {
		return "", err
	}
	if port != "" && !strings.Contains(port, "*") && !strings.Contains(scheme, "*") {
		if port, err = canonicalPort(scheme, port); err != nil {
			return "", err
		}
	}
	// "https://*" or "https://api.*" leaves the path open: no "/" added.
	if tail != "" || !strings.HasSuffix(authority, "*") {
		if tail, err = canonicalPathPattern(tail); err != nil {
			return "", err
		}
	}
	return strings.ToLower(scheme + "://" + joinHostPort(host, port) + tail), nil
}

// canonicalHostPattern is a host pattern's labels in canonical form.
func canonicalHostPattern(h string) (string, error) {
	h = strings.TrimRight(h, ".")
	if h == "" {
		return "", errors.New("the URL pattern has no host (write * for any)")
	}
	labels := strings.Split(h, ".")
	for i, l := range labels {
		if strings.Contains(l, "*") || isASCII(l) {
			continue
		}
		a, err := idna.Lookup.ToASCII(l)
		if err != nil {
			return "", fmt.Errorf("host %q is not a valid international domain name: %w", h, err)
		}
		labels[i] = a
	}
	return strings.Join(labels, "."), nil
}

// canonicalPathPattern normalizes a pattern's path and query as a URL's;
// the fragment of a pattern is dropped, as a URL's is.
func canonicalPathPattern(tail string) (string, error) {
	tail, _, _ = strings.Cut(tail, "#")
	path, query, hasQuery := strings.Cut(tail, "?")
	path, err := normalizePercent(path, pathChar)
	if err != nil {
		return "", fmt.Errorf("URL pattern: %w", err)
	}
	path = cmpOr(removeDotSegments(path), "/")
	if !hasQuery {
		return path, nil
	}
	if query, err = normalizePercent(query, queryChar); err != nil {
		return "", fmt.Errorf("URL pattern: %w", err)
	}
	if query == "" {
		return path, nil
	}
	return path + "?" + query, nil
}

package sandbox

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/agentfleet/agentfleet"
)

// Credentials (ExecRequest.Credentials) are sent by the parent, at send
// time: after the egress check, the policy and the approvals, which all
// see the request as the script made it, as do the journal, the events
// and the script itself. Only HTTPS requests to one of a credential's
// hosts get it; a header of the same name the script set is replaced.
// On a redirect the header follows only to one of the credential's hosts
// over HTTPS: Go's client strips only Authorization and Cookie (and only
// across domains), never a header of another name. A redirect never adds
// a credential the request did not carry: the policy and the approvals
// saw the first URL only.

// credHeader is the header c is sent in.
func credHeader(c *agentfleet.OpenSecret) string {
	return cmpOr(c.Header, agentfleet.SecretHeaderDefault)
}

// credValue is the header value c is sent as: its format with {value}
// replaced.
func credValue(c *agentfleet.OpenSecret) string {
	return strings.ReplaceAll(cmpOr(c.Format, agentfleet.SecretFormatDefault), "{value}", c.Value)
}

// credFor says whether a request to u gets c: over HTTPS, to one of its
// hosts ("api.example.com", "api.example.com:8443", "*.example.com").
func credFor(c *agentfleet.OpenSecret, u *url.URL) bool {
	if u.Scheme != "https" {
		return false
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	hostPort := strings.ToLower(u.Host)
	for _, h := range c.Hosts {
		// As canonical URLs have them: lower case, no trailing dot,
		// no default port.
		h = strings.TrimSuffix(strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ":443"), ".")
		switch {
		case h == "":
		case h == host, h == hostPort:
			return true
		case strings.HasPrefix(h, "*.") && strings.HasSuffix(host, h[1:]):
			return true
		}
	}
	return false
}

// injectCredentials sets on req the header of each credential it gets
// and returns those credentials.
func injectCredentials(req *http.Request, creds []agentfleet.OpenSecret) []*agentfleet.OpenSecret {
	var sent []*agentfleet.OpenSecret
	for i := range creds {
		c := &creds[i]
		if !credFor(c, req.URL) {
			continue
		}
		req.Header.Set(credHeader(c), credValue(c))
		sent = append(sent, c)
	}
	return sent
}

// withCredentialRedirects is base for a request that carries the
// credentials sent: on each redirect, after base's own checks, each one's
// header is dropped, and set again only where the target gets it.
func withCredentialRedirects(base *http.Client, sent []*agentfleet.OpenSecret) *http.Client {
	c := *base
	check := base.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if check != nil {
			if err := check(req, via); err != nil {
				return err
			}
		}
		for _, s := range sent {
			req.Header.Del(credHeader(s))
		}
		for _, s := range sent {
			if credFor(s, req.URL) {
				req.Header.Set(credHeader(s), credValue(s))
			}
		}
		return nil
	}
	return &c
}

package sandbox

import (
	"fmt"
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
// hosts.
func credFor(c *agentfleet.OpenSecret, u *url.URL) bool {
	return u.Scheme == "https" && credHost(c, u)
}

// credHost says whether u's host is one of c's hosts ("api.example.com",
// "api.example.com:8443", "*.example.com"), whatever the scheme.
func credHost(c *agentfleet.OpenSecret, u *url.URL) bool {
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

// errPlainCredential refuses a plain-http request to a host a credential
// is bound to: the credential is never sent over it, and sending the
// request without it would only fail upstream in a way the script cannot
// tell apart from a wrong token.
func errPlainCredential(creds []agentfleet.OpenSecret, u *url.URL) error {
	if u.Scheme == "https" {
		return nil
	}
	for i := range creds {
		if credHost(&creds[i], u) {
			return fmt.Errorf("secret %q is sent over HTTPS only, so this plain-%s request to its host was not sent; use https://%s", creds[i].Name, u.Scheme, u.Host)
		}
	}
	return nil
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

// withCredentialRedirects is base for a request of a turn with
// credentials: on each redirect, after base's own checks, a plain-http
// target on a credential's host is refused (errPlainCredential), each
// sent credential's header is dropped, and set again only where the
// target gets it.
func withCredentialRedirects(base *http.Client, creds []agentfleet.OpenSecret, sent []*agentfleet.OpenSecret) *http.Client {
	c := *base
	check := base.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if check != nil {
			if err := check(req, via); err != nil {
				return err
			}
		}
		if err := errPlainCredential(creds, req.URL); err != nil {
			return fmt.Errorf("redirect to %s: %w", req.URL.Redacted(), err)
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

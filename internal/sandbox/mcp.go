package sandbox

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/agentfleet/agentfleet"
)

// CheckMCPServers checks an agent's mcp entries at apply time, naming
// the field of the first that no worker could serve: a module name,
// unique; an http(s) URL without userinfo; a secret the agent lists;
// tools as non-empty names.
func CheckMCPServers(servers []agentfleet.MCPServer, secrets []string) error {
	seen := map[string]bool{}
	for i, s := range servers {
		f := fmt.Sprintf("mcp[%d]", i)
		switch {
		case !moduleNameRE.MatchString(s.Name):
			return fmt.Errorf("%s.name %q: give 1 to 64 of a-z, 0-9 and _", f, s.Name)
		case seen[s.Name]:
			return fmt.Errorf("%s.name %q is listed twice", f, s.Name)
		case s.URL == "":
			return fmt.Errorf("%s.url: give the server's streamable HTTP endpoint (an http(s) URL)", f)
		case s.Secret != "" && !slices.Contains(secrets, s.Secret):
			return fmt.Errorf("%s.secret %q is not one of the agent's secrets: list it in secrets too", f, s.Secret)
		}
		seen[s.Name] = true
		if err := checkBaseURL(s.URL); err != nil {
			return fmt.Errorf("%s.url: %v", f, err)
		}
		for j, t := range s.Tools {
			if strings.TrimSpace(t) == "" || strings.ContainsFunc(t, func(r rune) bool { return r < ' ' }) || len(t) > 128 {
				return fmt.Errorf("%s.tools[%d] %q is not a tool name", f, j, t)
			}
			if slices.Contains(s.Tools[:j], t) {
				return fmt.Errorf("%s.tools[%d] %q is listed twice", f, j, t)
			}
		}
	}
	return nil
}

// CheckMCPSecrets refuses an MCP server whose secret would never be sent
// to it (not HTTPS, or not one of the secret's hosts), as
// CheckOpenAPISecrets does for modules.
func CheckMCPSecrets(servers []agentfleet.MCPServer, have []agentfleet.Secret) error {
	for i, m := range servers {
		if m.Secret == "" {
			continue
		}
		u, err := url.Parse(m.URL)
		if err != nil {
			return fmt.Errorf("mcp[%d].url: %v", i, err)
		}
		for _, s := range have {
			if s.Name != m.Secret {
				continue
			}
			switch {
			case u.Scheme != "https":
				return fmt.Errorf("mcp[%d].secret %q: the server %s is plain http, and a secret is sent over HTTPS only", i, m.Secret, m.URL)
			case !credHost(&agentfleet.OpenSecret{Secret: s}, u):
				return fmt.Errorf("mcp[%d].secret %q is sent only to %s, and the server is at %s: add the host to the secret (agentctl secrets set %s --host %s)",
					i, m.Secret, strings.Join(s.Hosts, ", "), u.Host, m.Secret, u.Hostname())
			}
		}
	}
	return nil
}

package egress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCheckAddr pins the connect-time rule itself, including the
// operator's allow-list.
func TestCheckAddr(t *testing.T) {
	t.Parallel()
	g := New(Config{Allow: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}})
	for _, c := range []struct {
		addr    string
		blocked bool
	}{
		{"93.184.215.14", false},
		{"2606:4700::6810:85e5", false},
		{"::ffff:93.184.215.14", false},
		{"10.9.1.1", false}, // allowed explicitly
		{"::ffff:10.9.1.1", false},
		{"10.8.1.1", true},
		{"127.0.0.1", true},
		{"::1", true},
		{"::ffff:127.0.0.1", true},
		{"fe80::1%eth0", true},
		{"192.0.2.1", true},
		{"2001:db8::1", true},
		{"168.63.129.16", true}, // public space, but Azure's wire server
	} {
		err := g.CheckAddr(netip.MustParseAddr(c.addr))
		require.Equal(t, c.blocked, err != nil, "%s: %v", c.addr, err)
	}
}

// metadata is every cloud metadata address the egress guard must refuse (docs/api.md, "Defining an agent"), and forms
// that embed one.
var metadata = []string{
	"169.254.169.254", "169.254.170.2", "169.254.170.23", "169.254.0.1", "169.254.255.255",
	"fd00:ec2::254", "fd20:ce::254", "168.63.129.16", "100.100.100.200",
	"fe80::1", "fe80::a9fe:a9fe", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1",
}

// No entry of anyone opens a metadata address: not the operator's
// widest ranges, not one naming the address itself, not a host name
// resolving to it, not an agent's.
func TestMetadataNeverOpens(t *testing.T) {
	t.Parallel()
	var res fakeResolver = map[string][]netip.Addr{}
	all := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	for _, m := range metadata {
		a := netip.MustParseAddr(m)
		all = append(all, netip.PrefixFrom(a, a.BitLen()))
		res["m"+strconv.Itoa(len(res))+".corp.example"] = []netip.Addr{a}
	}
	g := New(Config{
		Allow: all, AllowHosts: []string{"*.corp.example"},
		Agent:    Entries{Prefixes: all, Hosts: []string{"*.corp.example"}},
		Resolver: res,
	})
	for _, m := range metadata {
		err := g.CheckAddr(netip.MustParseAddr(m))
		var be *BlockedError
		require.ErrorAs(t, err, &be, m)
		require.Contains(t, be.Reason, "which nothing opens", m)
	}
	for name := range res {
		require.Error(t, g.checkDial(name, res[name][0]), name)
	}
	// The same guard opens everything else the operator named.
	require.NoError(t, g.CheckAddr(netip.MustParseAddr("127.0.0.1")))
	require.NoError(t, g.CheckAddr(netip.MustParseAddr("10.1.2.3")))
}

func TestParseAllow(t *testing.T) {
	t.Parallel()
	c, err := ParseAllow("127.0.0.1, 10.0.0.0/8 ::1\tbilling.internal,*.corp.example,localhost,0.0.0.0/0")
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("0.0.0.0/0")}, c.Allow)
	require.Equal(t, []string{"billing.internal", "*.corp.example", "localhost"}, c.AllowHosts)
	_, err = ParseAllow("http://x")
	require.ErrorContains(t, err, "not a host name")
	c, err = ParseAllow("")
	require.NoError(t, err)
	require.Empty(t, c.Allow)
	// An entry that is metadata and nothing else is refused at start,
	// naming it.
	for _, bad := range []string{"169.254.169.254", "169.254.170.23", "169.254.0.0/16", "169.254.169.0/24", "fe80::/10", "fd20:ce::254", "fd00:ec2::254", "168.63.129.16", "100.100.100.200", "metadata.google.internal"} {
		_, err := ParseAllow("10.0.0.0/8," + bad)
		require.ErrorContains(t, err, fmt.Sprintf("%q", bad))
		require.ErrorContains(t, err, "nothing opens", bad)
	}
}

// A host-name entry opens the name, and what the name resolves to is
// still checked when it is dialled: an agent's name that resolves to
// loopback or metadata is refused at connect time (the URL check passes);
// an operator's name that resolves to loopback connects, and to metadata
// is refused.
func TestHostNameOpensTheNameOnly(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "inside") }))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	res := fakeResolver{
		"svc.internal":       addrs("127.0.0.1"),
		"meta.internal":      addrs("169.254.169.254"),
		"gcp6.internal":      addrs("fd20:ce::254"),
		"api.corp.example":   addrs("127.0.0.1"),
		"other.example":      addrs("127.0.0.1"),
		"ops.internal":       addrs("127.0.0.1"),
		"opsmeta.internal":   addrs("169.254.169.254"),
		"private.internal":   addrs("10.1.2.3"),
		"unlisted.internal":  addrs("10.1.2.3"),
		"ops6meta.internal":  addrs("fd20:ce::254"),
		"opsazure.internal":  addrs("168.63.129.16"),
		"agentazure.example": addrs("168.63.129.16"),
	}
	g := New(Config{
		AllowHosts: []string{"ops.internal", "opsmeta.internal", "ops6meta.internal", "opsazure.internal"},
		Agent:      Entries{Hosts: []string{"svc.internal", "meta.internal", "gcp6.internal", "*.corp.example", "private.internal", "agentazure.example"}},
		Resolver:   res,
	})
	c := g.HTTPClient(0)
	c.Timeout = 5 * time.Second
	get := func(host string) error {
		u := fmt.Sprintf("http://%s:%d/", host, port)
		if _, err := g.CheckURL(u); err != nil {
			return fmt.Errorf("up front: %w", err)
		}
		resp, err := c.Get(u)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for host, want := range map[string]string{
		"svc.internal":       "127.0.0.1 is a loopback address (svc.internal resolves to it); an agent's egress opens private addresses only",
		"api.corp.example":   "127.0.0.1 is a loopback address",
		"meta.internal":      "169.254.169.254 is a cloud metadata address",
		"gcp6.internal":      "fd20:ce::254 is a cloud metadata address",
		"agentazure.example": "168.63.129.16 is a cloud metadata address",
		"other.example":      "127.0.0.1 is a loopback address (other.example resolves to it)",
		"opsmeta.internal":   "169.254.169.254 is a cloud metadata address",
		"ops6meta.internal":  "fd20:ce::254 is a cloud metadata address",
		"opsazure.internal":  "168.63.129.16 is a cloud metadata address",
	} {
		err := get(host)
		var be *BlockedError
		require.ErrorAs(t, err, &be, host)
		require.NotContains(t, err.Error(), "up front", host)
		require.Contains(t, err.Error(), want, host)
	}
	require.NoError(t, get("ops.internal"), "the operator's name opens loopback")
	for _, lit := range []string{"127.0.0.1", "localhost"} {
		var be *BlockedError
		require.ErrorAs(t, get(lit), &be, lit)
	}
	// A private address is what an agent's name opens, and only its.
	require.NoError(t, g.checkDial("private.internal", netip.MustParseAddr("10.1.2.3")))
	require.Error(t, g.checkDial("unlisted.internal", netip.MustParseAddr("10.1.2.3")))
}

// An agent's prefixes open private addresses only, however they were
// made: a Config built past ParseAgentEntries opens no loopback.
func TestAgentPrefixesOpenPrivateOnly(t *testing.T) {
	t.Parallel()
	g := New(Config{Agent: Entries{Prefixes: []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::/0"), netip.MustParsePrefix("224.0.0.0/4"),
	}}})
	require.NoError(t, g.CheckAddr(netip.MustParseAddr("10.1.2.3")))
	require.NoError(t, g.CheckAddr(netip.MustParseAddr("fd12::1")))
	for _, a := range []string{"127.0.0.1", "::1", "224.0.0.1", "ff02::1", "::", "172.16.0.1"} {
		require.Error(t, g.CheckAddr(netip.MustParseAddr(a)), a)
	}
}

type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

// An agent's egress opens private ranges only: every entry that would
// reach loopback, link-local, unspecified, multicast, public or metadata
// addresses is refused, naming the entry and why.
func TestParseAgentEntries(t *testing.T) {
	t.Parallel()
	c, err := ParseAgentEntries([]string{"billing.internal", "*.corp.example", "*.nip.io", "10.1.2.3", "10.0.0.0/8", "172.16.0.0/12", "192.168.1.0/24", "100.64.0.0/16", "fd12::/16", "10.1.2.3.nip.io"})
	require.NoError(t, err)
	require.Equal(t, []string{"billing.internal", "*.corp.example", "*.nip.io", "10.1.2.3.nip.io"}, c.Hosts)
	require.Len(t, c.Prefixes, 6)
	for bad, why := range map[string]string{
		"127.0.0.1":                 "loopback",
		"127.0.0.0/8":               "loopback",
		"::1":                       "loopback",
		"::ffff:10.0.0.1":           "IPv4-mapped",
		"0.0.0.0":                   "unspecified",
		"::":                        "unspecified",
		"0.0.0.0/0":                 "holds the cloud metadata address",
		"::/0":                      "holds the cloud metadata address",
		"8.8.8.8":                   "public address",
		"8.8.0.0/16":                "past the private ranges",
		"224.0.0.1":                 "multicast",
		"ff02::1":                   "multicast",
		"169.254.169.254":           "metadata",
		"169.254.170.23":            "metadata",
		"169.254.1.1":               "link-local",
		"169.254.0.0/16":            "metadata",
		"fe80::/10":                 "metadata",
		"fe80::1":                   "link-local",
		"fd00:ec2::254":             "metadata",
		"fd20:ce::254":              "metadata",
		"fc00::/7":                  "holds the cloud metadata address",
		"fd20:ce::/32":              "holds the cloud metadata address fd20:ce::254",
		"100.64.0.0/10":             "holds the cloud metadata address 100.100.100.200",
		"100.100.100.200":           "metadata",
		"168.63.129.16":             "metadata",
		"localhost":                 "local machine",
		"api.localhost":             "local machine",
		"*.localhost":               "local machine",
		"metadata.google.internal":  "metadata service",
		"169.254.169.254.nip.io":    "spells the address 169.254.169.254",
		"x.169-254-170-23.sslip.io": "spells the address 169.254.170.23",
		"127-0-0-1.sslip.io":        "spells the address 127.0.0.1",
		"*.internal":                "too wide",
		"not a host":                "not a host name",
		"":                          "not a host name",
	} {
		_, err := ParseAgentEntries([]string{"ok.example", bad})
		require.ErrorContains(t, err, fmt.Sprintf("%q", bad), bad)
		require.ErrorContains(t, err, why, bad)
	}
}

// DenyPrivate closes what Allow, AllowHosts and Agent opened.
func TestDenyPrivate(t *testing.T) {
	t.Parallel()
	agent, err := ParseAgentEntries([]string{"10.1.0.0/16", "billing.internal"})
	require.NoError(t, err)
	ops, err := ParseAllow("127.0.0.1,ops.internal")
	require.NoError(t, err)
	ops.Agent = agent
	open := New(ops)
	require.NoError(t, open.CheckAddr(netip.MustParseAddr("127.0.0.1")))
	require.NoError(t, open.CheckAddr(netip.MustParseAddr("10.1.2.3")))
	require.NoError(t, open.checkDial("billing.internal", netip.MustParseAddr("10.2.0.1")))

	ops.DenyPrivate = true
	closed := New(ops)
	require.Error(t, closed.CheckAddr(netip.MustParseAddr("127.0.0.1")))
	require.Error(t, closed.CheckAddr(netip.MustParseAddr("10.1.2.3")))
	require.Error(t, closed.checkDial("billing.internal", netip.MustParseAddr("10.2.0.1")))
	require.Error(t, closed.checkDial("ops.internal", netip.MustParseAddr("127.0.0.1")))
	require.NoError(t, closed.CheckAddr(netip.MustParseAddr("93.184.215.14")))
	_, err = closed.CheckURL("http://billing.internal/")
	require.NoError(t, err, "a name is refused at connect time, on its addresses")
}

package sandbox

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
)

// fakeResolver maps names to addresses, standing in for DNS (including a
// DNS server that lies: rebinding a public-looking name to a private
// address).
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

// TestNetworkGuardMatrix fetches every blocked form through a real pool
// with the production guard (no allow-list) and expects a denial that
// names the reason. The resolver makes the name-based cases independent
// of the machine's DNS.
func TestNetworkGuardMatrix(t *testing.T) {
	t.Parallel()
	res := fakeResolver{
		"rebind.example":      addrs("10.1.2.3"),
		"meta.example":        addrs("169.254.169.254"),
		"v6private.example":   addrs("fd12::1"),
		"v6meta.example":      addrs("fd00:ec2::254"),
		"mixed.example":       addrs("127.0.0.1", "::1"),
		"cgnat.example":       addrs("100.64.1.1"),
		"mapped.example":      addrs("::ffff:192.168.1.1"),
		"nat64.example":       addrs("64:ff9b::7f00:1"),
		"broadcast.example":   addrs("255.255.255.255"),
		"multicast6.example":  addrs("ff02::1"),
		"unspecified.example": addrs("0.0.0.0"),
		"azure.example":       addrs("168.63.129.16"),
		"gcp6.example":        addrs("fd20:ce::254"),
	}
	p := newPool(t, Config{PoolSize: 2, Network: NetworkConfig{Resolver: res}})
	cases := []struct {
		url  string
		want string // in the message
	}{
		// Up front: literal and non-canonical forms.
		{"http://127.0.0.1/", "127.0.0.1 is a loopback address"},
		{"http://127.1/", "non-canonical IPv4 address (= 127.0.0.1)"},
		{"http://2130706433/", "non-canonical IPv4 address (= 127.0.0.1)"},
		{"http://0x7f000001/", "non-canonical IPv4 address (= 127.0.0.1)"},
		{"http://017700000001/", "non-canonical IPv4 address (= 127.0.0.1)"},
		{"http://0177.0.0.1/", "non-canonical IPv4 address (= 127.0.0.1)"},
		{"http://127.000.000.001/", "non-canonical IPv4 address (= 127.0.0.1)"},
		{"http://[::1]/", "::1 is a loopback address"},
		{"http://0.0.0.0/", "unspecified"},
		{"http://[::]/", "unspecified"},
		{"http://[::ffff:127.0.0.1]/", "IPv4-mapped IPv6 address (= 127.0.0.1)"},
		{"http://[::ffff:7f00:1]/", "IPv4-mapped IPv6 address (= 127.0.0.1)"},
		{"http://10.0.0.8:8080/", "private address"},
		{"http://172.16.5.4/", "private address"},
		{"http://192.168.0.1/", "private address"},
		{"http://100.64.0.1/", "carrier-grade NAT"},
		{"http://169.254.1.1/", "link-local"},
		{"http://169.254.169.254/latest/meta-data/", "cloud metadata address"},
		{"http://[fd00:ec2::254]/", "cloud metadata address"},
		{"http://169.254.170.23/", "cloud metadata address"},
		{"http://[fd20:ce::254]/", "cloud metadata address"},
		{"http://168.63.129.16/", "cloud metadata address"},
		{"http://[fc00::1]/", "unique local"},
		{"http://[fe80::1]/", "link-local"},
		{"http://224.0.0.1/", "multicast"},
		{"http://255.255.255.255/", "broadcast"},
		{"http://[64:ff9b::a00:1]/", "private address (via NAT64)"},
		{"http://[2002:7f00:1::]/", "loopback address (via 6to4)"},
		{"http://metadata.google.internal/computeMetadata/v1/", "cloud metadata service"},
		{"http://METADATA.google.internal./", "cloud metadata service"},
		{"http://localhost:8080/", "names the local machine"},
		{"http://api.localhost/", "names the local machine"},
		{"http://1.2.3.999/", "not a valid IPv4 address"},
		// At connect time: names resolving to blocked addresses.
		{"http://rebind.example/", "10.1.2.3 is a private address"},
		{"http://meta.example/", "169.254.169.254 is a cloud metadata address"},
		{"http://v6private.example/", "fd12::1 is a private (unique local) address"},
		{"http://v6meta.example/", "fd00:ec2::254 is a cloud metadata address"},
		{"http://mixed.example/", "is a loopback address"},
		{"http://cgnat.example/", "carrier-grade NAT"},
		{"http://mapped.example/", "192.168.1.1 is a private address"},
		{"http://nat64.example/", "loopback address (via NAT64)"},
		{"http://broadcast.example/", "broadcast"},
		{"http://multicast6.example/", "multicast"},
		{"http://unspecified.example/", "unspecified"},
		{"http://azure.example/", "168.63.129.16 is a cloud metadata address"},
		{"http://gcp6.example/", "fd20:ce::254 is a cloud metadata address"},
	}
	for _, c := range cases {
		t.Run(c.url, func(t *testing.T) {
			t.Parallel()
			res := run(t, p, `function run(a) { return fetch(a.url).status }`, fmt.Sprintf(`{"url":%q}`, c.url))
			msg := failed(t, res, agentfleet.ScriptDenied)
			require.Contains(t, msg, "blocked by the network guard")
			require.Contains(t, msg, c.want)
		})
	}
}

// No allow-list opens a cloud metadata address: not the operator's
// widest ranges, nor a host name of the operator's that resolves to one.
func TestOperatorAllowNeverOpensMetadata(t *testing.T) {
	t.Parallel()
	res := fakeResolver{"meta.corp.example": addrs("169.254.169.254"), "azure.corp.example": addrs("168.63.129.16")}
	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{
		Allow:      []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")},
		AllowHosts: []string{"*.corp.example"},
		Resolver:   res,
	}})
	for _, u := range []string{
		"http://169.254.169.254/latest/meta-data/", "http://169.254.170.2/", "http://169.254.170.23/", "http://[fd00:ec2::254]/",
		"http://[fd20:ce::254]/", "http://168.63.129.16/", "http://100.100.100.200/", "http://[fe80::1]/",
		"http://meta.corp.example/", "http://azure.corp.example/",
	} {
		msg := failed(t, run(t, p, `function run(a) { return fetch(a.url).status }`, fmt.Sprintf(`{"url":%q}`, u)), agentfleet.ScriptDenied)
		require.Contains(t, msg, "which nothing opens", u)
	}
}

func TestNetworkGuardSchemes(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	for _, u := range []string{"file:///etc/passwd", "ftp://example.com/", "gopher://example.com/", "/relative", "javascript:alert(1)"} {
		res := run(t, p, `function run(a) { fetch(a.url) }`, fmt.Sprintf(`{"url":%q}`, u))
		msg := failed(t, res, agentfleet.ScriptException)
		require.Regexp(t, `only http and https|absolute http`, msg, u)
	}
}

// TestRedirectToLoopbackBlockedAtConnect follows a redirect from an
// allowed server to a name that resolves to another loopback address. The
// URL check passes (it is a name); the dial is refused, and the target
// server never sees a request.
func TestRedirectToLoopbackBlockedAtConnect(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 on this machine: %v", err)
	}
	target := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "internal secrets")
	}))
	target.Listener.Close()
	target.Listener = ln
	target.Start()
	t.Cleanup(target.Close)
	targetPort := ln.Addr().(*net.TCPAddr).Port

	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			fmt.Fprint(w, "fine")
			return
		}
		http.Redirect(w, r, fmt.Sprintf("http://internal.example:%d/secrets", targetPort), http.StatusFound)
	}))
	t.Cleanup(front.Close)
	frontPort := front.Listener.Addr().(*net.TCPAddr).Port

	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Resolver: fakeResolver{
			"front.example":    addrs("127.0.0.1"),
			"internal.example": addrs("127.0.0.2"),
		},
	}})
	res := run(t, p, `function run(a) { return fetch(a.url).body }`, fmt.Sprintf(`{"url":"http://front.example:%d/start"}`, frontPort))
	msg := failed(t, res, agentfleet.ScriptDenied)
	require.Contains(t, msg, "127.0.0.2 is a loopback address")
	require.Zero(t, hits.Load(), "the blocked server was reached")

	// The allowed server itself is reachable by name: what blocked the
	// redirect was its target.
	res = run(t, p, `function run(a) { return fetch(a.url).body }`, fmt.Sprintf(`{"url":"http://front.example:%d/ok"}`, frontPort))
	require.Equal(t, `"fine"`, ok(t, res))
}

func TestRedirectCap(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hop5" {
			fmt.Fprint(w, "arrived")
			return
		}
		i := n.Add(1)
		http.Redirect(w, r, fmt.Sprintf("/loop%d", i), http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	hops := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var k int
		fmt.Sscanf(r.URL.Path, "/hop%d", &k)
		if k >= 5 {
			fmt.Fprint(w, "arrived")
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/hop%d", k+1), http.StatusFound)
	}))
	t.Cleanup(hops.Close)
	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}})
	// Five redirects are followed.
	require.Equal(t, `"arrived"`, ok(t, run(t, p, `function run(a) { return fetch(a.url).body }`, `{"url":"`+hops.URL+`/hop0"}`)))
	// An endless chain stops after five.
	msg := failed(t, run(t, p, `function run(a) { return fetch(a.url).body }`, `{"url":"`+srv.URL+`/start"}`), agentfleet.ScriptException)
	require.Contains(t, msg, "stopped after 5 redirects")
	require.LessOrEqual(t, n.Load(), int32(6))
}

func TestFetchSizeCap(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"data":"%s"}`, strings.Repeat("é", 4000))
	}))
	t.Cleanup(srv.Close)
	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}, Limits: Limits{FetchMaxBytes: 1024}})
	res := run(t, p, `function run(a) {
  const r = fetch(a.url);
  let err = null;
  try { r.json() } catch (e) { err = e.message }
  return {len: r.body.length, truncated: r.truncated, err};
}`, `{"url":"`+srv.URL+`"}`)
	require.JSONEq(t, `{"len":516,"truncated":true,"err":"json(): the body was truncated at the fetch size limit and cannot be parsed; fetch a smaller resource"}`, ok(t, res))
}

func TestFetchTimeout(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	p := newPool(t, Config{PoolSize: 1, Network: NetworkConfig{Allow: loopback}, Limits: Limits{FetchTimeout: 200 * time.Millisecond}})
	start := time.Now()
	msg := failed(t, run(t, p, `function run(a) { fetch(a.url) }`, `{"url":"`+srv.URL+`"}`), agentfleet.ScriptException)
	require.Contains(t, msg, "timed out after 200ms")
	require.Less(t, time.Since(start), 2*time.Second)
}

package sandbox

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCanonicalURL(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"http://example.com/a":                   "http://example.com/a",
		"http://example.com":                     "http://example.com/",
		"http://example.com?q=1":                 "http://example.com/?q=1",
		"HTTP://EXAMPLE.COM/Path":                "http://example.com/Path",
		"http://Example.Com./x":                  "http://example.com/x",
		"http://example.com../x":                 "http://example.com/x",
		"http://127.0.0.1.:8080/sink":            "http://127.0.0.1:8080/sink",
		"http://example.com:80/x":                "http://example.com/x",
		"https://example.com:443/x":              "https://example.com/x",
		"http://example.com:443/x":               "http://example.com:443/x",
		"https://example.com:80/x":               "https://example.com:80/x",
		"http://example.com:/x":                  "http://example.com/x",
		"http://example.com:0080/x":              "http://example.com/x",
		"http://example.com:08080/x":             "http://example.com:8080/x",
		"http://example.com/a/../sink":           "http://example.com/sink",
		"http://example.com/a/./b/../c":          "http://example.com/a/c",
		"http://example.com/../../x":             "http://example.com/x",
		"http://example.com/a/..":                "http://example.com/",
		"http://example.com/a/.":                 "http://example.com/a/",
		"http://example.com/a/%2e%2E/sink":       "http://example.com/sink",
		"http://example.com/%7euser":             "http://example.com/~user",
		"http://example.com/~user":               "http://example.com/~user",
		"http://example.com/%41%62c":             "http://example.com/Abc",
		"http://example.com/a%2fb":               "http://example.com/a%2Fb",
		"http://example.com/a%2Fb":               "http://example.com/a%2Fb",
		"http://example.com/a b":                 "http://example.com/a%20b",
		"http://example.com/é":                   "http://example.com/%C3%A9",
		"http://example.com/x?a=%7e&b=%2f&c=d+e": "http://example.com/x?a=~&b=%2F&c=d+e",
		"http://example.com/x?":                  "http://example.com/x",
		"http://example.com/x#frag":              "http://example.com/x",
		"http://bücher.example/":                 "http://xn--bcher-kva.example/",
		"http://BÜCHER.example/":                 "http://xn--bcher-kva.example/",
		"http://[::1]:80/":                       "http://[::1]/",
		"http://[0:0::1]:8080/":                  "http://[::1]:8080/",
		"http://[2001:DB8::1]/":                  "http://[2001:db8::1]/",
		// Left as written for the network guard to refuse.
		"http://2130706433/":        "http://2130706433/",
		"http://[::ffff:7f00:1]/":   "http://[::ffff:127.0.0.1]/",
		"https://api.example.com/v": "https://api.example.com/v",
	} {
		got, err := canonicalURL(raw)
		require.NoError(t, err, raw)
		require.Equal(t, want, got, raw)
		again, err := canonicalURL(got)
		require.NoError(t, err)
		require.Equal(t, got, again, "canonical is a fixed point (%s)", raw)
	}
	for raw, want := range map[string]string{
		"http://u@example.com/":          "user name or password",
		"http://u:p@example.com/":        "user name or password",
		"http://@example.com/":           "user name or password",
		"http://:p@example.com/":         "user name or password",
		"ftp://example.com/":             "only http and https",
		"/relative":                      "absolute http",
		"http:opaque":                    "no host",
		"http:///x":                      "no host",
		"http://./x":                     "no host",
		"http://example.com:99999/":      "not a port number",
		"http://example.com/%zz":         "invalid URL",
		"http://[::1x]/":                 "invalid URL",
		"http://xn--a-ecp.ru\u200d.com/": "not a valid international domain name",
	} {
		_, err := canonicalURL(raw)
		require.ErrorContains(t, err, want, raw)
	}
}

func TestCanonicalPattern(t *testing.T) {
	t.Parallel()
	for pattern, want := range map[string]string{
		"http://127.0.0.1:8080/*":      "http://127.0.0.1:8080/*",
		"HTTP://API.Example.COM./v1/*": "http://api.example.com/v1/*",
		"http://example.com:80/*":      "http://example.com/*",
		"https://example.com:443":      "https://example.com/",
		"https://*.internal/*":         "https://*.internal/*",
		"https://*":                    "https://*",
		"*://example.com/*":            "*://example.com/*",
		"https://example.com:*/x":      "https://example.com:*/x",
		"https://bücher.*/*":           "https://xn--bcher-kva.*/*",
		"https://API.*":                "https://api.*",
		"https://example.com/a/../b*":  "https://example.com/b*",
		"https://example.com/%7eu/*":   "https://example.com/~u/*",
		"https://example.com/x?a=%7e":  "https://example.com/x?a=~",
		"https://[0::1]:443/*":         "https://[::1]/*",
		"*.internal*":                  "*.internal*",
	} {
		got, err := canonicalPattern(pattern)
		require.NoError(t, err, pattern)
		require.Equal(t, want, got, pattern)
	}
	for pattern, want := range map[string]string{
		"http://u@example.com/*": "cannot have a user name",
		"http://:70000/*":        "no host",
		"http://example.com:0/":  "not a port number",
	} {
		_, err := canonicalPattern(pattern)
		require.ErrorContains(t, err, want, pattern)
	}
}

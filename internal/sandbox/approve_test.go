package sandbox

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestApproveRules(t *testing.T) {
	require.NoError(t, CheckApprove([]string{"*", "fetch", "http", "ai", "aiJSON", "spawn", "http.get", "http.post", "http.put", "http.del", "fetch:POST", "fetch:PATCH"}))
	for _, bad := range []string{"", "wait", "log", "http.patch", "fetch:post", "fetch:", "ai:POST", "http.", "spawn.x", "**"} {
		require.Error(t, CheckApprove([]string{"fetch", bad}), bad)
	}

	for _, c := range []struct {
		rules             []string
		primitive, method string
		want              string
	}{
		{[]string{"http.post"}, "http", "POST", "http.post"},
		{[]string{"http.post"}, "http", "GET", ""},
		{[]string{"http.del"}, "http", "DELETE", "http.del"},
		{[]string{"fetch:POST"}, "fetch", "POST", "fetch:POST"},
		{[]string{"fetch:POST"}, "fetch", "GET", ""},
		{[]string{"fetch:POST"}, "http", "POST", ""},
		{[]string{"fetch"}, "fetch", "GET", "fetch"},
		{[]string{"spawn"}, "spawn", "", "spawn"},
		{[]string{"ai", "*"}, "spawn", "", "*"},
		{[]string{"*"}, "wait", "", ""},
		{nil, "fetch", "POST", ""},
	} {
		got, ok := ApproveMatch(c.rules, c.primitive, c.method)
		require.Equal(t, c.want != "", ok, "%v %s %s", c.rules, c.primitive, c.method)
		require.Equal(t, c.want, got)
	}
}

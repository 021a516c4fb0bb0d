package mcp

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTSType(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, schema, want string
	}{
		{"required and optional", `{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"},"c":{"type":"boolean"}},"required":["b"]}`,
			`args: {b: string; a?: number; c?: boolean}`},
		{"nothing required", `{"type":"object","properties":{"q":{"type":"number"}}}`, `args?: {q?: number}`},
		{"no properties", `{"type":"object"}`, `args?: {}`},
		{"enum", `{"type":"object","properties":{"city":{"type":"string","enum":["New York","Chicago"]}},"required":["city"]}`,
			`args: {city: "New York" | "Chicago"}`},
		{"array", `{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"}},"m":{"type":"array","items":{"enum":[1,2]}},"x":{"type":"array"}},"required":["tags","m","x"]}`,
			`args: {m: (1 | 2)[]; tags: string[]; x: any[]}`},
		{"nested shallowly", `{"type":"object","properties":{"user":{"type":"object","properties":{"name":{"type":"string"},"addr":{"type":"object","properties":{"zip":{"type":"string"}}}},"required":["name"]}},"required":["user"]}`,
			`args: {user: {name: string; addr?: object}}`},
		{"nullable", `{"type":"object","properties":{"n":{"type":["string","null"]}}}`, `args?: {n?: string | null}`},
		{"anyOf", `{"type":"object","properties":{"v":{"anyOf":[{"type":"string"},{"type":"number"}]}}}`, `args?: {v?: string | number}`},
		{"unknown", `{"type":"object","properties":{"v":{},"w":{"type":"weird"},"x":{"$ref":"#/defs/x"}}}`, `args?: {v?: any; w?: any; x?: any}`},
		{"odd keys", `{"type":"object","properties":{"content-type":{"type":"string"}}}`, `args?: {"content-type"?: string}`},
		{"const", `{"type":"object","properties":{"k":{"const":"fixed"}}}`, `args?: {k?: "fixed"}`},
		{"not an object", `true`, `args?: any`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, argsParam(Tool{Name: "x", InputSchema: json.RawMessage(tc.schema)}))
		})
	}

	// Many properties are cut, and say how many.
	props := map[string]any{}
	for i := range 100 {
		props[fmt.Sprintf("field_%03d", i)] = map[string]any{"type": "string"}
	}
	b, _ := json.Marshal(map[string]any{"type": "object", "properties": props})
	got := argsParam(Tool{InputSchema: b})
	require.Less(t, len(got), 500)
	require.Regexp(t, `; /\* \d+ more \*/ \[k: string\]: any\}$`, got)
}

func TestAliasAndToolName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "getSum", Alias("get-sum"))
	require.Equal(t, "getTinyImage", Alias("get-tiny-image"))
	require.Equal(t, "listRepos", Alias("list.repos"))
	require.Equal(t, "", Alias("create_issue"))
	require.Equal(t, "", Alias("echo"))
	require.Equal(t, "", Alias("---"))

	tools := []Tool{{Name: "get-sum"}, {Name: "echo"}, {Name: "get_sum"}, {Name: "a-b"}, {Name: "aB"}}
	for called, want := range map[string]string{"get-sum": "get-sum", "getSum": "get-sum", "echo": "echo", "get_sum": "get_sum", "aB": "aB", "a-b": "a-b"} {
		got, ok := ToolName(tools, called)
		require.True(t, ok, called)
		require.Equal(t, want, got, called)
	}
	_, ok := ToolName(tools, "nope")
	require.False(t, ok)
	// a-b's alias is taken by tool aB: it is declared by its quoted name.
	require.True(t, strings.HasPrefix(DeclLine(tools, tools[3]), `"a-b"(`))
}

func TestDeclaration(t *testing.T) {
	t.Parallel()
	tools := []Tool{
		{Name: "echo", Description: "Echoes back the input string\nSecond line ignored.", ReadOnly: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}`)},
		{Name: "get-sum", Description: "Returns   the sum of two numbers",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`)},
		{Name: "long", Description: strings.Repeat("word ", 100), InputSchema: json.RawMessage(`{"type":"object"}`)},
	}
	require.Equal(t, "declare function require(m: 'mcp:ev'): {\n"+
		"  echo(args: {message: string}): any; // Echoes back the input string (read-only)\n"+
		"  getSum(args: {a: number; b: number}): any; // \"get-sum\": Returns the sum of two numbers\n"+
		"  long(args?: {}): any; // "+strings.TrimSpace(strings.Repeat("word ", 24))+"…\n"+
		"};", Declaration("ev", tools))

	// The allow-list filters.
	allowed := Allowed(tools, []string{"get-sum", "missing"})
	require.Len(t, allowed, 1)
	require.Equal(t, "get-sum", allowed[0].Name)
	require.Len(t, Allowed(tools, nil), 3)

	// Past 12 tools: one catalog line; help renders them all.
	var many []Tool
	for i := range 13 {
		many = append(many, Tool{Name: fmt.Sprintf("tool-%d", i), Description: "does things", InputSchema: json.RawMessage(`{"type":"object"}`)})
	}
	decl := Declaration("gh", many)
	require.NotContains(t, decl, "\n")
	require.Equal(t, "declare function require(m: 'mcp:gh'): Record<string, (args?: object) => any>; // 13 tools: tool0, tool1, tool2, tool3, tool4, tool5, tool6, tool7, tool8, tool9, tool10, tool11, tool12; help('mcp:gh') logs their declarations", decl)
	help := Help("gh", many)
	require.Len(t, strings.Split(help, "\n"), 15)
	require.Contains(t, help, "\n  tool12(args?: {}): any; // \"tool-12\": does things\n")
	require.Len(t, strings.Split(Declaration("gh", many[:12]), "\n"), 14)
}

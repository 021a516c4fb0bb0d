package mcp

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// CatalogAfter is how many tools a server's declaration lists one per
	// line; past it the server gets one catalog line and help prints the
	// declarations.
	CatalogAfter = 12

	descriptionRunes = 120 // a declaration's description, cut to one line
	typeBytes        = 400 // a parameter type longer than this is cut to its first properties
	unionMax         = 12  // enum members shown before the rest become the base type
)

// Allowed returns the tools allow names, in the server's order; a nil or
// empty allow-list allows every tool. Names in allow are tool names.
func Allowed(tools []Tool, allow []string) []Tool {
	if len(allow) == 0 {
		return tools
	}
	ok := make(map[string]bool, len(allow))
	for _, n := range allow {
		ok[n] = true
	}
	var out []Tool
	for _, t := range tools {
		if ok[t.Name] {
			out = append(out, t)
		}
	}
	return out
}

// Alias returns the camelCase alias of a tool name that is no JS
// identifier (get-sum -> getSum), or "" when the name is one already or
// has no identifier form.
func Alias(name string) string {
	if isIdent(name) {
		return ""
	}
	var b strings.Builder
	upper := false
	for _, r := range name {
		if !isIdentRune(r, b.Len() > 0) {
			upper = b.Len() > 0
			continue
		}
		if upper {
			r = unicode.ToUpper(r)
			upper = false
		}
		b.WriteRune(r)
	}
	a := b.String()
	if !isIdent(a) {
		return ""
	}
	return a
}

// ToolName maps what a script called (a tool name, or the alias of one)
// to the tool's name among tools. A tool's own name wins over another's
// alias.
func ToolName(tools []Tool, called string) (string, bool) {
	for _, t := range tools {
		if t.Name == called {
			return t.Name, true
		}
	}
	for _, t := range tools {
		if Alias(t.Name) == called {
			return t.Name, true
		}
	}
	return "", false
}

// member is how a declaration names a tool: its alias when it has one
// that no other tool's name takes, else the name (quoted when it is no
// identifier).
func member(tools []Tool, t Tool) (key string, aliased bool) {
	if a := Alias(t.Name); a != "" {
		if n, _ := ToolName(tools, a); n == t.Name {
			return a, true
		}
	}
	if isIdent(t.Name) {
		return t.Name, false
	}
	return quote(t.Name), false
}

// DeclLine is one tool's declaration:
// `name(args: {a: number; b?: string}): any; // description`.
func DeclLine(tools []Tool, t Tool) string {
	key, aliased := member(tools, t)
	var b strings.Builder
	b.WriteString(key)
	b.WriteString("(")
	b.WriteString(argsParam(t))
	b.WriteString("): any;")
	var notes []string
	if aliased {
		notes = append(notes, quote(t.Name)+":")
	}
	if d := oneLine(t.Description); d != "" {
		notes = append(notes, d)
	}
	if t.ReadOnly {
		notes = append(notes, "(read-only)")
	}
	if t.SchemaCut {
		notes = append(notes, fmt.Sprintf("(input schema of %d bytes cut)", t.SchemaBytes))
	}
	if len(notes) > 0 {
		b.WriteString(" // ")
		b.WriteString(strings.Join(notes, " "))
	}
	return b.String()
}

// Declaration is what the prompt shows for server's tools (already
// filtered by Allowed): a require declaration with one line per tool, or
// past CatalogAfter tools one catalog line naming them, whose declarations
// Help renders. notes (ToolList.Notes) are appended as comments.
func Declaration(server string, tools []Tool, notes ...string) string {
	if len(tools) <= CatalogAfter {
		return Help(server, tools, notes...)
	}
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i], _ = member(tools, t)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "declare function require(m: 'mcp:%s'): Record<string, (args?: object) => any>; // %d tools: %s; help('mcp:%s') logs their declarations",
		server, len(tools), strings.Join(names, ", "), server)
	for _, n := range notes {
		b.WriteString("\n// ")
		b.WriteString(oneLine(n))
	}
	return b.String()
}

// Help renders every tool of server in full: the text help('mcp:<server>')
// logs, and the declaration of a server with few tools.
func Help(server string, tools []Tool, notes ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "declare function require(m: 'mcp:%s'): {", server)
	if len(tools) == 0 {
		b.WriteString("}; // no tools")
	}
	for _, t := range tools {
		b.WriteString("\n  ")
		b.WriteString(DeclLine(tools, t))
	}
	if len(tools) > 0 {
		b.WriteString("\n};")
	}
	for _, n := range notes {
		b.WriteString("\n// ")
		b.WriteString(oneLine(n))
	}
	return b.String()
}

// argsParam is the parameter of a tool's declaration, optional when the
// schema requires nothing.
func argsParam(t Tool) string {
	if t.SchemaCut || t.InputSchema == nil {
		return "args?: any"
	}
	var s map[string]any
	if json.Unmarshal(t.InputSchema, &s) != nil {
		return "args?: any"
	}
	typ := tsType(s, 0)
	if req, _ := s["required"].([]any); len(req) > 0 {
		return "args: " + typ
	}
	return "args?: " + typ
}

// tsType renders a JSON schema as a TypeScript type: objects two levels
// deep (the arguments and their object properties), deeper ones as
// object; whatever it does not know as any.
func tsType(s map[string]any, depth int) string {
	if s == nil {
		return "any"
	}
	if c, ok := s["const"]; ok {
		return literal(c)
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 && len(e) <= unionMax {
		parts := make([]string, len(e))
		for i, v := range e {
			parts[i] = literal(v)
		}
		return strings.Join(parts, " | ")
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[k].([]any); ok && len(alts) > 0 && len(alts) <= unionMax {
			return union(alts, depth)
		}
	}
	switch t := s["type"].(type) {
	case string:
		return typeName(t, s, depth)
	case []any:
		var parts []string
		for _, x := range t {
			if n, ok := x.(string); ok {
				parts = append(parts, typeName(n, s, depth))
			}
		}
		if len(parts) > 0 {
			return strings.Join(dedupe(parts), " | ")
		}
	}
	if _, ok := s["properties"].(map[string]any); ok {
		return typeName("object", s, depth)
	}
	return "any"
}

func union(alts []any, depth int) string {
	var parts []string
	for _, a := range alts {
		m, _ := a.(map[string]any)
		parts = append(parts, tsType(m, depth))
	}
	parts = dedupe(parts)
	for _, p := range parts {
		if p == "any" {
			return "any"
		}
	}
	return strings.Join(parts, " | ")
}

func typeName(t string, s map[string]any, depth int) string {
	switch t {
	case "string":
		return "string"
	case "number", "integer":
		return "number"
	case "boolean":
		return "boolean"
	case "null":
		return "null"
	case "array":
		items, _ := s["items"].(map[string]any)
		it := tsType(items, depth+1)
		if strings.ContainsAny(it, " |") {
			it = "(" + it + ")"
		}
		return it + "[]"
	case "object":
		return objectType(s, depth)
	}
	return "any"
}

func objectType(s map[string]any, depth int) string {
	props, _ := s["properties"].(map[string]any)
	if depth >= 2 {
		return "object"
	}
	if len(props) == 0 {
		if depth == 0 {
			return "{}"
		}
		return "object"
	}
	required := map[string]bool{}
	if req, ok := s["required"].([]any); ok {
		for _, r := range req {
			if n, ok := r.(string); ok {
				required[n] = true
			}
		}
	}
	// Required first, each group by name: schema key order is not kept
	// through JSON decoding, and this reads well and is stable.
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if required[names[i]] != required[names[j]] {
			return required[names[i]]
		}
		return names[i] < names[j]
	})
	var b strings.Builder
	b.WriteString("{")
	for i, n := range names {
		if b.Len() > typeBytes {
			fmt.Fprintf(&b, "; /* %d more */ [k: string]: any", len(names)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		if isIdent(n) {
			b.WriteString(n)
		} else {
			b.WriteString(quote(n))
		}
		if !required[n] {
			b.WriteString("?")
		}
		b.WriteString(": ")
		p, _ := props[n].(map[string]any)
		b.WriteString(tsType(p, depth+1))
	}
	b.WriteString("}")
	return b.String()
}

func literal(v any) string {
	switch v.(type) {
	case string, float64, bool, nil:
		b, _ := json.Marshal(v)
		return string(b)
	}
	return "any"
}

func dedupe(parts []string) []string {
	seen := map[string]bool{}
	out := parts[:0:0]
	for _, p := range parts {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// oneLine is a description's first line, spaces collapsed, cut to
// descriptionRunes.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > descriptionRunes {
		r := []rune(s)
		s = strings.TrimSpace(string(r[:descriptionRunes-1])) + "…"
	}
	return s
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func isIdentRune(r rune, notFirst bool) bool {
	return r == '_' || r == '$' || unicode.IsLetter(r) || (notFirst && unicode.IsDigit(r))
}

func isIdent(s string) bool {
	if s == "" || reserved[s] {
		return false
	}
	for i, r := range s {
		if !isIdentRune(r, i > 0) {
			return false
		}
	}
	return true
}

// reserved words cannot be a declared method's bare name in the prompt's
// TypeScript without confusing a reader; they are quoted instead.
var reserved = map[string]bool{
	"break": true, "case": true, "catch": true, "class": true, "const": true, "continue": true,
	"debugger": true, "default": true, "delete": true, "do": true, "else": true, "export": true,
	"extends": true, "finally": true, "for": true, "function": true, "if": true, "import": true,
	"in": true, "instanceof": true, "new": true, "return": true, "super": true, "switch": true,
	"this": true, "throw": true, "try": true, "typeof": true, "var": true, "void": true,
	"while": true, "with": true, "yield": true, "let": true, "static": true, "enum": true,
	"await": true, "null": true, "true": true, "false": true,
}

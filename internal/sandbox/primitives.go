package sandbox

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// prim identifies a primitive. The order is the order of the declarations.
type prim uint8

const (
	primLog prim = iota
	primConsole
	primAnswer
	primAssert
	primHelp
	primParseURL
	primFetch
	primHTTP
	primMarkdown
	primHTMLToMarkdown
	primAI
	primAIJSON
	primSpawn
	primWait
	primRequire
	primSecret
	primAPI
	primMCP
	primSkillList
	primSkillGet
	numPrims
)

// primSet is a set of primitives as a bit mask: it travels in the exec
// frame as one uvarint.
type primSet uint64

func (s primSet) has(p prim) bool { return s&(1<<p) != 0 }

// coreSet are the primitives of the turn protocol itself: without log and
// answer a script cannot report anything, so they are always defined.
const coreSet = primSet(1<<primLog | 1<<primConsole | 1<<primAnswer | 1<<primAssert | 1<<primHelp)

// primInfo describes one primitive: its name in ExecRequest.Primitives,
// whether it runs in the parent (host) and its TypeScript declaration.
type primInfo struct {
	name string
	host bool
	decl string
}

// The declarations are shown to the model in every system prompt, so they
// are terse: one line per primitive, shared types declared once.
var prims = [numPrims]primInfo{
	primLog:      {name: "log", decl: "declare function log(...a: any[]): void; // shown to you next turn; objects as JSON"},
	primConsole:  {name: "console", decl: "declare const console: Record<'log' | 'info' | 'warn' | 'error', typeof log>; // warn/error lines are tagged"},
	primAnswer:   {name: "answer", decl: "declare function answer(result: any): never; // final answer; ends the run"},
	primAssert:   {name: "assert", decl: "declare function assert(cond: any, msg?: string): void; // throws if falsy"},
	primHelp:     {name: "help", decl: "declare function help(): void; // logs these declarations"},
	primParseURL: {name: "parseUrl", decl: "declare function parseUrl(url: string): Record<'protocol' | 'host' | 'hostname' | 'port' | 'pathname' | 'search' | 'hash', string> & {query: Record<string, string>};"},
	primFetch:    {name: "fetch", host: true, decl: "declare function fetch(url: string, opts?: Opts): Res; // synchronous; public http(s) only"},
	primHTTP:     {name: "http", host: true, decl: "declare function require(m: 'http'): {get(url: string, o?: Opts): Res; post(url: string, body?: any, o?: Opts): Res; put(url: string, body?: any, o?: Opts): Res; del(url: string, o?: Opts): Res};"},
	primMarkdown: {name: "markdown", decl: "declare function require(m: 'markdown'): {headings(md: string): {level: number; text: string}[]; links(md: string): {text: string; url: string}[];\n" +
		"  sections(md: string): {heading: string; level: number; body: string}[]; text(md: string): string};"},
	primHTMLToMarkdown: {name: "htmlToMarkdown", decl: "declare function htmlToMarkdown(html: string): string;"},
	primAI:             {name: "ai", host: true, decl: "declare function ai(prompt: string): string; // model sub-call; costs tokens"},
	primAIJSON:         {name: "aiJSON", host: true, decl: "declare function aiJSON(prompt: string, schema?: object): any; // model sub-call returning parsed JSON"},
	primSpawn:          {name: "spawn", host: true, decl: "declare function spawn(o: {message: string; agent?: string; context?: any; metadata?: Record<string, string>; max_turns?: number; max_tokens?: number}): string; // starts a child run now, returns its id"},
	primWait:           {name: "wait", host: true, decl: "declare function wait(ids: string[], o?: {timeout?: number}): void; // once this turn returns, sleep until those children end (timeout: ms); next turn's args.children: {id, status, answer?, error?, truncated?}[]"},
	// require is not a primitive of its own: it exists when a module
	// (http, markdown) is enabled. Listing it is accepted and ignored.
	primRequire: {name: "require"},
	// secret is not listed in an agent's primitives: it is enabled
	// when the agent names secrets (ExecRequest.Credentials), declared
	// when one of them is exposed.
	primSecret: {name: "secret", host: true, decl: "declare function secret(name: string): string; // the value of a secret your agent names that is exposed to scripts"},
	// api is the host call of require('api:<name>') operations: not
	// listed in primitives, enabled when the agent names OpenAPI
	// documents (ExecRequest.OpenAPI), declared per module (openapi.go).
	primAPI: {name: "api", host: true},
	// mcp is the host call of require('mcp:<name>') tools: enabled when
	// the agent names MCP servers (ExecRequest.MCP), declared per
	// server (mcprun.go).
	primMCP: {name: "mcp", host: true},
	// skillList and skillGet read the tenant's skills the run's agent
	// sees: not listed in primitives, enabled when the run has skills
	// (ExecRequest.Skills), declared by the prompt's skills catalog.
	primSkillList: {name: "skillList", host: true, decl: SkillListDecl},
	primSkillGet:  {name: "skillGet", host: true, decl: SkillGetDecl},
}

// defaultSet is what ExecRequest.Primitives nil enables: every listable
// primitive.
const defaultSet = primSet(1<<numPrims-1) &^ (1 << primSecret) &^ (1 << primAPI) &^ (1 << primMCP) &^ skillSet

// resTypesDecl declares the types fetch and http share, once.
const resTypesDecl = "type Res = {status: number; headers: Record<string, string>; body: string; url: string; truncated?: true; json(): any};\n" +
	"type Opts = {method?: string; headers?: Record<string, string>; body?: string | object}; // object body is sent as JSON"

var primByName = func() map[string]prim {
	m := make(map[string]prim, numPrims)
	for i, p := range prims {
		if prim(i) != primSecret && prim(i) != primAPI && prim(i) != primMCP && !skillSet.has(prim(i)) {
			m[p.name] = prim(i)
		}
	}
	return m
}()

// DefaultPrimitives is the set enabled when ExecRequest.Primitives is nil.
func DefaultPrimitives() []string {
	out := make([]string, 0, numPrims)
	for i, p := range prims {
		if prim(i) != primRequire && prim(i) != primSecret && prim(i) != primAPI && prim(i) != primMCP && !skillSet.has(prim(i)) {
			out = append(out, p.name)
		}
	}
	return out
}

// CheckPrimitives reports the names that are not primitives of this
// sandbox, so an agent profile can be validated when it is saved rather
// than on its first turn.
func CheckPrimitives(names []string) error {
	_, err := primSetOf(names)
	return err
}

func primSetOf(names []string) (primSet, error) {
	if names == nil {
		return defaultSet, nil
	}
	s := coreSet
	var unknown []string
	for _, n := range names {
		p, ok := primByName[n]
		if !ok {
			unknown = append(unknown, n)
			continue
		}
		s |= 1 << p
	}
	if len(unknown) > 0 {
		return 0, fmt.Errorf("sandbox: unknown primitive(s) %s; known primitives: %s",
			strings.Join(unknown, ", "), strings.Join(DefaultPrimitives(), ", "))
	}
	return s, nil
}

// modules lists the require() modules enabled in s, in a stable order.
func (s primSet) modules() []string {
	var m []string
	if s.has(primHTTP) {
		m = append(m, "http")
	}
	if s.has(primMarkdown) {
		m = append(m, "markdown")
	}
	if s.has(primAPI) {
		m = append(m, "api:<name> (this agent's OpenAPI modules)")
	}
	if s.has(primMCP) {
		m = append(m, "mcp:<name> (this agent's MCP servers)")
	}
	return m
}

// declarations renders the TypeScript declarations of the primitives in s
// followed by one line stating the limits, which the model needs to plan
// (how much to return, how long a loop may run).
func declarations(s primSet, l Limits) string {
	var b strings.Builder
	b.WriteString("// Sandbox API: synchronous JavaScript, no await. Define function run(args); its return value is args next turn.\n")
	for i := range prims {
		p := prim(i)
		if !s.has(p) || prims[p].decl == "" {
			continue
		}
		if p == primFetch || (p == primHTTP && !s.has(primFetch)) {
			// The result and option types fetch and http share.
			b.WriteString(resTypesDecl)
			b.WriteByte('\n')
		}
		b.WriteString(prims[p].decl)
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "// Limits per turn: %s CPU, %s memory, return value %s as JSON, log %s (middle cut).\n",
		shortDuration(l.CPUTime), formatBytes(l.MemoryBytes), formatBytes(int64(l.CarryBytes)), formatBytes(int64(l.LogBytes)))
	return b.String()
}

func shortDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", int64(d/time.Second))
	}
	return d.String()
}

// formatBytes renders n compactly in binary units ("256 MiB", "16 KiB").
func formatBytes(n int64) string {
	units := []string{"bytes", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	v := float64(n)
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d bytes", n)
	}
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %s", int64(v), units[i])
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// primNames lists the names in s (for messages).
func (s primSet) names() []string {
	var out []string
	for i, p := range prims {
		if s.has(prim(i)) && prim(i) != primRequire {
			out = append(out, p.name)
		}
	}
	slices.Sort(out)
	return out
}

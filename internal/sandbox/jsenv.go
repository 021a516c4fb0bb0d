package sandbox

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/dop251/goja"
)

// jsEnv is one prepared runtime: a fresh goja.Runtime with every primitive
// installed, built by the child between turns. A turn takes it, deletes
// the primitives its agent does not have, runs, and discards it: nothing a
// script does outlives its turn.
type jsEnv struct {
	vm *goja.Runtime
	t  *turnState
	// Captured before any script runs, so a script that replaces JSON or
	// Error hurts only its own output.
	stringify goja.Callable
	parse     goja.Callable
	errorCtor *goja.Object
	jsonFn    goja.Value // the json() method of fetch/http results
}

// maxCallStack bounds JavaScript recursion: a runaway recursion fails
// with a RangeError instead of growing the goja stack toward the memory
// bound.
const maxCallStack = 10000

// maxHostArgs bounds the arguments of one host call (a fetch body, an ai
// prompt) sent to the parent.
const maxHostArgs = 8 << 20

func (s *childServer) newEnv() *jsEnv {
	vm := goja.New()
	vm.SetMaxCallStackSize(maxCallStack)
	e := &jsEnv{vm: vm}
	t := &turnState{s: s, env: e}
	e.t = t
	j := vm.Get("JSON").(*goja.Object)
	e.stringify, _ = goja.AssertFunction(j.Get("stringify"))
	e.parse, _ = goja.AssertFunction(j.Get("parse"))
	e.errorCtor = vm.Get("Error").(*goja.Object)
	e.jsonFn = vm.ToValue(t.jsonMethod)

	g := vm.GlobalObject()
	set := func(name string, fn func(goja.FunctionCall) goja.Value) {
		_ = g.Set(name, fn)
	}
	set("log", t.logFn(""))
	console := vm.NewObject()
	_ = console.Set("log", t.logFn(""))
	_ = console.Set("info", t.logFn(""))
	_ = console.Set("warn", t.logFn("[warn] "))
	_ = console.Set("error", t.logFn("[error] "))
	_ = g.Set("console", console)
	set("answer", t.answerFn)
	set("assert", t.assertFn)
	set("help", t.helpFn)
	set("parseUrl", t.parseURLFn)
	set("fetch", t.fetchFn)
	set("htmlToMarkdown", t.htmlToMarkdownFn)
	set("ai", t.aiFn)
	set("aiJSON", t.aiJSONFn)
	set("spawn", t.spawnFn)
	set("wait", t.waitFn)
	set("require", t.requireFn)
	if childTestGlobals != nil {
		childTestGlobals(vm)
	}
	return e
}

// restrict deletes the primitives not in set from the global object.
func (e *jsEnv) restrict(set primSet) {
	g := e.vm.GlobalObject()
	for i := range prims {
		p := prim(i)
		if set.has(p) {
			continue
		}
		switch p {
		case primHTTP, primMarkdown, primRequire:
			continue // modules, handled by require below
		case primSecret, primSkillList, primSkillGet:
			continue // defined only when enabled, below
		}
		_ = g.Delete(prims[p].name)
	}
	if set.has(primSecret) {
		// Only for agents that name secrets: defining it costs every
		// fresh runtime allocations.
		_ = g.Set("secret", e.t.secretFn)
	}
	if set.has(primSkillList) {
		_ = g.Set("skillList", e.t.skillListFn)
		_ = g.Set("skillGet", e.t.skillGetFn)
	}
	if len(set.modules()) == 0 && len(e.t.apis) == 0 && len(e.t.mcps) == 0 {
		_ = g.Delete("require")
	}
}

// turnState is what the primitives of one runtime work on.
type turnState struct {
	s       *childServer
	env     *jsEnv
	ctl     *turnCtl
	prims   primSet
	modules map[string]*goja.Object
	// apis are the turn's OpenAPI modules by name (require('api:<name>')).
	apis map[string]childModule
	// mcps are the turn's MCP servers by name (require('mcp:<name>')).
	mcps map[string]childModule
	// denials are the PolicyError objects thrown this turn: an uncaught
	// one makes the turn fail with kind denied.
	denials map[*goja.Object]bool

	answered bool
	answer   []byte
	limitMsg string // why answer() was refused (stopLimit)

	cpu *cpuBudget
}

// throw raises a JS Error with the given name (empty: plain Error).
func (t *turnState) throw(name, msg string) {
	panic(t.newError(name, msg))
}

func (t *turnState) newError(name, msg string) *goja.Object {
	obj, err := t.env.vm.New(t.env.errorCtor, t.env.vm.ToValue(msg))
	if err != nil {
		// Constructing Error cannot fail; if it somehow does, a TypeError
		// still carries the message.
		panic(t.env.vm.NewTypeError(msg))
	}
	if name != "" {
		_ = obj.Set("name", name)
	}
	return obj
}

// rethrow propagates an error from a call into JavaScript: interrupts
// must keep unwinding, exceptions are thrown on.
func rethrow(err error) {
	if ex, ok := err.(*goja.Exception); ok {
		panic(ex.Value())
	}
	panic(err)
}

// ---- log / console ----

func (t *turnState) logFn(prefix string) func(goja.FunctionCall) goja.Value {
	return func(c goja.FunctionCall) goja.Value {
		// Straight into the capped buffer: a 64 MiB string logged is
		// not copied on the way.
		logs := &t.s.logs
		logs.WriteString(prefix)
		for i, a := range c.Arguments {
			if i > 0 {
				logs.WriteString(" ")
			}
			logs.WriteString(t.format(a))
		}
		logs.WriteString("\n")
		return goja.Undefined()
	}
}

// format renders v as log output: strings verbatim, objects as JSON,
// errors as "Name: message".
func (t *turnState) format(v goja.Value) string {
	obj, ok := v.(*goja.Object)
	if !ok {
		if v == nil || goja.IsUndefined(v) {
			return "undefined"
		}
		return v.String()
	}
	if _, isFn := goja.AssertFunction(obj); isFn {
		return "[Function]"
	}
	if obj.ClassName() == "Error" {
		return t.errorString(obj)
	}
	s, err := t.env.stringify(goja.Undefined(), obj)
	if err != nil {
		if _, interrupted := err.(*goja.InterruptedError); interrupted {
			rethrow(err)
		}
		return "[unserializable object: " + firstLine(errMessage(err)) + "]"
	}
	if goja.IsUndefined(s) {
		return "undefined"
	}
	return s.String()
}

// ---- answer / assert / help ----

func (t *turnState) answerFn(c goja.FunctionCall) goja.Value {
	doc, err := t.toJSON(c.Argument(0))
	if err != nil {
		rethrow(err)
	}
	if len(doc) > t.s.spec.carry {
		t.limitMsg = fmt.Sprintf("answer() got %s of JSON; the limit is %s. Answer with less: a summary, the top items, or the fields that matter",
			formatBytes(int64(len(doc))), formatBytes(int64(t.s.spec.carry)))
		t.ctl.stop(stopLimit)
		return goja.Undefined()
	}
	if jsonDeeperThan(doc, maxJSONDepth) {
		t.limitMsg = fmt.Sprintf("answer() got a value nested more than %d levels deep; answer with something flatter", maxJSONDepth)
		t.ctl.stop(stopLimit)
		return goja.Undefined()
	}
	t.answered = true
	t.answer = doc
	// Stop the script here, uncatchably: code after answer() must not
	// run, not even a finally block.
	t.env.vm.Interrupt(stopAnswered)
	t.ctl.stop(stopAnswered)
	return goja.Undefined()
}

func (t *turnState) assertFn(c goja.FunctionCall) goja.Value {
	if c.Argument(0).ToBoolean() {
		return goja.Undefined()
	}
	msg := "Assertion failed"
	if m := c.Argument(1); !goja.IsUndefined(m) {
		msg += ": " + m.String()
	}
	t.throw("AssertionError", msg)
	return nil
}

func (t *turnState) helpFn(c goja.FunctionCall) goja.Value {
	if name, ok := strings.CutPrefix(c.Argument(0).String(), "mcp:"); ok {
		m, ok := t.mcps[name]
		if !ok {
			t.throw("Error", fmt.Sprintf("help: this agent has no module %q", "mcp:"+name))
		}
		t.s.logs.WriteString(m.help + "\n")
		return goja.Undefined()
	}
	if name, ok := strings.CutPrefix(c.Argument(0).String(), "api:"); ok {
		m, ok := t.apis[name]
		if !ok {
			t.throw("Error", fmt.Sprintf("help: this agent has no module %q", "api:"+name))
		}
		t.s.logs.WriteString(m.help + "\n")
		return goja.Undefined()
	}
	t.s.logs.WriteString(declarations(t.prims, t.s.limits))
	for _, name := range slices.Sorted(maps.Keys(t.apis)) {
		t.s.logs.WriteString(fmt.Sprintf("// require('api:%s'): %d operations; help('api:%s') logs their declarations\n", name, len(t.apis[name].ops), name))
	}
	return goja.Undefined()
}

// ---- parseUrl / htmlToMarkdown / markdown ----

func (t *turnState) parseURLFn(c goja.FunctionCall) goja.Value {
	raw := c.Argument(0).String()
	u, err := url.Parse(raw)
	if err != nil {
		t.throw("TypeError", fmt.Sprintf("parseUrl: invalid URL %q: %v", raw, unwrapURLError(err)))
	}
	vm := t.env.vm
	o := vm.NewObject()
	protocol := ""
	if u.Scheme != "" {
		protocol = strings.ToLower(u.Scheme) + ":"
	}
	path := u.EscapedPath()
	if path == "" && u.Host != "" {
		path = "/"
	}
	search, hash := "", ""
	if u.RawQuery != "" {
		search = "?" + u.RawQuery
	}
	if f := u.EscapedFragment(); f != "" {
		hash = "#" + f
	}
	_ = o.Set("protocol", protocol)
	_ = o.Set("host", u.Host)
	_ = o.Set("hostname", u.Hostname())
	_ = o.Set("port", u.Port())
	_ = o.Set("pathname", path)
	_ = o.Set("search", search)
	_ = o.Set("hash", hash)
	q := vm.NewObject()
	for k, vs := range u.Query() {
		if len(vs) > 0 {
			_ = q.Set(k, vs[0])
		}
	}
	_ = o.Set("query", q)
	return o
}

func (t *turnState) htmlToMarkdownFn(c goja.FunctionCall) goja.Value {
	return t.env.vm.ToValue(htmlToMarkdown(c.Argument(0).String()))
}

func (t *turnState) requireFn(c goja.FunctionCall) goja.Value {
	name := c.Argument(0).String()
	if m, ok := t.modules[name]; ok {
		return m
	}
	var m *goja.Object
	switch {
	case name == "http" && t.prims.has(primHTTP):
		m = t.httpModule()
	case name == "markdown" && t.prims.has(primMarkdown):
		m = t.markdownModule()
	case strings.HasPrefix(name, "api:") && t.prims.has(primAPI):
		api, ok := t.apis[name[len("api:"):]]
		if !ok {
			t.throw("Error", fmt.Sprintf("require: unknown module %q; available modules: %s", name, strings.Join(t.moduleNames(), ", ")))
		}
		m = t.apiModule(name[len("api:"):], api)
	case strings.HasPrefix(name, "mcp:") && t.prims.has(primMCP):
		srv, ok := t.mcps[name[len("mcp:"):]]
		if !ok {
			t.throw("Error", fmt.Sprintf("require: unknown module %q; available modules: %s", name, strings.Join(t.moduleNames(), ", ")))
		}
		if len(srv.ops) == 0 && strings.Contains(srv.help, mcpUnlisted) {
			// Its tools could not be listed: say why, catchably.
			t.throw("Error", strings.TrimPrefix(srv.help, "// "))
		}
		m = t.mcpModule(name[len("mcp:"):], srv)
	default:
		t.throw("Error", fmt.Sprintf("require: unknown module %q; available modules: %s", name, strings.Join(t.moduleNames(), ", ")))
	}
	if t.modules == nil {
		t.modules = map[string]*goja.Object{}
	}
	t.modules[name] = m
	return m
}

func (t *turnState) markdownModule() *goja.Object {
	vm := t.env.vm
	m := vm.NewObject()
	_ = m.Set("headings", func(c goja.FunctionCall) goja.Value { return t.fromGo(mdHeadings(c.Argument(0).String())) })
	_ = m.Set("links", func(c goja.FunctionCall) goja.Value { return t.fromGo(mdLinks(c.Argument(0).String())) })
	_ = m.Set("sections", func(c goja.FunctionCall) goja.Value { return t.fromGo(mdSections(c.Argument(0).String())) })
	_ = m.Set("text", func(c goja.FunctionCall) goja.Value { return vm.ToValue(mdText(c.Argument(0).String())) })
	return m
}

// fromGo turns a Go value into a plain JS value (native arrays and
// objects, not Go wrappers) through JSON.
func (t *turnState) fromGo(v any) goja.Value {
	b, err := json.Marshal(v)
	if err != nil {
		t.throw("Error", "internal: "+err.Error())
	}
	return t.parseJSON(b)
}

// parseJSON turns JSON from the Go side into JavaScript values.
func (t *turnState) parseJSON(b []byte) goja.Value {
	v, err := parseJS(t.env.vm, string(b))
	if err != nil {
		t.throw("SyntaxError", "invalid JSON: "+err.Error())
	}
	return v
}

// toJSON serializes v with JSON.stringify; undefined (and functions)
// become null.
//
// A writer walking goja values in Go instead (Keys, Get, toJSON, goja's
// number formatting, delegating exotic objects to JSON.stringify) was
// measured: about 15% less time than JSON.stringify for 200 small
// objects (goja's Keys costs about as much as stringify's whole walk),
// and no difference measurable on a whole turn. So JSON.stringify it is.
func (t *turnState) toJSON(v goja.Value) ([]byte, error) {
	s, err := t.env.stringify(goja.Undefined(), v)
	if err != nil {
		return nil, err
	}
	if s == nil || goja.IsUndefined(s) {
		return []byte("null"), nil
	}
	return []byte(s.String()), nil
}

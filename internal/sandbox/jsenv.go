package sandbox

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
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
		}
		_ = g.Delete(prims[p].name)
	}
	if len(set.modules()) == 0 {
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

func (t *turnState) helpFn(goja.FunctionCall) goja.Value {
	t.s.logs.WriteString(declarations(t.prims, t.s.limits))
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
	default:
		t.throw("Error", fmt.Sprintf("require: unknown module %q; available modules: %s", name, strings.Join(t.prims.modules(), ", ")))
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

// ---- host primitives: fetch, http, ai, aiJSON ----

// fetchArgs is the host-call argument of fetch and http, and the Args a
// Policy sees (without the body).
type fetchArgs struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    *string           `json:"body,omitempty"`
	// JSON is set when the body was an object serialized by the
	// sandbox: the parent then defaults the Content-Type.
	JSON bool `json:"json,omitempty"`
}

// fetchResult is the host-call reply of fetch and http.
type fetchResult struct {
	Status    int               `json:"status"`
	Headers   map[string]string `json:"headers"`
	Body      string            `json:"body"`
	URL       string            `json:"url"`
	Truncated bool              `json:"truncated,omitempty"`
}

func (t *turnState) fetchFn(c goja.FunctionCall) goja.Value {
	a := fetchArgs{Method: "GET", URL: c.Argument(0).String()}
	t.readOpts(&a, c.Argument(1), "fetch")
	return t.request(primFetch, &a)
}

func (t *turnState) httpModule() *goja.Object {
	m := t.env.vm.NewObject()
	call := func(method string, hasBody bool) func(goja.FunctionCall) goja.Value {
		return func(c goja.FunctionCall) goja.Value {
			a := fetchArgs{Method: method, URL: c.Argument(0).String()}
			opts := c.Argument(1)
			if hasBody {
				opts = c.Argument(2)
			}
			t.readOpts(&a, opts, "http."+strings.ToLower(method))
			if hasBody {
				t.setBody(&a, c.Argument(1))
			}
			return t.request(primHTTP, &a)
		}
	}
	_ = m.Set("get", call("GET", false))
	_ = m.Set("post", call("POST", true))
	_ = m.Set("put", call("PUT", true))
	_ = m.Set("del", call("DELETE", false))
	return m
}

func (t *turnState) readOpts(a *fetchArgs, opts goja.Value, fn string) {
	if opts == nil || goja.IsUndefined(opts) || goja.IsNull(opts) {
		return
	}
	o, ok := opts.(*goja.Object)
	if !ok {
		t.throw("TypeError", fn+": options must be an object like {method, headers, body}")
	}
	if m := o.Get("method"); m != nil && !goja.IsUndefined(m) {
		a.Method = strings.ToUpper(m.String())
	}
	if h := o.Get("headers"); h != nil && !goja.IsUndefined(h) && !goja.IsNull(h) {
		ho, ok := h.(*goja.Object)
		if !ok {
			t.throw("TypeError", fn+": headers must be an object of strings")
		}
		a.Headers = map[string]string{}
		for _, k := range ho.Keys() {
			a.Headers[k] = ho.Get(k).String()
		}
	}
	t.setBody(a, o.Get("body"))
}

func (t *turnState) setBody(a *fetchArgs, body goja.Value) {
	if body == nil || goja.IsUndefined(body) || goja.IsNull(body) {
		return
	}
	var s string
	if _, ok := body.(*goja.Object); ok {
		doc, err := t.toJSON(body)
		if err != nil {
			rethrow(err)
		}
		s, a.JSON = string(doc), true
	} else {
		s = body.String()
	}
	a.Body = &s
}

func (t *turnState) request(p prim, a *fetchArgs) goja.Value {
	args, err := json.Marshal(a)
	if err != nil {
		t.throw("Error", prims[p].name+": "+err.Error())
	}
	data := t.host(p, args)
	var r fetchResult
	if err := json.Unmarshal(data, &r); err != nil {
		t.throw("Error", prims[p].name+": bad reply from host: "+err.Error())
	}
	vm := t.env.vm
	o := vm.NewObject()
	_ = o.Set("status", r.Status)
	h := vm.NewObject()
	for k, v := range r.Headers {
		_ = h.Set(k, v)
	}
	_ = o.Set("headers", h)
	_ = o.Set("body", r.Body)
	_ = o.Set("url", r.URL)
	if r.Truncated {
		_ = o.Set("truncated", true)
	}
	_ = o.DefineDataProperty("json", t.env.jsonFn, goja.FLAG_FALSE, goja.FLAG_TRUE, goja.FLAG_FALSE)
	return o
}

// jsonMethod is the json() of a fetch/http result: JSON.parse(this.body),
// with a message that says what went wrong.
func (t *turnState) jsonMethod(c goja.FunctionCall) goja.Value {
	o, ok := c.This.(*goja.Object)
	if !ok {
		t.throw("TypeError", "json() must be called on a fetch result")
	}
	if tr := o.Get("truncated"); tr != nil && tr.ToBoolean() {
		t.throw("SyntaxError", "json(): the body was truncated at the fetch size limit and cannot be parsed; fetch a smaller resource")
	}
	body := o.Get("body")
	if s, ok := body.(goja.String); ok && reflect.TypeOf(s) != utf16StringType {
		// The body as fetched (a string from Go, which has no lone
		// surrogates for String to lose): the fast parser.
		v, err := parseJS(t.env.vm, s.String())
		if err != nil {
			t.throw("SyntaxError", "json(): the body is not valid JSON: "+err.Error())
		}
		return v
	}
	v, err := t.env.parse(goja.Undefined(), body)
	if err != nil {
		if ex, ok := err.(*goja.Exception); ok {
			t.throw("SyntaxError", "json(): the body is not valid JSON: "+errMessage(ex))
		}
		rethrow(err)
	}
	return v
}

type aiArgs struct {
	Prompt string          `json:"prompt"`
	Schema json.RawMessage `json:"schema,omitempty"`
}

func (t *turnState) aiFn(c goja.FunctionCall) goja.Value {
	args, _ := json.Marshal(aiArgs{Prompt: c.Argument(0).String()})
	var s string
	if err := json.Unmarshal(t.host(primAI, args), &s); err != nil {
		t.throw("Error", "ai: bad reply from host: "+err.Error())
	}
	return t.env.vm.ToValue(s)
}

func (t *turnState) aiJSONFn(c goja.FunctionCall) goja.Value {
	a := aiArgs{Prompt: c.Argument(0).String()}
	if sc := c.Argument(1); !goja.IsUndefined(sc) && !goja.IsNull(sc) {
		doc, err := t.toJSON(sc)
		if err != nil {
			rethrow(err)
		}
		a.Schema = doc
	}
	args, _ := json.Marshal(a)
	return t.parseJSON(t.host(primAIJSON, args))
}

func (t *turnState) spawnFn(c goja.FunctionCall) goja.Value {
	args, err := t.toJSON(c.Argument(0))
	if err != nil {
		rethrow(err)
	}
	var id string
	if err := json.Unmarshal(t.host(primSpawn, args), &id); err != nil {
		t.throw("Error", "spawn: bad reply from host: "+err.Error())
	}
	return t.env.vm.ToValue(id)
}

// waitArgs is wait()'s call to the host: the ids, and the timeout in
// milliseconds (0: none).
type waitArgs struct {
	IDs       []string `json:"ids"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
}

func (t *turnState) waitFn(c goja.FunctionCall) goja.Value {
	idsDoc, err := t.toJSON(c.Argument(0))
	if err != nil {
		rethrow(err)
	}
	var a waitArgs
	if err := json.Unmarshal(idsDoc, &a.IDs); err != nil || len(a.IDs) == 0 {
		t.throw("TypeError", "wait: the first argument must be a non-empty array of run ids (what spawn() returned)")
	}
	if o := c.Argument(1); !goja.IsUndefined(o) && !goja.IsNull(o) {
		if obj := o.ToObject(t.env.vm); obj != nil {
			if tv := obj.Get("timeout"); tv != nil && !goja.IsUndefined(tv) {
				a.TimeoutMS = tv.ToInteger()
				if a.TimeoutMS <= 0 {
					t.throw("RangeError", "wait: timeout must be a positive number of milliseconds")
				}
			}
		}
	}
	args, _ := json.Marshal(a)
	t.host(primWait, args)
	return goja.Undefined()
}

// host runs primitive p in the parent and returns its JSON result, or
// throws its error. The CPU clock stops meanwhile: waiting on the network
// or a model is not the script's computation.
func (t *turnState) host(p prim, args []byte) []byte {
	if len(args) > maxHostArgs {
		t.throw("Error", fmt.Sprintf("%s: arguments of %s exceed the limit of %s", prims[p].name, formatBytes(int64(len(args))), formatBytes(maxHostArgs)))
	}
	s := t.s
	e := &s.enc
	e.start(frameHostCall)
	e.uint(t.ctl.seq)
	e.byte(byte(p))
	e.bytes(args)
	t.cpu.pause()
	s.write(e.frame())
	status, data := s.readHostReply(t.ctl.seq)
	if t.ctl.reason.Load() == 0 {
		t.cpu.resume()
	}
	switch status {
	case hostOK:
		return data
	case hostPark:
		// The call waits for a person: stop here, uncatchably, as
		// answer() does; the turn runs again once it is decided.
		t.ctl.stop(stopParked)
		t.throw("Error", "the turn stops here to wait for an approval")
	case hostDenied:
		err := t.newError("PolicyError", string(data))
		if t.denials == nil {
			t.denials = map[*goja.Object]bool{}
		}
		t.denials[err] = true
		panic(err)
	default:
		t.throw("Error", string(data))
	}
	return nil
}

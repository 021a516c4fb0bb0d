// The host primitives on the child's side: fetch, http, ai, aiJSON, spawn
// and wait, each a host call that the parent runs (host.go) while the
// script's CPU clock stops.

package sandbox

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/dop251/goja"
)

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
	return t.response(prims[p].name, t.host(p, args))
}

// response is the Res of a fetch, http or api call's reply.
func (t *turnState) response(name string, data []byte) goja.Value {
	var r fetchResult
	if err := json.Unmarshal(data, &r); err != nil {
		t.throw("Error", name+": bad reply from host: "+err.Error())
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

// secretArgs is secret()'s call to the host.
type secretArgs struct {
	Name string `json:"name"`
}

func (t *turnState) secretFn(c goja.FunctionCall) goja.Value {
	args, _ := json.Marshal(secretArgs{Name: c.Argument(0).String()})
	var v string
	if err := json.Unmarshal(t.host(primSecret, args), &v); err != nil {
		t.throw("Error", "secret: bad reply from host: "+err.Error())
	}
	return t.env.vm.ToValue(v)
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

// moduleNames lists the modules require() gives this turn (for messages).
func (t *turnState) moduleNames() []string {
	var out []string
	for _, m := range t.prims.modules() {
		if !strings.HasPrefix(m, "api:") && !strings.HasPrefix(m, "mcp:") {
			out = append(out, m)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(t.apis)) {
		out = append(out, "api:"+n)
	}
	for _, n := range slices.Sorted(maps.Keys(t.mcps)) {
		out = append(out, "mcp:"+n)
	}
	return out
}

// apiModule is require('api:<name>'): one function per operation, each
// taking one object of parameters by name and returning Res, made by
// the parent from the module's document (openapi.go).
func (t *turnState) apiModule(name string, m childModule) *goja.Object {
	o := t.env.vm.NewObject()
	for _, op := range m.ops {
		_ = o.Set(op, func(c goja.FunctionCall) goja.Value {
			var params []byte
			if p := c.Argument(0); !goja.IsUndefined(p) && !goja.IsNull(p) {
				if _, ok := p.(*goja.Object); !ok {
					t.throw("TypeError", fmt.Sprintf("api:%s.%s: give one object of parameters by name ({id, body, ...})", name, op))
				}
				var err error
				if params, err = t.toJSON(p); err != nil {
					rethrow(err)
				}
			}
			args, _ := json.Marshal(apiCallArgs{Module: name, Operation: op, Params: params})
			return t.response("api:"+name+"."+op, t.host(primAPI, args))
		})
	}
	return o
}

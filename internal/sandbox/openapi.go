// OpenAPI modules: an agent's OpenAPI 3 documents (agentfleet.OpenAPIModule)
// compiled into the operations require('api:<name>') gives scripts. The
// parent compiles a document (once per content, cached) and builds each
// call's HTTP request from it, so a script names an operation and its
// parameters, never the base URL; the request then takes fetch's path
// (host.go): egress guard, policy, approvals, journal, credentials.

package sandbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"

	"github.com/agentfleet/agentfleet"
	"github.com/pb33f/libopenapi"
	"github.com/pb33f/libopenapi/datamodel"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	"github.com/pb33f/libopenapi/index"
)

// OpenAPISpecMaxBytes bounds an OpenAPI document.
const OpenAPISpecMaxBytes = 1 << 20

// openAPIInlineDeclMaxChars is the longest module declaration the prompt
// shows in full; a longer one is a catalog line and help('api:<name>').
const openAPIInlineDeclMaxChars = 400

var moduleNameRE = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)

// opNameMax bounds an operation's name: api:<module>.<operation> is what
// the journal and approvals record.
const opNameMax = 128

// apiModule is a compiled OpenAPI module.
type apiModule struct {
	name    string
	baseURL string
	ops     []apiOp
	byName  map[string]*apiOp
}

// apiOp is one operation of a module.
type apiOp struct {
	name    string // operationId, or method and path camelCased
	method  string
	path    string
	params  []apiParam
	body    bool // takes a request body
	bodyReq bool
	summary string
}

type apiParam struct {
	name, in, ts string
	required     bool
}

// apiCallArgs is require('api:<name>').<op>(params)'s host call.
type apiCallArgs struct {
	Module    string          `json:"module"`
	Operation string          `json:"operation"`
	Params    json.RawMessage `json:"params,omitempty"`
}

// CheckOpenAPIModules says what is wrong with an agent's openapi list as
// a tenant gives it (naming the entry's field), given the names of the
// agent's secrets, or returns nil. A spec_url's document is the caller's
// to fetch and check (CheckOpenAPIDocument).
func CheckOpenAPIModules(mods []agentfleet.OpenAPIModule, secrets []string) error {
	seen := map[string]bool{}
	for i, m := range mods {
		f := fmt.Sprintf("openapi[%d]", i)
		switch {
		case !moduleNameRE.MatchString(m.Name):
			return fmt.Errorf("%s.name %q: give 1 to 64 of a-z, 0-9 and _", f, m.Name)
		case seen[m.Name]:
			return fmt.Errorf("%s.name %q is listed twice", f, m.Name)
		case m.SpecURL != "" && len(m.Spec) > 0:
			return fmt.Errorf("%s: give spec or spec_url, not both", f)
		case m.SpecURL != "":
			if err := checkBaseURL(m.SpecURL); err != nil {
				return fmt.Errorf("%s.spec_url: %v", f, err)
			}
		case len(m.Spec) == 0 || string(m.Spec) == "null":
			return fmt.Errorf("%s.spec: give the OpenAPI 3 document (a JSON object, or a string of JSON or YAML)", f)
		case m.Secret != "" && !slices.Contains(secrets, m.Secret):
			return fmt.Errorf("%s.secret %q is not one of the agent's secrets: list it in secrets too", f, m.Secret)
		}
		seen[m.Name] = true
		if m.BaseURL != "" {
			if err := checkBaseURL(m.BaseURL); err != nil {
				return fmt.Errorf("%s.base_url: %v", f, err)
			}
		}
		if m.SpecURL != "" {
			continue
		}
		if _, err := compileModule(m); err != nil {
			return fmt.Errorf("%s.%v", f, err)
		}
	}
	return nil
}

// CheckOpenAPIDocument checks the document fetched from the i-th
// module's spec_url (m.Spec), naming the URL.
func CheckOpenAPIDocument(i int, m agentfleet.OpenAPIModule) error {
	if _, err := compileModule(m); err != nil {
		return fmt.Errorf("openapi[%d].spec_url: the document at %s: %v", i, m.SpecURL, strings.TrimPrefix(err.Error(), "spec: "))
	}
	return nil
}

func checkBaseURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", s)
	}
	if u.User != nil {
		return fmt.Errorf("%q has userinfo: put credentials in a secret", s)
	}
	return nil
}

var (
	moduleCache sync.Map // [32]byte (name, base_url, spec) -> *apiModule
	moduleCount atomic.Int64
)

// moduleCacheMax bounds the compiled modules a process keeps.
const moduleCacheMax = 256

// compileModule parses m's document; errors name the field ("spec: ...").
func compileModule(m agentfleet.OpenAPIModule) (mod *apiModule, err error) {
	key := sha256.Sum256([]byte(m.Name + "\x00" + m.BaseURL + "\x00" + string(m.Spec)))
	if c, ok := moduleCache.Load(key); ok {
		return c.(*apiModule), nil
	}
	defer func() {
		// The document is a tenant's: a parser bug it finds is its
		// error, not the API server's or the worker's crash.
		if r := recover(); r != nil {
			mod, err = nil, fmt.Errorf("spec: the OpenAPI parser failed on this document: %v", r)
		}
	}()
	doc, err := specBytes(m.Spec)
	if err != nil {
		return nil, fmt.Errorf("spec: %v", err)
	}
	cfg := datamodel.NewDocumentConfiguration()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := libopenapi.NewDocumentWithConfiguration(doc, cfg)
	if err != nil {
		return nil, fmt.Errorf("spec: %v", err)
	}
	if v := d.GetVersion(); !strings.HasPrefix(v, "3.") {
		return nil, fmt.Errorf("spec: OpenAPI %q is not served: give an OpenAPI 3 document", v)
	}
	model, err := d.BuildV3Model()
	if model == nil {
		return nil, fmt.Errorf("spec: %v", err)
	}
	if err := withoutCircular(err); err != nil {
		return nil, fmt.Errorf("spec: %v", err)
	}
	mod = &apiModule{name: m.Name, baseURL: m.BaseURL, byName: map[string]*apiOp{}}
	if mod.baseURL == "" {
		if len(model.Model.Servers) == 0 || model.Model.Servers[0].URL == "" {
			return nil, fmt.Errorf("base_url: the document names no server: give base_url")
		}
		mod.baseURL = model.Model.Servers[0].URL
		if err := checkBaseURL(mod.baseURL); err != nil {
			return nil, fmt.Errorf("spec: servers[0].url: %v (give base_url)", err)
		}
	}
	mod.baseURL = strings.TrimSuffix(mod.baseURL, "/")
	if model.Model.Paths != nil && model.Model.Paths.PathItems != nil {
		for path, item := range model.Model.Paths.PathItems.FromOldest() {
			for method, op := range item.GetOperations().FromOldest() {
				o := apiOp{method: strings.ToUpper(method), path: path, name: op.OperationId, summary: firstLine(cmpOr(op.Summary, op.Description))}
				if o.name == "" {
					o.name = camelOp(method, path)
				}
				if len(o.name) > opNameMax {
					return nil, fmt.Errorf("spec: paths.%s.%s: operation name %q is longer than %d characters", path, method, o.name[:32]+"…", opNameMax)
				}
				if _, dup := mod.byName[o.name]; dup {
					return nil, fmt.Errorf("spec: paths.%s.%s: operation %q is defined twice", path, method, o.name)
				}
				for _, p := range slices.Concat(item.Parameters, op.Parameters) {
					if p == nil || p.In == "cookie" {
						continue
					}
					o.params = slices.DeleteFunc(o.params, func(q apiParam) bool { return q.name == p.Name && q.in == p.In })
					o.params = append(o.params, apiParam{name: p.Name, in: p.In, required: p.In == "path" || (p.Required != nil && *p.Required), ts: tsType(p.Schema)})
				}
				for _, pm := range pathParamRE.FindAllStringSubmatch(path, -1) {
					// A template parameter the document forgot to
					// declare is still one the URL needs.
					if !slices.ContainsFunc(o.params, func(q apiParam) bool { return q.in == "path" && q.name == pm[1] }) {
						o.params = append(o.params, apiParam{name: pm[1], in: "path", required: true, ts: "string"})
					}
				}
				if rb := op.RequestBody; rb != nil {
					o.body, o.bodyReq = true, rb.Required != nil && *rb.Required
				}
				mod.ops = append(mod.ops, o)
				mod.byName[o.name] = &mod.ops[len(mod.ops)-1]
			}
		}
	}
	// byName points into ops: rebuild it now that ops no longer grows.
	for i := range mod.ops {
		mod.byName[mod.ops[i].name] = &mod.ops[i]
	}
	if len(mod.ops) == 0 {
		return nil, fmt.Errorf("spec: the document defines no operations")
	}
	if moduleCount.Add(1) > moduleCacheMax {
		// Documents change seldom: past the bound, start over.
		moduleCache.Clear()
		moduleCount.Store(1)
	}
	moduleCache.Store(key, mod)
	return mod, nil
}

var pathParamRE = regexp.MustCompile(`\{([^{}/]+)\}`)

// withoutCircular is err without the circular references libopenapi
// reports (a recursive schema is a valid document), or nil.
func withoutCircular(err error) error {
	if err == nil {
		return nil
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	var keep []error
	for _, e := range errs {
		var re *index.ResolvingError
		if errors.As(e, &re) && re.CircularReference != nil {
			continue
		}
		keep = append(keep, e)
	}
	return errors.Join(keep...)
}

// specBytes is the document of a spec given as a JSON object or as a
// string of JSON or YAML.
func specBytes(raw json.RawMessage) ([]byte, error) {
	if len(raw) > OpenAPISpecMaxBytes {
		return nil, fmt.Errorf("the document is %s, over the limit of 1 MiB", formatBytes(int64(len(raw))))
	}
	t := bytes.TrimSpace(raw)
	if len(t) > 0 && t[0] == '"' {
		var s string
		if err := json.Unmarshal(t, &s); err != nil {
			return nil, err
		}
		if len(s) > OpenAPISpecMaxBytes {
			return nil, fmt.Errorf("the document is %s, over the limit of 1 MiB", formatBytes(int64(len(s))))
		}
		return []byte(s), nil
	}
	if len(t) == 0 || t[0] != '{' {
		return nil, errors.New("give a JSON object, or a string of JSON or YAML")
	}
	return t, nil
}

// camelOp names an operation without an operationId: getInvoicesId for
// GET /invoices/{id}.
func camelOp(method, path string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	up := true
	for _, r := range path {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			up = true
			continue
		}
		if up {
			r = unicode.ToUpper(r)
			up = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

func tsType(sp *base.SchemaProxy) string {
	if sp == nil {
		return "any"
	}
	s := sp.Schema()
	if s == nil || len(s.Type) == 0 {
		return "any"
	}
	switch s.Type[0] {
	case "string":
		return "string"
	case "integer", "number":
		return "number"
	case "boolean":
		return "boolean"
	case "array":
		return "any[]"
	case "object":
		return "object"
	}
	return "any"
}

// jsIdent reports whether s can follow a dot in JavaScript.
func jsIdent(s string) bool {
	for i, r := range s {
		if !(r == '_' || r == '$' || unicode.IsLetter(r) || (i > 0 && unicode.IsDigit(r))) {
			return false
		}
	}
	return s != ""
}

// decl is the TypeScript type of one operation's function.
func (o *apiOp) decl() string {
	var b strings.Builder
	name := o.name
	if !jsIdent(name) {
		name = fmt.Sprintf("%q", name)
	}
	b.WriteString(name)
	b.WriteString("(p")
	opt := true
	for _, p := range o.params {
		opt = opt && !p.required
	}
	if o.bodyReq {
		opt = false
	}
	if opt {
		b.WriteString("?")
	}
	b.WriteString(": {")
	var fields []string
	for _, p := range o.params {
		n := p.name
		if !jsIdent(n) {
			n = fmt.Sprintf("%q", n)
		}
		q := "?"
		if p.required {
			q = ""
		}
		fields = append(fields, n+q+": "+p.ts)
	}
	if o.body {
		q := "?"
		if o.bodyReq {
			q = ""
		}
		fields = append(fields, "body"+q+": any")
	}
	b.WriteString(strings.Join(fields, "; "))
	b.WriteString("}): Res")
	return b.String()
}

// declaration is the module's whole declaration (help('api:<name>')).
func (m *apiModule) declaration() string {
	var fns []string
	for i := range m.ops {
		fns = append(fns, m.ops[i].decl())
	}
	return fmt.Sprintf("declare function require(m: 'api:%s'): {%s};", m.name, strings.Join(fns, "; "))
}

// promptLine is the module's line in the prompt: the declaration when
// short, else a catalog line.
func (m *apiModule) promptLine() string {
	if d := m.declaration(); len(d) <= openAPIInlineDeclMaxChars {
		return d
	}
	names := make([]string, 0, len(m.ops))
	for _, o := range m.ops {
		names = append(names, o.name)
	}
	cat := strings.Join(names, ", ")
	if len(cat) > openAPIInlineDeclMaxChars {
		cat = cat[:openAPIInlineDeclMaxChars] + "…"
	}
	return fmt.Sprintf("// require('api:%s'): %d operations (%s), each fn(params by name; body for the request body): Res; help('api:%s') prints their declarations", m.name, len(m.ops), cat, m.name)
}

// OpenAPIDeclarations is the prompt's lines for an agent's OpenAPI
// modules ("" for none; a module that does not compile is skipped, as
// the agents API refuses it).
func OpenAPIDeclarations(mods []agentfleet.OpenAPIModule) string {
	var lines []string
	for _, m := range mods {
		if c, err := compileModule(m); err == nil {
			lines = append(lines, c.promptLine())
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return "// api modules: Res as fetch returns it; non-GET calls are journaled and may need approval\n" + strings.Join(lines, "\n")
}

// moduleTable is what the child needs to define require('api:<name>'):
// one line per module, "name op1 op2 ...", and each module's help text.
func moduleTable(mods []agentfleet.OpenAPIModule) string {
	var b strings.Builder
	for _, m := range mods {
		c, err := compileModule(m)
		if err != nil {
			continue
		}
		b.WriteString(c.name)
		for _, o := range c.ops {
			b.WriteByte(' ')
			b.WriteString(o.name)
		}
		b.WriteByte('\t')
		b.WriteString(strings.ReplaceAll(c.declaration(), "\n", " "))
		b.WriteByte('\n')
	}
	return b.String()
}

// childModule is one module as the child knows it.
type childModule struct {
	ops  []string
	help string
}

func parseModuleTable(s string) map[string]childModule {
	if s == "" {
		return nil
	}
	out := map[string]childModule{}
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		head, help, _ := strings.Cut(line, "\t")
		f := strings.Fields(head)
		if len(f) == 0 {
			continue
		}
		out[f[0]] = childModule{ops: f[1:], help: help}
	}
	return out
}

// turnModules compiles the turn's modules (from the cache), by name.
func turnModules(mods []agentfleet.OpenAPIModule) map[string]*apiModule {
	out := make(map[string]*apiModule, len(mods))
	for _, m := range mods {
		if c, err := compileModule(m); err == nil {
			out[c.name] = c
		}
	}
	return out
}

// apiRequest resolves an api call to the fetch arguments it sends, and
// the name approvals and events know it by (api:<module>.<op>).
func apiRequest(mods map[string]*apiModule, raw []byte) (fetchArgs, string, error) {
	var a apiCallArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return fetchArgs{}, "", fmt.Errorf("bad arguments: %v", err)
	}
	mod := mods[a.Module]
	if mod == nil {
		return fetchArgs{}, "", fmt.Errorf("no module %q for this agent", a.Module)
	}
	tool := "api:" + mod.name + "." + a.Operation
	op := mod.byName[a.Operation]
	if op == nil {
		return fetchArgs{}, tool, fmt.Errorf("%s: no such operation", tool)
	}
	params := map[string]json.RawMessage{}
	if len(a.Params) > 0 && string(a.Params) != "null" {
		if err := json.Unmarshal(a.Params, &params); err != nil {
			return fetchArgs{}, tool, fmt.Errorf("%s: give one object of parameters by name", tool)
		}
	}
	path := op.path
	q := url.Values{}
	fa := fetchArgs{Method: op.method}
	for _, p := range op.params {
		v, ok := params[p.name]
		if !ok || string(v) == "null" {
			if p.required {
				return fetchArgs{}, tool, fmt.Errorf("%s: parameter %q (%s) is required", tool, p.name, p.in)
			}
			continue
		}
		s := paramString(v)
		switch p.in {
		case "path":
			path = strings.ReplaceAll(path, "{"+p.name+"}", url.PathEscape(s))
		case "query":
			q.Set(p.name, s)
		case "header":
			if fa.Headers == nil {
				fa.Headers = map[string]string{}
			}
			fa.Headers[p.name] = s
		}
	}
	if b, ok := params["body"]; ok && op.body {
		s := string(b)
		fa.Body, fa.JSON = &s, true
		var str string
		if json.Unmarshal(b, &str) == nil {
			fa.Body, fa.JSON = &str, false // a string body is sent as it is
		}
	} else if op.bodyReq {
		return fetchArgs{}, tool, fmt.Errorf("%s: the request body is required: give it as body", tool)
	}
	fa.URL = mod.baseURL + path
	if len(q) > 0 {
		fa.URL += "?" + q.Encode()
	}
	return fa, tool, nil
}

// paramString is a parameter's value as it goes in a URL or header.
func paramString(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	return string(v)
}

// CheckOpenAPISecrets says which of an agent's modules names a secret its
// requests would never carry (have are the tenant's secrets, the module
// already checked by CheckOpenAPIModules): a secret goes over HTTPS only,
// to its hosts, so the module's base URL must be HTTPS on one of them.
func CheckOpenAPISecrets(mods []agentfleet.OpenAPIModule, have []agentfleet.Secret) error {
	for i, m := range mods {
		if m.Secret == "" {
			continue
		}
		c, err := compileModule(m)
		if err != nil {
			return fmt.Errorf("openapi[%d].%v", i, err)
		}
		u, err := url.Parse(c.baseURL)
		if err != nil {
			return fmt.Errorf("openapi[%d].base_url: %v", i, err)
		}
		for _, s := range have {
			if s.Name != m.Secret {
				continue
			}
			switch {
			case u.Scheme != "https":
				return fmt.Errorf("openapi[%d].secret %q: the module's requests go to %s over plain http, and a secret is sent over HTTPS only", i, m.Secret, c.baseURL)
			case !credHost(&agentfleet.OpenSecret{Secret: s}, u):
				return fmt.Errorf("openapi[%d].secret %q is sent only to %s, and the module's requests go to %s: add the host to the secret (agentctl secrets set %s --host %s)",
					i, m.Secret, strings.Join(s.Hosts, ", "), u.Host, m.Secret, u.Hostname())
			}
		}
	}
	return nil
}

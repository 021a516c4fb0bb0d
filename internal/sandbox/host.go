package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/egress"
)

// hostCall runs one host primitive for the child: decode, check it is
// enabled, pass the policy, do it. It returns the turn sequence number the
// call claims, a reply status and its data.
func (p *Pool) hostCall(ctx context.Context, req *agentfleet.ExecRequest, set primSet, payload []byte, st *hostState) (uint64, byte, []byte) {
	d := decoder{b: payload}
	seq := d.uint()
	pr := prim(d.byte())
	args := d.bytes()
	if d.err != nil {
		return seq, hostError, []byte("internal: malformed host call")
	}
	if pr >= numPrims || !prims[pr].host || !set.has(pr) {
		// The child defines only enabled primitives; a call for any
		// other is refused here too, not trusted.
		return seq, hostDenied, []byte(fmt.Sprintf("primitive #%d is not enabled for this agent", pr))
	}
	if pr == primMCP {
		status, data := p.mcpHostCall(ctx, req, args, st)
		return seq, status, data
	}
	if skillSet.has(pr) {
		// A read of the tenant's own skills: no side effect to journal,
		// approve or hold to a policy.
		status, data := skillCall(ctx, req.Skills, pr, args)
		return seq, status, data
	}
	name := prims[pr].name
	// tool names an api call (api:<module>.<operation>): from here on it
	// is the HTTP request its document makes, on fetch's path.
	var tool string
	if pr == primAPI {
		if st.apis == nil {
			st.apis = turnModules(req.OpenAPI)
		}
		fa, t, err := apiRequest(st.apis, args)
		if err != nil {
			return seq, hostError, []byte(err.Error())
		}
		tool, name = t, t
		args, _ = json.Marshal(fa)
	}
	if isHTTP(pr) {
		// Rules, approvals, the journal and the network all see the
		// request in its one canonical spelling.
		var err error
		if args, err = canonicalRequest(args); err != nil {
			if errors.Is(err, errUserinfo) {
				return seq, hostDenied, []byte(fmt.Sprintf("%s: %v", name, err))
			}
			return seq, hostError, []byte(fmt.Sprintf("%s: %v", name, err))
		}
	}
	call, journaled := journalCall(req, pr, args, st.calls)
	if tool != "" {
		call.Primitive = tool
	}
	if journaled {
		st.calls++
		if req.Journal != nil {
			if status, data, ok := replay(ctx, req.Journal, call, st); ok {
				if tool != "" {
					toolEvents(req, st.red, tool, args, status, data, true)
				}
				return seq, status, data
			}
		}
	}
	policyArgs := args
	if isHTTP(pr) {
		policyArgs = withoutBody(args)
	}
	// A Policy sees an api call as the fetch it is: one written for
	// fetch governs the requests of OpenAPI modules too.
	pc := Call{Primitive: name, Args: policyArgs, Tenant: req.Tenant, RunID: req.RunID, Turn: req.Turn, Index: st.hostCalls}
	if tool != "" {
		pc.Primitive = "fetch"
	}
	dec, reason := p.cfg.Policy.Check(ctx, pc)
	if dec == Allow && pr != primWait && pr != primSecret && len(req.Approve) > 0 {
		method, target := callTarget(pr, policyArgs)
		if needsApproval(req.Approve, name, method, target) {
			dec = NeedsApproval
		}
	}
	switch dec {
	case Allow:
	case NeedsApproval:
		// (A call the journal replayed above was approved on an
		// earlier attempt of the turn: it is not asked about again.)
		keyed := journaled && req.RunID != ""
		if status, data, ok := p.approval(ctx, req, pr, tool, pc.Index, args, keyed, reason, st); !ok {
			if tool != "" && status != hostPark {
				toolEvents(req, st.red, tool, args, status, data, false)
			}
			return seq, status, data
		}
	default:
		data := []byte(fmt.Sprintf("%s denied by policy: %s", name, orUnspecified(reason)))
		if tool != "" {
			toolEvents(req, st.red, tool, args, hostDenied, data, false)
		}
		return seq, hostDenied, data
	}
	if tool != "" {
		toolCallEvent(req, st.red, tool, args)
	}
	var (
		status byte
		data   []byte
	)
	switch pr {
	case primFetch, primHTTP, primAPI:
		var key string
		if journaled && req.RunID != "" {
			key = call.IdempotencyKey()
		}
		status, data = p.fetch(ctx, name, req.Egress, req.Credentials, args, key)
		if status == hostOK {
			// A server may echo what it was sent (the credential
			// header): the script, the journal and everything after
			// see the response redacted.
			data = st.red.json(data)
		}
	case primAI, primAIJSON:
		status, data = p.ai(ctx, req.AI, pr == primAIJSON, args, call.Index, &st.usage)
	case primSpawn:
		status, data = spawn(ctx, req.Spawn, call.Index, args)
	case primWait:
		status, data = wait(ctx, req.IsChild, args, st)
	case primSecret:
		status, data = secretValue(req.Credentials, args)
	}
	if journaled && req.Journal != nil {
		status, data = record(ctx, req.Journal, call, status, data, st.usage, st)
	}
	if tool != "" {
		toolResultEvent(req, st.red, tool, status, data, false)
	}
	return seq, status, data
}

// isHTTP says whether pr's calls are HTTP requests (fetch, http, and the
// operations of OpenAPI modules, resolved to their request).
func isHTTP(pr prim) bool { return pr == primFetch || pr == primHTTP || pr == primAPI }

// spawn starts a child run through the caller's SpawnFunc.
func spawn(ctx context.Context, fn agentfleet.SpawnFunc, index int, raw []byte) (byte, []byte) {
	if fn == nil {
		return hostErr("spawn() is not available for this run")
	}
	var r agentfleet.SpawnRequest
	if err := json.Unmarshal(raw, &r); err != nil {
		return hostErr("spawn: bad options: %v (give {message: string, agent?, context?, metadata?, max_turns?, max_tokens?})", err)
	}
	if strings.TrimSpace(r.Message) == "" {
		return hostErr("spawn: options need a message: the child's task")
	}
	id, err := fn(ctx, index, r)
	if err != nil {
		if ctx.Err() != nil {
			return hostErr("spawn: the turn was stopped")
		}
		return hostErr("spawn: %v", err)
	}
	out, _ := json.Marshal(id)
	return hostOK, out
}

// wait records what the run waits for once the turn is committed: its
// own children only (isChild), any other id throws here, before the
// turn commits.
func wait(ctx context.Context, isChild func(context.Context, string) (bool, error), raw []byte, st *hostState) (byte, []byte) {
	var a waitArgs
	if err := json.Unmarshal(raw, &a); err != nil || len(a.IDs) == 0 {
		return hostErr("wait: give a non-empty array of run ids")
	}
	for _, id := range a.IDs {
		ok := false
		var err error
		if isChild != nil {
			ok, err = isChild(ctx, id)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return hostErr("wait: the turn was stopped")
		case err != nil:
			return hostErr("wait: looking up run %q failed: %v", id, err)
		case !ok:
			return hostErr("wait: %q is not a child of this run: wait() takes only the ids spawn() returned to this run", id)
		}
	}
	st.wait = &agentfleet.WaitRequest{IDs: a.IDs, Timeout: time.Duration(a.TimeoutMS) * time.Millisecond}
	return hostOK, []byte("null")
}

// approval looks up the approval of the index-th host call of the turn,
// which needs one. ok says the call may proceed; otherwise status and
// data are the reply: a PolicyError (denied, or no way to ask), or
// hostPark, which stops the turn to wait (st.approval says for what).
//
// The approval asked for, and looked up, is of the exact call: its
// Digest (requestDigest) changes with anything the call would send
// differently, so a call that differs from the one approved asks again.
// keyed says the request carries the journal's Idempotency-Key.
func (p *Pool) approval(ctx context.Context, req *agentfleet.ExecRequest, pr prim, tool string, index int, args []byte, keyed bool, reason string, st *hostState) (status byte, data []byte, ok bool) {
	name := cmpOr(tool, prims[pr].name)
	if req.Approval == nil {
		return hostDenied, []byte(fmt.Sprintf("%s needs approval (%s), and this run cannot ask for one", name, orUnspecified(reason))), false
	}
	call := approvalCall(pr, index, args, st.red)
	if tool != "" {
		call.Primitive = tool
	}
	call.Digest = requestDigest(pr, args, keyed)
	state, why, err := req.Approval(ctx, call)
	switch {
	case err != nil:
		return hostError, []byte(fmt.Sprintf("%s: looking up its approval failed: %v", name, err)), false
	case state == agentfleet.ApprovalApproved:
		return 0, nil, true
	case state == agentfleet.ApprovalDenied:
		return hostDenied, []byte(fmt.Sprintf("%s was denied: %s", describeCall(call), orUnspecified(why))), false
	}
	st.approval = &call
	return hostPark, nil, false
}

// ApprovalPreviewMaxBytes bounds an approval's preview of a call's body.
const ApprovalPreviewMaxBytes = 1024

// approvalCall is the approval view of a host call: its method and URL
// (fetch, http) and a preview of what it sends, redacted, then cut.
func approvalCall(pr prim, index int, args []byte, red *redactor) agentfleet.ApprovalCall {
	c := agentfleet.ApprovalCall{Index: index, Primitive: prims[pr].name}
	var preview string
	switch pr {
	case primFetch, primHTTP, primAPI:
		var a fetchArgs
		_ = json.Unmarshal(args, &a)
		c.Method, c.URL = callTarget(pr, args)
		if a.Body != nil {
			preview = *a.Body
		}
	case primAI, primAIJSON:
		var a aiArgs
		_ = json.Unmarshal(args, &a)
		preview = a.Prompt
	case primSpawn:
		var a agentfleet.SpawnRequest
		_ = json.Unmarshal(args, &a)
		preview = a.Message
	case primMCP:
		var a mcpCallArgs
		_ = json.Unmarshal(args, &a)
		preview = string(a.Args)
	}
	c.URL = red.str(c.URL)
	preview = red.str(preview)
	if len(preview) > ApprovalPreviewMaxBytes {
		preview = string(trimPartialRune([]byte(preview[:ApprovalPreviewMaxBytes]))) + "…"
	}
	c.Preview = preview
	return c
}

// callTarget is the method and URL of a fetch or http call, whose args
// are canonical (canonicalRequest), and empty for other primitives.
func callTarget(pr prim, args []byte) (method, target string) {
	if !isHTTP(pr) {
		return "", ""
	}
	var a fetchArgs
	if json.Unmarshal(args, &a) != nil {
		return "", ""
	}
	return a.Method, a.URL
}

// canonicalRequest is fetch or http arguments with the method upper-case
// (GET when empty) and the URL canonical, or why the request is refused.
func canonicalRequest(args []byte) ([]byte, error) {
	var a fetchArgs
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, fmt.Errorf("bad arguments: %v", err)
	}
	a.Method = strings.ToUpper(cmpOr(a.Method, http.MethodGet))
	u, err := canonicalURL(a.URL)
	if err != nil {
		return nil, err
	}
	a.URL = u
	return json.Marshal(a)
}

// scriptHeader is the header a request sends of the script's own: the
// headers it set (applied in name order, so that two spellings of one
// name resolve the same way every time) and the Content-Type of a body
// it gave as an object.
func scriptHeader(a fetchArgs) http.Header {
	h := make(http.Header, len(a.Headers)+1)
	for _, k := range slices.Sorted(maps.Keys(a.Headers)) {
		h.Set(k, a.Headers[k])
	}
	if a.JSON && h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	return h
}

// requestDigest is the hex SHA-256 an approval binds a call with. For
// fetch and http (args canonical): of the method, the canonical URL, the
// SHA-256 of the body and the SHA-256 of the script's headers (without
// the Idempotency-Key when keyed, which the journal sets); for ai, aiJSON
// and spawn: of what the call asks (prompt and schema; the spawn
// request), in canonical JSON.
func requestDigest(pr prim, args []byte, keyed bool) string {
	sum := sha256.New()
	switch pr {
	case primFetch, primHTTP, primAPI:
		var a fetchArgs
		_ = json.Unmarshal(args, &a)
		var body []byte
		if a.Body != nil {
			body = []byte(*a.Body)
		}
		h := scriptHeader(a)
		if keyed {
			h.Del("Idempotency-Key")
		}
		pairs := make([][2]string, 0, len(h))
		for _, k := range slices.Sorted(maps.Keys(h)) {
			pairs = append(pairs, [2]string{k, h.Get(k)})
		}
		headers, _ := json.Marshal(pairs)
		bodySum, headerSum := sha256.Sum256(body), sha256.Sum256(headers)
		fmt.Fprintf(sum, "agentfleet request v1\n%s\n%s\n%x\n%x\n", a.Method, a.URL, bodySum, headerSum)
	default:
		var v any
		switch pr {
		case primAI, primAIJSON:
			var a aiArgs
			_ = json.Unmarshal(args, &a)
			v = a
		case primSpawn:
			var a agentfleet.SpawnRequest
			_ = json.Unmarshal(args, &a)
			v = a
		}
		doc, _ := json.Marshal(v)
		fmt.Fprintf(sum, "agentfleet call v1\n%s\n%s\n", prims[pr].name, doc)
	}
	return hex.EncodeToString(sum.Sum(nil))
}

// describeCall names a call in messages: "http POST https://x/y", "spawn".
func describeCall(c agentfleet.ApprovalCall) string {
	if c.URL == "" {
		return c.Primitive
	}
	return c.Primitive + " " + c.Method + " " + c.URL
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orUnspecified(reason string) string {
	if reason == "" {
		return "no reason given"
	}
	return reason
}

// withoutBody strips the body from fetch arguments: a policy decides on
// method, URL and headers, and a body can be large.
func withoutBody(args []byte) json.RawMessage {
	var a fetchArgs
	if err := json.Unmarshal(args, &a); err != nil {
		return args
	}
	a.Body, a.JSON = nil, false
	b, err := json.Marshal(a)
	if err != nil {
		return args
	}
	return b
}

func hostErr(format string, args ...any) (byte, []byte) {
	return hostError, []byte(fmt.Sprintf(format, args...))
}

// secretValue is secret(name): the value of a credential of the run's
// agent that is exposed to scripts.
func secretValue(creds []agentfleet.OpenSecret, raw []byte) (byte, []byte) {
	var a secretArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return hostErr("secret: bad arguments: %v", err)
	}
	for _, c := range creds {
		if c.Name != a.Name {
			continue
		}
		if !c.Expose {
			return hostErr("secret: %q is not exposed to scripts: it is sent for you in the %s header of HTTPS requests to %s; "+
				"just make the request (to read it in a script, the secret must be set with expose)", a.Name, credHeader(&c), strings.Join(c.Hosts, ", "))
		}
		out, _ := json.Marshal(c.Value)
		return hostOK, out
	}
	return hostErr("secret: %q is not one of the secrets this agent names", a.Name)
}

// fetch performs one HTTP request for fetch or http, through the net of
// the turn's agent egress; a journaled one carries its idempotency key
// (the script's own header is replaced), and one over HTTPS to a
// credential's host the credential (credentials.go).
func (p *Pool) fetch(ctx context.Context, name string, egressList []string, creds []agentfleet.OpenSecret, raw []byte, idempotencyKey string) (byte, []byte) {
	var a fetchArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return hostErr("%s: bad arguments: %v", name, err)
	}
	n, err := p.netFor(egressList)
	if err != nil {
		return hostDenied, []byte(fmt.Sprintf("%s %s: the agent's egress: %v", name, a.URL, err))
	}
	u, err := n.guard.CheckURL(a.URL)
	if err != nil {
		var be *egress.BlockedError
		if errors.As(err, &be) {
			return hostDenied, []byte(fmt.Sprintf("%s %s: %v", name, a.URL, err))
		}
		return hostErr("%s: %v", name, err)
	}
	target := u.Redacted()
	lim := p.cfg.Limits
	fctx, cancel := context.WithTimeout(ctx, lim.FetchTimeout)
	defer cancel()
	var body io.Reader
	if a.Body != nil {
		body = strings.NewReader(*a.Body)
	}
	hreq, err := http.NewRequestWithContext(fctx, a.Method, u.String(), body)
	if err != nil {
		return hostErr("%s %s: %v", name, target, err)
	}
	hreq.Header = scriptHeader(a)
	if hreq.Header.Get("User-Agent") == "" {
		hreq.Header.Set("User-Agent", "agentfleet-sandbox/1")
	}
	if idempotencyKey != "" {
		hreq.Header.Set("Idempotency-Key", idempotencyKey)
	}
	if err := errPlainCredential(creds, u); err != nil {
		return hostErr("%s %s: %v", name, target, err)
	}
	client := n.client
	if len(creds) > 0 {
		client = withCredentialRedirects(n.client, creds, injectCredentials(hreq, creds))
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return p.fetchErr(ctx, fctx, name, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, lim.FetchMaxBytes+1))
	if err != nil {
		return p.fetchErr(ctx, fctx, name, target, fmt.Errorf("reading body: %w", err))
	}
	r := fetchResult{Status: resp.StatusCode, Headers: make(map[string]string, len(resp.Header)), URL: resp.Request.URL.Redacted()}
	if int64(len(b)) > lim.FetchMaxBytes {
		b = trimPartialRune(b[:lim.FetchMaxBytes])
		r.Truncated = true
	}
	r.Body = string(b)
	for k, vs := range resp.Header {
		r.Headers[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	out, err := json.Marshal(r)
	if err != nil {
		return hostErr("%s %s: encode response: %v", name, target, err)
	}
	return hostOK, out
}

// fetchErr turns a request error into what the script sees: a guard block
// is a denial; timeouts and cancellation say so plainly.
func (p *Pool) fetchErr(turn, fctx context.Context, name, target string, err error) (byte, []byte) {
	var be *egress.BlockedError
	switch {
	case errors.As(err, &be):
		return hostDenied, []byte(fmt.Sprintf("%s %s: %v", name, target, be))
	case turn.Err() != nil:
		return hostErr("%s %s: the turn was stopped", name, target)
	case fctx.Err() != nil:
		return hostErr("%s %s: timed out after %s", name, target, shortDuration(p.cfg.Limits.FetchTimeout))
	}
	return hostErr("%s %s: %v", name, target, cleanNetErr(err))
}

// cleanNetErr drops the *url.Error wrapping ("Get \"url\": "), which
// repeats what the message already says.
func cleanNetErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// ai performs ai() or aiJSON() through the caller's AIFunc, adding what
// it used to the turn's usage.
func (p *Pool) ai(ctx context.Context, fn agentfleet.AIFunc, asJSON bool, raw []byte, index int, usage *agentfleet.Usage) (byte, []byte) {
	name := "ai"
	if asJSON {
		name = "aiJSON"
	}
	if fn == nil {
		return hostErr("%s() is not available: no model is configured for script sub-calls", name)
	}
	var a aiArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return hostErr("%s: bad arguments: %v", name, err)
	}
	resp, err := fn(ctx, agentfleet.AIRequest{Prompt: a.Prompt, Schema: a.Schema, JSON: asJSON, Index: index})
	*usage = usage.Add(resp.Usage)
	if err != nil {
		if ctx.Err() != nil {
			return hostErr("%s: the turn was stopped", name)
		}
		return hostErr("%s: the model call failed: %v", name, err)
	}
	if !asJSON {
		out, _ := json.Marshal(resp.Content)
		return hostOK, out
	}
	doc := strings.TrimSpace(stripFence(resp.Content))
	if !json.Valid([]byte(doc)) {
		return hostErr("aiJSON: the model's reply is not valid JSON: %s", capMessage(firstLine(resp.Content), 0))
	}
	return hostOK, []byte(doc)
}

// stripFence removes a Markdown code fence around a reply: models often
// wrap JSON in ```json ... ``` even when asked not to.
func stripFence(s string) string {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "```") {
		return s
	}
	t = t[3:]
	if i := strings.IndexByte(t, '\n'); i >= 0 {
		t = t[i+1:]
	} else {
		return s
	}
	return strings.TrimSuffix(strings.TrimSpace(t), "```")
}

func unwrapURLError(err error) error { return egress.URLErrorCause(err) }

package sandbox

import (
	"fmt"
	"strings"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/redact"
)

// redactor replaces known secret values in what a sandbox process
// reports: ExecRequest.Secrets as "[redacted]", the tenant's secrets
// (TenantSecrets, Credentials) as "[secret:<name>]" (internal/redact).
// It runs in the parent, on the result frame: the process is untrusted
// and is never sent a secret it may not read. A nil redactor redacts
// nothing.
type redactor struct {
	*redact.Redactor
}

const redacted = redact.Unnamed

// partialMin is the shortest piece of a secret that is redacted where a
// cut (of the log, of an error message) splits it: a shorter piece says
// nothing of the secret and is too likely to be ordinary text.
const partialMin = 4

func newRedactor(vs []redact.Value) *redactor {
	r := redact.New(vs)
	if r == nil {
		return nil
	}
	return &redactor{r}
}

// redactorEntry is the last redactor a pool built, with its values.
type redactorEntry struct {
	values []redact.Value
	r      *redactor
}

// redactorFor returns the redactor of req's secrets, reusing the last
// one built: a worker passes the same secrets (its provider key, the
// tenant's) turn after turn.
func (p *Pool) redactorFor(req *agentfleet.ExecRequest) *redactor {
	if len(req.Secrets) == 0 && len(req.TenantSecrets) == 0 && len(req.Credentials) == 0 {
		return nil
	}
	if e := p.red.Load(); e != nil && e.of(req) {
		return e.r
	}
	vs := redact.Values(req.Secrets, req.Credentials, req.TenantSecrets)
	e := &redactorEntry{values: vs, r: newRedactor(vs)}
	p.red.Store(e)
	return e.r
}

// of says whether e's values are req's, in the order redact.Values
// lists them.
func (e *redactorEntry) of(req *agentfleet.ExecRequest) bool {
	if len(e.values) != len(req.Secrets)+len(req.Credentials)+len(req.TenantSecrets) {
		return false
	}
	i := 0
	for _, s := range req.Secrets {
		if e.values[i] != (redact.Value{Value: s}) {
			return false
		}
		i++
	}
	for _, l := range [][]agentfleet.OpenSecret{req.Credentials, req.TenantSecrets} {
		for _, s := range l {
			if e.values[i] != (redact.Value{Name: s.Name, Value: s.Value}) {
				return false
			}
			i++
		}
	}
	return true
}

func (r *redactor) str(s string) string {
	if r == nil {
		return s
	}
	return r.String(s)
}

func (r *redactor) json(doc []byte) []byte {
	if r == nil {
		return doc
	}
	return r.JSON(doc)
}

// cutEnd redacts s, which a cut ended: the beginning of a secret left at
// its end is redacted too.
func (r *redactor) cutEnd(s string) string { return r.cutAt(s, true) }

// cutStart redacts s, which a cut began: the end of a secret left at its
// start is redacted too.
func (r *redactor) cutStart(s string) string { return r.cutAt(s, false) }

func (r *redactor) cutAt(s string, end bool) string {
	if r == nil {
		return s
	}
	s = r.Replace(s)
	best, label := 0, "" // the longest piece of a secret at the cut
	for i := range r.Len() {
		f, l := r.Form(i)
		for k := min(len(f)-1, len(s)); k >= partialMin && k > best; k-- {
			if end && strings.HasSuffix(s, f[:k]) || !end && strings.HasPrefix(s, f[len(f)-k:]) {
				best, label = k, l
				break
			}
		}
	}
	switch {
	case best == 0:
		return s
	case end:
		return s[:len(s)-best] + label
	}
	return label + s[best:]
}

// logs redacts a log's parts (logBuffer.parts) and joins them: the
// secrets, also where the cut splits one, then text shaped like a
// credential (redact.Shapes).
func (r *redactor) logs(head, tail string, cut int64) string {
	if cut == 0 {
		return redact.Shapes(r.str(head + tail))
	}
	return redact.Shapes(joinLog(r.cutEnd(head), r.cutStart(tail), cut))
}

// message redacts an error message and caps it at maxErrMessage.
// dropped is what the process already cut from its end (clipMessage).
func (r *redactor) message(s string, dropped int) string {
	if dropped > 0 {
		s = r.cutEnd(s)
	} else {
		s = r.str(s)
	}
	return capMessage(s, dropped)
}

// capMessage caps an error message shown to the model at maxErrMessage
// (a script can throw a megabyte string), counting dropped bytes already
// cut from its end.
func capMessage(s string, dropped int) string {
	if len(s) <= maxErrMessage && dropped == 0 {
		return s
	}
	kept := s
	if len(s) > maxErrMessage {
		kept = string(trimPartialRune([]byte(s[:maxErrMessage])))
	}
	return fmt.Sprintf("%s… [%d bytes cut]", kept, len(s)-len(kept)+dropped)
}

package api

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/maintain"
	"github.com/agentfleet/agentfleet/internal/secrets"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/wire"
)

// Secrets (docs/api.md, "Secrets"): a tenant's named credentials, which
// the worker adds to the requests of its runs to the secret's hosts.
// The value is sealed here (Config.Secrets, bound to the tenant and the
// name) and never leaves again: no answer, log line or error holds it.
// A tenant's key with the admin scope manages its own; the admin token
// any tenant's, named with ?tenant=. POST /v1/secrets/rekey (the admin
// token) seals every value the store keeps again under the current key.

// SecretValueMin and SecretValueMax bound a secret's value. Every
// value of a tenant is redacted wherever it shows, so a short one would
// blank out ordinary text: no credential is that short.
const (
	SecretValueMin = 8
	SecretValueMax = 16 << 10
)

// errSecretsKey is the answer when this dispatcher has no key to seal
// with.
func errSecretsKey(what string) error {
	return &apiError{status: http.StatusServiceUnavailable, code: "secrets_key_missing",
		msg: "this dispatcher cannot " + what + ": " + errNoSecretsKey}
}

// validSecretName reports whether name is a secret's name: what an
// agent's secrets list names, [a-z0-9_]{1,64}.
func validSecretName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

func (s *Server) handleSecretPut(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	if !validSecretName(name) {
		s.fail(w, r, errUnprocessable("secret name %q is not valid (lower-case letters, digits and '_', up to 64)", name))
		return
	}
	var req wire.SecretRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, quietDecodeError(err))
		return
	}
	if s.cfg.Secrets == nil {
		s.fail(w, r, errSecretsKey("store secrets"))
		return
	}
	if err := checkSecret(&req); err != nil {
		s.fail(w, r, err)
		return
	}
	sealed, err := s.cfg.Secrets.Seal(req.Value, secrets.SecretAD(p.tenant, name))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sec, err := s.cfg.Store.SecretPut(r.Context(), store.SecretPutParams{
		Tenant: p.tenant, Name: name, Sealed: sealed, KeyID: s.cfg.Secrets.KeyID(),
		Hosts: req.Hosts, Header: req.Header, Format: req.Format, Expose: req.Expose,
	})
	if errors.Is(err, store.ErrNotFound) {
		err = errNotFound("no tenant %q", p.tenant)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if sec.Version == 1 {
		status = http.StatusCreated
	}
	writeJSON(w, status, secretView(sec))
}

// secretView is a secret as the API shows it: hosts always a list.
func secretView(sec agentfleet.Secret) agentfleet.Secret {
	if sec.Hosts == nil {
		sec.Hosts = []string{}
	}
	return sec
}

// quietDecodeError is decodeBody's error without what the JSON parser
// quotes of the body, which may be part of a secret's value.
func quietDecodeError(err error) error {
	var ae *apiError
	if errors.As(err, &ae) && strings.HasPrefix(ae.msg, "malformed JSON") {
		where, _, _ := strings.Cut(ae.msg, ":")
		return errBadRequest("%s: send {\"value\", \"hosts\", \"header\", \"format\", \"expose\"} (what the parser said is left out: it may quote the value)", where)
	}
	return err
}

// checkSecret refuses the value no worker could send, naming the
// field (never the value). The store checks the rest (hosts, header,
// format) and names what is wrong in the same way.
func checkSecret(req *wire.SecretRequest) error {
	switch {
	case req.Value == "":
		return errUnprocessable("value is required: the secret itself (%d to %d bytes)", SecretValueMin, SecretValueMax)
	case len(req.Value) < SecretValueMin:
		return errUnprocessable("value is %d bytes; a secret is at least %d (every value is redacted wherever it shows, so a short one would hide ordinary text)", len(req.Value), SecretValueMin)
	case len(req.Value) > SecretValueMax:
		return errUnprocessable("value is %d bytes; the limit is %d", len(req.Value), SecretValueMax)
	case len(req.Hosts) == 0:
		return errUnprocessable("hosts is required: the hosts whose HTTPS requests get the secret, e.g. [\"api.github.com\"]")
	case !req.Expose && strings.ContainsFunc(req.Value, isCtl):
		return errUnprocessable("value has a control character (a line break?), which no header value can hold: strip it (or set expose: true for a value only scripts read, such as a PEM key)")
	}
	switch strings.ToLower(req.Header) {
	case "host", "content-length", "content-type", "transfer-encoding", "connection", "te", "upgrade", "trailer":
		return errUnprocessable("header %q is not one a secret may set: use Authorization or an API key header", req.Header)
	}
	return nil
}

func isCtl(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }

// handleSecretList lists the tenant's secrets by name, a page at a
// time: the cursor is the last name of the previous page.
func (s *Server) handleSecretList(w http.ResponseWriter, r *http.Request, p principal) {
	limit, err := pageLimit(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if limit == 0 {
		limit = listLimitMax
	}
	cursor := r.URL.Query().Get("cursor")
	if cursor != "" && !validSecretName(cursor) {
		s.fail(w, r, errBadRequest("cursor %q is not valid: pass the next_cursor of the previous page", cursor))
		return
	}
	all, err := s.cfg.Store.SecretList(r.Context(), p.tenant)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	slices.SortFunc(all, func(a, b agentfleet.Secret) int { return strings.Compare(a.Name, b.Name) })
	out := wire.SecretList{Secrets: []agentfleet.Secret{}}
	for _, sec := range all {
		if sec.Name <= cursor {
			continue
		}
		if len(out.Secrets) == limit {
			out.NextCursor = out.Secrets[limit-1].Name
			break
		}
		out.Secrets = append(out.Secrets, secretView(sec))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleSecretGet(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	sec, err := s.cfg.Store.SecretGet(r.Context(), p.tenant, name)
	if errors.Is(err, store.ErrNotFound) {
		err = errNotFound("no secret %q", name)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, secretView(sec))
}

func (s *Server) handleSecretDelete(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	err := s.cfg.Store.SecretDelete(r.Context(), p.tenant, name)
	if errors.Is(err, store.ErrNotFound) {
		err = errNotFound("no secret %q", name)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleSecretsRekey seals every value the store keeps (tenants'
// secrets, trigger and callback secrets) again under the current key
// (the admin token). Values that open under no key held here are
// reported, and left.
func (s *Server) handleSecretsRekey(w http.ResponseWriter, r *http.Request, p principal) {
	if s.cfg.Secrets == nil {
		s.fail(w, r, errSecretsKey("rekey secrets"))
		return
	}
	res, err := maintain.Rekey(r.Context(), s.cfg.Store, s.cfg.Secrets)
	s.log.Info("secrets rekeyed", "key_id", s.cfg.Secrets.KeyID(), "rewritten", res.Rewritten,
		"current", res.Current, "unopened", len(res.Unopened), "err", err)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.RekeyReport{KeyID: s.cfg.Secrets.KeyID(), Rewritten: res.Rewritten, Current: res.Current, Unopened: []wire.SealedRef{}}
	for _, ref := range res.Unopened {
		out.Unopened = append(out.Unopened, wire.SealedRef{Kind: string(ref.Kind), Owner: ref.Owner, Name: ref.Name})
	}
	writeJSON(w, http.StatusOK, out)
}

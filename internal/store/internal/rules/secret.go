package rules

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
)

// Bounds of a secret.
const (
	SecretHostsMax  = 32
	SecretHeaderMax = 128
	SecretFormatMax = 1024
	// SealedListLimitDefault and SealedListLimitMax bound one page of
	// SealedList.
	SealedListLimitDefault = 100
	SealedListLimitMax     = 1000
)

// SecretCols are a secret's columns but its sealed value.
const SecretCols = `tenant, name, hosts, header, format, expose, version, key_id, created_at, updated_at`

var (
	secretNamePattern = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)
	hostLabelPattern  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// SecretPut validates p and fills its defaults: hosts lower-cased
// without repeats, Header and Format.
func SecretPut(p store.SecretPutParams) (store.SecretPutParams, error) {
	if err := checkSecretRef(p.Tenant, p.Name); err != nil {
		return p, err
	}
	if p.Sealed == "" || p.KeyID == "" {
		return p, Invalidf("secret %s: the sealed value and its key id are required", p.Name)
	}
	if err := checkTexts("secret sealed value", p.Sealed, "secret key id", p.KeyID); err != nil {
		return p, err
	}
	if p.Header == "" {
		p.Header = agentfleet.SecretHeaderDefault
	}
	if p.Format == "" {
		p.Format = agentfleet.SecretFormatDefault
	}
	if err := CheckText("format", p.Format); err != nil {
		return p, err
	}
	hosts, err := secretHosts(p.Hosts)
	if err == nil {
		err = checkHeaderName(p.Header)
	}
	if err == nil {
		err = checkHeaderFormat(p.Format)
	}
	if err != nil {
		return p, Invalidf("secret %s: %v", p.Name, err)
	}
	p.Hosts = hosts
	return p, nil
}

func checkSecretRef(tenant, name string) error {
	if tenant == "" {
		return Invalidf("secret: tenant is required")
	}
	if !secretNamePattern.MatchString(name) {
		return Invalidf("secret name %q: use 1 to 64 lower-case letters, digits or '_'", name)
	}
	return nil
}

// secretHosts checks the hosts of a secret and returns them lower-cased,
// without repeats: 1 to SecretHostsMax bare host names (no scheme, port
// or path), each perhaps "*." and a domain of two labels or more, which
// names every host below the domain but not the domain itself.
func secretHosts(hosts []string) ([]string, error) {
	if len(hosts) == 0 || len(hosts) > SecretHostsMax {
		return nil, fmt.Errorf("hosts: give 1 to %d host names (%d given)", SecretHostsMax, len(hosts))
	}
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		h = strings.ToLower(h)
		if err := checkHost(h); err != nil {
			return nil, fmt.Errorf("hosts entry %q %w", h, err)
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out, nil
}

func checkHost(h string) error {
	if strings.ContainsAny(h, ":/?#@[] ") {
		return errors.New("is not a bare host name: give it without scheme, port or path (\"api.github.com\")")
	}
	name, wild := strings.CutPrefix(h, "*.")
	if len(name) > 253 {
		return errors.New("is longer than 253 characters")
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if !hostLabelPattern.MatchString(l) {
			return errors.New("is not a host name: labels of 1 to 63 letters, digits or '-' (not first or last), joined by '.'; a wildcard only as a leading \"*.\"")
		}
	}
	if wild && len(labels) < 2 {
		return errors.New("is too wide: a wildcard names the hosts below a domain (\"*.example.com\")")
	}
	return nil
}

// checkHeaderName holds a header name to RFC 9110's token.
func checkHeaderName(h string) error {
	if len(h) > SecretHeaderMax {
		return fmt.Errorf("header: at most %d characters", SecretHeaderMax)
	}
	for _, c := range []byte(h) {
		if !isTokenChar(c) {
			return fmt.Errorf("header %q: a header name is letters, digits and !#$%%&'*+-.^_`|~ only", h)
		}
	}
	return nil
}

func isTokenChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// checkHeaderFormat: the format becomes a header's value, so it holds
// {value} and no control character (a line break would start another
// header). It is valid UTF-8 (CheckText) already.
func checkHeaderFormat(f string) error {
	if len(f) > SecretFormatMax {
		return fmt.Errorf("format: at most %d characters", SecretFormatMax)
	}
	if !strings.Contains(f, "{value}") {
		return fmt.Errorf("format %q: it must hold {value}, where the secret goes (%q)", f, agentfleet.SecretFormatDefault)
	}
	for _, r := range f {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return fmt.Errorf("format %q: no control characters (a header value is one line)", f)
		}
	}
	return nil
}

// SealedList validates p and fills its Limit.
func SealedList(p store.SealedListParams) (store.SealedListParams, error) {
	if p.After.Kind != "" && !slices.Contains(SealedKinds, p.After.Kind) {
		return p, Invalidf("sealed list: after kind %q: use %s", p.After.Kind, sealedKindList())
	}
	if p.Limit < 0 || p.Limit > SealedListLimitMax {
		return p, Invalidf("sealed list: limit %d: use 1 to %d (zero: %d)", p.Limit, SealedListLimitMax, SealedListLimitDefault)
	}
	if p.Limit == 0 {
		p.Limit = SealedListLimitDefault
	}
	return p, nil
}

// SealedReplace validates p.
func SealedReplace(p store.SealedReplaceParams) error {
	r := p.Ref
	switch {
	case !slices.Contains(SealedKinds, r.Kind):
		return Invalidf("sealed replace: kind %q: use %s", r.Kind, sealedKindList())
	case r.Owner == "":
		return Invalidf("sealed replace: the owner is required")
	case (r.Kind == store.SealedSecretValue) != (r.Name != ""):
		return Invalidf("sealed replace: a name is for a secret, and a secret needs one")
	case p.Old == "" || p.New == "":
		return Invalidf("sealed replace %s %s: old and new values are required", r.Kind, r.Owner)
	case r.Kind == store.SealedSecretValue && p.KeyID == "":
		return Invalidf("sealed replace of secret %s/%s: the new value's key id is required", r.Owner, r.Name)
	}
	return checkTexts("sealed value", p.New, "sealed key id", p.KeyID)
}

// SealedKinds are the kinds of sealed values, in the order SealedList
// walks them (bytewise).
var SealedKinds = []store.SealedKind{store.SealedCallbackValue, store.SealedSecretValue, store.SealedTrigger, store.SealedTriggerPrev}

func sealedKindList() string {
	var ss []string
	for _, k := range SealedKinds {
		ss = append(ss, string(k))
	}
	return strings.Join(ss, ", ")
}

// Secret scans SecretCols.
func (s Scans) Secret(sc Scanner) (agentfleet.Secret, error) {
	var x agentfleet.Secret
	var hosts []byte
	if err := sc.Scan(&x.Tenant, &x.Name, &hosts, &x.Header, &x.Format, &x.Expose, &x.Version, &x.KeyID,
		s.Time(&x.CreatedAt), s.Time(&x.UpdatedAt)); err != nil {
		return x, err
	}
	var err error
	x.Hosts, err = DecodeStrings(hosts)
	return x, err
}

// ScanSealedSecret scans a secret's tenant, name, sealed value and key id.
func ScanSealedSecret(sc Scanner) (store.SealedSecret, error) {
	var x store.SealedSecret
	return x, sc.Scan(&x.Tenant, &x.Name, &x.Sealed, &x.KeyID)
}

// ScanSealedOf scans a sealed value of kind: its owner, name and value.
func ScanSealedOf(kind store.SealedKind) func(Scanner) (store.Sealed, error) {
	return func(sc Scanner) (store.Sealed, error) {
		x := store.Sealed{Ref: store.SealedRef{Kind: kind}}
		return x, sc.Scan(&x.Ref.Owner, &x.Ref.Name, &x.Sealed)
	}
}

func (s *Store) SecretPut(ctx context.Context, p store.SecretPutParams) (agentfleet.Secret, error) {
	p, err := SecretPut(p)
	if err != nil {
		return agentfleet.Secret{}, err
	}
	x, err := s.d.SecretUpsert(ctx, p, Now())
	if err != nil {
		return agentfleet.Secret{}, fmt.Errorf("put secret %s/%s: %w", p.Tenant, p.Name, err)
	}
	return x, nil
}

func (s *Store) SecretGet(ctx context.Context, tenant, name string) (agentfleet.Secret, error) {
	if err := checkSecretRef(tenant, name); err != nil {
		return agentfleet.Secret{}, err
	}
	x, err := s.d.SecretGet(ctx, tenant, name)
	if err != nil {
		return agentfleet.Secret{}, fmt.Errorf("get secret %s/%s: %w", tenant, name, err)
	}
	return x, nil
}

// SecretList of an unknown tenant is ErrNotFound; the tenant is read
// only when it lists none.
func (s *Store) SecretList(ctx context.Context, tenant string) ([]agentfleet.Secret, error) {
	if tenant == "" {
		return nil, Invalidf("secret list: tenant is required")
	}
	var xs []agentfleet.Secret
	err := s.d.Read(ctx, func(x driver.Executor) error {
		var err error
		if xs, err = x.SecretList(ctx, tenant); err != nil || len(xs) > 0 {
			return err
		}
		_, err = x.TenantGet(ctx, tenant)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list secrets of %s: %w", tenant, err)
	}
	return xs, nil
}

func (s *Store) SecretDelete(ctx context.Context, tenant, name string) error {
	if err := checkSecretRef(tenant, name); err != nil {
		return err
	}
	ok, err := s.d.SecretDelete(ctx, tenant, name)
	if err == nil && !ok {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("delete secret %s/%s: %w", tenant, name, err)
	}
	return nil
}

// SecretSealedList of a tenant with none (or unknown) is empty: the
// worker's read, one statement.
func (s *Store) SecretSealedList(ctx context.Context, tenant string) ([]store.SealedSecret, error) {
	if tenant == "" {
		return nil, Invalidf("secret sealed list: tenant is required")
	}
	xs, err := s.d.SecretSealedList(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("list sealed secrets of %s: %w", tenant, err)
	}
	return xs, nil
}

// SealedList walks the kinds in order, each in (owner, name) order, so
// each read is one table's key range.
func (s *Store) SealedList(ctx context.Context, p store.SealedListParams) ([]store.Sealed, error) {
	p, err := SealedList(p)
	if err != nil {
		return nil, err
	}
	var out []store.Sealed
	for _, kind := range SealedKinds {
		if kind < p.After.Kind {
			continue
		}
		var after store.SealedRef
		if kind == p.After.Kind {
			after = p.After
		}
		got, err := s.d.SealedList(ctx, kind, after.Owner, after.Name, p.Limit-len(out))
		if err != nil {
			return nil, fmt.Errorf("list sealed values (%s): %w", kind, err)
		}
		if out = append(out, got...); len(out) == p.Limit {
			break
		}
	}
	return out, nil
}

// SealedReplace is a compare-and-swap: when it swaps nothing, a read
// tells a value gone (ErrNotFound) from one changed (ErrConflict).
func (s *Store) SealedReplace(ctx context.Context, p store.SealedReplaceParams) error {
	if err := SealedReplace(p); err != nil {
		return err
	}
	r := p.Ref
	ok, err := s.d.SealedReplace(ctx, p)
	if err == nil && !ok {
		if _, err = s.d.SealedGet(ctx, r); err == nil {
			err = fmt.Errorf("%w: the value is no longer the one given as old", store.ErrConflict)
		}
	}
	if err != nil {
		return fmt.Errorf("replace sealed value (%s %s %s): %w", r.Kind, r.Owner, r.Name, err)
	}
	return nil
}

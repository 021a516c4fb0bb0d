// Package natsauth owns the fleet's NATS trust chain in decentralised JWT
// mode: an operator, a system account, the fleet's named account, the
// fleet's own user, and the tenant subscriber users the dispatcher issues
// and revokes (docs/ARCHITECTURE.md §10).
//
// It is the only importer of nats-io/jwt and nats-io/nkeys. It makes and
// reads keys, JWTs, creds files and the servers' configuration fragment;
// it opens no connection (pushing an account JWT to the servers is the
// bus's job).
//
// Every tenant has one user key, derived from the account signing key and
// the tenant id, so all the creds a tenant was ever issued share one
// public key and one revocation entry revokes them all: NATS's own
// revocation list, kept in the account JWT, is the only record.
package natsauth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// Defaults of GenerateConfig and TenantCreds.
const (
	AccountNameDefault = "AGENTFLEET"
	ResolverDirDefault = "jwt"
	TTLDefault         = 24 * time.Hour
	// TTLMax bounds a tenant's creds: revocation covers the rest, but a
	// forgotten file should not work for years.
	TTLMax = 366 * 24 * time.Hour
)

// The files `agentctl nats-auth DIR` writes.
const (
	FileServerConf = "server.conf"
	FileFleetCreds = "fleet.creds"
	FileSigningKey = "signing.nk"
	FileSysCreds   = "sys.creds"
	FileOperatorNK = "operator.nk"
)

// GenerateConfig shapes a new trust chain.
type GenerateConfig struct {
	// AccountName names the fleet's account (default "AGENTFLEET").
	AccountName string
	// ResolverDir is where each server keeps account JWTs (the full
	// resolver's dir; default "jwt", relative to the server's working
	// directory). It must be per node and writable.
	ResolverDir string
}

// Setup is a generated trust chain: what the servers and the fleet need.
type Setup struct {
	// ServerConf is the configuration fragment every node includes.
	ServerConf []byte
	// FleetCreds is the fleet's own user (AGENTFLEET_NATS_CREDS).
	FleetCreds []byte
	// SigningKey is the dispatcher's issuer bundle
	// (AGENTFLEET_NATS_SIGNING_KEY): see LoadIssuer.
	SigningKey []byte
	// SysCreds is a system-account user, for operators' tools.
	SysCreds []byte
	// OperatorSeed is the operator's identity key; no process needs it.
	OperatorSeed []byte
	// Account is the fleet account's public key.
	Account string
}

// Generate makes a new operator, system account, fleet account and users.
func Generate(cfg GenerateConfig) (*Setup, error) {
	if cfg.AccountName == "" {
		cfg.AccountName = AccountNameDefault
	}
	if cfg.ResolverDir == "" {
		cfg.ResolverDir = ResolverDirDefault
	}
	if strings.ContainsAny(cfg.ResolverDir, "\"\n") {
		return nil, fmt.Errorf("resolver dir %q: must not contain quotes or newlines", cfg.ResolverDir)
	}
	var keys [5]nkeys.KeyPair
	for i, create := range []func() (nkeys.KeyPair, error){
		nkeys.CreateOperator, nkeys.CreateOperator, nkeys.CreateAccount, nkeys.CreateAccount, nkeys.CreateAccount,
	} {
		var err error
		if keys[i], err = create(); err != nil {
			return nil, fmt.Errorf("generate nkeys: %w", err)
		}
	}
	op, opSign, sysAcc, acc, accSign := keys[0], keys[1], keys[2], keys[3], keys[4]
	opPub, opSignPub := pub(op), pub(opSign)
	sysPub, accPub, accSignPub := pub(sysAcc), pub(acc), pub(accSign)

	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "agentfleet"
	oc.SigningKeys.Add(opSignPub)
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(op)
	if err != nil {
		return nil, fmt.Errorf("operator jwt: %w", err)
	}

	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(opSign)
	if err != nil {
		return nil, fmt.Errorf("system account jwt: %w", err)
	}

	ac := jwt.NewAccountClaims(accPub)
	ac.Name = cfg.AccountName
	ac.SigningKeys.Add(accSignPub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	accJWT, err := ac.Encode(opSign)
	if err != nil {
		return nil, fmt.Errorf("fleet account jwt: %w", err)
	}

	sysCreds, sysUserJWT, sysUserSeed, err := newUser("sys", sysAcc, sysPub)
	if err != nil {
		return nil, fmt.Errorf("system user: %w", err)
	}
	fleetCreds, _, _, err := newUser("fleet", accSign, accPub)
	if err != nil {
		return nil, fmt.Errorf("fleet user: %w", err)
	}

	opSeed, _ := op.Seed()
	opSignSeed, _ := opSign.Seed()
	accSignSeed, _ := accSign.Seed()
	var bundle bytes.Buffer
	bundle.WriteString("# agentfleet NATS issuer (AGENTFLEET_NATS_SIGNING_KEY): the fleet account's\n" +
		"# signing key (tenant users), an operator signing key (the account JWT with\n" +
		"# its revocations) and a system-account user (pushing it). Keep it secret.\n")
	fmt.Fprintf(&bundle, "# account: %s\n", accPub)
	writeBlock(&bundle, blockAccountKey, string(accSignSeed))
	writeBlock(&bundle, blockOperatorKey, string(opSignSeed))
	writeBlock(&bundle, blockSysJWT, sysUserJWT)
	writeBlock(&bundle, blockSysSeed, sysUserSeed)

	var conf bytes.Buffer
	fmt.Fprintf(&conf, "# agentfleet NATS auth (generated by `agentctl nats-auth`): include it in\n"+
		"# every node's configuration. Fleet account %q: %s\n", cfg.AccountName, accPub)
	fmt.Fprintf(&conf, "operator: %s\n", opJWT)
	fmt.Fprintf(&conf, "system_account: %s\n", sysPub)
	fmt.Fprintf(&conf, "resolver: {\n    type: full\n    dir: %q\n    allow_delete: false\n    interval: \"2m\"\n    timeout: \"5s\"\n}\n", cfg.ResolverDir)
	fmt.Fprintf(&conf, "resolver_preload: {\n    %s: %s\n    %s: %s\n}\n", sysPub, sysJWT, accPub, accJWT)

	return &Setup{
		ServerConf: conf.Bytes(), FleetCreds: fleetCreds, SigningKey: bundle.Bytes(), SysCreds: sysCreds,
		OperatorSeed: append(append([]byte(nil), opSeed...), '\n'), Account: accPub,
	}, nil
}

// ErrExists is returned by WriteDir when a file it would write exists.
var ErrExists = errors.New("exists")

// files are what WriteDir writes, in order.
var files = []string{FileServerConf, FileFleetCreds, FileSigningKey, FileSysCreds, FileOperatorNK}

// HasSet reports whether dir holds a whole set WriteDir wrote; a part of
// one is an error naming what is missing (a one-shot that died midway
// must not leave servers and fleet with halves of two sets).
func HasSet(dir string) (bool, error) {
	var have, missing []string
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			have = append(have, f)
		} else {
			missing = append(missing, f)
		}
	}
	switch {
	case len(missing) == 0:
		return true, nil
	case len(have) == 0:
		return false, nil
	}
	return false, fmt.Errorf("%s holds %s but not %s: remove it or write a new set with --force", dir, strings.Join(have, ", "), strings.Join(missing, ", "))
}

// WriteDir writes the setup's files into dir (mode 0600 for secrets); it
// refuses to replace any of them unless force is set.
func (s *Setup) WriteDir(dir string, force bool) error {
	set := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{FileServerConf, s.ServerConf, 0o644},
		{FileFleetCreds, s.FleetCreds, 0o600},
		{FileSigningKey, s.SigningKey, 0o600},
		{FileSysCreds, s.SysCreds, 0o600},
		{FileOperatorNK, s.OperatorSeed, 0o600},
	}
	if !force {
		for _, f := range set {
			if _, err := os.Stat(filepath.Join(dir, f.name)); err == nil {
				return fmt.Errorf("%s: %w (use --force to replace the whole set)", filepath.Join(dir, f.name), ErrExists)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for _, f := range set {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	return nil
}

func pub(kp nkeys.KeyPair) string {
	p, _ := kp.PublicKey()
	return p
}

// newUser makes a user key and its JWT signed by signer for account,
// returning the creds file, the JWT and the seed.
func newUser(name string, signer nkeys.KeyPair, account string) (creds []byte, userJWT, seed string, err error) {
	u, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", "", err
	}
	uc := jwt.NewUserClaims(pub(u))
	uc.Name = name
	if pub(signer) != account {
		uc.IssuerAccount = account
	}
	if userJWT, err = uc.Encode(signer); err != nil {
		return nil, "", "", err
	}
	s, _ := u.Seed()
	creds, err = jwt.FormatUserConfig(userJWT, s)
	return creds, userJWT, string(s), err
}

const (
	blockAccountKey  = "ACCOUNT SIGNING KEY"
	blockOperatorKey = "OPERATOR SIGNING KEY"
	blockSysJWT      = "SYSTEM USER JWT"
	blockSysSeed     = "SYSTEM USER NKEY SEED"
)

func writeBlock(w *bytes.Buffer, name, body string) {
	fmt.Fprintf(w, "-----BEGIN %s-----\n%s\n------END %s------\n", name, body, name)
}

// readBlocks parses writeBlock's output.
func readBlocks(data []byte) map[string]string {
	out := map[string]string{}
	lines := strings.Split(string(data), "\n")
	for i := 0; i+2 < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		name, ok := strings.CutPrefix(l, "-----BEGIN ")
		if !ok {
			continue
		}
		name = strings.TrimSuffix(name, "-----")
		if strings.TrimSpace(lines[i+2]) == "------END "+name+"------" {
			out[name] = strings.TrimSpace(lines[i+1])
			i += 2
		}
	}
	return out
}

// Subjects locate the fleet's subscriber-facing subjects: the bus's
// Config.Prefix and the events stream's name.
type Subjects struct {
	// Prefix is the subject prefix (default "af").
	Prefix string
	// EventsStream is the events stream (default "AF_EVENTS").
	EventsStream string
}

func (s Subjects) withDefaults() Subjects {
	if s.Prefix == "" {
		s.Prefix = "af"
	}
	if s.EventsStream == "" {
		s.EventsStream = "AF_EVENTS"
	}
	return s
}

// InboxPrefix is the inbox prefix a tenant's connection must use
// (nats.go CustomInboxPrefix, the nats CLI's --inbox-prefix): a tenant
// may subscribe only to its own inboxes, never to _INBOX.>, which in the
// fleet's account carries every reply (the workers' pulled turns, other
// tenants' replayed events).
func InboxPrefix(tenant string) string { return "_INBOX_" + tenant }

// TenantAPIPrefix is the JetStream API prefix a tenant's connection
// must use (nats.go jetstream.NewWithAPIPrefix, the nats CLI's
// --js-api-prefix): the dispatchers serve it (bus.TenantAPI), so that
// what a consumer-create request's body says (durable, deliver subject)
// is checked before the server sees it. Permissions see only subjects.
func TenantAPIPrefix(subj Subjects, tenant string) string {
	return subj.withDefaults().Prefix + ".js." + tenant
}

// TenantPermissions are what a tenant's user may do: subscribe to its
// events, its runs' response chunks (core NATS, <p>.stream.<tenant>.<run>),
// batch events and inboxes, and make JetStream requests through
// its API prefix; nothing reaches $JS.API directly.
func TenantPermissions(subj Subjects, tenant string) jwt.Permissions {
	subj = subj.withDefaults()
	return jwt.Permissions{
		Sub: jwt.Permission{Allow: jwt.StringList{
			subj.Prefix + ".events." + tenant + ".>",
			subj.Prefix + ".stream." + tenant + ".>",
			subj.Prefix + ".batches." + tenant + ".>",
			InboxPrefix(tenant) + ".>",
		}},
		Pub: jwt.Permission{Allow: jwt.StringList{TenantAPIPrefix(subj, tenant) + ".>"}},
	}
}

// Issuer issues and revokes tenant users; it is what the dispatcher holds
// (AGENTFLEET_NATS_SIGNING_KEY).
type Issuer struct {
	accountKey  nkeys.KeyPair // the fleet account's signing key
	account     string        // the fleet account's public key
	operatorKey nkeys.KeyPair
	sysJWT      string
	sysSeed     string
	subjects    Subjects
}

// LoadIssuer reads the issuer bundle Generate wrote (signing.nk).
func LoadIssuer(path string, subj Subjects) (*Issuer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("nats signing key: %w", err)
	}
	iss, err := ParseIssuer(data, subj)
	if err != nil {
		return nil, fmt.Errorf("nats signing key %s: %w", path, err)
	}
	return iss, nil
}

// ParseIssuer parses an issuer bundle.
func ParseIssuer(data []byte, subj Subjects) (*Issuer, error) {
	b := readBlocks(data)
	iss := &Issuer{sysJWT: b[blockSysJWT], sysSeed: b[blockSysSeed], subjects: subj.withDefaults()}
	var err error
	if iss.accountKey, err = seedOf(b, blockAccountKey, nkeys.PrefixByteAccount); err != nil {
		return nil, err
	}
	if iss.operatorKey, err = seedOf(b, blockOperatorKey, nkeys.PrefixByteOperator); err != nil {
		return nil, err
	}
	if _, err := jwt.DecodeUserClaims(iss.sysJWT); err != nil {
		return nil, fmt.Errorf("%s: %w (write the bundle again with agentctl nats-auth)", blockSysJWT, err)
	}
	if _, err := seedOf(b, blockSysSeed, nkeys.PrefixByteUser); err != nil {
		return nil, err
	}
	if iss.account, err = accountOfSigner(data); err != nil {
		return nil, err
	}
	return iss, nil
}

func seedOf(b map[string]string, name string, want nkeys.PrefixByte) (nkeys.KeyPair, error) {
	s, ok := b[name]
	if !ok {
		return nil, fmt.Errorf("no %s block (is this the signing.nk agentctl nats-auth wrote?)", name)
	}
	kp, err := nkeys.FromSeed([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if p, _, err := nkeys.DecodeSeed([]byte(s)); err != nil || p != want {
		return nil, fmt.Errorf("%s: not a %s seed", name, want)
	}
	return kp, nil
}

// accountOfSigner reads the fleet account's public key from the bundle's
// header line, written by Generate.
func accountOfSigner(data []byte) (string, error) {
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "# account: "); ok {
			if !nkeys.IsValidPublicAccountKey(v) {
				return "", fmt.Errorf("account line %q is not an account public key", v)
			}
			return v, nil
		}
	}
	return "", errors.New("no '# account: ' line (write the bundle again with agentctl nats-auth)")
}

// Account is the fleet account's public key.
func (i *Issuer) Account() string { return i.account }

// SystemUser is the system-account user that pushes account JWTs.
func (i *Issuer) SystemUser() (userJWT, seed string) { return i.sysJWT, i.sysSeed }

// TenantUser is the public key every creds of tenant share.
func (i *Issuer) TenantUser(tenant string) (string, error) {
	kp, err := i.tenantKey(tenant)
	if err != nil {
		return "", err
	}
	return pub(kp), nil
}

func (i *Issuer) tenantKey(tenant string) (nkeys.KeyPair, error) {
	seed, err := i.accountKey.Seed()
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, seed)
	m.Write([]byte("agentfleet tenant subscriber\x00" + tenant))
	return nkeys.FromRawSeed(nkeys.PrefixByteUser, m.Sum(nil))
}

// TenantCreds issues a creds file for tenant's subscriber user, valid for
// ttl (TTLDefault when zero, at most TTLMax).
func (i *Issuer) TenantCreds(tenant string, ttl time.Duration) ([]byte, error) {
	if tenant == "" || strings.ContainsAny(tenant, ".*> \t\r\n") {
		return nil, fmt.Errorf("tenant %q cannot be a subject token", tenant)
	}
	if ttl == 0 {
		ttl = TTLDefault
	}
	if ttl < time.Second || ttl > TTLMax {
		return nil, fmt.Errorf("ttl %s: use 1s to %s", ttl, TTLMax)
	}
	kp, err := i.tenantKey(tenant)
	if err != nil {
		return nil, err
	}
	uc := jwt.NewUserClaims(pub(kp))
	uc.Name = "tenant:" + tenant
	uc.IssuerAccount = i.account
	uc.Expires = time.Now().Add(ttl).Unix()
	uc.Permissions = TenantPermissions(i.subjects, tenant)
	uc.Tags.Add("agentfleet-tenant")
	userJWT, err := uc.Encode(i.accountKey)
	if err != nil {
		return nil, fmt.Errorf("sign tenant user: %w", err)
	}
	seed, _ := kp.Seed()
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	if err != nil {
		return nil, err
	}
	hint := "\n# agentfleet tenant " + tenant + ": subscribe to " + i.subjects.Prefix + ".events." + tenant +
		".> and " + i.subjects.Prefix + ".batches." + tenant + ".> (and " + i.subjects.Prefix + ".stream." + tenant + ".> for response chunks); JetStream clients use the API prefix " +
		TenantAPIPrefix(i.subjects, tenant) + " and the inbox prefix " + InboxPrefix(tenant) + ". Expires " + time.Unix(uc.Expires, 0).UTC().Format(time.RFC3339) + ".\n"
	return append(creds, hint...), nil
}

// RevokeTenant returns the fleet account's JWT re-signed with every creds
// of tenant issued up to at revoked. accountJWTs are the JWTs the servers
// answered a lookup with: the newest is the base, and the revocations of
// all of them are kept, so a node that lags loses nothing.
func (i *Issuer) RevokeTenant(accountJWTs []string, tenant string, at time.Time) (string, error) {
	var base *jwt.AccountClaims
	revs := jwt.RevocationList{}
	for _, s := range accountJWTs {
		ac, err := jwt.DecodeAccountClaims(s)
		if err != nil {
			return "", fmt.Errorf("decode the fleet account jwt: %w", err)
		}
		if ac.Subject != i.account {
			return "", fmt.Errorf("account jwt is %s's, not the fleet account %s", ac.Subject, i.account)
		}
		for k, t := range ac.Revocations {
			revs.Revoke(k, time.Unix(t, 0))
		}
		if base == nil || ac.IssuedAt > base.IssuedAt {
			base = ac
		}
	}
	if base == nil {
		return "", errors.New("no server holds the fleet account's jwt (is the servers' resolver the full one of server.conf?)")
	}
	user, err := i.TenantUser(tenant)
	if err != nil {
		return "", err
	}
	base.Revocations = revs
	base.RevokeAt(user, at)
	out, err := base.Encode(i.operatorKey)
	if err != nil {
		return "", fmt.Errorf("sign the fleet account jwt: %w", err)
	}
	return out, nil
}

// RevokedAt is when the newest of accountJWTs revokes tenant's creds up
// to (zero: never).
func (i *Issuer) RevokedAt(accountJWTs []string, tenant string) (time.Time, error) {
	var newest *jwt.AccountClaims
	for _, s := range accountJWTs {
		ac, err := jwt.DecodeAccountClaims(s)
		if err != nil {
			return time.Time{}, fmt.Errorf("decode the fleet account jwt: %w", err)
		}
		if newest == nil || ac.IssuedAt > newest.IssuedAt {
			newest = ac
		}
	}
	user, err := i.TenantUser(tenant)
	if err != nil || newest == nil {
		return time.Time{}, err
	}
	if t, ok := newest.Revocations[user]; ok {
		return time.Unix(t, 0), nil
	}
	return time.Time{}, nil
}

package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentfleet/agentfleet/internal/api"
	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/natsauth"
)

// natsAuthDirName is where dev mode (and any process running an embedded
// server) keeps the NATS auth files `agentctl nats-auth` would write.
const natsAuthDirName = "nats-auth"

// prepareEmbeddedNATSAuth secures the embedded server a process without
// AGENTFLEET_NATS_URL runs: unless the environment names creds already,
// it uses (making them on first start) the files of DataDir/nats-auth and
// points NATSCreds and NATSSigningKey at them.
func (c *Config) prepareEmbeddedNATSAuth() error {
	if c.NATSURL != "" || c.NATSCreds != "" || c.NATSSigningKey != "" {
		return nil
	}
	dir, err := filepath.Abs(filepath.Join(c.DataDir, natsAuthDirName))
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, natsauth.FileServerConf)); os.IsNotExist(err) {
		setup, err := natsauth.Generate(natsauth.GenerateConfig{ResolverDir: filepath.Join(dir, "jwt")})
		if err != nil {
			return err
		}
		if err := setup.WriteDir(dir, false); err != nil {
			return fmt.Errorf("dev NATS auth: %w", err)
		}
	}
	c.natsAuthDir = dir
	c.NATSCreds = filepath.Join(dir, natsauth.FileFleetCreds)
	c.NATSSigningKey = filepath.Join(dir, natsauth.FileSigningKey)
	return nil
}

// embeddedAuthConf is the server.conf the embedded server is secured
// with ("" without auth).
func (c Config) embeddedAuthConf() (string, error) {
	if c.natsAuthDir == "" {
		return "", nil
	}
	b, err := os.ReadFile(filepath.Join(c.natsAuthDir, natsauth.FileServerConf))
	if err != nil {
		return "", fmt.Errorf("embedded NATS auth: %w", err)
	}
	return string(b), nil
}

// natsCreds is api.NATSCreds over natsauth and the servers' resolver.
type natsCreds struct {
	issuer *natsauth.Issuer
	bus    *bus.Bus
	admin  func(ctx context.Context) (*bus.AccountAdmin, error)
}

// newNATSCreds loads the issuer (AGENTFLEET_NATS_SIGNING_KEY) for the
// fleet's bus and serves the tenants' JetStream API prefix on it (until
// the bus closes); nil without a signing key, whose fleet issues no
// tenant creds.
func newNATSCreds(cfg Config, b *bus.Bus, emb *bus.Embedded) (api.NATSCreds, error) {
	if cfg.NATSSigningKey == "" {
		return nil, nil
	}
	iss, err := natsauth.LoadIssuer(cfg.NATSSigningKey, natsauth.Subjects{Prefix: b.Prefix(), EventsStream: b.EventsStream()})
	if err != nil {
		return nil, fmt.Errorf("AGENTFLEET_NATS_SIGNING_KEY=%q: %w (write it with: agentctl nats-auth DIR)", cfg.NATSSigningKey, err)
	}
	if _, err := b.ServeTenantAPI(bus.TenantAPIConfig{MaxConsumers: cfg.NATSTenantConsumers}); err != nil {
		return nil, err
	}
	var opts []bus.Option
	if emb != nil {
		opts = append(opts, bus.WithEmbedded(emb))
	}
	return &natsCreds{issuer: iss, bus: b, admin: func(ctx context.Context) (*bus.AccountAdmin, error) {
		userJWT, seed := iss.SystemUser()
		return bus.ConnectAccountAdmin(ctx, bus.Config{URL: cfg.NATSURL, Name: "agentfleet-revoker"}, userJWT, seed, opts...)
	}}, nil
}

func (n *natsCreds) TenantCreds(_ context.Context, tenant string, ttl time.Duration) ([]byte, error) {
	return n.issuer.TenantCreds(tenant, ttl)
}

// RevokeTenantCreds reads the fleet account's JWT from the servers,
// pushes it back with the tenant's revocation, and checks that the
// servers hold it (another dispatcher's revocation at the same moment
// may have replaced it: then it tries again on top of that one). Then it
// deletes the consumers made with the tenant's creds: the servers have
// closed their connections, and nothing is delivered any more.
func (n *natsCreds) RevokeTenantCreds(ctx context.Context, tenant string) (time.Time, error) {
	admin, err := n.admin(ctx)
	if err != nil {
		return time.Time{}, err
	}
	defer admin.Close()
	at := time.Unix(time.Now().Unix(), 0)
	for attempt := 0; ; attempt++ {
		jwts, err := admin.LookupAccount(ctx, n.issuer.Account())
		if err != nil {
			return time.Time{}, err
		}
		if attempt > 0 {
			if got, err := n.issuer.RevokedAt(jwts, tenant); err == nil && !got.Before(at) {
				break
			}
			if attempt == 3 {
				return time.Time{}, fmt.Errorf("revoke %s's NATS creds: the servers still do not hold the revocation after %d pushes", tenant, attempt)
			}
		}
		next, err := n.issuer.RevokeTenant(jwts, tenant, at)
		if err != nil {
			return time.Time{}, err
		}
		if err := admin.PushAccount(ctx, next); err != nil {
			return time.Time{}, err
		}
	}
	// A creds issued within the revocation's second would be born
	// revoked (JWT times are whole seconds): let that second pass.
	select {
	case <-time.After(time.Until(at.Add(time.Second))):
	case <-ctx.Done():
	}
	// After that second, so that a create the tenant sent just before
	// its connection closed is gone too.
	if _, err := n.bus.DeleteTenantConsumers(ctx, tenant); err != nil {
		return time.Time{}, fmt.Errorf("revoke %s's NATS creds: revoked, but %w (revoke again to retry)", tenant, err)
	}
	return at, nil
}

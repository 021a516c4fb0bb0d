package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/natsauth"
)

// natsAuthCmd is `agentctl nats-auth [--account NAME] [--resolver-dir
// D] [--force | --if-missing] DIR`: the servers' and the fleet's side of
// NATS JWT auth. --if-missing keeps a whole existing set, so a one-shot
// deploy step can run at every start.
func (e cliEnv) natsAuthCmd() *cobra.Command {
	return leaf("nats-auth [flags] DIR", "Write NATS JWT auth for the servers and the fleet (operator, account, creds) to DIR",
		"agentctl nats-auth nats-auth/\nagentctl nats-auth --if-missing /var/lib/agentfleet/nats-auth",
		func(fs *pflag.FlagSet) runFunc {
			account := fs.String("account", natsauth.AccountNameDefault, "name of the fleet's NATS account")
			resolverDir := fs.String("resolver-dir", natsauth.ResolverDirDefault, "where each server keeps account JWTs (per node, writable; relative to its working directory)")
			force := fs.Bool("force", false, "replace an existing set (every creds issued with it stops working)")
			ifMissing := fs.Bool("if-missing", false, "keep a whole existing set and exit 0 (for a deploy step run at every start)")
			return func(_ context.Context, pos []string) error {
				if len(pos) != 1 {
					return usagef("nats-auth takes one DIR")
				}
				if *force && *ifMissing {
					return usagef("nats-auth takes --force or --if-missing, not both")
				}
				return e.natsAuth(pos[0], *account, *resolverDir, *force, *ifMissing)
			}
		})
}

func (e cliEnv) natsAuth(dir, account, resolverDir string, force, ifMissing bool) error {
	if ifMissing {
		has, err := natsauth.HasSet(dir)
		if err != nil {
			return err
		}
		if has {
			fmt.Fprintf(e.stdout, "NATS auth in %s kept (--if-missing)\n", dir)
			return nil
		}
	}
	setup, err := natsauth.Generate(natsauth.GenerateConfig{AccountName: account, ResolverDir: resolverDir})
	if err != nil {
		return err
	}
	if err := setup.WriteDir(dir, force); err != nil {
		if errors.Is(err, natsauth.ErrExists) {
			return usagef("%v", err)
		}
		return err
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	// nats-server resolves an include relative to the including file,
	// even an absolute path, so the hint is relative to DIR's parent.
	fmt.Fprintf(e.stdout, `NATS auth written to %s (fleet account %s)
  %-12s in each nats-server's configuration file, by its path from that file's directory
               (nats-server joins even an absolute path to it): include "%s"
               for a configuration beside %s; or start nats-server with -c %s
  %-12s the fleet's processes:  AGENTFLEET_NATS_CREDS=%s
  %-12s the dispatchers (issue and revoke tenants' creds):  AGENTFLEET_NATS_SIGNING_KEY=%s
  %-12s a system-account user for operators' tools (nats --creds %s server list)
  %-12s the operator's key: no process needs it; keep it offline
Tenants' subscribers: agentctl tenants nats-creds ID -o ID.creds
`, dir, setup.Account, natsauth.FileServerConf, filepath.ToSlash(filepath.Join(filepath.Base(filepath.Clean(dir)), natsauth.FileServerConf)),
		filepath.Base(filepath.Clean(dir)), p(natsauth.FileServerConf), natsauth.FileFleetCreds, p(natsauth.FileFleetCreds),
		natsauth.FileSigningKey, p(natsauth.FileSigningKey), natsauth.FileSysCreds, p(natsauth.FileSysCreds), natsauth.FileOperatorNK)
	return nil
}

// tenantNATSCredsCmd is `agentctl tenants nats-creds [--ttl D]
// [--revoke] [-o FILE] ID`.
func (e cliEnv) tenantNATSCredsCmd() *cobra.Command {
	return leaf("nats-creds [flags] ID", "Issue NATS creds a tenant's subscribers read its events with (admin token)",
		"agentctl tenants nats-creds -o acme.creds acme\nagentctl tenants nats-creds --ttl 1h acme\nagentctl tenants nats-creds --revoke acme",
		func(fs *pflag.FlagSet) runFunc {
			ttl := fs.Duration("ttl", 0, "how long the creds work (default 24h)")
			revoke := fs.Bool("revoke", false, "revoke every creds issued to the tenant so far instead")
			out := fs.StringP("out", "o", "", "write the creds to this file (mode 0600) instead of stdout")
			return func(ctx context.Context, pos []string) error {
				if len(pos) != 1 {
					return usagef("tenants nats-creds takes one tenant ID")
				}
				return e.tenantNATSCreds(ctx, e.client(), pos[0], *ttl, *revoke, *out)
			}
		})
}

func (e cliEnv) tenantNATSCreds(ctx context.Context, c *client.Client, tenant string, ttl time.Duration, revoke bool, out string) error {
	if revoke {
		if ttl != 0 || out != "" {
			return usagef("tenants nats-creds --revoke takes no --ttl or -o")
		}
		r, err := c.RevokeNATSCreds(ctx, tenant)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "revoked every NATS creds of %s issued up to %s\n", r.Tenant, r.RevokedBefore.Format(time.RFC3339))
		return nil
	}
	if ttl < 0 {
		return usagef("--ttl %s: must be positive", ttl)
	}
	creds, err := c.NATSCreds(ctx, tenant, ttl)
	if err != nil {
		return err
	}
	if out == "" {
		_, err := e.stdout.Write(creds)
		return err
	}
	if err := os.WriteFile(out, creds, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "wrote %s; subscribe with: nats sub --creds %s '%s'\n", out, out, "af.events."+tenant+".>")
	return nil
}

package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// AccountAdmin is a system-account connection to servers in JWT mode (a
// full account resolver): it reads an account's JWT as the servers hold
// it and pushes a new one, which is how revocations reach every node and
// every live connection.
type AccountAdmin struct {
	nc      *nats.Conn
	timeout time.Duration
}

// lookupSettle is how long LookupAccount keeps collecting answers after
// the first: every node of a cluster answers, and one that lags must not
// hide a newer JWT.
const lookupSettle = 250 * time.Millisecond

// ConnectAccountAdmin connects as the system-account user (userJWT,
// seed) to cfg.URL, or in-process with WithEmbedded.
func ConnectAccountAdmin(ctx context.Context, cfg Config, userJWT, seed string, opts ...Option) (*AccountAdmin, error) {
	var co connectOptions
	for _, o := range opts {
		o(&co)
	}
	cfg = cfg.withDefaults()
	if cfg.URL == "" && co.embedded == nil {
		return nil, errors.New("account admin: no NATS URL")
	}
	nopts := append([]nats.Option{nats.Name(cfg.Name), nats.UserJWTAndSeed(userJWT, seed), nats.Timeout(cfg.RequestTimeout)}, tlsOptions(cfg)...)
	nc, url, err := co.dial(cfg, nopts)
	if err != nil {
		return nil, fmt.Errorf("connect to nats %s as the system account: %w", url, err)
	}
	return &AccountAdmin{nc: nc, timeout: cfg.RequestTimeout}, nil
}

// Close closes the connection.
func (a *AccountAdmin) Close() { a.nc.Close() }

// LookupAccount returns the account JWTs the servers answer with, one
// per answering node (empty answers, from nodes that do not know the
// account, left out).
func (a *AccountAdmin) LookupAccount(ctx context.Context, account string) ([]string, error) {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	inbox := a.nc.NewInbox()
	sub, err := a.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("look up account %s: %w", account, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := a.nc.PublishRequest("$SYS.REQ.ACCOUNT."+account+".CLAIMS.LOOKUP", inbox, nil); err != nil {
		return nil, fmt.Errorf("look up account %s: %w", account, err)
	}
	var out []string
	answered := false
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if answered {
				return out, nil
			}
			return nil, fmt.Errorf("look up account %s: no server answered: %w", account, err)
		}
		if !answered {
			answered = true
			var settle context.CancelFunc
			ctx, settle = context.WithTimeout(ctx, lookupSettle)
			defer settle()
		}
		if len(m.Data) > 0 {
			out = append(out, string(m.Data))
		}
	}
}

// PushAccount hands the servers a new account JWT; the cluster's
// resolvers share it, and the server applies it to live connections.
func (a *AccountAdmin) PushAccount(ctx context.Context, accountJWT string) error {
	ctx, cancel := a.bound(ctx)
	defer cancel()
	m, err := a.nc.RequestWithContext(ctx, "$SYS.REQ.CLAIMS.UPDATE", []byte(accountJWT))
	if err != nil {
		return fmt.Errorf("push account jwt: %w", err)
	}
	var resp struct {
		Data *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"data"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("push account jwt: answer %q: %w", m.Data, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("push account jwt: the server refused it (%d): %s", resp.Error.Code, resp.Error.Description)
	}
	return nil
}

func (a *AccountAdmin) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, a.timeout)
}

// dial connects with nopts to cfg.URL, or in-process to the embedded
// server; it returns the URL it used ("" in-process).
func (co connectOptions) dial(cfg Config, nopts []nats.Option) (*nats.Conn, string, error) {
	url := cfg.URL
	if co.embedded != nil {
		nopts = append(nopts, nats.InProcessServer(inProcess{co.embedded}))
		url = ""
	}
	nc, err := nats.Connect(url, nopts...)
	return nc, url, err
}

// Prefix is the subject prefix in use (Config.Prefix).
func (b *Bus) Prefix() string { return b.n.prefix }

// EventsStream is the events stream's name (AF_EVENTS by default).
func (b *Bus) EventsStream() string { return b.n.stream(streamEvents) }

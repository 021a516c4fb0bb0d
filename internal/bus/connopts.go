package bus

import (
	"time"

	"github.com/nats-io/nats.go"
)

// natsOptions is every option the fleet's connections are made with: the
// one place to add a way of authenticating or securing them.
//
// With several URLs (a cluster) the client starts from a random one and,
// when its server dies, reconnects to another of the list or of those the
// cluster advertised, forever.
func (b *Bus) natsOptions() []nats.Option {
	cfg := b.cfg
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		// No reconnect buffer: a publish while disconnected fails at once
		// and the caller retries it, rather than bytes waiting in memory
		// that vanish with the process.
		nats.ReconnectBufSize(-1),
		nats.CustomReconnectDelay(reconnectDelay),
		// Notice a dead server within ~30s even when no TCP reset arrives.
		nats.PingInterval(10 * time.Second),
		nats.MaxPingsOutstanding(3),
		nats.ConnectHandler(b.onConnect),
		nats.ReconnectHandler(b.onConnect),
		nats.DisconnectErrHandler(b.onDisconnect),
		nats.ErrorHandler(b.onAsyncError),
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	return append(opts, tlsOptions(cfg)...)
}

// tlsOptions are Config's TLS settings as client options.
func tlsOptions(cfg Config) []nats.Option {
	var opts []nats.Option
	if cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	if cfg.TLSCert != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	return opts
}

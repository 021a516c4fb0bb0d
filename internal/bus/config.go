package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Defaults of Config. Each is what a field gets when left zero.
const (
	PrefixDefault       = "af"
	StreamPrefixDefault = "AF_"
	EventsMaxAgeDefault = 7 * 24 * time.Hour
	DLQMaxAgeDefault    = 30 * 24 * time.Hour
	DedupWindowDefault  = 30 * time.Minute
	// EventsDedupWindowDefault is four times AckWaitDefault: long enough
	// for a worker's retry, or a redelivered turn, to publish events
	// again without storing them twice.
	EventsDedupWindowDefault = 2 * time.Minute
	AckWaitDefault           = 30 * time.Second
	MaxDeliverDefault        = 5
	MaxAckPendingDefault     = 10_000
	MaxWaitingDefault        = 4096
	PullExpiryDefault        = 5 * time.Second
	RequestTimeoutDefault    = 5 * time.Second
	ConnectTimeoutDefault    = 30 * time.Second
	ReplicasDefault          = 1
)

// MinDedupWindow is the shortest duplicate window the queues may have. A
// worker that dies after publishing turn n+1 but before acking turn n
// republishes turn n+1 when turn n comes back, which can be several
// AckWaits and NakWithDelays later; the window must outlast that, or the
// republished turn runs twice.
const MinDedupWindow = 30 * time.Minute

// Config says which server to use and how the fleet's streams and consumers
// are shaped. The zero value of every field means its default; Connect
// validates the result.
type Config struct {
	// URL is the NATS server URL, or several separated by commas (a
	// cluster: give every node, so the first connection needs any one
	// alive; the client also learns the others from the server).
	// tls:// URLs require TLS. Ignored when connecting in-process with
	// WithEmbedded.
	URL string
	// Name identifies this connection in the server's monitoring
	// (e.g. "worker-3").
	Name string
	// CredsFile is a NATS credentials file (JWT and seed) for secured
	// servers; user and password may also be given in URL.
	CredsFile string
	// TLSCA is a PEM file of the CA that signed the servers'
	// certificates (empty: the system roots); TLSCert and TLSKey are a
	// PEM client certificate and its key, for servers that verify
	// clients. Either set makes the connection TLS.
	TLSCA   string
	TLSCert string
	TLSKey  string

	// Prefix is the first subject token(s) of every subject (default "af").
	Prefix string
	// StreamPrefix starts every stream and lease bucket name (default
	// "AF_"). Two fleets can share a server when both prefixes differ.
	StreamPrefix string
	// Replicas of every stream and lease bucket the Bus creates
	// (default 1; 3 on a production cluster). A stream that exists with
	// another count keeps it until ApplyReplicas, which only the fleet's
	// lease holder calls, so processes with different values never flip
	// it back and forth.
	Replicas int

	// EventsMaxAge is how long run events are kept (default 7 days).
	EventsMaxAge time.Duration
	// DLQMaxAge is how long dead letters are kept (default 30 days).
	DLQMaxAge time.Duration
	// DedupWindow is the turn queues' and the dead letters' duplicate
	// window (default and minimum 30 minutes, see MinDedupWindow).
	DedupWindow time.Duration
	// EventsDedupWindow is the events stream's duplicate window (default
	// 2 minutes, at most EventsMaxAge). The server holds every message
	// id for the window, about 150 bytes each, and a turn publishes
	// about six events: at 1,000 turns/s, 30 minutes would be 1.6 GB.
	// An event published again after the window is stored twice, with
	// the same seq, which consumers skip (seq is dense per run); a
	// duplicate turn, which would run twice, is what the longer
	// DedupWindow guards against.
	EventsDedupWindow time.Duration
	// Observer marks a client that watches a fleet rather than being part
	// of it (the bench's subscriber): it creates the streams that are
	// missing but leaves existing ones as the fleet's processes
	// configured them, where every other client sets its own
	// configuration (EventsMaxAge, the duplicate windows) on them.
	Observer bool

	// AckWait is how long a delivered turn may go without an Ack or an
	// InProgress before the server redelivers it (default 30s).
	AckWait time.Duration
	// MaxDeliver is the fleet's dead-letter threshold: the number of
	// deliveries after which a failing turn is dead-lettered (default 5).
	// The server-side consumer never stops redelivering; see Delivery.
	MaxDeliver int
	// MaxAckPending bounds the un-acked messages of one TurnSource across
	// the fleet, i.e. the fleet's concurrency per queue (default 10000).
	MaxAckPending int
	// MaxWaiting bounds the pull requests waiting on one TurnSource across
	// the fleet, i.e. idle worker slots (default 4096). The server cannot
	// change it on an existing consumer.
	MaxWaiting int
	// PullExpiry is how long one pull request waits at the server before
	// Next issues a fresh one (default 5s).
	PullExpiry time.Duration

	// RequestTimeout bounds calls whose context has no deadline (default 5s).
	RequestTimeout time.Duration
	// ConnectTimeout bounds Connect when its context has no deadline
	// (default 30s).
	ConnectTimeout time.Duration

	// Logger receives connection events (disconnects, reconnects, async
	// errors). Nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = PrefixDefault
	}
	if c.StreamPrefix == "" {
		c.StreamPrefix = StreamPrefixDefault
	}
	if c.Replicas == 0 {
		c.Replicas = ReplicasDefault
	}
	if c.EventsMaxAge == 0 {
		c.EventsMaxAge = EventsMaxAgeDefault
	}
	if c.DLQMaxAge == 0 {
		c.DLQMaxAge = DLQMaxAgeDefault
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = DedupWindowDefault
	}
	if c.EventsDedupWindow == 0 {
		c.EventsDedupWindow = EventsDedupWindowDefault
	}
	if c.AckWait == 0 {
		c.AckWait = AckWaitDefault
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = MaxDeliverDefault
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = MaxAckPendingDefault
	}
	if c.MaxWaiting == 0 {
		c.MaxWaiting = MaxWaitingDefault
	}
	if c.PullExpiry == 0 {
		c.PullExpiry = PullExpiryDefault
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = RequestTimeoutDefault
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = ConnectTimeoutDefault
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate(embedded bool) error {
	var errs []error
	if c.URL == "" && !embedded {
		errs = append(errs, errors.New("URL is empty: set it to the NATS server (e.g. nats://127.0.0.1:4222) or connect in-process with WithEmbedded"))
	}
	for _, tok := range strings.Split(c.Prefix, ".") {
		if err := validToken(tok); err != nil {
			errs = append(errs, fmt.Errorf("Prefix %q: every dot-separated part must be a plain subject token: %w", c.Prefix, err))
			break
		}
	}
	if err := validName(c.StreamPrefix); err != nil {
		errs = append(errs, fmt.Errorf("StreamPrefix %q: %w", c.StreamPrefix, err))
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("Replicas is %d: use 1 to 5 (odd numbers on a cluster)", c.Replicas))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("TLSCert and TLSKey go together: set both (a client certificate and its key) or neither"))
	}
	if c.DedupWindow < MinDedupWindow {
		errs = append(errs, fmt.Errorf("DedupWindow is %s: use at least %s so a republished turn is still recognised as a duplicate", c.DedupWindow, MinDedupWindow))
	}
	if c.EventsDedupWindow < time.Second {
		errs = append(errs, fmt.Errorf("EventsDedupWindow is %s: use at least 1s (default %s)", c.EventsDedupWindow, EventsDedupWindowDefault))
	}
	if c.EventsMaxAge < time.Second {
		errs = append(errs, fmt.Errorf("EventsMaxAge is %s: use at least 1s (default %s)", c.EventsMaxAge, EventsMaxAgeDefault))
	}
	if c.DLQMaxAge < time.Second {
		errs = append(errs, fmt.Errorf("DLQMaxAge is %s: use at least 1s (default %s)", c.DLQMaxAge, DLQMaxAgeDefault))
	}
	if c.AckWait < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("AckWait is %s: use at least 100ms (default %s)", c.AckWait, AckWaitDefault))
	}
	if c.MaxDeliver < 1 {
		errs = append(errs, fmt.Errorf("MaxDeliver is %d: use 1 or more (default %d)", c.MaxDeliver, MaxDeliverDefault))
	}
	if c.MaxAckPending < 1 {
		errs = append(errs, fmt.Errorf("MaxAckPending is %d: use 1 or more (default %d)", c.MaxAckPending, MaxAckPendingDefault))
	}
	if c.MaxWaiting < 1 {
		errs = append(errs, fmt.Errorf("MaxWaiting is %d: use 1 or more (default %d)", c.MaxWaiting, MaxWaitingDefault))
	}
	if c.PullExpiry < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("PullExpiry is %s: use at least 100ms (default %s)", c.PullExpiry, PullExpiryDefault))
	}
	if c.RequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("RequestTimeout is %s: use a positive duration (default %s)", c.RequestTimeout, RequestTimeoutDefault))
	}
	if c.ConnectTimeout <= 0 {
		errs = append(errs, fmt.Errorf("ConnectTimeout is %s: use a positive duration (default %s)", c.ConnectTimeout, ConnectTimeoutDefault))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bus config: %w", err)
	}
	return nil
}

// Option changes how Connect connects, beyond the plain data of Config.
type Option func(*connectOptions)

type connectOptions struct {
	embedded *Embedded
}

// WithEmbedded connects in-process to an embedded server, through a pipe
// instead of a socket; Config.URL is then ignored. Reconnects go to the same
// server object, so this suits one-process deployments (agentctl dev) and
// tests; a test that restarts its server connects by URL instead.
func WithEmbedded(e *Embedded) Option {
	return func(o *connectOptions) { o.embedded = e }
}

// Package bus owns everything the fleet does with NATS: the JetStream
// streams and consumers, the subject layout, the JSON envelopes on the
// wire, the dead-letter policy, a leader lease for singleton roles, and an
// embedded nats-server for development and tests.
//
// It is the only importer of nats.go and nats-server. Nothing outside sees a
// driver type (jetstream.Msg, nats.Conn, server.Server): callers get Turn,
// Delivery, agentfleet.Event, Control and Lease, and the errors declared
// here. It knows nothing about runs beyond their tenant, id, turn number and
// wake count: what a turn means belongs to the worker and internal/loop.
//
// # Subjects and streams
//
// <p> is Config.Prefix ("af"); stream names are Config.StreamPrefix ("AF_")
// followed by the suffix below, so two fleets can share one server by giving
// each its own Prefix and StreamPrefix.
//
//	what            stream     subjects                          retention  notes
//	turn queue      AF_RUNQ    <p>.runq.<tenant>.<run>           WorkQueue  every turn to execute; msg id <run>/turn/<n>[/w<wake>]
//	dispatch queue  AF_WORK    <p>.work.<tenant>.<run>           WorkQueue  fed from AF_RUNQ by the fair scheduler, and by workers after a Direct turn they could not follow in place; workers pull here
//	events          AF_EVENTS  <p>.events.<tenant>.<run>.<type>  Limits     MaxAge Config.EventsMaxAge (7d); msg id <run>/ev/<seq>
//	batch events    AF_EVENTS  <p>.batches.<tenant>.<batch>.<type>  Limits  progress (at most once a second) and done; msg id <batch>/<type>/<n>
//	dead letters    AF_DLQ     <p>.dlq.<tenant>.<run>            Limits     MaxAge Config.DLQMaxAge (30d); original payload + Af-Dlq-* headers
//	control         (none)     <p>.ctl.<tenant>.<run>.<verb>     core NATS  best effort (cancel); the store is the durable truth
//	tenant JS API   (none)     <p>.js.<tenant>.<$JS.API path>    core NATS  tenants' creds' only JetStream access: TenantAPI (dispatchers, one queue group) checks and forwards (tenantapi.go)
//	worker slots    (none)     <p>.slots.<durable>               core NATS  each worker's slot count every second, 0 when it stops; the scheduler sums them (slots.go)
//	leases          KV_AF_LEASE_<name>  (KV bucket per lease)    KV, TTL    singleton roles such as the scheduler
//	lease probes    (none)     <p>.lease.<name>.<token>          core NATS  each contender answers on its own; a contender asks the holder's, and "no responders" twice means it died (lease.go)
//
// All streams use file storage. The turn queues and the dead letters have a
// duplicate window of Config.DedupWindow (at least 30 minutes), the events
// Config.EventsDedupWindow (2 minutes: the server holds each id for the
// window, and events are most of the messages; consumers skip a seq they
// have seen). Every publish carries a message id, so a worker that crashed
// after publishing turn n+1 and before acking turn n can publish it again
// on redelivery without creating a second copy. Tenant and run ids become
// subject tokens and are validated as such (no '.', '*', '>', whitespace).
// Streams are created or updated idempotently on Connect and again after
// every reconnect, so a server that came back with an empty store is
// repopulated by the first client that sees it.
//
// # Clusters and replicas
//
// Config.URL may name every node of a cluster; the connection starts from
// one and moves to a survivor when its node dies (natsOptions, the one
// place the connection's options are made). Streams and lease buckets are
// created with Config.Replicas copies, but an existing one keeps its count
// on Connect: only ApplyReplicas changes it, and the fleet calls that
// from its scheduler's lease holder alone, so processes configured apart
// never flip a stream back and forth. More replicas than a single server
// can hold fail Connect at once (ErrReplicas), more than a cluster can
// place after a grace for the cluster to form. Replicas reports where each
// stream's copies are and whether they are current.
//
// # Pull one at a time
//
// TurnSource.Next issues a pull request for exactly one message, and only
// when called. A worker calls it for a free slot; when the delivery says
// more are queued (Delivery.Pending) and it has more free slots, it takes
// up to that many with one FetchReady, which asks only for what is queued
// now. So a worker with 8 free slots holds at most 8 un-acked messages and
// never a buffered one: the AckWait clock of a message starts when the
// server delivers it, and a message sitting in a client buffer behind a
// slow turn would be redelivered to another worker while this one still
// intends to run it. The consumer is
// one durable pull consumer shared by every worker (AckExplicit, AckWait,
// MaxDeliver unlimited). A worker keeps a long turn alive with
// Delivery.KeepAlive (InProgress every AckWait/3, from one goroutine of
// the Bus for all kept deliveries), retries with
// NakWithDelay (the consumer has no BackOff: the caller knows why it failed
// and how long to wait), and acks only after the turn is committed and its
// continuation published.
//
// # Dead letters
//
// The server never gives up on a message (MaxDeliver is unlimited); the
// fleet decides. Delivery.LastAttempt reports that this delivery is the
// Config.MaxDeliver-th (default 5), so a failure should dead-letter rather
// than retry; Delivery.Exhausted reports a delivery beyond that budget, for
// example after workers crashed on it repeatedly, which should be
// dead-lettered without running it. Delivery.DeadLetter copies the original
// payload to AF_DLQ with the headers Af-Dlq-Reason, Af-Dlq-Subject,
// Af-Dlq-Stream, Af-Dlq-Stream-Seq and Af-Dlq-Deliveries (message id
// dlq/<stream>/<seq>, so a retried dead-lettering is stored once) and then
// terminates the original. Envelopes that cannot be decoded are
// dead-lettered by Next itself and never reach the caller.
//
// # Restarts
//
// The connection reconnects forever with capped, jittered backoff. The
// client's reconnect buffer is disabled on purpose: while disconnected every
// publish fails fast and the caller retries it (all publishes are
// idempotent by message id), instead of the bytes sitting in a buffer that
// is lost if the process dies. After every reconnect the Bus re-ensures the
// streams, and a TurnSource re-ensures its stream and durable consumer
// before its next pull; a pull that is in flight when the connection drops
// is abandoned, and a message that still arrives for it is Nak'ed so it is
// redelivered at once rather than after AckWait. A server that restarts with
// its store keeps the queue and consumer state; one that restarts empty
// gets the streams and consumers back but, naturally, not the messages:
// the store of record is what re-publishes them.
package bus

package bus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrReplicas: the server cannot hold the configured replicas (a single
// server asked for more than one, or a cluster with fewer JetStream
// servers than the replicas asked for). Connect fails with it.
var ErrReplicas = errors.New("replicas exceed the nats cluster")

// streamShapeKey is the stream metadata key under which applyStream keeps
// a digest of the configuration it applied.
const streamShapeKey = "agentfleet.shape"

// streamShape is the digest of sc as this process would apply it, its
// replicas and metadata aside (the lease holder owns the one, the digest
// lives in the other).
func streamShape(sc jetstream.StreamConfig) string {
	sc.Replicas, sc.Metadata = 0, nil
	raw, err := json.Marshal(sc)
	if err != nil {
		panic(fmt.Sprintf("bus: stream config %s does not encode: %v", sc.Name, err))
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:12])
}

// applyStream creates the stream sc, or updates an existing one to sc
// except for its replicas: an existing stream keeps its count until the
// lease holder calls ApplyReplicas, so processes configured apart never
// flip it back and forth. An existing stream already of sc's shape (its
// metadata holds the digest) is left alone: every process connects, and
// an update that changes nothing still takes the stream's locks against
// consumers being created on it (nats-server 2.15 races a stream update
// with a consumer create in its file store). An Observer's Bus leaves an
// existing stream as the fleet configured it.
func (b *Bus) applyStream(ctx context.Context, sc jetstream.StreamConfig) error {
	shape := streamShape(sc)
	sc.Metadata = map[string]string{streamShapeKey: shape}
	for attempt := 0; ; attempt++ {
		s, err := b.js.Stream(ctx, sc.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = b.js.CreateStream(ctx, sc)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) && attempt == 0 {
				continue // another process created it meanwhile, with its own shape
			}
			return b.replicasErr(err)
		}
		if err != nil || b.cfg.Observer {
			return err
		}
		have := s.CachedInfo().Config
		if have.Metadata[streamShapeKey] == shape {
			return nil
		}
		if have := have.Replicas; have != sc.Replicas {
			b.warnReplicas(sc.Name, have)
			sc.Replicas = have
		}
		_, err = b.js.UpdateStream(ctx, sc)
		return err
	}
}

// warnReplicas says, once per stream and count, that a stream keeps a
// replica count other than this process's.
func (b *Bus) warnReplicas(stream string, have int) {
	b.replicaWarnMu.Lock()
	seen := b.replicaWarned[stream] == have
	b.replicaWarned[stream] = have
	b.replicaWarnMu.Unlock()
	if !seen {
		b.log.Warn("stream keeps its replicas until the scheduler lease holder applies its own setting",
			"stream", stream, "replicas", have, "configured", b.cfg.Replicas)
	}
}

// checkClustered fails when more than one replica is asked of a server
// that is not part of a cluster: the mistake is clear before any stream
// is touched.
func (b *Bus) checkClustered() error {
	if b.cfg.Replicas > 1 && b.nc.ConnectedClusterName() == "" {
		return fmt.Errorf("%w: %d replicas asked, but the nats server %s is not part of a cluster (a single server holds 1): lower the replicas or run a JetStream cluster of at least %d servers",
			ErrReplicas, b.cfg.Replicas, b.nc.ConnectedServerName(), b.cfg.Replicas)
	}
	return nil
}

// replicasErr names a server's refusal to place the replicas for what it
// is; other errors pass unchanged.
func (b *Bus) replicasErr(err error) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return err
	}
	switch apiErr.ErrorCode {
	case 10074, 10005, 10023: // replicas not supported (single server), no suitable peers, insufficient resources
		return fmt.Errorf("%w: the nats cluster %q cannot place %d replicas (%v): lower the replicas, or run at least %d JetStream servers, all up",
			ErrReplicas, b.nc.ConnectedClusterName(), b.cfg.Replicas, err, b.cfg.Replicas)
	}
	return err
}

// fleetStreams is the name of every stream of this fleet: the queues,
// events and dead letters, and the streams behind its lease buckets.
func (b *Bus) fleetStreams(ctx context.Context) ([]string, error) {
	ctx, cancel := b.apiCtx(ctx)
	defer cancel()
	var names []string
	for _, sc := range b.streamConfigs() {
		names = append(names, sc.Name)
	}
	leases := "KV_" + b.n.leaseBucket("")
	lister := b.js.StreamNames(ctx)
	for name := range lister.Name() {
		if strings.HasPrefix(name, leases) {
			names = append(names, name)
		}
	}
	if err := lister.Err(); err != nil {
		return nil, opErr(ctx, fmt.Errorf("list streams: %w", err))
	}
	return names, nil
}

// ApplyReplicas sets every stream and lease bucket of the fleet to
// Config.Replicas, the one change Connect leaves to the lease holder (the
// scheduler calls it when it starts leading). It reports the streams it
// changed; the server moves their data to the new peers in the
// background (see Replicas).
func (b *Bus) ApplyReplicas(ctx context.Context) (changed []string, err error) {
	if err := b.checkConn(); err != nil {
		return nil, err
	}
	if err := b.checkClustered(); err != nil {
		return nil, err
	}
	names, err := b.fleetStreams(ctx)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		info, err := b.streamInfo(ctx, name)
		if err != nil {
			return changed, err
		}
		sc := info.Config
		if sc.Replicas == b.cfg.Replicas {
			continue
		}
		sc.Replicas = b.cfg.Replicas
		uctx, cancel := b.apiCtx(ctx)
		_, err = b.js.UpdateStream(uctx, sc)
		err = opErr(uctx, err)
		cancel()
		if err != nil {
			return changed, fmt.Errorf("set %s to %d replicas: %w", name, b.cfg.Replicas, b.replicasErr(err))
		}
		b.log.Info("stream replicas changed", "stream", name, "replicas", b.cfg.Replicas)
		changed = append(changed, name)
	}
	return changed, nil
}

// StreamReplicas is where one stream's copies live, from the stream's
// info.
type StreamReplicas struct {
	Stream string
	// Replicas is the configured count.
	Replicas int
	// Leader is the server name of the copy that takes writes ("" while
	// the stream has no leader, or on a single server).
	Leader string
	// Peers are the other copies.
	Peers []Peer
}

// Peer is one follower copy of a stream.
type Peer struct {
	Name string
	// Current: caught up with the leader.
	Current bool
	// Offline: its server has not been seen recently.
	Offline bool
	// Lag is how many operations it is behind.
	Lag uint64
}

// Current reports whether the stream has a leader and replicas-1
// followers, every one caught up.
func (r StreamReplicas) Current() bool {
	if r.Leader == "" || len(r.Peers) != r.Replicas-1 {
		return false
	}
	for _, p := range r.Peers {
		if !p.Current || p.Offline {
			return false
		}
	}
	return true
}

// Replicas reports where the copies of the fleet's streams and lease
// buckets are, for operators and the cluster bench (which kills the node
// leading a stream and waits for its copies to be current again).
func (b *Bus) Replicas(ctx context.Context) ([]StreamReplicas, error) {
	if err := b.checkConn(); err != nil {
		return nil, err
	}
	names, err := b.fleetStreams(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]StreamReplicas, 0, len(names))
	for _, name := range names {
		info, err := b.streamInfo(ctx, name)
		if err != nil {
			return nil, err
		}
		r := StreamReplicas{Stream: name, Replicas: info.Config.Replicas}
		if c := info.Cluster; c != nil {
			r.Leader = c.Leader
			for _, p := range c.Replicas {
				r.Peers = append(r.Peers, Peer{Name: p.Name, Current: p.Current, Offline: p.Offline, Lag: p.Lag})
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// streamInfo asks for one stream's info, bounded by RequestTimeout: in a
// cluster that is electing a leader a request can go unanswered.
func (b *Bus) streamInfo(ctx context.Context, name string) (*jetstream.StreamInfo, error) {
	ctx, cancel := b.apiCtx(ctx)
	defer cancel()
	s, err := b.js.Stream(ctx, name)
	if err != nil {
		return nil, opErr(ctx, fmt.Errorf("stream %s: %w", name, err))
	}
	return s.CachedInfo(), nil
}

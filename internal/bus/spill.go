package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// TenantSources lists the tenant-filtered sources (FilterTenant) on queue
// q, by tenant, with how many turns each has waiting, delivered or not:
// a scheduler taking over finds there the tenants whose turns its
// predecessor spilled.
func (b *Bus) TenantSources(ctx context.Context, q Queue) (map[string]TenantSource, error) {
	if err := q.valid(); err != nil {
		return nil, err
	}
	ctx, cancel := b.opCtx(ctx)
	defer cancel()
	st, err := b.js.Stream(ctx, b.n.queueStream(q))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list sources on %s: %w", q, err)
	}
	out := map[string]TenantSource{}
	lister := st.ListConsumers(ctx)
	for info := range lister.Info() {
		toks, ok := b.n.tokensAfter(info.Config.FilterSubject, q.String(), 2)
		if !ok || toks[0] == "*" || toks[1] != "*" {
			continue
		}
		out[toks[0]] = TenantSource{Durable: info.Name, Waiting: info.NumPending + uint64(info.NumAckPending)}
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("list sources on %s: %w", q, err)
	}
	return out, nil
}

// TenantSource is a tenant-filtered source TenantSources found.
type TenantSource struct {
	Durable string
	// Waiting counts the tenant's turns in the queue, delivered or not.
	Waiting uint64
}

// Delete removes the source's consumer, for a source whose queue is
// drained: a tenant's spill source is not kept once its turns are back.
func (s *TurnSource) Delete(ctx context.Context) error {
	s.ensureMu.Lock()
	defer s.ensureMu.Unlock()
	actx, cancel := s.b.apiCtx(ctx)
	defer cancel()
	err := s.b.js.DeleteConsumer(actx, s.stream, s.durable)
	s.invalidate()
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return opErr(actx, fmt.Errorf("delete consumer %s on %s: %w", s.durable, s.stream, err))
	}
	return nil
}

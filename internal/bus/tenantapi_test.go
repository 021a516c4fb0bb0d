package bus

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// What a tenant's consumer may be: the rules TenantAPI holds a create
// to, before the server sees it (the fleet's e2e tests drive them with
// a tenant's creds).
func TestTenantConsumerRules(t *testing.T) {
	a := &TenantAPI{b: &Bus{n: names{prefix: "af", streamPrefix: "AF_"}}}
	none := jetstream.AckNonePolicy
	for _, c := range []struct {
		name string
		cfg  jetstream.ConsumerConfig
		want string // "" allowed, else a part of the refusal
	}{
		{"ordered", jetstream.ConsumerConfig{Name: "x_1", FilterSubject: "af.events.acme.r1.>", AckPolicy: none}, ""},
		{"whole tenant", jetstream.ConsumerConfig{FilterSubjects: []string{"af.events.acme.>", "af.batches.acme.>"}, AckPolicy: none}, ""},
		{"push to own inbox", jetstream.ConsumerConfig{DeliverSubject: "_INBOX_acme.abc", FilterSubject: "af.events.acme.>", AckPolicy: none}, ""},
		{"durable", jetstream.ConsumerConfig{Durable: "d", FilterSubject: "af.events.acme.>", AckPolicy: none}, "durable_name"},
		{"push to work queue", jetstream.ConsumerConfig{DeliverSubject: "af.work.acme.r1", FilterSubject: "af.events.acme.>", AckPolicy: none}, "deliver_subject"},
		{"push to the fleet's inboxes", jetstream.ConsumerConfig{DeliverSubject: "_INBOX.abc", FilterSubject: "af.events.acme.>", AckPolicy: none}, "deliver_subject"},
		{"push to a longer tenant's inbox", jetstream.ConsumerConfig{DeliverSubject: "_INBOX_acmecorp.abc", FilterSubject: "af.events.acme.>", AckPolicy: none}, "deliver_subject"},
		{"bare inbox prefix", jetstream.ConsumerConfig{DeliverSubject: "_INBOX_acme", FilterSubject: "af.events.acme.>", AckPolicy: none}, "deliver_subject"},
		{"no filter", jetstream.ConsumerConfig{AckPolicy: none}, "filter_subject: required"},
		{"another tenant", jetstream.ConsumerConfig{FilterSubject: "af.events.globex.>", AckPolicy: none}, "filter_subject"},
		{"a longer tenant", jetstream.ConsumerConfig{FilterSubject: "af.events.acmecorp.>", AckPolicy: none}, "filter_subject"},
		{"wildcard tenant", jetstream.ConsumerConfig{FilterSubject: "af.events.*.r1.>", AckPolicy: none}, "filter_subject"},
		{"every tenant", jetstream.ConsumerConfig{FilterSubject: "af.events.>", AckPolicy: none}, "filter_subject"},
		{"tenant prefix only", jetstream.ConsumerConfig{FilterSubject: "af.events.acme.", AckPolicy: none}, "filter_subject"},
		{"one of two outside", jetstream.ConsumerConfig{FilterSubjects: []string{"af.events.acme.>", "af.runq.acme.>"}, AckPolicy: none}, "filter_subject"},
		{"acks", jetstream.ConsumerConfig{FilterSubject: "af.events.acme.>", AckPolicy: jetstream.AckExplicitPolicy}, "ack_policy"},
		{"replicas", jetstream.ConsumerConfig{FilterSubject: "af.events.acme.>", AckPolicy: none, Replicas: 3}, "num_replicas"},
		{"bad name", jetstream.ConsumerConfig{Name: "a.b", FilterSubject: "af.events.acme.>", AckPolicy: none}, "name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := a.checkConsumer("acme", &c.cfg)
			if c.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, c.want)
		})
	}
}

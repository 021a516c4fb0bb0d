package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Slot announcements tell the fair scheduler how many turns the workers of
// one consumer can run at once. The consumer's state says how many turns
// they are running (its ack-pending count) but not how many they could:
// a worker keeps one pull request parked whatever its free slots, so the
// parked requests count idle workers, not idle slots. Each worker
// therefore publishes its slot count on <p>.slots.<durable> every
// SlotsAnnounceEvery, and 0 when it stops; the scheduler sums the
// announcements it heard within SlotsTTL. Nothing stores them: a
// scheduler that starts or reconnects knows every worker again within
// one period, and until then it falls back to the parked pull requests.
const (
	SlotsAnnounceEvery = time.Second
	// SlotsTTL is how long an announcement counts: three periods, so one
	// lost message does not drop a live worker's slots.
	SlotsTTL = 3 * SlotsAnnounceEvery
)

type slotsAnnouncement struct {
	Worker string `json:"worker"`
	Slots  int    `json:"slots"`
}

func (n names) slotsSubject(durable string) string { return n.prefix + ".slots." + durable }

// AnnounceSlots publishes that worker (an id unique to the process) runs
// up to slots turns at once from the consumer durable. It is best effort,
// like control: a nil error says the message was handed to the
// connection, not that a scheduler heard it.
func (b *Bus) AnnounceSlots(durable, worker string, slots int) error {
	if err := validName(durable); err != nil {
		return fmt.Errorf("announce slots: durable: %w", err)
	}
	if worker == "" || slots < 0 {
		return fmt.Errorf("announce slots: need a worker id and slots >= 0 (got %q, %d)", worker, slots)
	}
	if err := b.checkConn(); err != nil {
		return fmt.Errorf("announce slots: %w", err)
	}
	data, err := json.Marshal(slotsAnnouncement{Worker: worker, Slots: slots})
	if err != nil {
		return fmt.Errorf("announce slots: %w", err)
	}
	if err := b.nc.Publish(b.n.slotsSubject(durable), data); err != nil {
		return fmt.Errorf("announce slots: %w", err)
	}
	return nil
}

// SlotTally sums the slots announced by the workers of one consumer.
type SlotTally struct {
	ttl   time.Duration
	now   func() time.Time
	stop  func()
	mu    sync.Mutex
	heard map[string]slotsHeard // worker id -> its last announcement
}

type slotsHeard struct {
	slots int
	at    time.Time
}

// TallySlots listens to the slot announcements of the workers of the
// consumer durable until Close.
func (b *Bus) TallySlots(ctx context.Context, durable string) (*SlotTally, error) {
	if err := validName(durable); err != nil {
		return nil, fmt.Errorf("tally slots: durable: %w", err)
	}
	t := &SlotTally{ttl: SlotsTTL, now: time.Now, heard: map[string]slotsHeard{}}
	stop, err := b.subscribe(ctx, b.n.slotsSubject(durable), t.hear)
	if err != nil {
		return nil, fmt.Errorf("tally slots: %w", err)
	}
	t.stop = stop
	return t, nil
}

func (t *SlotTally) hear(m *nats.Msg) {
	var a slotsAnnouncement
	if err := json.Unmarshal(m.Data, &a); err != nil || a.Worker == "" || a.Slots < 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if a.Slots == 0 {
		delete(t.heard, a.Worker)
		return
	}
	t.heard[a.Worker] = slotsHeard{slots: a.Slots, at: t.now()}
}

// Total is the sum of the slots of the workers heard from within
// SlotsTTL; 0 when none was.
func (t *SlotTally) Total() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	now, total := t.now(), 0
	for w, h := range t.heard {
		if now.Sub(h.at) > t.ttl {
			delete(t.heard, w)
			continue
		}
		total += h.slots
	}
	return total
}

// Close stops listening.
func (t *SlotTally) Close() { t.stop() }

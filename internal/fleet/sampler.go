package fleet

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet/internal/bus"
	"github.com/agentfleet/agentfleet/internal/scheduler"
	"github.com/agentfleet/agentfleet/wire"
)

// Fleet sampling, for the console's picture of the fleet
// (GET /v1/fleet/stats).
const (
	// FleetSampleEveryDefault is how often the dispatcher samples.
	FleetSampleEveryDefault = 10 * time.Second
	// FleetSampleKeep is how far back the samples reach.
	FleetSampleKeep = time.Hour
)

// fleetSampler keeps the last hour of what the dispatcher can see of the
// fleet without asking the workers: the slots they announce (the
// scheduler's tally, bus.TallySlots), the turns delivered and not acked
// on the workers' consumer (slots in use), and the turns waiting in
// AF_RUNQ, AF_SPILL and undelivered in AF_WORK. Three JetStream info
// requests a sample; nothing is stored. Run is its owner: it samples
// until its context ends.
type fleetSampler struct {
	bus    *bus.Bus
	every  time.Duration
	logger *slog.Logger

	mu      sync.Mutex
	samples []wire.FleetSample // a ring of cap(samples), next the oldest once full
	next    int
}

func newFleetSampler(b *bus.Bus, every time.Duration, logger *slog.Logger) *fleetSampler {
	if every <= 0 {
		every = FleetSampleEveryDefault
	}
	n := max(1, int(FleetSampleKeep/every))
	return &fleetSampler{bus: b, every: every, logger: logger, samples: make([]wire.FleetSample, 0, n)}
}

// FleetSamples returns the samples kept, oldest first.
func (f *fleetSampler) FleetSamples() (time.Duration, []wire.FleetSample) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]wire.FleetSample, 0, len(f.samples))
	if len(f.samples) == cap(f.samples) {
		out = append(out, f.samples[f.next:]...)
		out = append(out, f.samples[:f.next]...)
	} else {
		out = append(out, f.samples...)
	}
	return f.every, out
}

func (f *fleetSampler) keep(s wire.FleetSample) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.samples) < cap(f.samples) {
		f.samples = append(f.samples, s)
		return
	}
	f.samples[f.next] = s
	f.next = (f.next + 1) % cap(f.samples)
}

// Run samples at once and then every f.every until ctx ends. A sample
// that fails (NATS away) is skipped: the picture has a gap, not a zero.
func (f *fleetSampler) Run(ctx context.Context) error {
	slots, err := f.bus.TallySlots(ctx, scheduler.WorkersDefault)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		f.logger.Warn("fleet sampler: cannot listen to the workers' slots; the console shows no fleet picture", "err", err)
		<-ctx.Done()
		return nil
	}
	defer slots.Close()
	var work *bus.TurnSource
	tick := time.NewTicker(f.every)
	defer tick.Stop()
	// The first announcements arrive within a second of listening; the
	// first sample waits for them rather than report no slots.
	first := time.NewTimer(min(f.every, bus.SlotsAnnounceEvery+100*time.Millisecond))
	defer first.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-first.C:
		case <-tick.C:
		}
		if work == nil {
			if work, err = f.bus.TurnSource(ctx, bus.QueueWork, scheduler.WorkersDefault); err != nil {
				f.logger.Debug("fleet sampler: open the workers' queue", "err", err)
				work = nil
				continue
			}
		}
		s, err := f.sample(ctx, slots, work)
		if err != nil {
			f.logger.Debug("fleet sampler: sample skipped", "err", err)
			continue
		}
		f.keep(s)
	}
}

func (f *fleetSampler) sample(ctx context.Context, slots *bus.SlotTally, work *bus.TurnSource) (wire.FleetSample, error) {
	bl, err := work.Pending(ctx)
	if err != nil {
		return wire.FleetSample{}, err
	}
	runq, err := f.bus.QueueDepth(ctx, bus.QueueRunQ)
	if err != nil {
		return wire.FleetSample{}, err
	}
	spill, err := f.bus.QueueDepth(ctx, bus.QueueSpill)
	if err != nil {
		return wire.FleetSample{}, err
	}
	return wire.FleetSample{
		At: time.Now().UTC().Truncate(time.Millisecond), Slots: slots.Total(), SlotsInUse: bl.AckPending,
		QueueDepth: int64(runq + spill + bl.Undelivered),
	}, nil
}

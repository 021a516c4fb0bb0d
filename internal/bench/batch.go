package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/wire"
)

// batch submits Runs runs as one batch (POST /v1/batches, JSONL streamed
// from a pipe, so neither side holds the whole body) and measures its
// admission, from the first byte sent to the 202 (when every run is
// durable and queued: the bench checks that the store counts them all
// queued or further), then the turns/s while the batch runs, from the 202
// to the last run's end. Peak RSS (this process and its children: the
// fleet, unless --url) is sampled throughout. Compare with `bench
// throughput` for the same runs submitted one by one.
func (e *env) batch(ctx context.Context) error {
	if err := e.warmup(ctx, e.cfg.Warmup); err != nil {
		return err
	}
	t, err := e.tenant(ctx, "batch")
	if err != nil {
		return err
	}
	f := &BatchFigures{Inputs: e.cfg.Runs, IdleRSS: rssTree()}
	stopRSS := e.sampleRSS(&f.PeakRSS)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeBatchInputs(pw, t.tag, e.cfg.Runs, e.cfg.Turns)) }()
	e.say("admitting %d inputs as one batch", e.cfg.Runs)
	local := e.fleet.local()
	var cpu0 cpuSample
	if local {
		cpu0 = e.sampleCPU()
	}
	start := time.Now()
	b, err := t.c.SubmitBatch(ctx, client.BatchSubmitParams{MaxTurns: e.cfg.Turns + 1}, pr)
	admitted := time.Now()
	_ = pr.Close()
	if err != nil {
		stopRSS()
		return fmt.Errorf("submit the batch: %w", err)
	}
	if local {
		cpu1 := e.sampleCPU()
		f.AdmissionCPU = durPtr(cpu1.self - cpu0.self + cpu1.kids - cpu0.kids)
		if e.rep.Parameters.Store == "postgres" && cpu1.postgres > cpu0.postgres {
			f.AdmissionCPUPostgres = durPtr(cpu1.postgres - cpu0.postgres)
		}
	}
	f.Admission = Duration(admitted.Sub(start))
	f.AdmittedPerSec = float64(b.Total) / admitted.Sub(start).Seconds()
	t.submitted.Store(int64(b.Total))
	if st := e.fleet.store(); st != nil {
		queued, err := countRuns(ctx, st, t, func(agentfleet.RunStatus) bool { return true })
		if err != nil {
			stopRSS()
			return err
		}
		f.DurableAtAdmission = queued
	}
	e.startProgress(e.turnRate(e.cfg.Runs))
	waitErr := e.waitAll(ctx, t)
	detected := time.Now()
	stopRSS()
	var subs []submission
	err = t.c.BatchResults(ctx, b.ID, -1, false, func(r wire.BatchResult) error {
		subs = append(subs, submission{i: r.Index, id: r.RunID, at: start})
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the batch's results: %w", err)
	}
	counts, _, last, err := e.finish(ctx, t, subs, 0, waitErr)
	if err != nil {
		return err
	}
	run := wallTime(admitted, last, detected)
	f.Wall = Duration(run)
	f.TurnsPerSec = float64(counts.Turns) / run.Seconds()
	f.RunsPerSec = float64(counts.Completed) / run.Seconds()
	e.rep.Figures.Batch = f
	e.rep.checkRuns()
	if e.fleet.store() != nil {
		e.rep.check("every run durable and queued at the 202", f.DurableAtAdmission == e.cfg.Runs, false,
			"%d of %d runs in the store when the batch was admitted", f.DurableAtAdmission, e.cfg.Runs)
	}
	goal := BatchAdmissionGoalSQLite
	if e.rep.Parameters.Store == "postgres" {
		goal = BatchAdmissionGoalPostgres
	}
	if e.cfg.Runs >= 100_000 {
		e.rep.check("100,000 inputs admitted within the goal", time.Duration(f.Admission) <= goal, true,
			"admitted in %s (goal %s on %s)", f.Admission, goal, orDash(e.rep.Parameters.Store))
	}
	e.rep.note("admission: from the first byte of the POST to its 202; turns/s: from the 202 to the last run's end; RSS: this process and its children, sampled every 100ms")
	return nil
}

// Admission goals for 100,000 inputs.
const (
	BatchAdmissionGoalPostgres = 10 * time.Second
	BatchAdmissionGoalSQLite   = 15 * time.Second
)

// BatchFigures: one batch of Inputs runs.
type BatchFigures struct {
	Inputs int `json:"inputs"`
	// Admission is from the first byte of the POST to its 202.
	Admission      Duration `json:"admission"`
	AdmittedPerSec float64  `json:"admitted_per_sec"`
	// AdmissionCPU is the CPU this process and its children (the whole
	// fleet, the bench's client included) spent during the admission,
	// and AdmissionCPUPostgres the local PostgreSQL's: what the
	// admission costs whatever else the machine runs.
	AdmissionCPU         *Duration `json:"admission_cpu,omitempty"`
	AdmissionCPUPostgres *Duration `json:"admission_cpu_postgres,omitempty"`
	// DurableAtAdmission is how many of the batch's runs the store had
	// right after the 202 (the bench's own store only).
	DurableAtAdmission int `json:"durable_at_admission,omitempty"`
	// Wall is from the 202 to the last run's end.
	Wall        Duration `json:"wall"`
	TurnsPerSec float64  `json:"turns_per_sec"`
	RunsPerSec  float64  `json:"runs_per_sec"`
	IdleRSS     int64    `json:"idle_rss_bytes"`
	PeakRSS     int64    `json:"peak_rss_bytes"`
}

// writeBatchInputs writes n bench tasks of tag as JSONL.
func writeBatchInputs(w io.Writer, tag string, n, turns int) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	for i := range n {
		if _, err := fmt.Fprintf(bw, `{"message":%q,"custom_id":"%d"}`+"\n", taskMessage(tag, i, turns), i); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// sampleRSS keeps *peak at the most RSS seen, every 100ms, until the
// returned stop is called.
func (e *env) sampleRSS(peak *int64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var rs rssSampler
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if v := rs.sample(); v > *peak {
				*peak = v
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

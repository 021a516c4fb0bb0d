package fleet_test

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/client"
	"github.com/agentfleet/agentfleet/internal/console/browsertest"
	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/sqlite"
	"github.com/agentfleet/agentfleet/wire"
)

// Seeded for the console's pictures at scale: 10,000 runs and a batch of
// 100,000 inputs, of which 60,000 have ended over the half hour before
// the test (the rest are queued). Under the race detector SQLite (pure
// Go) is many times slower, so the store holds a twentieth of that and
// the render time is logged, not bounded (as the other wall-clock bounds
// of these tests).
var (
	chartScale     = map[bool]int{false: 1, true: 20}[raceEnabled]
	chartRuns      = 10_000 / chartScale
	chartBatch     = 100_000 / chartScale
	chartBatchDone = 60_000 / chartScale
)

// renderMax is what each page may take to render, charts included.
const renderMax = time.Second

// drawn is a JavaScript expression: the chart sel names has a uPlot on a
// canvas, holding at least min x values, and the canvas has pixels of
// the colour rgb (a series it drew, not only its axes).
func drawn(kind string, min int, rgb [3]int) string {
	return fmt.Sprintf(`(() => {
  const el = document.querySelector('[data-chart=%q]');
  const c = el && el.querySelector('canvas');
  if (!c || !el.uplot || el.uplot.data[0].length < %d || c.width === 0) return false;
  const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  for (let i = 0; i < px.length; i += 4) {
    if (px[i+3] > 200 && Math.abs(px[i] - %d) < 3 && Math.abs(px[i+1] - %d) < 3 && Math.abs(px[i+2] - %d) < 3) return true;
  }
  return false;
})()`, kind, min, rgb[0], rgb[1], rgb[2])
}

// chartsState describes the page's charts, for a failure message.
const chartsState = `JSON.stringify([...document.querySelectorAll('[data-chart]')].map((el) => ({
  chart: el.dataset.chart, canvas: !!el.querySelector('canvas'), points: el.uplot ? el.uplot.data[0].length : null,
  series: el.uplot ? el.uplot.data.length : null, hidden: el.closest('[hidden]') !== null })))`

// plotted is drawn without the colour: the chart holds min x values.
func plotted(kind string, min int) string {
	return fmt.Sprintf(`(() => { const el = document.querySelector('[data-chart=%q]');
  return !!(el && el.querySelector('canvas') && el.uplot && el.uplot.data[0].length >= %d); })()`, kind, min)
}

var (
	rgbModel     = [3]int{0x1f, 0x6f, 0xb2} // colors.model, colors.prompt, colors.inUse
	rgbWaitModel = [3]int{0x7f, 0xa8, 0xcf} // colors.waitModel, colors.rate
	rgbCompleted = [3]int{0x1c, 0x7c, 0x3c} // colors.completed, colors.done
)

// TestConsoleCharts drives the console's pictures in headless Chromium:
// a run's timeline, a tenant's tokens per hour and runs by outcome, a
// batch's progress and rate, and the fleet's slots and queue depth (the
// admin's). With 10,000 runs and a 100,000-input batch in the store,
// each page renders, charts included, in under a second (measured from
// following the link to the last chart drawn; without -race, see
// chartScale). Screenshots go to the
// test's artifact directory (go test -artifacts).
func TestConsoleCharts(t *testing.T) {
	br := browsertest.Start(t)
	m := &consoleModel{gates: map[int]chan struct{}{}}
	path := filepath.Join(t.TempDir(), "fleet.db")
	st, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
	require.NoError(t, err)
	f := setupFleetWith(t, fleetOptions{responder: m.respond, store: st})
	t.Cleanup(m.releaseAll)
	url := f.dispatcher.URL()
	shots := t.ArtifactDir()
	t.Logf("screenshots in %s", shots)

	// A real run, for the timeline: three turns.
	run := f.submit(wire.RunCreateRequest{Message: "compute 3"})
	require.Equal(t, agentfleet.StatusCompleted, f.wait(run.ID, 30*time.Second).Status)

	batchID, bigKey := seedCharts(t, f, path)

	p := signIn(t, br, url, "admin-secret")
	// open follows a console link and waits for ready, failing when it
	// took renderMax or more.
	open := func(t *testing.T, name, hash, ready string) time.Duration {
		t.Helper()
		start := time.Now()
		browsertest.Eval[bool](p, fmt.Sprintf(`(location.hash = %q, true)`, hash))
		for !browsertest.Eval[bool](p, ready) {
			if time.Since(start) > 10*time.Second {
				p.Screenshot(shots, "failed-"+strings.ReplaceAll(name, " ", "-"))
				t.Fatalf("%s never rendered: charts %s\nconsole: %v", name, browsertest.Eval[string](p, chartsState), p.Messages())
			}
			time.Sleep(20 * time.Millisecond)
		}
		took := time.Since(start)
		t.Logf("requests: %s", browsertest.Eval[string](p, `performance.getEntriesByType('resource').filter((e) => e.name.includes('/v1/')).slice(-5).map((e) => e.name.replace(/^.*\/v1/, '') + ' ' + Math.round(e.duration) + 'ms').join(', ')`))
		t.Logf("%s (%s) rendered in %s", name, hash, took.Round(time.Millisecond))
		if !raceEnabled {
			require.Less(t, took, renderMax, "%s took %s to render", name, took)
		}
		return took
	}
	and := func(exprs ...string) string {
		out := "true"
		for _, e := range exprs {
			out += " && " + e
		}
		return out
	}

	t.Run("RunTimeline", func(t *testing.T) {
		open(t, "run page", "#/runs/"+run.ID, and(
			drawn("timeline", 3, rgbModel), `document.querySelector('[data-chart=timeline]').dataset.turns === '3'`,
			`document.querySelectorAll('.turn').length === 3`))
		u := `document.querySelector('[data-chart=timeline]').uplot`
		require.Equal(t, []float64{1, 2, 3}, browsertest.Eval[[]float64](p, u+`.data[0]`), "one bar per turn")
		require.Equal(t, 6, browsertest.Eval[int](p, u+`.data.length`), "x and five phases")
		// Stacked: the top series is the whole turn, at least as tall as
		// any phase below it.
		for turn := range 3 {
			top := browsertest.Eval[float64](p, fmt.Sprintf(`%s.data[1][%d]`, u, turn))
			require.Greater(t, top, 0.0, "turn %d took some time", turn+1)
			for s := 2; s < 6; s++ {
				require.GreaterOrEqual(t, top, browsertest.Eval[float64](p, fmt.Sprintf(`%s.data[%d][%d] || 0`, u, s, turn)))
			}
		}
		// Every turn has its queue wait and model call apart (a turn's
		// model_call says when it began): no "queue + model call" bar.
		require.False(t, browsertest.Eval[bool](p, drawn("timeline", 3, rgbWaitModel)), "no turn's queue wait and model call drawn as one bar")
		p.Screenshot(shots, "chart-run-timeline")
		requireClean(t, p)
	})

	t.Run("Usage", func(t *testing.T) {
		open(t, "usage page", "#/usage?tenant=big", and(
			drawn("tokens", 168, rgbModel), drawn("outcomes", 168, rgbCompleted), plotted("fleet", 1)))
		u := func(kind string) string { return `document.querySelector('[data-chart=` + kind + `]').uplot` }
		require.Equal(t, 168, browsertest.Eval[int](p, u("tokens")+`.data[0].length`), "an hour a bar, 7 days")
		// The top of the stack is prompt + completion: the seeded hours.
		total := browsertest.Eval[float64](p, u("tokens")+`.data[1].reduce((a, b) => a + b, 0)`)
		require.Equal(t, float64(seededTokens), total)
		ended := browsertest.Eval[float64](p, u("outcomes")+`.data[1].reduce((a, b) => a + b, 0)`)
		require.Equal(t, float64(chartRuns+chartBatchDone), ended, "every seeded run ended within the week, and the batch's")
		require.Contains(t, p.Text(".usage .totals"), commas(chartRuns+chartBatchDone)+" runs ended")
		// The fleet: the two workers' 16 slots, sampled by the dispatcher.
		require.Equal(t, 16.0, browsertest.Eval[float64](p, u("fleet")+`.data[1].at(-1)`))
		p.Screenshot(shots, "chart-usage")
		requireClean(t, p)
	})

	t.Run("Batch", func(t *testing.T) {
		open(t, "batch page", "#/batches/"+batchID, and(
			drawn("batch", 2, rgbCompleted), drawn("batch", 2, rgbWaitModel), // the line, the rate's bars
			`document.querySelectorAll('tr[data-index]').length === 100`,
			fmt.Sprintf(`document.querySelector('.batch-progress')?.dataset.done === '%d'`, chartBatchDone)))
		u := `document.querySelector('[data-chart=batch]').uplot`
		require.Equal(t, float64(chartBatchDone), browsertest.Eval[float64](p, u+`.data[2].at(-1)`), "the line rises to the runs ended")
		require.Equal(t, float64(chartBatch), browsertest.Eval[float64](p, u+`.data[3][0]`), "the inputs")
		require.Greater(t, browsertest.Eval[float64](p, `Math.max(...`+u+`.data[1])`), 0.0, "a rate")
		p.Screenshot(shots, "chart-batch")
		requireClean(t, p)
	})

	t.Run("OtherPages", func(t *testing.T) {
		// As the tenant with the 110,000 runs; open reads p.
		admin := p
		p = signIn(t, br, url, bigKey)
		defer func() { p = admin }()
		open(t, "batches page", "#/batches", `document.querySelectorAll('table.runs tbody tr').length === 1`)
		open(t, "runs page", "#/runs", `document.querySelectorAll('table.runs tbody tr').length === 50`)
		open(t, "tenants page", "#/tenants", `!!document.querySelector('.tenant[data-tenant="big"] .budget')`)
		open(t, "usage page", "#/usage", and(drawn("tokens", 168, rgbModel), drawn("outcomes", 168, rgbCompleted)))
		open(t, "batch page", "#/batches/"+batchID, and(drawn("batch", 2, rgbCompleted), `document.querySelectorAll('tr[data-index]').length === 100`))
		requireClean(t, p)
	})

	t.Run("TenantKey", func(t *testing.T) {
		// A tenant's key sees its own usage and no fleet.
		tp := signIn(t, br, url, f.tenantKey)
		browsertest.Eval[bool](tp, `(location.hash = '#/usage', true)`)
		tp.WaitJS("acme's tokens drawn", drawn("tokens", 168, rgbModel))
		require.Equal(t, 360.0, browsertest.Eval[float64](tp, `document.querySelector('[data-chart=tokens]').uplot.data[1].reduce((a, b) => a + b, 0)`), "the run's 360 tokens")
		require.True(t, browsertest.Eval[bool](tp, `document.querySelector('.fleet-stats').hidden`))
		requireClean(t, tp)
	})

	t.Run("Client", func(t *testing.T) {
		ts, err := f.tenant.TenantStats(f.ctx, "acme", 0)
		require.NoError(t, err)
		require.Len(t, ts.Buckets, 7*24)
		require.Equal(t, int64(300), ts.Buckets[len(ts.Buckets)-1].PromptTokens+ts.Buckets[len(ts.Buckets)-2].PromptTokens, "the run's three calls, this hour or the last")
		_, err = f.tenant.TenantStats(f.ctx, "big", 0)
		require.True(t, client.IsNotFound(err), "another tenant's: %v", err)
		bs, err := f.admin.BatchStats(f.ctx, batchID)
		require.NoError(t, err)
		require.Equal(t, chartBatch, bs.Total)
		require.Equal(t, chartBatchDone, bs.Done)
		fs, err := f.admin.FleetStats(f.ctx)
		require.NoError(t, err)
		require.Equal(t, 10, fs.IntervalSeconds)
		require.NotEmpty(t, fs.Samples)
		require.Equal(t, 16, fs.Samples[len(fs.Samples)-1].Slots)
		_, err = f.tenant.FleetStats(f.ctx)
		require.Error(t, err, "the admin's alone")
	})

	if dir := os.Getenv("AGENTFLEET_SCREENSHOT_DIR"); dir != "" {
		// The README's picture (docs/console-charts.png).
		open(t, "run page", "#/runs/"+run.ID, drawn("timeline", 3, rgbModel))
		p.Screenshot(dir, "console-charts-run")
		open(t, "usage page", "#/usage?tenant=big", and(drawn("tokens", 168, rgbModel), plotted("fleet", 1)))
		p.Screenshot(dir, "console-charts")
	}
}

// commas writes n as the console does (en: 70,000).
func commas(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// seedHours is how far back seedCharts writes: within the stats' week
// (which ends with the hour now is in) even when the clock passes an
// hour while the test runs.
const seedHours = 7*24 - 1

// seededTokens are the usage seedCharts settles for tenant big.
var seededTokens = func() int64 {
	var n int64
	for h := range seedHours {
		n += seedPrompt(h) + seedCompletion(h)
	}
	return n
}()

func seedPrompt(h int) int64     { return int64(2000 + (h%24)*400 + (h*7919)%1500) }
func seedCompletion(h int) int64 { return int64(300 + (h*104729)%700) }

// seedCharts records, in the store alone (nothing runs them), tenant
// big's 10,000 ended runs spread over the last week with a week of
// hourly usage, and its batch of 100,000 inputs, 60,000 of them ended
// over the last half hour. It returns the batch's id and big's key.
func seedCharts(t *testing.T, f *testFleet, path string) (string, string) {
	t.Helper()
	started := time.Now()
	big, err := f.admin.CreateTenant(f.ctx, wire.TenantRequest{ID: "big"})
	require.NoError(t, err)
	now := time.Now().UTC()
	for h := range seedHours {
		_, err := f.store.BudgetSettle(f.ctx, store.BudgetSettleParams{Tenant: "big", RunID: "seed", Model: "m",
			Usage: agentfleet.Usage{PromptTokens: seedPrompt(h), CompletionTokens: seedCompletion(h)},
			Now:   now.Add(-time.Duration(seedHours-1-h) * time.Hour)})
		require.NoError(t, err)
	}

	res, err := f.store.BatchAdmit(f.ctx, store.BatchAdmitParams{Tenant: "big", Agent: agentfleet.DefaultAgent})
	require.NoError(t, err)
	require.NoError(t, res.Admission.Append(f.ctx, []store.BatchInput{{Index: 0, CustomID: "row-0", Message: "input 0"}}))
	bt, err := res.Admission.Commit(f.ctx, store.BatchCommitParams{})
	require.NoError(t, err)

	// The rest is written straight into the file, in a few statements
	// (through the store it takes minutes under -race, and the runs'
	// ends need times of the past, where the store stamps its own
	// clock). The batch's open runs are dated ahead (created and
	// updated), so the dispatcher's sweep for stranded runs, which looks
	// at runs older than a minute, leaves them alone meanwhile.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(60000)")
	require.NoError(t, err)
	defer db.Close()
	us := func(t time.Time) int64 { return t.UnixMicro() }
	week := int64((seedHours - 1) * time.Hour / time.Microsecond)
	_, err = db.ExecContext(f.ctx, `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?3 - 1)
		INSERT INTO runs (id, tenant, agent, agent_version, status, message, turn, prompt_tokens, completion_tokens, created_at, updated_at)
		SELECT 'seed-' || i, 'big', 'default', 1,
			CASE i % 20 WHEN 0 THEN 'failed' WHEN 1 THEN 'cancelled' WHEN 2 THEN 'max_turns' ELSE 'completed' END,
			'seeded run ' || i, 3, 300, 60, ?1 - (i * 60000007) % ?2 - 5000000, ?1 - (i * 60000007) % ?2 FROM n`, us(now), week, chartRuns)
	require.NoError(t, err)
	half := int64(30 * time.Minute / time.Microsecond)
	created := us(now) - half - int64(time.Minute/time.Microsecond)
	_, err = db.ExecContext(f.ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?5 - 1)
		INSERT INTO runs (id, tenant, agent, agent_version, status, message, turn, batch_id, batch_index, custom_id, created_at, updated_at)
		SELECT ?4 || '-' || i, 'big', 'default', 1, 'queued', 'input ' || i, 0, ?4, i, 'row-' || i, ?1, ?2 FROM n`,
		us(now.Add(2*time.Hour)), us(now.Add(2*time.Hour)), chartBatchDone, bt.ID, chartBatch)
	require.NoError(t, err)
	_, err = db.ExecContext(f.ctx, `UPDATE runs SET
		status = CASE WHEN batch_index % 25 = 0 THEN 'failed' ELSE 'completed' END, turn = 2,
		updated_at = ?1 + batch_index * ?2 / ?3, created_at = ?1 - 1000000
		WHERE batch_id = ?4 AND batch_index < ?3`, us(now)-half, half, chartBatchDone, bt.ID)
	require.NoError(t, err)
	_, err = db.ExecContext(f.ctx, `UPDATE batches SET total = ?1, released = ?1, created_at = ?2 WHERE id = ?3`, chartBatch, created, bt.ID)
	require.NoError(t, err)
	t.Logf("seeded %d runs and a batch of %d inputs (%d ended) in %s", chartRuns, chartBatch, chartBatchDone, time.Since(started).Round(time.Millisecond))
	return bt.ID, big.APIKey
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// baselineArgs is the sync job of the two baseline strategies.
type baselineArgs struct {
	AccountID uuid.UUID `json:"account_id"`
}

func (baselineArgs) Kind() string { return "bench_baseline_sync" }

// lrsPollArgs is the least-recently-synced poller's periodic job.
type lrsPollArgs struct{}

func (lrsPollArgs) Kind() string { return "bench_lrs_poll" }

type strategy struct {
	name   string
	schema string
	kind   string
	drop   func()
	client *river.Client[pgx.Tx]
	series []point
	// figures over the cycle window
	peak       int64
	meanDepth  float64
	maxStarts  int64
	meanStarts float64
	// longestAtCap is the longest run of consecutive seconds in which the
	// strategy started jobs at (at least 90% of) the client's ceiling: how
	// long the upstream is hammered at full rate.
	longestAtCap int
	// healthySynced counts the accounts of the healthy upstreams synced by
	// the end of the cycle; healthyLatenessP50 and P99 are percentiles of
	// their sync's start minus its scheduled time; failingAttempts counts
	// the attempts spent on the failing upstream's accounts.
	healthySynced      int64
	healthyLatenessP50 time.Duration
	healthyLatenessP99 time.Duration
	failingAttempts    int64
}

// strategies are the three sides of one queue-depth round, by name.
type strategies struct {
	naive, slot, lrs *strategy
}

// all lists the strategies in the order of the CSV columns and the chart.
func (ss strategies) all() []*strategy { return []*strategy{ss.naive, ss.slot, ss.lrs} }

// depthWorkers is each strategy's River MaxWorkers. With River's fetch
// cooldown (100 ms) it also caps how many jobs a client starts per second.
const depthWorkers = 20

// depthMaxAttempts is the sync jobs' MaxAttempts in every strategy.
const depthMaxAttempts = 3

// setLongestAtCap sets each strategy's longestAtCap, where the ceiling is the
// highest per-second start count any strategy reached: the same client
// configuration has the same ceiling, whatever fills its queue.
func setLongestAtCap(strategies []*strategy) int64 {
	var ceiling int64
	for _, s := range strategies {
		ceiling = max(ceiling, s.maxStarts)
	}
	for _, s := range strategies {
		run := 0
		for _, p := range s.series {
			if float64(p.starts) >= 0.9*float64(ceiling) {
				run++
				s.longestAtCap = max(s.longestAtCap, run)
			} else {
				run = 0
			}
		}
	}
	return ceiling
}

type point struct {
	second  int
	pending int64
	starts  int64
}

// depthRun is one compressed cycle of the queue-depth comparison: the same
// accounts, each strategy on its own schema and River client, side by side.
type depthRun struct {
	r       *Runner
	ids     []uuid.UUID
	failing map[uuid.UUID]bool // accounts of a broken upstream: every attempt fails
	cycle   time.Duration
	start   time.Time
	riverLg *slog.Logger
}

// sync is every strategy's work for one account: the simulated call, which
// fails for a broken upstream, then last_synced_at.
func (d *depthRun) sync(ctx context.Context, schema string, id uuid.UUID) error {
	select {
	case <-time.After(d.r.cfg.DepthWork):
	case <-ctx.Done():
		return ctx.Err()
	}
	if d.failing[id] {
		return errors.New("upstream is down")
	}
	_, err := d.r.cfg.Pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "accounts"}.Sanitize()+" SET last_synced_at = now() WHERE id = $1", id)
	return err
}

// newClient builds and starts a client for s with workers (and the
// scheduler's, when given).
func (d *depthRun) newClient(ctx context.Context, s *strategy, workers *river.Workers, scheduler *riverslot.Scheduler, periodic []*river.PeriodicJob) error {
	config := &river.Config{
		Logger: d.riverLg, Schema: s.schema, Workers: workers, PeriodicJobs: periodic,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: depthWorkers}},
		FetchPollInterval: 200 * time.Millisecond,
	}
	if scheduler != nil {
		if err := scheduler.Configure(config); err != nil {
			return err
		}
		config.PeriodicJobs = nil // the bench enqueues its cycle itself
	}
	client, err := river.NewClient(riverpgxv5.New(d.r.cfg.Pool), config)
	if err != nil {
		return err
	}
	s.client = client
	return client.Start(ctx)
}

func (d *depthRun) baselineWorkers(s *strategy) *river.Workers {
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[baselineArgs]) error {
		return d.sync(ctx, s.schema, job.Args.AccountID)
	}))
	s.kind = baselineArgs{}.Kind()
	return workers
}

// runNaive enqueues every account at cycle start, delayed by a seeded random
// offset over the whole cycle (the talk's Random.new(user.id).rand(cycle)).
func (d *depthRun) runNaive(ctx context.Context, s *strategy) error {
	if err := d.newClient(ctx, s, d.baselineWorkers(s), nil, nil); err != nil {
		return err
	}
	time.Sleep(time.Until(d.start))
	params := make([]river.InsertManyParams, len(d.ids))
	for i, id := range d.ids {
		params[i] = river.InsertManyParams{
			Args:       baselineArgs{AccountID: id},
			InsertOpts: &river.InsertOpts{MaxAttempts: depthMaxAttempts, ScheduledAt: d.start.Add(slotplan.OffsetIn(slotplan.Hash(1, id), d.cycle))},
		}
	}
	_, err := s.client.InsertManyFast(ctx, params)
	return err
}

// runSlot is riverslot, its cycle enqueued ahead (its per-slot jobs carry
// their times).
func (d *depthRun) runSlot(ctx context.Context, s *strategy) error {
	scheduler, err := riverslot.New(d.r.cfg.Pool, &riverslot.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tasks: []riverslot.Task{{
		Name: "bench", Cycle: d.cycle, TriggerOffset: slotplan.GridOffset(d.start, d.cycle), Schema: s.schema, Table: "accounts",
		MaxAttempts: depthMaxAttempts,
		Sync: func(ctx context.Context, id uuid.UUID, job *river.Job[syncjob.Args]) error {
			return d.sync(ctx, s.schema, id)
		},
	}}})
	if err != nil {
		return err
	}
	s.kind = syncjob.Kind
	if err := d.newClient(ctx, s, river.NewWorkers(), scheduler, nil); err != nil {
		return err
	}
	_, err = scheduler.EnqueueCycle(ctx, s.client, "bench", d.start)
	return err
}

// runLRS is least recently synced first as teams run it: a periodic poller
// (River periodic job, every cycle/60) enqueues the K least recently synced
// accounts that are due (last_synced_at older than a cycle) and not already
// enqueued within the last quarter cycle, marking them enqueued in the same
// transaction; the sync updates last_synced_at. K covers the accounts over
// the cycle with 10% to spare.
func (d *depthRun) runLRS(ctx context.Context, s *strategy) error {
	poll := d.cycle / 60
	k := (len(d.ids)*11/10 + 59) / 60
	table := pgx.Identifier{s.schema, "accounts"}.Sanitize()
	workers := d.baselineWorkers(s)
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[lrsPollArgs]) error {
		if time.Now().Before(d.start) {
			return nil
		}
		client := river.ClientFromContext[pgx.Tx](ctx)
		return pgx.BeginFunc(ctx, d.r.cfg.Pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `WITH due AS (
					SELECT id FROM `+table+` WHERE last_synced_at < now() - $1::interval
					  AND (enqueued_at IS NULL OR enqueued_at < now() - $2::interval)
					ORDER BY last_synced_at, id LIMIT $3 FOR UPDATE SKIP LOCKED)
				UPDATE `+table+` a SET enqueued_at = now() FROM due WHERE a.id = due.id RETURNING a.id`,
				d.cycle, d.cycle/4, k)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			if err != nil || len(ids) == 0 {
				return err
			}
			params := make([]river.InsertManyParams, len(ids))
			for i, id := range ids {
				params[i] = river.InsertManyParams{Args: baselineArgs{AccountID: id}, InsertOpts: &river.InsertOpts{MaxAttempts: depthMaxAttempts}}
			}
			_, err = client.InsertManyFastTx(ctx, tx, params)
			return err
		})
	}))
	if _, err := d.r.cfg.Pool.Exec(ctx, "ALTER TABLE "+table+" ADD COLUMN enqueued_at timestamptz"); err != nil {
		return err
	}
	if _, err := d.r.cfg.Pool.Exec(ctx, "CREATE INDEX ON "+table+" (last_synced_at, id)"); err != nil {
		return err
	}
	periodic := []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(poll),
		func() (river.JobArgs, *river.InsertOpts) { return lrsPollArgs{}, &river.InsertOpts{Priority: 1} },
		&river.PeriodicJobOpts{RunOnStart: true})}
	time.Sleep(time.Until(d.start))
	return d.newClient(ctx, s, workers, nil, periodic)
}

// queueDepth runs the queue-depth comparison twice: with every upstream
// healthy, then with 5% of the accounts behind an upstream that fails every
// attempt. Strategies: naive, riverslot, and least recently synced first as
// a poller (see runNaive, runSlot, runLRS).
func (r *Runner) queueDepth(ctx context.Context) error {
	n, cycle := r.cfg.DepthAccounts, r.cfg.DepthCycle
	plan, err := slotplan.New(cycle)
	if err != nil {
		return err
	}
	ids := make([]uuid.UUID, n)
	failing := map[uuid.UUID]bool{}
	for i := range ids {
		ids[i] = uuid.New()
		if i%20 == 0 {
			failing[ids[i]] = true // 5%
		}
	}
	size := fmt.Sprintf("%s accounts, %s cycle", human(n), cycle)

	healthy, err := r.depthRound(ctx, ids, nil, plan, "healthy")
	if err != nil {
		return err
	}
	if err := r.writeDepthOutputs(healthy.all(), n, cycle); err != nil {
		return err
	}
	naive, slot, lrs := healthy.naive, healthy.slot, healthy.lrs
	r.row("peak pending sync jobs over the cycle", size,
		fmt.Sprintf("%d (accounts/slots = %d)", slot.peak, n/plan.Slots),
		fmt.Sprintf("naive %d / least-recent-first poller %d", naive.peak, lrs.peak),
		lowerOrHigher(float64(naive.peak), float64(slot.peak))+" / "+lowerOrHigher(float64(lrs.peak), float64(slot.peak)))
	r.row("mean pending sync jobs over the cycle", size,
		fmt.Sprintf("%.0f", slot.meanDepth),
		fmt.Sprintf("naive %.0f / least-recent-first poller %.0f", naive.meanDepth, lrs.meanDepth),
		lowerOrHigher(naive.meanDepth, slot.meanDepth)+" / "+lowerOrHigher(lrs.meanDepth, slot.meanDepth))
	r.row("sync start spread (max / mean starts per second)", size,
		fmt.Sprintf("%.1f (max %d/s)", float64(slot.maxStarts)/slot.meanStarts, slot.maxStarts),
		fmt.Sprintf("naive %.1f (max %d/s) / least-recent-first poller %.1f (max %d/s)",
			float64(naive.maxStarts)/naive.meanStarts, naive.maxStarts, float64(lrs.maxStarts)/lrs.meanStarts, lrs.maxStarts),
		"-")
	ceiling := setLongestAtCap(healthy.all())
	r.row(fmt.Sprintf("longest burst (consecutive seconds starting >= 90%% of the client's ceiling of %d/s)", ceiling), size,
		fmt.Sprintf("%d s", slot.longestAtCap),
		fmt.Sprintf("naive %d s / least-recent-first poller %d s", naive.longestAtCap, lrs.longestAtCap),
		"-")

	broken, err := r.depthRound(ctx, ids, failing, plan, "failing")
	if err != nil {
		return err
	}
	fNaive, fSlot, fLRS := broken.naive, broken.slot, broken.lrs
	healthyN := int64(n - len(failing))
	r.row("5% of accounts behind a failing upstream: healthy accounts synced within the cycle", size,
		fmt.Sprintf("%d of %d", fSlot.healthySynced, healthyN),
		fmt.Sprintf("naive %d / least-recent-first poller %d", fNaive.healthySynced, fLRS.healthySynced), "-")
	lateness := func(failing, healthy *strategy) string {
		return fmt.Sprintf("%s / %s (%s / %s)", round(failing.healthyLatenessP50), round(failing.healthyLatenessP99),
			round(healthy.healthyLatenessP50), round(healthy.healthyLatenessP99))
	}
	r.row("5% failing: healthy accounts' start lateness p50 / p99 (without the failing 5%)", size,
		lateness(fSlot, slot),
		fmt.Sprintf("naive %s / least-recent-first poller %s (queue wait: its jobs are due when enqueued)",
			lateness(fNaive, naive), lateness(fLRS, lrs)), "-")
	r.row("5% failing: attempts spent on the failing accounts within the cycle", size,
		fmt.Sprintf("%d", fSlot.failingAttempts),
		fmt.Sprintf("naive %d / least-recent-first poller %d", fNaive.failingAttempts, fLRS.failingAttempts), "-")
	r.row("5% failing: peak pending / max starts per second (without the failing 5%)", size,
		fmt.Sprintf("%d / %d (%d / %d)", fSlot.peak, fSlot.maxStarts, slot.peak, slot.maxStarts),
		fmt.Sprintf("naive %d / %d (%d / %d), least-recent-first poller %d / %d (%d / %d)",
			fNaive.peak, fNaive.maxStarts, naive.peak, naive.maxStarts, fLRS.peak, fLRS.maxStarts, lrs.peak, lrs.maxStarts), "-")
	return nil
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }

// depthRound runs the three strategies side by side over one cycle and
// measures them.
func (r *Runner) depthRound(ctx context.Context, ids []uuid.UUID, failing map[uuid.UUID]bool, plan slotplan.Plan, label string) (*strategies, error) {
	cycle := r.cfg.DepthCycle
	d := &depthRun{
		r: r, ids: ids, failing: failing, cycle: cycle,
		start:   time.Now().Add(20 * time.Second).Truncate(time.Second),
		riverLg: slog.New(slog.NewTextHandler(r.cfg.Log, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	sides := &strategies{naive: &strategy{name: "naive"}, slot: &strategy{name: "slot"}, lrs: &strategy{name: "lrs"}}
	for _, s := range sides.all() {
		schema, drop, err := r.schema(ctx, "depth_"+s.name)
		if err != nil {
			return nil, err
		}
		s.schema, s.drop = schema, drop
		defer drop()
		table := pgx.Identifier{schema, "accounts"}.Sanitize()
		if _, err := r.cfg.Pool.Exec(ctx, "CREATE TABLE "+table+" (id uuid PRIMARY KEY, active boolean NOT NULL DEFAULT true, last_synced_at timestamptz NOT NULL DEFAULT '-infinity')"); err != nil {
			return nil, err
		}
		rows := make([][]any, len(ids))
		for i, id := range ids {
			rows[i] = []any{id}
		}
		if _, err := r.cfg.Pool.CopyFrom(ctx, pgx.Identifier{schema, "accounts"}, []string{"id"}, pgx.CopyFromRows(rows)); err != nil {
			return nil, err
		}
		if _, err := r.cfg.Pool.Exec(ctx, sqlIndex(schema)); err != nil {
			return nil, err
		}
	}
	r.logf("queue depth (%s upstreams): %d accounts, %s cycle (%d slots of %s), 3 strategies side by side from %s",
		label, len(ids), cycle, plan.Slots, plan.SlotDuration, d.start.Format(time.RFC3339))

	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for s, run := range map[*strategy]func(context.Context, *strategy) error{
		sides.naive: d.runNaive, sides.slot: d.runSlot, sides.lrs: d.runLRS,
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- run(ctx, s)
		}()
	}
	wg.Wait()
	close(errs)
	defer func() {
		for _, s := range sides.all() {
			if s.client != nil {
				_ = s.client.Stop(context.WithoutCancel(ctx))
			}
		}
	}()
	for err := range errs {
		if err != nil {
			return nil, err
		}
	}

	// The cycle, then a quarter cycle for the last jobs and retries.
	end := d.start.Add(cycle)
	r.logf("waiting until %s for the cycle and its last retries", end.Add(cycle/4).Format(time.RFC3339))
	select {
	case <-time.After(time.Until(end.Add(cycle / 4))):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	failingIDs := make([]uuid.UUID, 0, len(failing))
	for id := range failing {
		failingIDs = append(failingIDs, id)
	}
	for _, s := range sides.all() {
		if err := r.series(ctx, s, d.start, cycle); err != nil {
			return nil, err
		}
		// A healthy account's sync succeeds on its first attempt, so its
		// attempted_at is that attempt's start.
		jobs := riverjob.QualifiedTable(s.schema)
		var p50, p99 float64
		if err := r.cfg.Pool.QueryRow(ctx, `WITH healthy AS (
				SELECT extract(epoch FROM attempted_at - scheduled_at) AS lateness FROM `+jobs+`
				WHERE kind = $1 AND attempt = 1 AND attempted_at IS NOT NULL AND NOT ((args->>'account_id')::uuid = ANY($4)))
			SELECT
				(SELECT count(*) FROM `+pgx.Identifier{s.schema, "accounts"}.Sanitize()+` WHERE last_synced_at BETWEEN $2 AND $3 AND NOT (id = ANY($4))),
				coalesce((SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY lateness) FROM healthy), 0)::float8,
				coalesce((SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY lateness) FROM healthy), 0)::float8,
				(SELECT coalesce(sum(attempt), 0) FROM `+jobs+` WHERE kind = $1 AND attempted_at <= $3 AND (args->>'account_id')::uuid = ANY($4))`,
			s.kind, d.start, end, failingIDs).Scan(&s.healthySynced, &p50, &p99, &s.failingAttempts); err != nil {
			return nil, err
		}
		s.healthyLatenessP50 = time.Duration(p50 * float64(time.Second))
		s.healthyLatenessP99 = time.Duration(p99 * float64(time.Second))
	}
	return sides, nil
}

// lowerOrHigher says how riverslot's figure compares with a baseline's.
func lowerOrHigher(baseline, slot float64) string {
	if baseline >= slot {
		return fmt.Sprintf("%.1fx lower", baseline/slot)
	}
	return fmt.Sprintf("%.1fx higher", slot/baseline)
}

func sqlIndex(schema string) string {
	return "CREATE INDEX ON " + pgx.Identifier{schema, "accounts"}.Sanitize() + " ((" + sqlbucket.Expr("id") + "), id)"
}

func (r *Runner) series(ctx context.Context, s *strategy, start time.Time, cycle time.Duration) error {
	jobs := riverjob.QualifiedTable(s.schema)
	rows, err := r.cfg.Pool.Query(ctx, `
		SELECT g.sec,
		       (SELECT count(*) FROM `+jobs+` j WHERE j.kind = $1 AND j.created_at <= $2::timestamptz + make_interval(secs => g.sec)
		           AND (j.attempted_at IS NULL OR j.attempted_at > $2::timestamptz + make_interval(secs => g.sec))),
		       (SELECT count(*) FROM `+jobs+` j WHERE j.kind = $1 AND j.attempted_at >= $2::timestamptz + make_interval(secs => g.sec)
		           AND j.attempted_at < $2::timestamptz + make_interval(secs => g.sec + 1))
		FROM generate_series(-5, $3::int + 15) AS g(sec) ORDER BY 1`, s.kind, start, int(cycle/time.Second))
	if err != nil {
		return err
	}
	defer rows.Close()
	var sum, seconds int64
	for rows.Next() {
		var p point
		if err := rows.Scan(&p.second, &p.pending, &p.starts); err != nil {
			return err
		}
		s.series = append(s.series, p)
		s.peak = max(s.peak, p.pending)
		s.maxStarts = max(s.maxStarts, p.starts)
		if p.second >= 0 && p.second < int(cycle/time.Second) {
			sum += p.pending
			seconds++
		}
	}
	s.meanDepth = float64(sum) / float64(seconds)
	s.meanStarts = float64(r.cfg.DepthAccounts) / (cycle.Seconds())
	return rows.Err()
}

func (r *Runner) writeDepthOutputs(strategies []*strategy, n int, cycle time.Duration) error {
	if err := os.MkdirAll(r.cfg.OutDir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("second")
	for _, s := range strategies {
		fmt.Fprintf(&b, ",%s_pending,%s_starts", s.name, s.name)
	}
	b.WriteString("\n")
	for i := range strategies[0].series {
		fmt.Fprintf(&b, "%d", strategies[0].series[i].second)
		for _, s := range strategies {
			fmt.Fprintf(&b, ",%d,%d", s.series[i].pending, s.series[i].starts)
		}
		b.WriteString("\n")
	}
	csvPath := filepath.Join(r.cfg.OutDir, "queue_depth.csv")
	if err := os.WriteFile(csvPath, []byte(b.String()), 0o644); err != nil {
		return err
	}
	r.logf("wrote %s", csvPath)
	if r.cfg.ChartPath == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(r.cfg.ChartPath), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(r.cfg.ChartPath, []byte(chart(strategies, n, cycle)), 0o644); err != nil {
		return err
	}
	r.logf("wrote %s", r.cfg.ChartPath)
	return nil
}

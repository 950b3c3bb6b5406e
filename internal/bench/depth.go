package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot/riverutil"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
	"github.com/riverslot/riverslot/syncjob"
)

// baselineArgs is the sync job of the two baseline strategies.
type baselineArgs struct {
	AccountID uuid.UUID `json:"account_id"`
}

func (baselineArgs) Kind() string { return "bench_baseline_sync" }

type strategy struct {
	name   string
	schema string
	kind   string
	drop   func()
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
}

// depthWorkers is each strategy's River MaxWorkers. With River's fetch
// cooldown (100 ms) it also caps how many jobs a client starts per second.
const depthWorkers = 20

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

// queueDepth runs one compressed cycle for three strategies side by side,
// each with its own River client and the same accounts:
//
//   - naive: every account enqueued at cycle start, delayed by a seeded
//     random offset over the whole cycle (the talk's
//     Random.new(user.id).rand(cycle));
//   - slot: riverslot;
//   - least recently synced first: at cycle start a scheduler pages through
//     accounts by last_synced_at, 100 at a time, and enqueues each with a
//     random wait inside a short spread window (the talk's 8 minutes of
//     24 h, scaled to the cycle).
func (r *Runner) queueDepth(ctx context.Context) error {
	n, cycle := r.cfg.DepthAccounts, r.cfg.DepthCycle
	plan, err := slotplan.New(cycle)
	if err != nil {
		return err
	}
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
	}

	strategies := []*strategy{{name: "naive"}, {name: "slot"}, {name: "lrs"}}
	for _, s := range strategies {
		schema, drop, err := r.schema(ctx, "depth_"+s.name)
		if err != nil {
			return err
		}
		s.schema, s.drop = schema, drop
		defer drop()
		table := pgx.Identifier{schema, "accounts"}.Sanitize()
		if _, err := r.cfg.Pool.Exec(ctx, "CREATE TABLE "+table+" (id uuid PRIMARY KEY, active boolean NOT NULL DEFAULT true, last_synced_at timestamptz NOT NULL DEFAULT '-infinity')"); err != nil {
			return err
		}
		rows := make([][]any, n)
		for i, id := range ids {
			rows[i] = []any{id}
		}
		if _, err := r.cfg.Pool.CopyFrom(ctx, pgx.Identifier{schema, "accounts"}, []string{"id"}, pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		if _, err := r.cfg.Pool.Exec(ctx, sqlIndex(schema)); err != nil {
			return err
		}
	}

	work := func(ctx context.Context) error {
		select {
		case <-time.After(r.cfg.DepthWork):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	riverLogger := slog.New(slog.NewTextHandler(r.cfg.Log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	start := time.Now().Add(10 * time.Second).Truncate(time.Second)
	clients := make([]*river.Client[pgx.Tx], len(strategies))
	enqueue := make([]func() error, len(strategies))

	for i, s := range strategies {
		workers := river.NewWorkers()
		s.kind = baselineArgs{}.Kind()
		table := pgx.Identifier{s.schema, "accounts"}.Sanitize()
		river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[baselineArgs]) error {
			if err := work(ctx); err != nil {
				return err
			}
			_, err := r.cfg.Pool.Exec(ctx, "UPDATE "+table+" SET last_synced_at = now() WHERE id = $1", job.Args.AccountID)
			return err
		}))
		var scheduler *riverutil.Scheduler
		if s.name == "slot" {
			s.kind = syncjob.Kind
			scheduler, err = riverutil.New(r.cfg.Pool, &riverutil.Config{Logger: quiet, Tasks: []riverutil.Task{{
				Name: "bench", Cycle: cycle, TriggerOffset: gridOffset(start, cycle), Schema: s.schema, Table: "accounts",
				Sync: func(ctx context.Context, id uuid.UUID, job *river.Job[syncjob.Args]) error {
					if err := work(ctx); err != nil {
						return err
					}
					_, err := r.cfg.Pool.Exec(ctx, "UPDATE "+table+" SET last_synced_at = now() WHERE id = $1", id)
					return err
				},
			}}})
			if err != nil {
				return err
			}
		}
		config := &river.Config{
			Logger: riverLogger, Schema: s.schema, Workers: workers,
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: depthWorkers}},
			FetchPollInterval: 200 * time.Millisecond,
		}
		if scheduler != nil {
			if err := scheduler.Configure(config); err != nil {
				return err
			}
			config.PeriodicJobs = nil // the bench enqueues its cycle itself
		}
		client, err := river.NewClient(riverpgxv5.New(r.cfg.Pool), config)
		if err != nil {
			return err
		}
		clients[i] = client
		switch s.name {
		case "naive":
			enqueue[i] = func() error { return r.enqueueNaive(ctx, client, ids, start, cycle) }
		case "slot":
			enqueue[i] = func() error {
				_, err := scheduler.EnqueueCycle(ctx, client, "bench", start)
				return err
			}
		case "lrs":
			spread := cycle * 8 / (24 * 60) // 8 minutes of a day
			enqueue[i] = func() error { return r.enqueueLRS(ctx, client, s.schema, start, spread) }
		}
	}
	for _, c := range clients {
		if err := c.Start(ctx); err != nil {
			return err
		}
		defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
	}

	r.logf("queue depth: %d accounts, %s cycle (%d slots of %s), 3 strategies side by side from %s",
		n, cycle, plan.Slots, plan.SlotDuration, start.Format(time.RFC3339))
	// The slot strategy is enqueued ahead (its per-slot jobs carry their
	// times); the baselines enqueue at cycle start, as they would.
	if err := enqueue[1](); err != nil {
		return err
	}
	time.Sleep(time.Until(start))
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, i := range []int{0, 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- enqueue[i]()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}

	deadline := start.Add(cycle).Add(5 * time.Minute)
	for _, s := range strategies {
		for {
			var left int64
			if err := r.cfg.Pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{s.schema, "river_job"}.Sanitize()+
				" WHERE kind = $1 AND state <> 'completed'", s.kind).Scan(&left); err != nil {
				return err
			}
			var done int64
			if err := r.cfg.Pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{s.schema, "river_job"}.Sanitize()+
				" WHERE kind = $1 AND state = 'completed'", s.kind).Scan(&done); err != nil {
				return err
			}
			if left == 0 && done == int64(n) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %d of %d sync jobs unfinished at the deadline", s.name, left, n)
			}
			time.Sleep(time.Second)
		}
		if err := r.series(ctx, s, start, cycle); err != nil {
			return err
		}
	}

	if err := r.writeDepthOutputs(strategies, n, cycle); err != nil {
		return err
	}
	naive, slot, lrs := strategies[0], strategies[1], strategies[2]
	size := fmt.Sprintf("%s accounts, %s cycle", human(n), cycle)
	r.row("peak pending sync jobs over the cycle", size,
		fmt.Sprintf("%d (accounts/slots = %d)", slot.peak, n/plan.Slots),
		fmt.Sprintf("naive %d / least-recent-first %d", naive.peak, lrs.peak),
		fmt.Sprintf("%.1fx / %.1fx lower", float64(naive.peak)/float64(slot.peak), float64(lrs.peak)/float64(slot.peak)))
	r.row("mean pending sync jobs over the cycle", size,
		fmt.Sprintf("%.0f", slot.meanDepth),
		fmt.Sprintf("naive %.0f / least-recent-first %.0f", naive.meanDepth, lrs.meanDepth),
		fmt.Sprintf("%.1fx / %.1fx lower", naive.meanDepth/slot.meanDepth, lrs.meanDepth/slot.meanDepth))
	r.row("sync start spread (max / mean starts per second)", size,
		fmt.Sprintf("%.1f (max %d/s)", float64(slot.maxStarts)/slot.meanStarts, slot.maxStarts),
		fmt.Sprintf("naive %.1f (max %d/s) / least-recent-first %.1f (max %d/s)",
			float64(naive.maxStarts)/naive.meanStarts, naive.maxStarts, float64(lrs.maxStarts)/lrs.meanStarts, lrs.maxStarts),
		"-")
	ceiling := setLongestAtCap(strategies)
	r.row(fmt.Sprintf("longest burst (consecutive seconds starting >= 90%% of the client's ceiling of %d/s)", ceiling), size,
		fmt.Sprintf("%d s", slot.longestAtCap),
		fmt.Sprintf("naive %d s / least-recent-first %d s", naive.longestAtCap, lrs.longestAtCap),
		"-")
	return nil
}

func sqlIndex(schema string) string {
	return "CREATE INDEX ON " + pgx.Identifier{schema, "accounts"}.Sanitize() + " ((" + sqlbucket.Expr("id") + "), id)"
}

func gridOffset(start time.Time, cycle time.Duration) time.Duration {
	return time.Duration(((start.UnixNano() % int64(cycle)) + int64(cycle)) % int64(cycle))
}

func (r *Runner) enqueueNaive(ctx context.Context, client *river.Client[pgx.Tx], ids []uuid.UUID, start time.Time, cycle time.Duration) error {
	params := make([]river.InsertManyParams, len(ids))
	for i, id := range ids {
		params[i] = river.InsertManyParams{
			Args:       baselineArgs{AccountID: id},
			InsertOpts: &river.InsertOpts{ScheduledAt: start.Add(slotplan.OffsetIn(slotplan.Hash(1, id), cycle))},
		}
	}
	_, err := client.InsertManyFast(ctx, params)
	return err
}

// enqueueLRS is the talk's "least recently synced first" scheduler: it pages
// through all accounts due for a sync by last_synced_at, 100 at a time, and
// enqueues each with a random wait inside spread.
func (r *Runner) enqueueLRS(ctx context.Context, client *river.Client[pgx.Tx], schema string, start time.Time, spread time.Duration) error {
	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	rng := rand.New(rand.NewPCG(uint64(start.Unix()), 2))
	type due struct {
		LastSyncedAt pgtype.Timestamptz
		ID           uuid.UUID
	}
	// Keyset on (last_synced_at, id), starting before every row.
	after := due{LastSyncedAt: pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}}
	first := true
	for {
		rows, err := r.cfg.Pool.Query(ctx, "SELECT last_synced_at, id FROM "+table+
			" WHERE last_synced_at < $1 AND ($4 OR (last_synced_at, id) > ($2, $3)) ORDER BY last_synced_at, id LIMIT 100",
			start, after.LastSyncedAt, after.ID, first)
		if err != nil {
			return err
		}
		batch, err := pgx.CollectRows(rows, pgx.RowToStructByPos[due])
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		first = false
		params := make([]river.InsertManyParams, len(batch))
		for i, d := range batch {
			id := d.ID
			wait := time.Duration(rng.Int64N(int64(spread) + 1))
			params[i] = river.InsertManyParams{Args: baselineArgs{AccountID: id}, InsertOpts: &river.InsertOpts{ScheduledAt: time.Now().Add(wait)}}
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return err
		}
		after = batch[len(batch)-1]
	}
}

// series reads pending (inserted, not yet started) and starts per second
// back from the job table.
func (r *Runner) series(ctx context.Context, s *strategy, start time.Time, cycle time.Duration) error {
	jobs := pgx.Identifier{s.schema, "river_job"}.Sanitize()
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

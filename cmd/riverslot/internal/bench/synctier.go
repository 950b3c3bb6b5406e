package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/taskspec"
)

// noopArgs are River job args with the four fields a sync job carries, for
// River's own no-op worker.
type noopArgs struct {
	Task       string    `json:"task"`
	AccountID  uuid.UUID `json:"account_id"`
	CycleStart time.Time `json:"cycle_start"`
	Slot       int       `json:"slot"`
}

func (noopArgs) Kind() string { return "riverslot_bench_noop" }

type noopWorker struct{ river.WorkerDefaults[noopArgs] }

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// syncTier runs SyncTierJobs jobs through riverslot's sync worker with a
// no-op Sync (as the fan-out makes them: tagged with the plan, accounts
// that exist, so each checks its account and derives its NotAfter), the
// same number through River's own no-op worker, same fields, same
// MaxWorkers, and through riverslot's sync worker again with every sync
// going through its upstream's limits (23 upstreams, limits set high), and
// once more with the same limits and no Upstream (every sync's decision and
// outcome on one row, the hot row of a task with Limits alone), one River
// client each, in turn, and reports the median jobs a second of each: what
// the sync tier costs per job, and what the limiter costs.
func (r *Runner) syncTier(ctx context.Context) error {
	n, workers := r.cfg.SyncTierJobs, r.cfg.SyncTierWorkers
	accounts, drop, err := r.schema(ctx, "synctier_accounts")
	if err != nil {
		return err
	}
	defer drop()
	if err := r.seedAccounts(ctx, accounts, n, 255); err != nil {
		return err
	}
	rows, err := r.cfg.Pool.Query(ctx, "SELECT id FROM "+pgx.Identifier{accounts, "accounts"}.Sanitize())
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return err
	}
	var riverslots, raws, limiteds, ones []time.Duration
	for rep := range r.cfg.Reps {
		// The runs take turns going first: a run pays for the
		// autovacuum and checkpoint work the runs before it left (their
		// completed jobs, their dropped schemas), and the one always
		// last paid most.
		var took [tiers]time.Duration
		for i := range tiers {
			run := (tier(rep) + i) % tiers
			d, err := r.syncTierOnce(ctx, accounts, ids, workers, run)
			if err != nil {
				return err
			}
			took[run] = d
		}
		rs, raw, lim, one := took[tierRiverslot], took[tierRiver], took[tierLimited], took[tierLimitedOneKey]
		r.logf("sync tier %d jobs, MaxWorkers %d, rep %d: riverslot %s, River no-op %s, riverslot with upstream limits set high %s, the same limits on one upstream %s", n, workers, rep+1,
			rs.Round(time.Millisecond), raw.Round(time.Millisecond), lim.Round(time.Millisecond), one.Round(time.Millisecond))
		riverslots, raws, limiteds, ones = append(riverslots, rs), append(raws, raw), append(limiteds, lim), append(ones, one)
	}
	rs, raw, lim, one := median(riverslots), median(raws), median(limiteds), median(ones)
	r.row(fmt.Sprintf("sync tier (jobs/s; no-op Sync against River's no-op worker, MaxWorkers %d, median of %d)", workers, r.cfg.Reps), human(n),
		fmt.Sprintf("%.0f/s (%.2f s)", perSec(n, rs), rs.Seconds()),
		fmt.Sprintf("%.0f/s (%.2f s) River no-op worker", perSec(n, raw), raw.Seconds()),
		fmt.Sprintf("%.2f", raw.Seconds()/rs.Seconds()))
	r.row(fmt.Sprintf("upstream limiter (jobs/s; no-op Sync over %d upstreams, limits set high, against no limits, MaxWorkers %d, median of %d)", limiterKeys, workers, r.cfg.Reps), human(n),
		fmt.Sprintf("%.0f/s (%.2f s)", perSec(n, lim), lim.Seconds()),
		fmt.Sprintf("%.0f/s (%.2f s) no limits", perSec(n, rs), rs.Seconds()),
		fmt.Sprintf("%.2f", rs.Seconds()/lim.Seconds()))
	r.row(fmt.Sprintf("upstream limiter, one upstream (jobs/s; Limits without Upstream: every sync on one row, limits set high, against no limits, MaxWorkers %d, median of %d)", workers, r.cfg.Reps), human(n),
		fmt.Sprintf("%.0f/s (%.2f s)", perSec(n, one), one.Seconds()),
		fmt.Sprintf("%.0f/s (%.2f s) no limits", perSec(n, rs), rs.Seconds()),
		fmt.Sprintf("%.2f", rs.Seconds()/one.Seconds()))
	return nil
}

// The sync-tier runs: riverslot's sync worker, River's no-op worker, and
// riverslot's with every sync through its upstream's limits.
type tier int

const (
	tierRiverslot tier = iota
	tierRiver
	tierLimited
	tierLimitedOneKey // Limits without Upstream: every sync's decision on one row
	tiers
)

// limiterKeys is how many upstreams the limited run spreads its syncs
// over (the demo's 23 banks).
const limiterKeys = 23

// syncTierOnce inserts one job per id into a fresh River schema (riverslot
// sync jobs of a cycle that started now, or River no-op jobs with the same
// fields), then starts a client with workers MaxWorkers and returns how long
// it took to complete them all.
func (r *Runner) syncTierOnce(ctx context.Context, accounts string, ids []uuid.UUID, workers int, run tier) (time.Duration, error) {
	schema, drop, err := r.schema(ctx, "synctier")
	if err != nil {
		return 0, err
	}
	defer drop()
	config := &river.Config{
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Schema:  schema,
		Queues:  map[string]river.QueueConfig{"synctier": {MaxWorkers: workers}},
		Workers: river.NewWorkers(),
	}
	start := time.Now().Truncate(time.Second)
	params := make([]river.InsertManyParams, len(ids))
	if run != tierRiver {
		task := riverslot.Task{Name: "synctier", Cycle: 24 * time.Hour, Schema: accounts, Table: "accounts", Queue: "synctier",
			Sync: func(context.Context, uuid.UUID, *river.Job[syncjob.Args]) error { return nil }}
		if run == tierLimited || run == tierLimitedOneKey {
			// Limits no run reaches: what deciding and recording each
			// sync costs, not waiting.
			task.Limits = riverslot.UpstreamLimits{Rate: 1e6, Burst: 100_000, Concurrency: 100_000, FailureThreshold: 1000}
		}
		if run == tierLimited {
			task.Upstream = fmt.Sprintf("'bank-' || get_byte(uuid_send(id), 0) %% %d", limiterKeys)
		}
		scheduler, err := riverslot.New(r.cfg.Pool, &riverslot.Config{
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Tasks:  []riverslot.Task{task},
		})
		if err != nil {
			return 0, err
		}
		if err := scheduler.Configure(config); err != nil {
			return 0, err
		}
		config.PeriodicJobs = nil // only the sync jobs inserted here
		info, err := scheduler.Task("synctier")
		if err != nil {
			return 0, err
		}
		opts := &river.InsertOpts{Queue: "synctier", Priority: 2, MaxAttempts: 5, Tags: []string{taskspec.PlanTag(info.PlanID)}}
		for i, id := range ids {
			slot := info.Plan.SlotOf(id)
			args := syncjob.NewArgs("synctier", id, start, slot)
			if run == tierLimited {
				args.Upstream = fmt.Sprintf("bank-%d", int(id[0])%limiterKeys) // as the fan-out reads it
			}
			params[i] = river.InsertManyParams{Args: args, InsertOpts: opts}
		}
	} else {
		river.AddWorker(config.Workers, noopWorker{})
		opts := &river.InsertOpts{Queue: "synctier", Priority: 2, MaxAttempts: 5}
		for i, id := range ids {
			params[i] = river.InsertManyParams{Args: noopArgs{Task: "synctier", AccountID: id, CycleStart: start.UTC(), Slot: int(id[15]) / 2}, InsertOpts: opts}
		}
	}
	client, err := river.NewClient(riverpgxv5.New(r.cfg.Pool), config)
	if err != nil {
		return 0, err
	}
	for lo := 0; lo < len(params); lo += r.cfg.BatchSize {
		if _, err := client.InsertManyFast(ctx, params[lo:min(lo+r.cfg.BatchSize, len(params))]); err != nil {
			return 0, err
		}
	}
	if _, err := r.cfg.Pool.Exec(ctx, "ANALYZE "+riverjob.QualifiedTable(schema)); err != nil {
		return 0, err
	}
	begun := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer func() { _ = client.Stop(context.WithoutCancel(ctx)) }()
	for {
		var left, failed int
		if err := r.cfg.Pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE state <> 'completed'), count(*) FILTER (WHERE state IN ('retryable', 'discarded', 'cancelled')) FROM "+
			riverjob.QualifiedTable(schema)).Scan(&left, &failed); err != nil {
			return 0, err
		}
		if failed > 0 {
			return 0, fmt.Errorf("%d jobs failed in the sync-tier run", failed)
		}
		if left == 0 {
			return time.Since(begun), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// fanOut compares one per-slot job's full fan-out of n accounts (select,
// offsets, COPY, cursor per batch) with River's InsertManyFastTx of the same
// n pre-built jobs in the same batch size, one transaction per batch. It also
// reports the process's peak heap and RSS during the fan-out.
func (r *Runner) fanOut(ctx context.Context) error {
	type result struct {
		n                int
		slot, raw        time.Duration
		heapPeak, rssHWM int64
	}
	var results []result
	for _, n := range r.cfg.FanOutSizes {
		accounts, drop, err := r.schema(ctx, "fanout_accounts")
		if err != nil {
			return err
		}
		if err := r.seedAccounts(ctx, accounts, n, 127); err != nil { // 18s cycle (2 slots): slot 0 = buckets 0..127
			drop()
			return err
		}
		selectOnly, err := r.keysetSelection(ctx, accounts, n)
		if err != nil {
			drop()
			return err
		}
		// Alternate the two sides, each into a fresh River schema after a
		// CHECKPOINT, and keep the medians: on 2 shared cores a single run
		// of either side varies by tens of percent.
		res := result{n: n}
		var slots, raws []time.Duration
		for rep := range r.cfg.Reps {
			slot, heapPeak, rss, err := r.fanOutOnce(ctx, accounts, n)
			if err != nil {
				drop()
				return err
			}
			raw, err := r.rawInsert(ctx, n)
			if err != nil {
				drop()
				return err
			}
			r.logf("fan-out %d accounts, rep %d: riverslot %s, raw %s", n, rep+1, slot.Round(time.Millisecond), raw.Round(time.Millisecond))
			slots, raws = append(slots, slot), append(raws, raw)
			res.heapPeak, res.rssHWM = max(res.heapPeak, heapPeak), max(res.rssHWM, rss)
		}
		drop()
		res.slot, res.raw = median(slots), median(raws)
		results = append(results, res)
		r.row(fmt.Sprintf("fan-out throughput (accounts/s; one slot, batch %d, median of %d)", r.cfg.BatchSize, r.cfg.Reps), human(n),
			fmt.Sprintf("%.0f/s (%.2f s)", perSec(n, res.slot), res.slot.Seconds()),
			fmt.Sprintf("%.0f/s (%.2f s) raw River InsertManyFastTx", perSec(n, res.raw), res.raw.Seconds()),
			fmt.Sprintf("%.2f", res.raw.Seconds()/res.slot.Seconds()))
		r.row("fan-out breakdown: the same keyset selection alone (no inserts)", human(n),
			fmt.Sprintf("%.2f s = %.0f%% of the fan-out", selectOnly.Seconds(), 100*selectOnly.Seconds()/res.slot.Seconds()),
			fmt.Sprintf("fan-out minus raw insert: %.2f s", (res.slot-res.raw).Seconds()), "-")
	}
	for _, res := range results {
		r.row("memory during fan-out (peak Go heap in use / peak RSS)", human(res.n),
			fmt.Sprintf("%.1f MiB / %.1f MiB", float64(res.heapPeak)/(1<<20), float64(res.rssHWM)/(1<<20)),
			"target < 64 MiB, flat in accounts", "-")
	}
	return nil
}

// fanOutOnce runs one per-slot job over n accounts all in slot 0 through a
// real River client in this process and returns the job's run time (from its
// attempted_at to finalized_at, so queueing is excluded), the peak Go heap in
// use while it ran, and the process's peak RSS.
func (r *Runner) fanOutOnce(ctx context.Context, accounts string, n int) (time.Duration, int64, int64, error) {
	schema, drop, err := r.schema(ctx, "fanout")
	if err != nil {
		return 0, 0, 0, err
	}
	defer drop()

	scheduler, err := riverslot.New(r.cfg.Pool, &riverslot.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tasks: []riverslot.Task{{
			Name: "bench", Cycle: 18 * time.Second, Schema: accounts, Table: "accounts",
			BatchSize: r.cfg.BatchSize, Queue: "parked", ControlQueue: river.QueueDefault, PerSlotTimeout: 30 * time.Minute,
			Sync: func(context.Context, uuid.UUID, *river.Job[syncjob.Args]) error { return nil },
		}},
	})
	if err != nil {
		return 0, 0, 0, err
	}
	config := &river.Config{
		Logger:               slog.New(slog.NewTextHandler(r.cfg.Log, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Schema:               schema,
		FetchPollInterval:    100 * time.Millisecond,
		JobTimeout:           30 * time.Minute,
		RescueStuckJobsAfter: time.Hour,
	}
	if err := scheduler.Configure(config); err != nil {
		return 0, 0, 0, err
	}
	config.PeriodicJobs = nil // the bench enqueues its cycle itself
	client, err := river.NewClient(riverpgxv5.New(r.cfg.Pool), config)
	if err != nil {
		return 0, 0, 0, err
	}
	if err := client.Start(ctx); err != nil {
		return 0, 0, 0, err
	}
	defer func() { _ = client.Stop(context.WithoutCancel(ctx)) }()

	if _, err := r.cfg.Pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return 0, 0, 0, err
	}
	debug.FreeOSMemory() // return earlier benchmarks' heap so the RSS peak is this fan-out's
	resetPeakRSS()
	var peakHeap atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			if h := int64(ms.HeapInuse); h > peakHeap.Load() {
				peakHeap.Store(h)
			}
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
		}
	}()

	cycleStart := time.Now().Truncate(18 * time.Second).Add(time.Hour)
	res, err := client.Insert(ctx, perslot.Args{Task: "bench", CycleStart: cycleStart, Slot: 0}, nil)
	if err != nil {
		return 0, 0, 0, err
	}
	var job *rivertype.JobRow
	for {
		if job, err = client.JobGet(ctx, res.Job.ID); err != nil {
			return 0, 0, 0, err
		}
		if job.State == rivertype.JobStateCompleted {
			break
		}
		if job.State == rivertype.JobStateDiscarded || job.State == rivertype.JobStateRetryable {
			return 0, 0, 0, fmt.Errorf("per-slot job %s: %v", job.State, job.Errors)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stopSampling)
	<-sampled

	var inserted int64
	if err := r.cfg.Pool.QueryRow(ctx, "SELECT count(*) FROM "+riverjob.QualifiedTable(schema)+" WHERE kind = $1", syncjob.Kind).Scan(&inserted); err != nil {
		return 0, 0, 0, err
	}
	if inserted != int64(n) {
		return 0, 0, 0, fmt.Errorf("fan-out inserted %d sync jobs for %d accounts", inserted, n)
	}
	return job.FinalizedAt.Sub(*job.AttemptedAt), peakHeap.Load(), vmHWM(), nil
}

// keysetSelection pages through slot 0's n accounts with the per-slot job's
// keyset query shape and batch size, without inserting anything.
func (r *Runner) keysetSelection(ctx context.Context, schema string, n int) (time.Duration, error) {
	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	expr := sqlbucket.Expr("id")
	head := "SELECT id, " + expr + " FROM " + table + " WHERE " + sqlbucket.SlotPredicate("id", 2, 3)
	tail := " ORDER BY " + expr + ", id LIMIT $1"
	lo, hi := 0, 127 // slot 0 of 2
	begun := time.Now()
	var (
		after  uuid.UUID
		bucket int
		seen   int
	)
	for first := true; ; first = false {
		var rows pgx.Rows
		var err error
		if first {
			rows, err = r.cfg.Pool.Query(ctx, head+tail, r.cfg.BatchSize, lo, hi)
		} else {
			rows, err = r.cfg.Pool.Query(ctx, head+" AND ("+expr+", id) > ($4::int, $5::uuid)"+tail, r.cfg.BatchSize, lo, hi, bucket, after)
		}
		if err != nil {
			return 0, err
		}
		k := 0
		for rows.Next() {
			if err := rows.Scan(&after, &bucket); err != nil {
				rows.Close()
				return 0, err
			}
			k++
		}
		if err := rows.Err(); err != nil {
			return 0, err
		}
		seen += k
		if k < r.cfg.BatchSize {
			break
		}
	}
	if seen != n {
		return 0, fmt.Errorf("keyset selection saw %d of %d accounts", seen, n)
	}
	return time.Since(begun), nil
}

// rawInsert inserts n pre-built sync jobs with River's InsertManyFastTx in
// batches of BatchSize, one transaction per batch, into a fresh schema.
func (r *Runner) rawInsert(ctx context.Context, n int) (time.Duration, error) {
	schema, drop, err := r.schema(ctx, "raw")
	if err != nil {
		return 0, err
	}
	defer drop()
	client, err := river.NewClient(riverpgxv5.New(r.cfg.Pool), &river.Config{Schema: schema})
	if err != nil {
		return 0, err
	}

	plan, _ := slotplan.New(18 * time.Second)
	cycleStart := time.Now().Truncate(18 * time.Second).Add(time.Hour)
	params := make([]river.InsertManyParams, n)
	opts := make([]river.InsertOpts, n)
	for i := range params {
		id := uuid.New()
		id[15] &= 0x7f
		opts[i] = river.InsertOpts{Queue: "parked", Priority: 2, MaxAttempts: 5, ScheduledAt: plan.Target(cycleStart, 1, id)}
		// River's own insert of the four fields a sync must carry (task,
		// account, cycle, slot): the fan-out adds the plan as a River tag
		// (stored, not indexed) and a NotAfter only to late-spread syncs.
		args := syncjob.NewArgs("bench", id, cycleStart, 0)
		params[i] = river.InsertManyParams{Args: args, InsertOpts: &opts[i]}
	}

	if _, err := r.cfg.Pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return 0, err
	}
	begun := time.Now()
	for lo := 0; lo < n; lo += r.cfg.BatchSize {
		hi := min(lo+r.cfg.BatchSize, n)
		tx, err := r.cfg.Pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		if _, err := client.InsertManyFastTx(ctx, tx, params[lo:hi]); err != nil {
			_ = tx.Rollback(ctx)
			return 0, err
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, err
		}
	}
	return time.Since(begun), nil
}

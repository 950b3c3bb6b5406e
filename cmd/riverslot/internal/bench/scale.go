package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/bootstrap"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/pinning"
	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// ScaleStep is one row of the scale benchmark's table.
type ScaleStep struct {
	Step     string
	Accounts int
	Time     time.Duration
	// Rows is what the step produced (accounts seeded, per-slot jobs,
	// pins, sync jobs, river_job rows); -1 when it has none.
	Rows    int64
	PeakRSS int64 // bytes: the process's VmHWM during the step
	Notes   string
}

// Scale names of the tasks the scale benchmark runs through riverslot.
const (
	scalePlain    = "scale_plain"    // 24h, 256 buckets: 128 slots
	scaleWeighted = "scale_weighted" // the same with Weight
	scaleFine     = "scale_fine"     // 24h, 65,536 buckets: 1,024 slots
	scaleRun      = "scale_run"      // the compressed run
)

// scale seeds ScaleAccounts accounts and times, through the library's own
// code (a riverslot Scheduler wired into a River client in this process),
// the steps of a fleet of that size: seeding, CreateIndexes, the bootstrap
// of a 24h cycle plain and weighted, the bootstrap and one slot's fan-out
// of a 1,024-slot task (Buckets 65536), Status of that cycle, and a
// compressed run with a short River retention sampling river_job's rows.
// Each step reports the process's peak RSS.
func (r *Runner) scale(ctx context.Context) error {
	n := r.cfg.ScaleAccounts
	schema, drop, err := r.schema(ctx, "scale")
	if err != nil {
		return err
	}
	defer drop()
	steps, err := r.scaleSteps(ctx, schema, n)
	r.scaleRows = append(r.scaleRows, steps...)
	if err != nil {
		return err
	}
	runSteps, err := r.scaleRun(ctx, schema)
	r.scaleRows = append(r.scaleRows, runSteps...)
	return err
}

// measureStep runs fn with the peak RSS reset and returns its wall time and
// the peak.
func measureStep(fn func() error) (time.Duration, int64, error) {
	debug.FreeOSMemory()
	resetPeakRSS()
	begun := time.Now()
	err := fn()
	return time.Since(begun), vmHWM(), err
}

func (r *Runner) scaleSteps(ctx context.Context, schema string, n int) ([]ScaleStep, error) {
	var steps []ScaleStep
	add := func(s ScaleStep) {
		steps = append(steps, s)
		r.logf("scale: %s: %s, %d rows, peak RSS %.1f MiB; %s", s.Step, s.Time.Round(time.Millisecond), s.Rows, float64(s.PeakRSS)/(1<<20), s.Notes)
	}
	table := pgx.Identifier{schema, "accounts"}.Sanitize()

	// Seeding: random UUIDv4 accounts with Pareto(1.5) weights (x_m = 1),
	// generated in the server in chunks, then the primary key.
	d, rss, err := measureStep(func() error {
		if _, err := r.cfg.Pool.Exec(ctx, "CREATE TABLE "+table+" (id uuid NOT NULL, active boolean NOT NULL DEFAULT true, weight double precision NOT NULL)"); err != nil {
			return err
		}
		const chunk = 1_000_000
		for done := 0; done < n; done += chunk {
			m := min(chunk, n-done)
			if _, err := r.cfg.Pool.Exec(ctx, "INSERT INTO "+table+" (id, weight) SELECT gen_random_uuid(), power(1 - random(), -1 / 1.5) FROM generate_series(1, $1)", m); err != nil {
				return fmt.Errorf("error seeding accounts: %w", err)
			}
			r.logf("scale: seeded %d/%d accounts", done+m, n)
		}
		r.logf("scale: building the primary key of %d accounts", n)
		for _, stmt := range []string{"ALTER TABLE " + table + " ADD PRIMARY KEY (id)", "VACUUM ANALYZE " + table} {
			if _, err := r.cfg.Pool.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return steps, err
	}
	add(ScaleStep{Step: "seed accounts (INSERT ... generate_series, 1M a statement; primary key; VACUUM ANALYZE)", Accounts: n, Time: d, Rows: int64(n), PeakRSS: rss,
		Notes: "Pareto(1.5) weights"})

	scheduler, err := riverslot.New(r.cfg.Pool, &riverslot.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tasks: []riverslot.Task{
			r.scaleTask(scalePlain, schema, "", 0),
			r.scaleTask(scaleWeighted, schema, "weight", 0),
			r.scaleTask(scaleFine, schema, "", riverslot.BucketsTwoByte),
		},
	})
	if err != nil {
		return steps, err
	}

	// CreateIndexes: both bucket indexes (one and two bytes) and the pins
	// tables, CONCURRENTLY as an operator would run it on a live table.
	r.logf("scale: CreateIndexes on %d accounts", n)
	d, rss, err = measureStep(func() error { return scheduler.CreateIndexes(ctx) })
	if err != nil {
		return steps, err
	}
	add(ScaleStep{Step: "riverslot CreateIndexes (bucket indexes for 256 and 65,536 buckets, CONCURRENTLY; pins tables)", Accounts: n, Time: d, Rows: -1, PeakRSS: rss,
		Notes: "2 indexes"})
	if _, err := r.cfg.Pool.Exec(ctx, "ANALYZE "+table); err != nil {
		return steps, err
	}

	config := &river.Config{
		Logger:               slog.New(slog.NewTextHandler(r.cfg.Log, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		Schema:               schema,
		FetchPollInterval:    100 * time.Millisecond,
		JobTimeout:           time.Hour,
		RescueStuckJobsAfter: 2 * time.Hour,
	}
	if err := scheduler.Configure(config); err != nil {
		return steps, err
	}
	config.PeriodicJobs = nil // the bench enqueues its cycles itself
	client, err := river.NewClient(riverpgxv5.New(r.cfg.Pool), config)
	if err != nil {
		return steps, err
	}
	if err := client.Start(ctx); err != nil {
		return steps, err
	}
	defer func() { _ = client.Stop(context.WithoutCancel(ctx)) }()

	// Tomorrow's cycle (on the 24h UTC grid): its per-slot jobs are
	// scheduled at their slot times, so none runs by itself here.
	cycleStart := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	jobTable := riverjob.QualifiedTable(schema)
	countPerSlot := func(task string) (int64, error) {
		var k int64
		err := r.cfg.Pool.QueryRow(ctx, "SELECT count(*) FROM "+jobTable+" WHERE kind = $1 AND args->>'task' = $2", perslot.Kind, task).Scan(&k)
		return k, err
	}
	boot := func(task string) (time.Duration, int64, error) {
		res, err := scheduler.EnqueueCycle(ctx, client, task, cycleStart)
		if err != nil {
			return 0, 0, err
		}
		job, err := waitJob(ctx, client, res.Job.ID)
		if err != nil {
			return 0, 0, fmt.Errorf("bootstrap of %s: %w", task, err)
		}
		return job.FinalizedAt.Sub(*job.AttemptedAt), vmHWM(), nil
	}
	for _, task := range []string{scalePlain, scaleWeighted, scaleFine} {
		if task == scaleWeighted {
			// The weight census the weighted bootstrap computes its pins
			// from, taken first as the census job takes it ahead of the
			// cycle: 256 steps, each a bucket range in a transaction of
			// its own.
			s, err := r.scaleCensus(ctx, scheduler, schema, cycleStart, n)
			if err != nil {
				return steps, err
			}
			add(s)
		}
		r.logf("scale: bootstrap of %s", task)
		var run time.Duration
		_, rss, err := measureStep(func() (err error) { run, _, err = boot(task); return err })
		if err != nil {
			return steps, err
		}
		slots, err := countPerSlot(task)
		if err != nil {
			return steps, err
		}
		info, err := scheduler.Task(task)
		if err != nil {
			return steps, err
		}
		if slots != int64(info.Plan.Slots) {
			return steps, fmt.Errorf("bootstrap of %s inserted %d per-slot jobs, want %d", task, slots, info.Plan.Slots)
		}
		s := ScaleStep{Accounts: n, Time: run, Rows: slots, PeakRSS: rss}
		switch task {
		case scalePlain:
			s.Step, s.Notes = "bootstrap, plain (24h cycle, 128 slots; River job run time)", "rows: per-slot jobs"
		case scaleFine:
			s.Step, s.Notes = "bootstrap, Buckets 65536 (24h cycle, 1,024 slots of 1m24.375s)", "rows: per-slot jobs"
		case scaleWeighted:
			var pinned int64
			if err := r.cfg.Pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, taskspec.PinsTable}.Sanitize()+" WHERE task = $1 AND cycle_start = $2",
				scaleWeighted, cycleStart).Scan(&pinned); err != nil {
				return steps, err
			}
			s.Step = "bootstrap, weighted (24h, 128 slots; computes the cycle's pins from the weight census)"
			if n <= riverslot.PinsDirectMax {
				s.Step = fmt.Sprintf("bootstrap, weighted (24h, 128 slots; computes the cycle's pins over every account: at most %d)", riverslot.PinsDirectMax)
			}
			s.Notes = fmt.Sprintf("rows: per-slot jobs; %d accounts pinned", pinned)
		}
		add(s)
	}

	// The census job the weighted bootstrap enqueued for the next cycle
	// would run during the steps below: cancelled.
	if err := cancelCensusJobs(ctx, r.cfg.Pool, client, jobTable); err != nil {
		return steps, err
	}

	// One slot's fan-out at 1,024 slots: the bootstrap's per-slot job of a
	// middle slot, made available now (River's JobRetry).
	info, err := scheduler.Task(scaleFine)
	if err != nil {
		return steps, err
	}
	slot := info.Plan.Slots / 2
	lo, hi := info.Plan.BucketRange(slot)
	var expected int64
	if err := r.cfg.Pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE "+sqlbucket.ExprFor("id", riverslot.BucketsTwoByte)+" BETWEEN $1 AND $2", lo, hi).Scan(&expected); err != nil {
		return steps, err
	}
	var perSlotID int64
	if err := r.cfg.Pool.QueryRow(ctx, "SELECT id FROM "+jobTable+" WHERE kind = $1 AND args->>'task' = $2 AND (args->>'slot')::int = $3",
		perslot.Kind, scaleFine, slot).Scan(&perSlotID); err != nil {
		return steps, fmt.Errorf("error finding the per-slot job of slot %d: %w", slot, err)
	}
	if _, err := r.cfg.Pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return steps, err
	}
	r.logf("scale: fan-out of slot %d of %d (%d accounts)", slot, info.Plan.Slots, expected)
	var fanOut time.Duration
	_, rss, err = measureStep(func() error {
		if _, err := client.JobRetry(ctx, perSlotID); err != nil {
			return err
		}
		job, err := waitJob(ctx, client, perSlotID)
		if err != nil {
			return fmt.Errorf("per-slot job of slot %d: %w", slot, err)
		}
		fanOut = job.FinalizedAt.Sub(*job.AttemptedAt)
		return nil
	})
	if err != nil {
		return steps, err
	}
	var inserted int64
	if err := r.cfg.Pool.QueryRow(ctx, "SELECT count(*) FROM "+jobTable+" WHERE kind = $1", syncjob.Kind).Scan(&inserted); err != nil {
		return steps, err
	}
	if inserted != expected {
		return steps, fmt.Errorf("fan-out of slot %d inserted %d sync jobs for the %d accounts of its buckets %d-%d", slot, inserted, expected, lo, hi)
	}
	add(ScaleStep{Step: fmt.Sprintf("one slot's fan-out at 1,024 slots (slot %d, batch %d; River job run time)", slot, r.cfg.BatchSize), Accounts: n, Time: fanOut, Rows: inserted, PeakRSS: rss,
		Notes: fmt.Sprintf("rows: sync jobs = the slot's accounts; %.0f rows/s", perSec(int(inserted), fanOut))})

	// Status of that cycle, twice: the first counts the accounts per slot
	// (the plan's first cycle), the second reads the cached counts.
	for _, what := range []string{"first call: counts accounts per slot through the bucket index", "second call: per-slot counts cached"} {
		var st *riverslot.TaskStatus
		d, rss, err := measureStep(func() (err error) {
			st, err = scheduler.StatusAt(ctx, scaleFine, cycleStart)
			return err
		})
		if err != nil {
			return steps, fmt.Errorf("status: %w", err)
		}
		c := st.Current
		if c == nil || c.Slots != info.Plan.Slots || c.SlotsDone != 1 || c.Enqueued != inserted || c.AccountsExpected != int64(n) {
			return steps, fmt.Errorf("status of the 1,024-slot cycle: %+v; want %d slots, 1 done, %d enqueued, %d expected", c, info.Plan.Slots, inserted, n)
		}
		add(ScaleStep{Step: fmt.Sprintf("riverslot StatusAt of the 1,024-slot cycle (%s)", what), Accounts: n, Time: d, Rows: -1, PeakRSS: rss,
			Notes: fmt.Sprintf("%d slots, %d done, %d enqueued, %d expected", c.Slots, c.SlotsDone, c.Enqueued, c.AccountsExpected)})
	}
	return steps, nil
}

// scaleCensus times the weight census of the weighted task for the cycle
// starting at cycleStart (pinning.Run: what its census job does ahead of
// the cycle), on the task's own plan.
func (r *Runner) scaleCensus(ctx context.Context, scheduler *riverslot.Scheduler, schema string, cycleStart time.Time, n int) (ScaleStep, error) {
	info, err := scheduler.Task(scaleWeighted)
	if err != nil {
		return ScaleStep{}, err
	}
	spec := &taskspec.Spec{Name: scaleWeighted, Plan: info.Plan, Seed: info.Seed, Key: taskspec.KeyOf(info.Plan, info.Seed, info.Shift), PlanID: info.PlanID,
		Schema: schema, Table: "accounts", IDColumn: "id", Weight: "weight", WeightEpsilon: slotplan.WeightEpsilonDefault}
	spec.BuildSQL()
	r.logf("scale: weight census of %s", scaleWeighted)
	var c pinning.Census
	d, rss, err := measureStep(func() (err error) {
		c, _, err = pinning.Run(ctx, r.cfg.Pool, spec, cycleStart, time.Time{}, time.Time{})
		return err
	})
	if err != nil {
		return ScaleStep{}, fmt.Errorf("weight census: %w", err)
	}
	if !c.Finished || c.Accounts != int64(n) {
		return ScaleStep{}, fmt.Errorf("weight census of %s: finished %t, %d accounts counted, want %d", scaleWeighted, c.Finished, c.Accounts, n)
	}
	return ScaleStep{Step: "weight census, weighted (bucket ranges, each its own transaction; the census job's work ahead of the cycle)",
		Accounts: n, Time: d, Rows: c.Accounts, PeakRSS: rss, Notes: fmt.Sprintf("rows: accounts counted; %d steps, %.1f ms a step", c.Steps, float64(d.Microseconds())/1000/float64(max(c.Steps, 1)))}, nil
}

// cancelCensusJobs cancels every weight census job in jobTable.
func cancelCensusJobs(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], jobTable string) error {
	rows, err := pool.Query(ctx, "SELECT id FROM "+jobTable+" WHERE kind = $1 AND finalized_at IS NULL", bootstrap.CensusKind)
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := client.JobCancel(ctx, id); err != nil {
			return fmt.Errorf("error cancelling census job %d: %w", id, err)
		}
	}
	return nil
}

func (r *Runner) scaleTask(name, schema, weight string, buckets int) riverslot.Task {
	return riverslot.Task{
		Name: name, Cycle: 24 * time.Hour, Schema: schema, Table: "accounts", Weight: weight, Buckets: buckets,
		BatchSize: r.cfg.BatchSize, Queue: "parked", ControlQueue: river.QueueDefault, PerSlotTimeout: time.Hour,
		Sync: func(context.Context, uuid.UUID, *river.Job[syncjob.Args]) error { return nil },
	}
}

// waitJob polls job id until it completes; a discarded, cancelled or
// retryable job is an error.
func waitJob(ctx context.Context, client *river.Client[pgx.Tx], id int64) (*rivertype.JobRow, error) {
	for {
		job, err := client.JobGet(ctx, id)
		if err != nil {
			return nil, err
		}
		switch job.State {
		case rivertype.JobStateCompleted:
			return job, nil
		case rivertype.JobStateDiscarded, rivertype.JobStateCancelled, rivertype.JobStateRetryable:
			return nil, fmt.Errorf("job %d %s: %v", id, job.State, job.Errors)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// scaleRun runs ScaleRunAccounts accounts (the first of the seeded ones, in
// a table of their own) through one real cycle of ScaleRunCycle with River's
// CompletedJobRetentionPeriod at ScaleRunRetention, every sync a no-op,
// sampling river_job's rows every 500 ms until every account is synced and
// the cycle is over.
func (r *Runner) scaleRun(ctx context.Context, accountsSchema string) ([]ScaleStep, error) {
	k, cycle, retention := r.cfg.ScaleRunAccounts, r.cfg.ScaleRunCycle, r.cfg.ScaleRunRetention
	runTable := pgx.Identifier{accountsSchema, "run_accounts"}.Sanitize()
	for _, stmt := range []string{
		"CREATE TABLE " + runTable + " AS SELECT id, active FROM " + pgx.Identifier{accountsSchema, "accounts"}.Sanitize() + " LIMIT " + fmt.Sprint(k),
		"ALTER TABLE " + runTable + " ADD PRIMARY KEY (id)",
	} {
		if _, err := r.cfg.Pool.Exec(ctx, stmt); err != nil {
			return nil, err
		}
	}
	var have int
	if err := r.cfg.Pool.QueryRow(ctx, "SELECT count(*) FROM "+runTable).Scan(&have); err != nil {
		return nil, err
	}
	if have != k {
		return nil, fmt.Errorf("--scale-run-accounts %d is more than the %d accounts seeded", k, have)
	}
	schema, drop, err := r.schema(ctx, "scale_run")
	if err != nil {
		return nil, err
	}
	defer drop()

	// The next cycle starts about 20 s from now: the grid's offset is
	// chosen so.
	start := time.Now().Add(20 * time.Second).Truncate(time.Second)
	offset := slotplan.GridOffset(start, cycle)
	var (
		mu     sync.Mutex
		synced = make(map[uuid.UUID]int, k)
		syncs  atomic.Int64
	)
	scheduler, err := riverslot.New(r.cfg.Pool, &riverslot.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tasks: []riverslot.Task{{
			// LateGrace the whole cycle: a sync River starts late on a busy
			// machine still runs (and is counted) instead of completing
			// as stale.
			Name: scaleRun, Cycle: cycle, TriggerOffset: offset, LateGrace: cycle, Schema: accountsSchema, Table: "run_accounts", BatchSize: r.cfg.BatchSize,
			Sync: func(_ context.Context, id uuid.UUID, _ *river.Job[syncjob.Args]) error {
				mu.Lock()
				synced[id]++
				mu.Unlock()
				syncs.Add(1)
				return nil
			},
		}},
	})
	if err != nil {
		return nil, err
	}
	if err := scheduler.CreateIndexes(ctx); err != nil {
		return nil, err
	}
	if _, err := r.cfg.Pool.Exec(ctx, "ANALYZE "+runTable); err != nil {
		return nil, err
	}
	config := &river.Config{
		Logger:                      slog.New(slog.NewTextHandler(r.cfg.Log, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:                      map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 20}},
		Schema:                      schema,
		CompletedJobRetentionPeriod: retention,
	}
	if err := scheduler.Configure(config); err != nil {
		return nil, err
	}
	config.PeriodicJobs = nil // one cycle, enqueued below
	client, err := river.NewClient(riverpgxv5.New(r.cfg.Pool), config)
	if err != nil {
		return nil, err
	}
	info, err := scheduler.Task(scaleRun)
	if err != nil {
		return nil, err
	}
	debug.FreeOSMemory()
	resetPeakRSS()
	begun := time.Now()
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = client.Stop(context.WithoutCancel(ctx)) }()
	if _, err := scheduler.EnqueueCycle(ctx, client, scaleRun, start); err != nil {
		return nil, err
	}
	r.logf("scale: compressed run of %d accounts, cycle %s (%d slots) from %s, retention %s", k, cycle, info.Plan.Slots, start.Format(time.TimeOnly), retention)

	jobTable := riverjob.QualifiedTable(schema)
	end := start.Add(cycle)
	deadline := end.Add(cycle + 2*time.Minute)
	var maxRows, lastRows int64
	lastLog := time.Now()
	for {
		if err := r.cfg.Pool.QueryRow(ctx, "SELECT count(*) FROM "+jobTable).Scan(&lastRows); err != nil {
			return nil, err
		}
		maxRows = max(maxRows, lastRows)
		done := syncs.Load()
		if time.Now().After(end) {
			if done >= int64(k) {
				break
			}
			// Every job finished (syncs skipped as stale among them).
			var unfinished int64
			if err := r.cfg.Pool.QueryRow(ctx, "SELECT count(*) FROM "+jobTable+" WHERE state NOT IN ('completed', 'discarded', 'cancelled')").Scan(&unfinished); err != nil {
				return nil, err
			}
			if unfinished == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("compressed run: %d of %d accounts synced %s after the cycle's end", done, k, deadline.Sub(end))
		}
		if time.Since(lastLog) > 10*time.Second {
			r.logf("scale: run: %d/%d synced, %d rows in river_job (max %d)", done, k, lastRows, maxRows)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	elapsed := time.Since(begun)
	rss := vmHWM()
	mu.Lock()
	twice := 0
	for _, c := range synced {
		if c > 1 {
			twice++
		}
	}
	distinct := len(synced)
	mu.Unlock()
	if twice > 0 {
		return nil, fmt.Errorf("compressed run: %d accounts synced more than once", twice)
	}
	syncedNote := "every account synced once"
	if distinct != k {
		syncedNote = fmt.Sprintf("%d accounts synced once, %d not synced (skipped as stale: started more than LateGrace late)", distinct, k-distinct)
	}
	budget := riverslot.RowBudget(int64(k), info, retention)
	step := ScaleStep{
		Step: fmt.Sprintf("compressed run: one %s cycle (%d slots), River CompletedJobRetentionPeriod %s; rows = max river_job rows (sampled every 0.5 s)",
			cycle, info.Plan.Slots, retention),
		Accounts: k, Time: elapsed, Rows: maxRows, PeakRSS: rss,
		Notes: fmt.Sprintf("max rows %.2f x accounts (RowBudget %d); %s; %d rows at the end", float64(maxRows)/float64(k), budget, syncedNote, lastRows),
	}
	r.logf("scale: %s: %s", step.Step, step.Notes)
	return []ScaleStep{step}, nil
}

// ScaleTable formats the scale benchmark's rows as a markdown table.
func ScaleTable(steps []ScaleStep) string {
	var b strings.Builder
	b.WriteString("| step | accounts | time | rows | peak RSS | notes |\n|---|---|---|---|---|---|\n")
	for _, s := range steps {
		rows := "-"
		if s.Rows >= 0 {
			rows = fmt.Sprint(s.Rows)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f MiB | %s |\n", s.Step, human(s.Accounts), fmtDuration(s.Time), rows, float64(s.PeakRSS)/(1<<20), s.Notes)
	}
	return b.String()
}

func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return ms(d)
}

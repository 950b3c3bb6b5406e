package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/shutdown"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/sim"
	"github.com/riverslot/riverslot/internal/testkit/measure"
	"github.com/riverslot/riverslot/slotplan"
)

// ErrInterrupted is Run's error when ctx is cancelled while the cycles
// run: a rerun with Keep resumes the same cycle.
var ErrInterrupted = errors.New("interrupted; rerun with --keep to resume the same cycle")

// Run runs the demo that cfg describes and returns its report. Progress,
// riverslot's and River's log lines go to stderr: a live line when tty
// (stderr is a terminal), else a line a slot. A run whose accounts were
// missed or duplicated returns its report and an error saying so.
func Run(ctx context.Context, cfg *Config, stderr io.Writer, tty bool) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// River's logger, riverslot's logger and the progress display all
	// write to stderr from their own goroutines.
	stderr = &lockedWriter{w: stderr}
	if cfg.ShardPools != nil {
		summary, err := runShards(ctx, cfg, stderr, tty)
		if err != nil {
			return nil, err
		}
		return &Report{Shards: summary}, nil
	}
	d := &demo{
		cfg: cfg, pool: cfg.Pool, accounts: cfg.AccountsPool, monitor: cfg.Monitor, plan: mustPlan(cfg.Cycle),
		stderr: stderr, tty: tty,
	}
	return d.run(ctx)
}

func mustPlan(cycle time.Duration) slotplan.Plan {
	p, err := slotplan.New(cycle)
	if err != nil {
		panic(err) // checked by Config.validate
	}
	return p
}

type demo struct {
	cfg  *Config
	plan slotplan.Plan
	pool *pgxpool.Pool
	// accounts holds the accounts table: pool, or --accounts-database-url's.
	accounts *pgxpool.Pool
	// monitor is a separate one-connection pool for progress reads.
	monitor *pgxpool.Pool
	stderr  io.Writer
	// tty is whether stderr is a terminal: live line or one line per slot.
	tty bool
	// banks is the fake upstream server of --upstreams (nil without), and
	// httpClient the syncs' client of it; scheduler is the run's.
	banks      *bankServer
	offsetSeed uint64 // the task's Seed, for the banks' lateness
	// stopTriggers removes the client's periodic jobs (the tasks'
	// triggers); watch calls it once the last cycle has started.
	stopTriggers func()
	httpClient   *http.Client
	scheduler    *riverslot.Scheduler
	// maxRiverJobRows is the most rows river_job held at a progress read.
	maxRiverJobRows int64
}

func (d *demo) logf(format string, args ...any) {
	fmt.Fprintf(d.stderr, "riverslot demo: "+format+"\n", args...)
}

func (d *demo) table() string { return pgx.Identifier{d.cfg.Schema, "accounts"}.Sanitize() }

// synced is the table the demo's sync function records each sync in.
func (d *demo) synced() string { return pgx.Identifier{d.cfg.Schema, "synced"}.Sanitize() }

func (d *demo) run(ctx context.Context) (*Report, error) {
	if err := d.checkSchema(ctx); err != nil {
		return nil, err
	}
	accounts, err := d.prepare(ctx)
	if err != nil {
		return nil, err
	}
	task := riverslot.Task{
		Name:   d.cfg.Task,
		Cycle:  d.cfg.Cycle,
		Schema: d.cfg.Schema,
		Table:  "accounts",
		Filter: "active",
		// The app's own record of what it synced, as an app keeps
		// last_synced_at: the run's figures read it, so they hold after
		// River deletes completed jobs (--completed-retention). With
		// --upstreams the sync first calls the account's bank.
		Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
			if d.banks != nil {
				started := time.Now()
				if err := d.banks.call(ctx, d.httpClient, job.Args.Upstream); err != nil {
					return err
				}
				// How late the successful call started after the
				// account's regular time (a snooze moves the job's
				// scheduled_at; this does not move).
				due := d.plan.SlotStart(job.Args.CycleStart, job.Args.Slot).Add(d.plan.Offset(d.offsetSeed, accountID))
				d.banks.late(job.Args.Upstream, started.Sub(due))
			}
			// The record is the sync's effect: its INSERT is not cut by
			// the sync's timeout, so the Sync returns whether it committed
			// (with the job's context, one that committed as the deadline
			// passed failed the job, and River synced the account again).
			rctx, cancel := measure.RecordContext(ctx)
			defer cancel()
			_, err := d.pool.Exec(rctx, "INSERT INTO "+d.synced()+" (task, account_id, cycle_start) VALUES ($1, $2, $3)",
				job.Args.Task, accountID, job.Args.CycleStart)
			return err
		},
		// The pool given to New when the accounts are in River's database.
		AccountsPool: d.accounts,
	}
	if d.cfg.Weights != "" {
		task.Weight = "weight"
	}
	if d.cfg.Upstreams.Count > 0 {
		task.Upstream, task.Limits = "bank", limits(d.cfg.Upstreams, d.cfg.Cycle)
	}
	probe, err := riverslot.New(d.pool, &riverslot.Config{Tasks: []riverslot.Task{task}})
	if err != nil {
		return nil, err
	}
	info, err := probe.Task(task.Name)
	if err != nil {
		return nil, err
	}
	d.offsetSeed = info.Seed
	first, err := d.firstCycleStart(ctx, info.TriggerLead)
	if err != nil {
		return nil, err
	}
	starts := make([]time.Time, d.cfg.Cycles)
	for i := range starts {
		starts[i] = first.Add(time.Duration(i) * d.cfg.Cycle)
	}

	// The path real apps use: the periodic trigger bootstraps each cycle a
	// trigger lead before it starts; RunOnStart bootstraps the first one
	// (or, with --keep, the unfinished one) when the client becomes leader.
	task.TriggerOffset = slotplan.GridOffset(first, d.cfg.Cycle)
	if u := d.cfg.Upstreams; u.Count > 0 {
		cycle := d.cfg.Cycle
		down := func(key string, at time.Time) bool {
			if u.Down == nil || key != sim.BankKey(u.Down.Bank) {
				return false
			}
			for _, s := range starts {
				if from, to := s.Add(time.Duration(u.Down.From*float64(cycle))), s.Add(time.Duration(u.Down.To*float64(cycle))); !at.Before(from) && at.Before(to) {
					return true
				}
			}
			return false
		}
		if d.banks, err = startBanks(u.Count, down); err != nil {
			return nil, err
		}
		defer d.banks.close()
		d.httpClient = &http.Client{Timeout: 30 * time.Second}
		defer d.httpClient.CloseIdleConnections()
		d.logf("%d upstreams (bank-00 to %s) served at %s; limits %+v", u.Count, sim.BankKey(u.Count-1), d.banks.url, task.Limits)
	}
	tasks := []riverslot.Task{task}
	if d.cfg.Reciprocal {
		opposite := task
		opposite.Name, opposite.OppositeOf = d.cfg.tasks()[1], task.Name
		// A task OppositeOf a weighted task follows its pins (shifted by
		// half a cycle) and has no Weight of its own.
		opposite.Weight = ""
		tasks = append(tasks, opposite)
	}
	scheduler, err := riverslot.New(d.pool, &riverslot.Config{
		Logger: slog.New(slog.NewTextHandler(d.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Tasks:  tasks,
	})
	if err != nil {
		return nil, err
	}
	d.scheduler = scheduler
	config := &river.Config{
		Logger:            slog.New(slog.NewTextHandler(d.stderr, &slog.HandlerOptions{Level: d.cfg.LogLevel})),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: d.cfg.Workers}},
		Schema:            d.cfg.Schema,
		FetchPollInterval: 250 * time.Millisecond,

		CompletedJobRetentionPeriod: d.cfg.CompletedRetention,
	}
	// The README's order: Check after Configure sees the retention.
	if err := scheduler.Configure(config); err != nil {
		return nil, err
	}
	if err := scheduler.CreateIndexes(ctx); err != nil { // the bucket index exists; a weighted task's pins tables
		return nil, err
	}
	// An upstream over its budget is what --upstreams may show: reported,
	// not fatal.
	if err := exceptUpstreamBudget(scheduler.Check(ctx), d.logf); err != nil {
		return nil, err
	}
	client, err := river.NewClient(riverpgxv5.New(d.pool), config)
	if err != nil {
		return nil, err
	}
	// RunOnStart bootstraps the cycle that starts within the trigger lead
	// (plus a second) of now; start the client no earlier, so that it is
	// the first cycle and not a partial one before it.
	if wait := time.Until(first.Add(-info.TriggerLead - 500*time.Millisecond)); wait > 0 {
		d.logf("starting River at %s, %s before the first cycle (the trigger's lead)", time.Now().Add(wait).UTC().Format(time.RFC3339), info.TriggerLead)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// The client outlives ctx and is stopped below, so that an interrupt
	// shuts it down in order instead of tearing it down mid-query.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	defer func() {
		stop := client.Stop
		if ctx.Err() != nil {
			// Interrupted: cancel running jobs; a fan-out resumes from its
			// cursor on the next run with --keep.
			stop = client.StopAndCancel
		}
		// The outcomes its sync jobs counted, written before it exits.
		if _, err := shutdown.StopThenFlush(stop, scheduler.FlushOutcomes); err != nil {
			d.logf("warning: %v", err)
		}
	}()

	d.logf("%d cycle(s) from %s: %d slots of %s over %d accounts; the periodic trigger bootstraps each %s before it starts",
		len(starts), first.Format(time.RFC3339), d.plan.Slots, d.plan.SlotDuration, accounts, info.TriggerLead)

	// Once the last cycle has started, no later one is bootstrapped: its
	// syncs would call the banks and move the limiter's counters while
	// the last cycle's stragglers wait for their NotAfter.
	d.stopTriggers = client.PeriodicJobs().Clear
	if err := d.watch(ctx, starts); err != nil {
		return nil, err
	}
	summary, err := d.report(ctx, starts)
	if summary == nil {
		return nil, err
	}
	report := &Report{Summary: summary}
	if err != nil || d.cfg.JSON {
		return report, err
	}
	// The operator's view of the last cycle, as riverslot status shows it.
	if report.Status, err = scheduler.StatusAt(ctx, d.cfg.Task, starts[len(starts)-1]); err != nil {
		return report, fmt.Errorf("error reading the cycle's status: %w", err)
	}
	return report, nil
}

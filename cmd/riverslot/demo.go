package main

import (
	"context"
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
	"github.com/riverslot/riverslot/slotplan"
)

const demoAbout = `Runs compressed live cycles of slot scheduling against Postgres and reports
them: accounts synced once, missed or duplicated, start lateness and peak
pending sync jobs, all measured from River's job table.

The demo creates its schema (--schema) and marks it as its own. Each run
drops and recreates that schema (unless --keep); it refuses, before touching
anything, a schema that exists and was not created by the demo.
`

// cycleStartAheadMax is how far ahead --cycle-start may be.
const cycleStartAheadMax = 24 * time.Hour

type demoOptions struct {
	databaseURL string
	// accountsURL is the database of the accounts table ("": databaseURL).
	accountsURL string
	accounts    int
	cycle       time.Duration
	cycles      int
	workers     int
	json        bool
	cycleStart  time.Time // zero: a trigger lead from now
	keep        bool
	schema      string
	task        string
	reciprocal  bool       // a second task, opposite the first
	weights     string     // "" or "pareto": seed a weight column and run weighted
	logLevel    slog.Level // of River's logger
	// completedRetention is River's CompletedJobRetentionPeriod (0:
	// River's default, 24 h).
	completedRetention time.Duration
	// fanOutBaseline: time River's raw insert after the run
	// (--fanout-baseline).
	fanOutBaseline bool
	// upstreams: the --upstream* flags.
	upstreams demoUpstreamOptions
	// shardURLs: --shards, the databases of a sharded run (nil: one).
	shardURLs []string
}

// tasks are the names of the demo's tasks: --task, and with --reciprocal
// <task>_opposite, opposite it (riverslot.Task.OppositeOf).
func (o *demoOptions) tasks() []string {
	if o.reciprocal {
		return []string{o.task, o.task + "_opposite"}
	}
	return []string{o.task}
}

func parseDemoFlags(args []string, stderr io.Writer) (*demoOptions, error) {
	fs := newFlagSet("demo", demoAbout, stderr)
	o := &demoOptions{}
	databaseURL := databaseURLFlag(fs, defaultDatabaseURL, "demo")
	fs.StringVar(&o.accountsURL, "accounts-database-url", "", "PostgreSQL URL of another database for the accounts table (the demo creates it there, in a schema named --schema; River's database then holds nothing of the accounts); default: --database-url")
	fs.IntVar(&o.accounts, "accounts", 10_000, "number of random UUIDv4 accounts to seed")
	durationVar(fs, &o.cycle, "cycle", 120*time.Second, "cycle length: a whole number of seconds, a multiple of 2s, at most 24h (120s = 8 slots of 15s)")
	fs.IntVar(&o.cycles, "cycles", 1, "number of consecutive cycles to run")
	fs.IntVar(&o.workers, "workers", 0, "River MaxWorkers for the demo queue (0: sized for the fleet, at least 50: enough to start accounts/cycle syncs a second at 70% of the queue's MaxWorkers x 10 a second, riverslot.MaxWorkersFor)")
	fs.BoolVar(&o.json, "json", false, "print one JSON object on stdout instead of the table (progress stays on stderr)")
	cycleStart := fs.String("cycle-start", "", "RFC 3339 start of the first cycle, in the next 24h (default: the periodic trigger's lead from now, so the trigger starts it at once)")
	fs.BoolVar(&o.keep, "keep", false, "keep the demo's schema and accounts: do not drop and reseed; a rerun resumes an unfinished cycle")
	fs.StringVar(&o.schema, "schema", "riverslot_demo", "schema the demo creates for River's tables and the accounts; it must not exist or be one the demo created")
	fs.StringVar(&o.task, "task", "demo", "task name")
	shards := fs.String("shards", "", "URL,URL,...: run the task over several databases, one shard each (schema <--schema>_s1, _s2...; a URL may repeat), its buckets split evenly by slots (docs/shards.md), one River client per shard; reports each shard and all")
	fs.BoolVar(&o.reciprocal, "reciprocal", false, "run a second task, <task>_opposite, over the same accounts, opposite the first (OppositeOf): no account is synced by both within half a cycle minus one slot")
	fs.StringVar(&o.weights, "weights", "", "pareto: give every account a weight (column weight, Pareto(1.5) from a fixed seed) and run the task weighted (Task.Weight), reporting per-slot weight max/mean against hash-only placement")
	fs.BoolVar(&o.fanOutBaseline, "fanout-baseline", false, "after the run, time River's own insert of a mean slot's sync jobs (their four fields) into the same river_job, and report the live fan-out's rate against it (fanout_vs_raw_insert)")
	fs.DurationVar(&o.completedRetention, "completed-retention", time.Hour, "River's CompletedJobRetentionPeriod: how long River keeps completed jobs (0: River's 24h); riverslot's ledger keeps cycles unique whatever it is, e.g. 1m. The default, 1h, keeps the demo under Check's row budget")
	addDemoUpstreamFlags(fs, &o.upstreams)
	logLevel := logLevelFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := o.upstreams.check(); err != nil {
		return nil, err
	}
	o.databaseURL = databaseURL()
	if o.completedRetention < 0 {
		return nil, usageErr("--completed-retention must be 0 (River's default, 24h) or a positive duration such as 1m, got %s", o.completedRetention)
	}
	if o.weights != "" && o.weights != "pareto" {
		return nil, usageErr("--weights must be pareto (or omitted for unweighted accounts), got %q", o.weights)
	}
	o.logLevel = *logLevel

	switch {
	case o.accounts < 1:
		return nil, usageErr("--accounts must be at least 1, got %d", o.accounts)
	case o.cycles < 1:
		return nil, usageErr("--cycles must be at least 1, got %d", o.cycles)
	case o.workers < 0 || o.workers > river.QueueNumWorkersMax:
		return nil, usageErr("--workers must be between 1 and %d (River's limit per queue), or 0 to size it for the fleet, got %d", river.QueueNumWorkersMax, o.workers)
	}
	if o.workers == 0 {
		tasks := int64(1)
		if o.reciprocal {
			tasks = 2 // both tasks' syncs share the queue
		}
		need := riverslot.MaxWorkersFor(tasks*int64(o.accounts), o.cycle)
		o.workers = min(max(50, need), river.QueueNumWorkersMax)
		if need > o.workers {
			fmt.Fprintf(stderr, "riverslot demo: the fleet needs %d workers to start its syncs in time, more than River's %d per queue; the demo runs with %d and its syncs will start late (lengthen --cycle or lower --accounts)\n",
				need, river.QueueNumWorkersMax, o.workers)
		}
	}
	if err := checkSchemaName("--schema", o.schema); err != nil {
		return nil, err
	}
	if *shards != "" {
		urls, err := parseShardURLs(*shards)
		if err != nil {
			return nil, err
		}
		switch {
		case o.accountsURL != "" || o.keep || o.reciprocal || o.weights != "" || o.fanOutBaseline || o.upstreams.count > 0:
			return nil, usageErr("--shards runs the plain task: leave out --accounts-database-url, --keep, --reciprocal, --weights, --fanout-baseline and --upstreams")
		}
		o.shardURLs = urls
	}
	if err := checkTaskName(o.task); err != nil {
		return nil, err
	}
	if err := checkCycle("--cycle", o.cycle); err != nil {
		return nil, err
	}
	if *cycleStart != "" {
		t, err := time.Parse(time.RFC3339, *cycleStart)
		if err != nil {
			return nil, usageErr("--cycle-start must be RFC 3339, e.g. 2026-11-22T10:00:00Z, got %q", *cycleStart)
		}
		now := time.Now()
		switch {
		case !t.After(now):
			return nil, usageErr("--cycle-start %s is in the past (now %s): its slots would be due before the demo enqueues them; "+
				"pass a future time, or omit --cycle-start to start as soon as the trigger can", *cycleStart, now.UTC().Format(time.RFC3339))
		case t.After(now.Add(cycleStartAheadMax)):
			return nil, usageErr("--cycle-start %s is more than %s ahead: the demo would wait that long; "+
				"pass a time within %s, or omit --cycle-start to start as soon as the trigger can", *cycleStart, cycleStartAheadMax, cycleStartAheadMax)
		}
		o.cycleStart = t
	}
	return o, nil
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseDemoFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.shardURLs != nil {
		return runDemoShards(ctx, o, stdout, &lockedWriter{w: stderr}, isTerminal(stderr))
	}
	// At most 20 connections, fewer for a small --workers: a few demos
	// (the tests run several) must fit in Postgres' default 100.
	pool, err := connect(ctx, o.databaseURL, int32(min(20, max(o.workers, 1)+5)))
	if err != nil {
		return err
	}
	defer pool.Close()
	// Progress reads get their own connection: with more workers than
	// connections, a read queued behind the workers would stall the display
	// (and skip a slot's line) exactly when a slot's jobs come due.
	monitor, err := connect(ctx, o.databaseURL, 1)
	if err != nil {
		return err
	}
	defer monitor.Close()
	accounts := pool
	if o.accountsURL != "" {
		if accounts, err = connectFlag(ctx, "--accounts-database-url", o.accountsURL, int32(min(10, max(o.workers, 1)+2))); err != nil {
			return err
		}
		defer accounts.Close()
	}

	d := &demo{
		opts: o, pool: pool, accounts: accounts, monitor: monitor, plan: mustPlan(o.cycle), stdout: stdout,
		// River's logger, riverslot's logger and the progress display all
		// write to stderr from their own goroutines.
		stderr: &lockedWriter{w: stderr},
		tty:    isTerminal(stderr),
	}
	return d.run(ctx)
}

func mustPlan(cycle time.Duration) slotplan.Plan {
	p, err := slotplan.New(cycle)
	if err != nil {
		panic(err) // validated in parseDemoFlags
	}
	return p
}

type demo struct {
	opts *demoOptions
	plan slotplan.Plan
	pool *pgxpool.Pool
	// accounts holds the accounts table: pool, or --accounts-database-url's.
	accounts *pgxpool.Pool
	// monitor is a separate one-connection pool for progress reads.
	monitor *pgxpool.Pool
	stdout  io.Writer
	stderr  io.Writer
	// tty is whether stderr is a terminal: live line or one line per slot.
	tty bool
	// banks is the fake upstream server of --upstreams (nil without), and
	// httpClient the syncs' client of it; scheduler is the run's.
	banks      *demoBanks
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

func (d *demo) table() string { return pgx.Identifier{d.opts.schema, "accounts"}.Sanitize() }

// synced is the table the demo's sync function records each sync in.
func (d *demo) synced() string { return pgx.Identifier{d.opts.schema, "synced"}.Sanitize() }

func (d *demo) run(ctx context.Context) error {
	if err := d.checkSchema(ctx); err != nil {
		return err
	}
	accounts, err := d.prepare(ctx)
	if err != nil {
		return err
	}
	task := riverslot.Task{
		Name:   d.opts.task,
		Cycle:  d.opts.cycle,
		Schema: d.opts.schema,
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
			_, err := d.pool.Exec(ctx, "INSERT INTO "+d.synced()+" (task, account_id, cycle_start) VALUES ($1, $2, $3)",
				job.Args.Task, accountID, job.Args.CycleStart)
			return err
		},
		// The pool given to New when the accounts are in River's database.
		AccountsPool: d.accounts,
	}
	if d.opts.weights != "" {
		task.Weight = "weight"
	}
	if d.opts.upstreams.count > 0 {
		task.Upstream, task.Limits = "bank", d.opts.upstreams.limits(d.opts.cycle)
	}
	probe, err := riverslot.New(d.pool, &riverslot.Config{Tasks: []riverslot.Task{task}})
	if err != nil {
		return err
	}
	info, err := probe.Task(task.Name)
	if err != nil {
		return err
	}
	d.offsetSeed = info.Seed
	first, err := d.firstCycleStart(ctx, info.TriggerLead)
	if err != nil {
		return err
	}
	starts := make([]time.Time, d.opts.cycles)
	for i := range starts {
		starts[i] = first.Add(time.Duration(i) * d.opts.cycle)
	}

	// The path real apps use: the periodic trigger bootstraps each cycle a
	// trigger lead before it starts; RunOnStart bootstraps the first one
	// (or, with --keep, the unfinished one) when the client becomes leader.
	task.TriggerOffset = slotplan.GridOffset(first, d.opts.cycle)
	if o := &d.opts.upstreams; o.count > 0 {
		cycle := d.opts.cycle
		down := func(key string, at time.Time) bool {
			if key != o.downKey {
				return false
			}
			for _, s := range starts {
				if from, to := s.Add(time.Duration(o.downFrom*float64(cycle))), s.Add(time.Duration(o.downTo*float64(cycle))); !at.Before(from) && at.Before(to) {
					return true
				}
			}
			return false
		}
		if d.banks, err = startDemoBanks(o.keys(), down); err != nil {
			return err
		}
		defer d.banks.close()
		d.httpClient = &http.Client{Timeout: 30 * time.Second}
		defer d.httpClient.CloseIdleConnections()
		d.logf("%d upstreams (bank-00 to %s) served at %s; limits %+v", o.count, o.keys()[o.count-1], d.banks.url, task.Limits)
	}
	tasks := []riverslot.Task{task}
	if d.opts.reciprocal {
		opposite := task
		opposite.Name, opposite.OppositeOf = d.opts.tasks()[1], task.Name
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
		return err
	}
	d.scheduler = scheduler
	config := &river.Config{
		Logger:            slog.New(slog.NewTextHandler(d.stderr, &slog.HandlerOptions{Level: d.opts.logLevel})),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: d.opts.workers}},
		Schema:            d.opts.schema,
		FetchPollInterval: 250 * time.Millisecond,

		CompletedJobRetentionPeriod: d.opts.completedRetention,
	}
	// The README's order: Check after Configure sees the retention.
	if err := scheduler.Configure(config); err != nil {
		return err
	}
	if err := scheduler.CreateIndexes(ctx); err != nil { // the bucket index exists; a weighted task's pins tables
		return err
	}
	// An upstream over its budget is what --upstreams may show: reported,
	// not fatal.
	if err := exceptUpstreamBudget(scheduler.Check(ctx), d.logf); err != nil {
		return err
	}
	client, err := river.NewClient(riverpgxv5.New(d.pool), config)
	if err != nil {
		return err
	}
	// RunOnStart bootstraps the cycle that starts within the trigger lead
	// (plus a second) of now; start the client no earlier, so that it is
	// the first cycle and not a partial one before it.
	if wait := time.Until(first.Add(-info.TriggerLead - 500*time.Millisecond)); wait > 0 {
		d.logf("starting River at %s, %s before the first cycle (the trigger's lead)", time.Now().Add(wait).UTC().Format(time.RFC3339), info.TriggerLead)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// The client outlives ctx and is stopped below, so that an interrupt
	// shuts it down in order instead of tearing it down mid-query.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	defer func() {
		stop := client.Stop
		if ctx.Err() != nil {
			// Interrupted: cancel running jobs; a fan-out resumes from its
			// cursor on the next run with --keep.
			stop = client.StopAndCancel
		}
		// The outcomes its sync jobs counted, written before it exits.
		if _, err := stopThenFlush(stop, scheduler.FlushOutcomes); err != nil {
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
		return err
	}
	if err := d.report(ctx, starts); err != nil {
		return err
	}
	if !d.opts.json {
		// The operator's view of the last cycle, as riverslot status shows it.
		st, err := scheduler.StatusAt(ctx, d.opts.task, starts[len(starts)-1])
		if err != nil {
			return fmt.Errorf("error reading the cycle's status: %w", err)
		}
		fmt.Fprintln(d.stdout)
		printStatus(d.stdout, st)
	}
	return nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot/bootstrap"
	"github.com/riverslot/riverslot/internal/measure"
	"github.com/riverslot/riverslot/perslot"
	"github.com/riverslot/riverslot/riverutil"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
	"github.com/riverslot/riverslot/syncjob"
)

// defaultDatabaseURL is the database `make demo` prepares.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/riverslot_demo?sslmode=disable"

type demoOptions struct {
	databaseURL string
	accounts    int
	cycle       time.Duration
	cycles      int
	workers     int
	json        bool
	cycleStart  time.Time // zero: next whole slot from now
	keep        bool
	schema      string
	task        string
}

func parseDemoFlags(args []string, stderr io.Writer) (*demoOptions, error) {
	fs := newFlagSet("demo", stderr)
	o := &demoOptions{}
	dbDefault := os.Getenv("DATABASE_URL")
	if dbDefault == "" {
		dbDefault = defaultDatabaseURL
	}
	fs.StringVar(&o.databaseURL, "database-url", dbDefault, "PostgreSQL URL (default $DATABASE_URL, else the database `make demo` prepares)")
	fs.IntVar(&o.accounts, "accounts", 10_000, "number of random UUIDv4 accounts to seed")
	fs.DurationVar(&o.cycle, "cycle", 120*time.Second, "cycle length: a whole number of seconds, a multiple of 2s (120s = 8 slots of 15s)")
	fs.IntVar(&o.cycles, "cycles", 1, "number of consecutive cycles to run")
	fs.IntVar(&o.workers, "workers", 50, "River MaxWorkers for the demo queue")
	fs.BoolVar(&o.json, "json", false, "print one JSON object on stdout instead of the table (progress stays on stderr)")
	cycleStart := fs.String("cycle-start", "", "RFC 3339 anchor of the first cycle (default: the next whole slot at least 5s from now)")
	fs.BoolVar(&o.keep, "keep", false, "keep existing demo data: do not drop and reseed; a rerun resumes an unfinished cycle")
	fs.StringVar(&o.schema, "schema", "riverslot_demo", "schema holding the demo's River tables and accounts")
	fs.StringVar(&o.task, "task", "demo", "task name")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}

	switch {
	case o.accounts < 1:
		return nil, usageErr("--accounts must be at least 1, got %d", o.accounts)
	case o.cycles < 1:
		return nil, usageErr("--cycles must be at least 1, got %d", o.cycles)
	case o.workers < 1:
		return nil, usageErr("--workers must be at least 1, got %d", o.workers)
	case o.schema == "" || strings.ContainsAny(o.schema, "\";\x00") || strings.Contains(o.schema, "--"):
		return nil, usageErr("--schema must be a plain identifier, got %q", o.schema)
	}
	if _, err := slotplan.New(o.cycle); err != nil {
		return nil, usageErr("--cycle: %v", err)
	}
	if *cycleStart != "" {
		t, err := time.Parse(time.RFC3339, *cycleStart)
		if err != nil {
			return nil, usageErr("--cycle-start must be RFC 3339, e.g. 2026-11-22T10:00:00Z, got %q", *cycleStart)
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
	pool, err := connect(ctx, o.databaseURL, 20)
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

	d := &demo{
		opts: o, pool: pool, monitor: monitor, plan: mustPlan(o.cycle), stdout: stdout,
		// River's logger, the plugin's logger and the progress display all
		// write to stderr from their own goroutines.
		stderr: &lockedWriter{w: stderr},
		tty:    isTerminal(stderr),
	}
	return d.run(ctx)
}

// connect opens a pool and pings it; failures exit 2 with a hint.
func connect(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	config, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usageErr("--database-url is not a valid PostgreSQL URL: %v", err)
	}
	config.MaxConns = maxConns
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(pingCtx, config)
	if err == nil {
		err = pool.Ping(pingCtx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, usageErr("cannot reach the database at %s: %v (run `make demo`, which starts PostgreSQL, or pass --database-url)", redact(config), err)
	}
	return pool, nil
}

func redact(c *pgxpool.Config) string {
	return fmt.Sprintf("%s@%s:%d/%s", c.ConnConfig.User, c.ConnConfig.Host, c.ConnConfig.Port, c.ConnConfig.Database)
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
	// monitor is a separate one-connection pool for progress reads.
	monitor *pgxpool.Pool
	stdout  io.Writer
	stderr  io.Writer
	// tty is whether stderr is a terminal: live line or one line per slot.
	tty bool
}

// lockedWriter serializes writes from several goroutines to one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (d *demo) logf(format string, args ...any) {
	fmt.Fprintf(d.stderr, "riverslot demo: "+format+"\n", args...)
}

func (d *demo) table() string { return pgx.Identifier{d.opts.schema, "accounts"}.Sanitize() }

func (d *demo) run(ctx context.Context) error {
	accounts, err := d.prepare(ctx)
	if err != nil {
		return err
	}
	first, err := d.firstCycleStart(ctx)
	if err != nil {
		return err
	}
	starts := make([]time.Time, d.opts.cycles)
	for i := range starts {
		starts[i] = first.Add(time.Duration(i) * d.opts.cycle)
	}

	scheduler, err := riverutil.New(d.pool, &riverutil.Config{
		Logger: slog.New(slog.NewTextHandler(d.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Tasks: []riverutil.Task{{
			Name:          d.opts.task,
			Cycle:         d.opts.cycle,
			TriggerOffset: gridOffset(first, d.opts.cycle),
			Schema:        d.opts.schema,
			Table:         "accounts",
			Filter:        "active",
			Sync:          func(context.Context, uuid.UUID, *river.Job[riverutil.SyncArgs]) error { return nil },
		}},
	})
	if err != nil {
		return err
	}
	if err := scheduler.Check(ctx); err != nil {
		return err
	}
	config := &river.Config{
		Logger:            slog.New(slog.NewTextHandler(d.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: d.opts.workers}},
		Schema:            d.opts.schema,
		FetchPollInterval: 250 * time.Millisecond,
	}
	if err := scheduler.Configure(config); err != nil {
		return err
	}
	config.PeriodicJobs = nil
	client, err := river.NewClient(riverpgxv5.New(d.pool), config)
	if err != nil {
		return err
	}
	// The client outlives ctx and is stopped below, so that an interrupt
	// shuts it down in order instead of tearing it down mid-query.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if ctx.Err() != nil {
			// Interrupted: cancel running jobs; a fan-out resumes from its
			// cursor on the next run with --keep.
			_ = client.StopAndCancel(stopCtx)
			return
		}
		_ = client.Stop(stopCtx)
	}()

	for _, start := range starts {
		res, err := scheduler.EnqueueCycle(ctx, client, d.opts.task, start)
		if err != nil {
			return err
		}
		verb := "enqueued"
		if res.UniqueSkippedAsDuplicate {
			verb = "resuming"
		}
		d.logf("%s cycle %s: %d slots of %s over %d accounts", verb, start.Format(time.RFC3339), d.plan.Slots, d.plan.SlotDuration, accounts)
	}

	if err := d.watch(ctx, starts); err != nil {
		return err
	}
	return d.report(ctx, starts)
}

// gridOffset is start's position on the absolute cycle grid.
func gridOffset(start time.Time, cycle time.Duration) time.Duration {
	return time.Duration(((start.UnixNano() % int64(cycle)) + int64(cycle)) % int64(cycle))
}

// prepare creates the schema, River's tables, the accounts and the bucket
// index, and returns the number of accounts.
func (d *demo) prepare(ctx context.Context) (int64, error) {
	schema := pgx.Identifier{d.opts.schema}.Sanitize()
	if !d.opts.keep {
		d.logf("dropping and recreating schema %s (use --keep to reuse it)", d.opts.schema)
		if _, err := d.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			return 0, fmt.Errorf("error dropping demo schema: %w", err)
		}
	}
	if _, err := d.pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema); err != nil {
		return 0, fmt.Errorf("error creating demo schema: %w", err)
	}
	d.logf("migrating River's tables in schema %s", d.opts.schema)
	if err := riverutil.Migrate(ctx, d.pool, d.opts.schema); err != nil {
		return 0, err
	}
	if _, err := d.pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+d.table()+" (id uuid PRIMARY KEY, active boolean NOT NULL DEFAULT true)"); err != nil {
		return 0, fmt.Errorf("error creating accounts table: %w", err)
	}
	var existing int64
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM "+d.table()).Scan(&existing); err != nil {
		return 0, err
	}
	if existing > 0 {
		d.logf("keeping %d existing accounts (--accounts ignored)", existing)
	} else if err := d.seed(ctx); err != nil {
		return 0, err
	}
	d.logf("creating the bucket index")
	if err := sqlbucket.CreateIndex(ctx, d.pool, d.opts.schema, "accounts", "id"); err != nil {
		return 0, err
	}
	if _, err := d.pool.Exec(ctx, "ANALYZE "+d.table()); err != nil {
		return 0, err
	}
	var n int64
	err := d.pool.QueryRow(ctx, "SELECT count(*) FROM "+d.table()+" WHERE active").Scan(&n)
	return n, err
}

func (d *demo) seed(ctx context.Context) error {
	const chunk = 50_000
	rows := make([][]any, 0, chunk)
	for done := 0; done < d.opts.accounts; {
		rows = rows[:0]
		for i := 0; i < chunk && done+i < d.opts.accounts; i++ {
			rows = append(rows, []any{uuid.New(), true})
		}
		if _, err := d.pool.CopyFrom(ctx, pgx.Identifier{d.opts.schema, "accounts"}, []string{"id", "active"}, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("error seeding accounts: %w", err)
		}
		done += len(rows)
		d.logf("seeded %d/%d accounts", done, d.opts.accounts)
	}
	return nil
}

// firstCycleStart is --cycle-start, else (with --keep) an unfinished cycle
// found in the schema, else the next whole slot from now.
func (d *demo) firstCycleStart(ctx context.Context) (time.Time, error) {
	if !d.opts.cycleStart.IsZero() {
		return d.opts.cycleStart.UTC(), nil
	}
	if d.opts.keep {
		var last *time.Time
		err := d.pool.QueryRow(ctx, "SELECT max((args->>'cycle_start')::timestamptz) FROM "+
			pgx.Identifier{d.opts.schema, "river_job"}.Sanitize()+" WHERE kind = $1 AND args->>'task' = $2",
			bootstrap.Kind, d.opts.task).Scan(&last)
		if err != nil {
			return time.Time{}, fmt.Errorf("error looking for an unfinished cycle: %w", err)
		}
		if last != nil && time.Now().Before(last.Add(d.opts.cycle)) {
			d.logf("found unfinished cycle %s; resuming it", last.UTC().Format(time.RFC3339))
			return last.UTC(), nil
		}
	}
	// The next whole slot at least 5 s away: River's leader election and
	// first scheduler pass happen before the first slot is due.
	start := time.Now().Add(5 * time.Second).Truncate(d.plan.SlotDuration).Add(d.plan.SlotDuration)
	return start.UTC(), nil
}

type progress struct {
	inserted, pending, running, completed, unfinished, perSlotDone int64
}

func (d *demo) progress(ctx context.Context, cycleStart time.Time, starts []time.Time) (progress, error) {
	var p progress
	err := d.monitor.QueryRow(ctx, `
		SELECT
			count(*) FILTER (WHERE kind = $3 AND (args->>'cycle_start')::timestamptz = $2),
			count(*) FILTER (WHERE kind = $3 AND (args->>'cycle_start')::timestamptz = $2 AND state IN ('scheduled', 'available', 'retryable', 'pending')),
			count(*) FILTER (WHERE kind = $3 AND (args->>'cycle_start')::timestamptz = $2 AND state = 'running'),
			count(*) FILTER (WHERE kind = $3 AND (args->>'cycle_start')::timestamptz = $2 AND state = 'completed'),
			count(*) FILTER (WHERE (args->>'cycle_start')::timestamptz = ANY($4) AND state NOT IN ('completed', 'cancelled', 'discarded')),
			count(*) FILTER (WHERE kind = $5 AND (args->>'cycle_start')::timestamptz = $6 AND state = 'completed')
		FROM `+pgx.Identifier{d.opts.schema, "river_job"}.Sanitize()+` WHERE args->>'task' = $1`,
		d.opts.task, cycleStart, syncjob.Kind, starts, perslot.Kind, starts[len(starts)-1]).Scan(
		&p.inserted, &p.pending, &p.running, &p.completed, &p.unfinished, &p.perSlotDone)
	return p, err
}

// watch shows progress until every job of every cycle has finished.
func (d *demo) watch(ctx context.Context, starts []time.Time) error {
	var (
		tty      = d.tty
		last     = starts[len(starts)-1]
		deadline = last.Add(d.opts.cycle).Add(max(2*time.Minute, d.opts.cycle))
		ticker   = time.NewTicker(500 * time.Millisecond)
		lastKey  = ""
	)
	defer ticker.Stop()
	interrupted := func() error {
		if tty {
			fmt.Fprintln(d.stderr)
		}
		return &exitError{code: 130, msg: "interrupted; rerun with --keep to resume the same cycle"}
	}

	for {
		if ctx.Err() != nil {
			return interrupted()
		}
		now := time.Now()
		idx := 0
		for i, s := range starts {
			if !now.Before(s) {
				idx = i
			}
		}
		cycleStart := starts[idx]
		p, err := d.progress(ctx, cycleStart, starts)
		if err != nil {
			if ctx.Err() != nil {
				return interrupted()
			}
			return fmt.Errorf("error reading progress: %w", err)
		}

		elapsed := now.Sub(cycleStart)
		slot := int(elapsed / d.plan.SlotDuration)
		var status string
		switch {
		case elapsed < 0:
			status = fmt.Sprintf("cycle %d/%d starts in %s", idx+1, len(starts), (-elapsed).Round(time.Second))
			slot = -1
		case slot >= d.plan.Slots:
			status = fmt.Sprintf("cycle %d/%d: all %d slots past, draining", idx+1, len(starts), d.plan.Slots)
			slot = d.plan.Slots
		default:
			status = fmt.Sprintf("cycle %d/%d slot %d/%d", idx+1, len(starts), slot+1, d.plan.Slots)
		}
		line := fmt.Sprintf("%-28s %s  sync jobs inserted %d  pending %d  running %d  completed %d",
			status, bar(elapsed, d.opts.cycle, 20), p.inserted, p.pending, p.running, p.completed)

		done := !now.Before(last.Add(d.opts.cycle)) && p.unfinished == 0 && p.perSlotDone == int64(d.plan.Slots)
		if tty {
			fmt.Fprintf(d.stderr, "\r\033[K%s", line)
			if done {
				fmt.Fprintln(d.stderr)
			}
		} else if key := fmt.Sprintf("%d/%d", idx, slot); key != lastKey || done {
			fmt.Fprintln(d.stderr, line)
			lastKey = key
		}
		if done {
			return nil
		}
		if now.After(deadline) {
			if tty {
				fmt.Fprintln(d.stderr)
			}
			return fmt.Errorf("timed out: %d jobs still unfinished %s after the last cycle ended; is a worker stuck?", p.unfinished, max(2*time.Minute, d.opts.cycle))
		}

		select {
		case <-ctx.Done():
			return interrupted()
		case <-ticker.C:
		}
	}
}

func bar(elapsed, total time.Duration, width int) string {
	frac := float64(elapsed) / float64(total)
	frac = min(max(frac, 0), 1)
	n := int(frac * float64(width))
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + fmt.Sprintf("] %3.0f%%", frac*100)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// demoSummary is the --json output. Every figure is read from the database.
type demoSummary struct {
	Schema              string          `json:"schema"`
	AccountsTable       string          `json:"accounts_table"`
	IDColumn            string          `json:"id_column"`
	SyncKind            string          `json:"sync_kind"`
	Buckets             int64           `json:"buckets"`
	Slots               int64           `json:"slots"`
	SlotDurationSeconds float64         `json:"slot_duration_seconds"`
	CycleSeconds        float64         `json:"cycle_seconds"`
	CycleStarts         []string        `json:"cycle_starts"`
	Cycles              int             `json:"cycles"`
	Accounts            int64           `json:"accounts"`
	AccountsPerSlot     int64           `json:"accounts_per_slot"`
	Synced              int64           `json:"synced"`
	Missed              int64           `json:"missed"`
	Duplicates          int64           `json:"duplicates"`
	PeakQueueDepth      int64           `json:"peak_queue_depth"`
	LatenessP50Seconds  float64         `json:"lateness_p50_seconds"`
	LatenessP99Seconds  float64         `json:"lateness_p99_seconds"`
	PerCycle            []*demoCycleRow `json:"per_cycle"`
}

type demoCycleRow struct {
	CycleStart  string `json:"cycle_start"`
	Accounts    int64  `json:"accounts"`
	Synced      int64  `json:"synced"`
	Missed      int64  `json:"missed"`
	Duplicates  int64  `json:"duplicates"`
	PeakPending int64  `json:"peak_queue_depth"`
}

func (d *demo) summarize(ctx context.Context, starts []time.Time) (*demoSummary, error) {
	jobs := pgx.Identifier{d.opts.schema, "river_job"}.Sanitize()

	// The run's cycle starts and sync kind, as recorded in the job table.
	rows, err := d.pool.Query(ctx, "SELECT DISTINCT (args->>'cycle_start')::timestamptz AS s FROM "+jobs+
		" WHERE kind = $1 AND args->>'task' = $2 AND (args->>'cycle_start')::timestamptz = ANY($3) ORDER BY s", bootstrap.Kind, d.opts.task, starts)
	if err != nil {
		return nil, err
	}
	recorded, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return nil, err
	}
	if len(recorded) != len(starts) {
		return nil, fmt.Errorf("found %d bootstrap jobs for %d cycles", len(recorded), len(starts))
	}
	var syncKind string
	if err := d.pool.QueryRow(ctx, "SELECT coalesce(min(kind), '') FROM "+jobs+" WHERE args->>'task' = $1 AND kind NOT IN ($2, $3)",
		d.opts.task, bootstrap.Kind, perslot.Kind).Scan(&syncKind); err != nil {
		return nil, err
	}

	run, err := measure.MeasureRun(ctx, d.pool, measure.Target{
		RiverSchema: d.opts.schema, AccountsTable: d.table(), IDColumn: "id", Filter: "active",
		SyncKind: syncKind, Task: d.opts.task,
	}, perslot.Kind, recorded)
	if err != nil {
		return nil, err
	}

	s := &demoSummary{
		Schema:              d.opts.schema,
		AccountsTable:       d.opts.schema + ".accounts",
		IDColumn:            "id",
		SyncKind:            syncKind,
		Buckets:             run.Buckets,
		Slots:               run.Slots,
		SlotDurationSeconds: run.SlotDuration.Seconds(),
		CycleSeconds:        (time.Duration(run.Slots) * run.SlotDuration).Seconds(),
		Cycles:              len(recorded),
		PeakQueueDepth:      run.PeakPending,
		LatenessP50Seconds:  run.LatenessP50.Seconds(),
		LatenessP99Seconds:  run.LatenessP99.Seconds(),
	}
	for _, c := range run.Cycles {
		s.CycleStarts = append(s.CycleStarts, c.CycleStart.Format(time.RFC3339))
		s.Accounts = c.Accounts
		s.Synced += c.SyncedOnce
		s.Missed += c.Missed
		s.Duplicates += c.Duplicated
		s.PerCycle = append(s.PerCycle, &demoCycleRow{
			CycleStart: c.CycleStart.Format(time.RFC3339), Accounts: c.Accounts,
			Synced: c.SyncedOnce, Missed: c.Missed, Duplicates: c.Duplicated, PeakPending: c.PeakPending,
		})
	}
	if s.Slots > 0 {
		s.AccountsPerSlot = s.Accounts / s.Slots
	}
	return s, nil
}

func (d *demo) report(ctx context.Context, starts []time.Time) error {
	s, err := d.summarize(ctx, starts)
	if err != nil {
		return fmt.Errorf("error measuring the run: %w", err)
	}
	if d.opts.json {
		enc := json.NewEncoder(d.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s); err != nil {
			return err
		}
	} else {
		d.printSummary(s)
	}
	if s.Missed > 0 || s.Duplicates > 0 {
		return errors.New(fmt.Sprintf("%d account-cycles missed and %d duplicated", s.Missed, s.Duplicates))
	}
	return nil
}

func (d *demo) printSummary(s *demoSummary) {
	w := d.stdout
	fmt.Fprintf(w, "\nriverslot demo: %d cycle(s) of %gs over %d accounts (schema %s)\n\n", s.Cycles, s.CycleSeconds, s.Accounts, s.Schema)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "accounts\t%d\n", s.Accounts)
	fmt.Fprintf(tw, "slots\t%d (buckets %d, %d buckets per slot)\n", s.Slots, s.Buckets, 256/max(s.Slots, 1))
	fmt.Fprintf(tw, "slot duration\t%gs\n", s.SlotDurationSeconds)
	fmt.Fprintf(tw, "sync start lateness\tp50 %.2fs   p99 %.2fs   (River promotes scheduled jobs every 5s)\n", s.LatenessP50Seconds, s.LatenessP99Seconds)
	fmt.Fprintf(tw, "peak pending sync jobs\t%d\n", s.PeakQueueDepth)
	fmt.Fprintf(tw, "  accounts/slots\t%d\n", s.AccountsPerSlot)
	fmt.Fprintf(tw, "  accounts (enqueue all at once)\t%d\n", s.Accounts)
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cycle\tstart\taccounts\tsynced once\tmissed\tduplicated\tpeak pending\t")
	for i, c := range s.PerCycle {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%d\t\n", i+1, c.CycleStart, c.Accounts, c.Synced, c.Missed, c.Duplicates, c.PeakPending)
	}
	_ = tw.Flush()
}

package main

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

	"github.com/riverslot/riverslot/riverutil"
)

// runWorker runs one River client with one riverslot task over an existing
// schema (River's tables and an accounts table, as the demo prepares them)
// until interrupted. Several workers on one schema form a cluster; the fault
// tests start, stop and kill them.
func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("worker", stderr)
	databaseURL := fs.String("database-url", defaultDatabaseURL, "PostgreSQL URL")
	schema := fs.String("schema", "riverslot_demo", "schema with River's tables and the accounts table")
	table := fs.String("table", "accounts", "accounts table (uuid column id, boolean column active)")
	task := fs.String("task", "demo", "task name")
	cycle := fs.Duration("cycle", 120*time.Second, "cycle length")
	offset := fs.Duration("trigger-offset", 0, "cycle grid offset from the Unix epoch")
	id := fs.String("id", "", "River client ID (default: River's)")
	workers := fs.Int("workers", 20, "MaxWorkers per queue")
	batch := fs.Int("batch-size", riverutil.BatchSizeDefault, "fan-out batch size")
	syncQueue := fs.String("sync-queue", river.QueueDefault, "queue of sync jobs")
	workSync := fs.Bool("work-sync", true, "work the sync queue (false: sync jobs stay queued)")
	periodic := fs.Bool("periodic", false, "run the periodic trigger (RunOnStart)")
	latePolicy := fs.String("late-policy", string(riverutil.LatePolicySpread), "spread or skip")
	rescueAfter := fs.Duration("rescue-after", 0, "river.Config.RescueStuckJobsAfter (default: the longest job timeout + 1m, set by Scheduler.Configure)")
	perSlotTimeout := fs.Duration("per-slot-timeout", 0, "per-slot attempt timeout (default: the library's)")
	syncTimeout := fs.Duration("sync-timeout", 0, "sync attempt timeout (default: the library's)")
	maxConns := fs.Int("max-conns", 10, "database connections this process may open")
	record := fs.Bool("record", true, "record each sync in <schema>.synced(task, account_id, cycle_start, client_id) if that table exists")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *workers < 1 {
		return usageErr("--workers must be at least 1, got %d", *workers)
	}
	if *maxConns < 2 {
		return usageErr("--max-conns must be at least 2, got %d", *maxConns)
	}

	pool, err := connect(ctx, *databaseURL, int32(*maxConns))
	if err != nil {
		return err
	}
	defer pool.Close()

	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	clientID := *id
	synced := pgx.Identifier{*schema, "synced"}.Sanitize()
	var recordOK bool
	if *record {
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", synced).Scan(&recordOK); err != nil {
			return err
		}
	}
	scheduler, err := riverutil.New(pool, &riverutil.Config{Logger: logger, Tasks: []riverutil.Task{{
		Name: *task, Cycle: *cycle, TriggerOffset: *offset, Schema: *schema, Table: *table, Filter: "active",
		BatchSize: *batch, Queue: *syncQueue, ControlQueue: river.QueueDefault,
		LatePolicy: riverutil.LatePolicy(*latePolicy), PerSlotTimeout: *perSlotTimeout, SyncTimeout: *syncTimeout,
		Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverutil.SyncArgs]) error {
			if !recordOK {
				return nil
			}
			_, err := pool.Exec(ctx, "INSERT INTO "+synced+" (task, account_id, cycle_start, client_id) VALUES ($1, $2, $3, $4)",
				job.Args.Task, accountID, job.Args.CycleStart, clientID)
			return err
		},
	}}})
	if err != nil {
		return usageErr("%v", err)
	}
	if err := scheduler.Check(ctx); err != nil {
		return usageErr("%v", err)
	}
	queues := map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *workers}}
	if *workSync {
		queues[*syncQueue] = river.QueueConfig{MaxWorkers: *workers}
	}
	config := &river.Config{
		ID:                   *id,
		Logger:               logger,
		Queues:               queues,
		Schema:               *schema,
		FetchPollInterval:    250 * time.Millisecond,
		RescueStuckJobsAfter: *rescueAfter,
	}
	if *rescueAfter > 0 {
		// River requires RescueStuckJobsAfter >= JobTimeout (the default
		// timeout of jobs whose worker sets none, here the bootstrap).
		config.JobTimeout = *rescueAfter / 2
	}
	if err := scheduler.Configure(config); err != nil {
		return usageErr("%v", err)
	}
	if !*periodic {
		config.PeriodicJobs = nil // cycles are enqueued by another process
	}
	client, err := river.NewClient(riverpgxv5.New(pool), config)
	if err != nil {
		return usageErr("%v", err)
	}
	if clientID == "" {
		clientID = client.ID()
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "worker %s started\n", client.ID())

	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return fmt.Errorf("error stopping: %w", err)
	}
	fmt.Fprintf(stdout, "worker %s stopped\n", client.ID())
	return nil
}

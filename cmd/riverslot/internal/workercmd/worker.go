package workercmd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/httplisten"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/inspect"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/shutdown"
	"github.com/riverslot/riverslot/riverslotweb"
)

// Config is a worker: the values of riverslot worker's flags, which the
// command validates as it parses them, the pools it connected and the
// addresses it bound.
type Config struct {
	// Pool is River's database (--database-url); its Schema must be one
	// that CheckSchema accepts.
	Pool *pgxpool.Pool
	// AccountsPool holds the accounts table (--accounts-database-url).
	// Defaults to Pool.
	AccountsPool *pgxpool.Pool
	// Schema is the schema of River's tables and of the synced table.
	Schema string
	// Task is the task the flags describe, but for its ControlQueue (River's
	// default queue, which the worker works) and its Sync (the worker's).
	Task riverslot.Task
	// Reciprocal also runs <Task.Name>_opposite over the same accounts,
	// opposite Task (riverslot.Task.OppositeOf).
	Reciprocal bool
	// ID is River's client ID. Defaults to River's.
	ID string
	// Workers is MaxWorkers of each queue the worker works.
	Workers int
	// WorkSync says the worker works Task.Queue, the sync jobs' queue.
	WorkSync bool
	// Periodic says the worker runs the periodic trigger that starts each
	// cycle.
	Periodic bool
	// CompletedRetention is River's CompletedJobRetentionPeriod. Defaults
	// to River's, 24 h.
	CompletedRetention time.Duration
	// RescueAfter is River's RescueStuckJobsAfter. Defaults to the longest
	// job timeout + 1m (Scheduler.Configure).
	RescueAfter time.Duration
	// Record records each sync in <Schema>.synced if that table exists.
	Record bool
	// UpstreamURL is the base URL each sync calls with its account's
	// upstream key ("": no call).
	UpstreamURL string
	// Shard is riverslot.Config.Shard ("": unsharded).
	Shard string
	// RiverLogLevel is the level of River's logger; riverslot logs at info.
	RiverLogLevel slog.Level
	// MetricsListener, if not nil, serves riverslot's metrics at /metrics;
	// WebListener, if not nil, the operator's page and /metrics. Run serves
	// them once the client has started and closes them before it stops.
	MetricsListener, WebListener *httplisten.Listener
}

// Run runs the worker until ctx is done, printing on stdout when it has
// started and stopped, and logging on stderr. A task or River
// configuration the library refuses is an *inspect.InputError.
func Run(ctx context.Context, c *Config, stdout, stderr io.Writer) error {
	var metrics *metricsExport
	if c.MetricsListener != nil || c.WebListener != nil {
		var err error
		if metrics, err = newMetricsExport(); err != nil {
			return err
		}
		defer metrics.close()
	}

	// riverslot's own lines (a cycle bootstrapped, a failed slot) at info;
	// River's at RiverLogLevel.
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	riverLogger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.RiverLogLevel}))
	recorder, err := newRecorder(ctx, c.Pool, c.Schema, c.Record, logger)
	if err != nil {
		return err
	}
	recorder.clientID = c.ID
	task := c.Task
	task.ControlQueue = river.QueueDefault
	callUpstream := upstreamCaller(c.UpstreamURL)
	task.Sync = func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
		if err := callUpstream(ctx, job.Args.Upstream); err != nil {
			return err
		}
		return recorder.record(ctx, accountID, job)
	}
	tasks := []riverslot.Task{task}
	if c.Reciprocal {
		opposite := task
		opposite.Name, opposite.OppositeOf = task.Name+"_opposite", task.Name
		// A task OppositeOf a weighted task follows its pins (shifted by
		// half a cycle) and has no Weight of its own.
		opposite.Weight, opposite.PinsTimeout = "", 0
		tasks = append(tasks, opposite)
	}
	schedulerConfig := &riverslot.Config{Logger: logger, Tasks: tasks, AccountsPool: c.AccountsPool, Shard: c.Shard}
	if metrics != nil {
		schedulerConfig.MeterProvider = metrics.provider
	}
	scheduler, err := riverslot.New(c.Pool, schedulerConfig)
	if err != nil {
		return &inspect.InputError{Err: err}
	}
	if err := scheduler.Check(ctx); err != nil {
		return &inspect.InputError{Err: err}
	}
	queues := map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: c.Workers}}
	if c.WorkSync {
		queues[task.Queue] = river.QueueConfig{MaxWorkers: c.Workers}
	}
	config := &river.Config{
		ID:                   c.ID,
		Logger:               riverLogger,
		Queues:               queues,
		Schema:               c.Schema,
		FetchPollInterval:    250 * time.Millisecond,
		RescueStuckJobsAfter: c.RescueAfter,

		CompletedJobRetentionPeriod: c.CompletedRetention,
	}
	if c.RescueAfter > 0 {
		// River requires RescueStuckJobsAfter >= JobTimeout (the default
		// timeout of jobs whose worker sets none, here the bootstrap).
		config.JobTimeout = c.RescueAfter / 2
	}
	if err := scheduler.Configure(config); err != nil {
		return &inspect.InputError{Err: err}
	}
	if !c.Periodic {
		config.PeriodicJobs = nil // cycles are enqueued by another process
	}
	client, err := river.NewClient(riverpgxv5.New(c.Pool), config)
	if err != nil {
		return &inspect.InputError{Err: err}
	}
	if recorder.clientID == "" {
		recorder.clientID = client.ID()
	}
	var page http.Handler
	if c.WebListener != nil {
		if page, err = riverslotweb.New(scheduler, &riverslotweb.Config{Metrics: metrics.handler, Logger: logger}); err != nil {
			return err
		}
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	if ln := c.MetricsListener; ln != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics.handler)
		ln.Serve(mux)
		fmt.Fprintf(stdout, "metrics at %s\n", ln.URL("/metrics"))
	}
	if ln := c.WebListener; ln != nil {
		ln.Serve(page)
		fmt.Fprintf(stdout, "operator's page at %s (metrics at %s)\n", ln.URL("/"), ln.URL("/metrics"))
	}
	fmt.Fprintf(stdout, "worker %s started\n", client.ID())

	<-ctx.Done()
	// The page and metrics stop first, while the pool and the meter
	// provider they read still work.
	for _, ln := range []*httplisten.Listener{c.WebListener, c.MetricsListener} {
		if ln != nil {
			ln.Close()
		}
	}
	stopErr, err := shutdown.StopThenFlush(client.Stop, scheduler.FlushOutcomes)
	if err != nil {
		fmt.Fprintf(stderr, "riverslot worker: error writing the sync outcomes counted: %v\n", err)
	}
	if stopErr != nil {
		return fmt.Errorf("error stopping: %w", stopErr)
	}
	fmt.Fprintf(stdout, "worker %s stopped\n", client.ID())
	return nil
}

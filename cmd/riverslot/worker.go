package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/demo"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/shutdown"
	"github.com/riverslot/riverslot/riverslotweb"
)

const workerAbout = `Runs one River client with one riverslot task over a demo's schema until
SIGINT or SIGTERM: River's tables in --schema, which riverslot demo created,
and an accounts table (--accounts-schema, --table) with a uuid column id, in
the same database or in --accounts-database-url's.
Several workers on one schema form a cluster.

The worker's sync only records (below), so it refuses (exit 2) a --schema
that riverslot demo did not create: on an app's schema it would complete the
app's sync jobs without running the app's Sync. Run the app's own workers
there, and observe them with riverslot status or the app's metrics.

The node runs the periodic trigger that bootstraps each cycle (River's
leader fires it once per cluster, so every node can run it), as an app
wired with Scheduler.Configure does. With --periodic=false the node starts
no cycle: it only works the jobs that another node or EnqueueCycle inserted.

With --record (the default), every sync inserts a row into the table
<--schema>.synced if that table exists, to audit which node synced which
account in which cycle:

    CREATE TABLE <schema>.synced (task text NOT NULL, account_id uuid NOT NULL,
        cycle_start timestamptz NOT NULL, client_id text,
        synced_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        scheduled_at timestamptz, job_id bigint)

scheduled_at and job_id are optional (recorded when the column exists):
the sync job's scheduled time, which River moves on a retry or a snooze,
and its id, which a job run again after a kill -9 records twice. Without that
table a sync does nothing.

--metrics-addr serves riverslot's metrics in Prometheus' format at /metrics;
--web-addr serves the operator's page and its JSON API (as riverslot web)
together with /metrics on one port. Neither has authentication: bind them to
127.0.0.1 or put them behind a proxy that authenticates.
`

// runWorker runs one River client with one riverslot task over an existing
// schema (River's tables and an accounts table, as the demo prepares them)
// until interrupted. Several workers on one schema form a cluster; the fault
// tests start, stop and kill them.
func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("worker", workerAbout, stderr)
	databaseURL := databaseURLFlag(fs, defaultDatabaseURL, "demo")
	accountsURL := fs.String("accounts-database-url", "", "PostgreSQL URL of the database holding the accounts table (the app's database or a read replica; riverslot demo --accounts-database-url creates the demo's there); default: --database-url")
	tf := addTaskFlags(fs)
	schema := tf.schema
	id := fs.String("id", "", "River client ID (default: River's)")
	workers := fs.Int("workers", 20, "MaxWorkers per queue")
	batch := fs.Int("batch-size", riverslot.BatchSizeDefault, "fan-out batch size")
	syncQueue := fs.String("sync-queue", river.QueueDefault, "queue of sync jobs")
	workSync := fs.Bool("work-sync", true, "work the sync queue (false: sync jobs stay queued)")
	periodic := fs.Bool("periodic", true, "run the periodic trigger that starts each cycle (RunOnStart); false: this node starts no cycle")
	latePolicy := fs.String("late-policy", string(riverslot.LatePolicySpread), "spread or skip")
	punctual := fs.Bool("punctual", false, "Task.Punctual: insert sync jobs available with their future time, so they start within the fetch poll of it instead of at River's next 5 s scheduler tick")
	firstCycle := fs.String("first-cycle", string(riverslot.FirstCycleLate), "what the task's first cycle does when it started before the app did: late (as any late cycle), all (every account within it) or next (start at the next cycle)")
	lateGrace := fs.Duration("late-grace", 0, "the task's LateGrace: how far past its time an account is still synced at its time, not by the late policy (default: the library's, a slot)")
	completedRetention := fs.Duration("completed-retention", 0, "river.Config.CompletedJobRetentionPeriod: how long River keeps completed jobs (default 0: River's 24h); riverslot's ledger keeps cycles unique whatever it is")
	rescueAfter := fs.Duration("rescue-after", 0, "river.Config.RescueStuckJobsAfter (default: the longest job timeout + 1m, set by Scheduler.Configure)")
	perSlotTimeout := fs.Duration("per-slot-timeout", 0, "per-slot attempt timeout (default: the library's)")
	syncTimeout := fs.Duration("sync-timeout", 0, "sync attempt timeout (default: the library's)")
	pinsTimeout := fs.Duration("pins-timeout", 0, "a weighted task's PinsTimeout (default: the library's)")
	maxConns := fs.Int("max-conns", 10, "database connections this process may open")
	reciprocal := fs.Bool("reciprocal", false, "also run <--task>_opposite over the same accounts, opposite --task (Task.OppositeOf), as riverslot demo --reciprocal does")
	record := fs.Bool("record", true, "record each sync in <--schema>.synced if that table exists (see above)")
	metricsAddr := fs.String("metrics-addr", "", "serve riverslot's OpenTelemetry metrics in Prometheus' format at http://ADDR/metrics, e.g. :9090 (default: no metrics)")
	upstreamExpr := fs.String("upstream", "", "the task's Upstream: SQL expression over the accounts table naming each account's upstream, e.g. bank (default: one upstream)")
	upstreamURL := fs.String("upstream-url", "", "call GET URL/<the account's upstream key> in each sync (before recording it): a 2xx succeeds, a 429 with Retry-After (seconds) is riverslot.Throttled, anything else fails the sync (default: no call)")
	upstreamRate := fs.Float64("upstream-rate", 0, "the task's Limits.Rate: syncs started per second per upstream (0: none)")
	upstreamBurst := fs.Int("upstream-burst", 0, "the task's Limits.Burst (default 1 with --upstream-rate)")
	upstreamConcurrency := fs.Int("upstream-concurrency", 0, "the task's Limits.Concurrency: syncs in flight per upstream (0: none)")
	upstreamFailures := fs.Int("upstream-failures", 0, "the task's Limits.FailureThreshold: consecutive failures that open an upstream's breaker (0: no breaker)")
	upstreamCooldown := fs.Duration("upstream-cooldown", 0, "the task's Limits.Cooldown: how long an open breaker defers syncs before a probe (default 30s)")
	webAddr := fs.String("web-addr", "", "serve the operator's page (as riverslot web) and /metrics on one port, e.g. 127.0.0.1:8080 (default: no page); it has no authentication: keep it on 127.0.0.1 or behind a proxy that has")
	shard := fs.String("shard", "", "the shard this database is, for a task spread over several databases (riverslot.Config.Shard; riverslot shards)")
	riverLogLevel := logLevelFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *upstreamURL != "" {
		if u, err := url.Parse(*upstreamURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usageErr("--upstream-url must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8081/banks, got %q", *upstreamURL)
		}
	}
	switch {
	case *workers < 1 || *workers > river.QueueNumWorkersMax:
		return usageErr("--workers must be between 1 and %d (River's limit per queue), got %d", river.QueueNumWorkersMax, *workers)
	case *maxConns < 2:
		return usageErr("--max-conns must be at least 2, got %d", *maxConns)
	case *completedRetention < 0:
		return usageErr("--completed-retention must be 0 (River's default, 24h) or a positive duration such as 1m, got %s", *completedRetention)
	case *rescueAfter < 0:
		return usageErr("--rescue-after must not be negative, got %s; omit it for the longest job timeout + 1m (Scheduler.Configure)", *rescueAfter)
	case *pinsTimeout < 0:
		return usageErr("--pins-timeout must not be negative, got %s; omit it for the library's default", *pinsTimeout)
	case *perSlotTimeout < 0:
		return usageErr("--per-slot-timeout must not be negative, got %s; omit it for the library's default", *perSlotTimeout)
	}
	if err := tf.check(); err != nil {
		return err
	}
	var metricsLn, webLn *httpListener
	if *metricsAddr != "" {
		var err error
		if metricsLn, err = listenHTTP("--metrics-addr", *metricsAddr, ":9090 or 127.0.0.1:0"); err != nil {
			return err
		}
		defer metricsLn.close()
	}
	if *webAddr != "" {
		var err error
		if webLn, err = listenHTTP("--web-addr", *webAddr, "127.0.0.1:8080 or 127.0.0.1:0"); err != nil {
			return err
		}
		fmt.Fprint(stderr, openWarning("--web-addr", webLn.listener.Addr()))
		defer webLn.close()
	}
	var metrics *metricsExport
	if metricsLn != nil || webLn != nil {
		var err error
		if metrics, err = newMetricsExport(); err != nil {
			return err
		}
		defer metrics.close()
	}

	pool, err := connect(ctx, databaseURL(), int32(*maxConns))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := checkWorkerSchema(ctx, pool, *schema); err != nil {
		return err
	}
	var accountsPool *pgxpool.Pool
	if *accountsURL != "" {
		if accountsPool, err = connectFlag(ctx, "--accounts-database-url", *accountsURL, int32(*maxConns)); err != nil {
			return err
		}
		defer accountsPool.Close()
	}

	// riverslot's own lines (a cycle bootstrapped, a failed slot) at info;
	// River's at --log-level.
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	riverLogger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: *riverLogLevel}))
	clientID := *id
	synced := pgx.Identifier{*schema, "synced"}.Sanitize()
	// The synced table's optional columns this node fills: scheduled_at
	// (the sync job's scheduled time) and job_id (River's job id: a job
	// run again after a kill -9 records the same id twice).
	var (
		recordOK bool
		optional []string
	)
	if *record {
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", synced).Scan(&recordOK); err != nil {
			return err
		}
		if recordOK {
			if err := pool.QueryRow(ctx, "SELECT coalesce(array_agg(attname::text ORDER BY attname), '{}') FROM pg_attribute WHERE attrelid = $1::regclass AND attname IN ('job_id', 'scheduled_at') AND NOT attisdropped",
				synced).Scan(&optional); err != nil {
				return err
			}
			logger.Info("recording each sync", slog.String("table", *schema+".synced"), slog.String("optional_columns", strings.Join(optional, ",")))
		} else {
			logger.Info("not recording syncs: no such table", slog.String("table", *schema+".synced"))
		}
	}
	insertSynced := "INSERT INTO " + synced + " (task, account_id, cycle_start, client_id"
	for _, c := range optional {
		insertSynced += ", " + pgx.Identifier{c}.Sanitize()
	}
	insertSynced += ") VALUES ($1, $2, $3, $4"
	for i := range optional {
		insertSynced += fmt.Sprintf(", $%d", 5+i)
	}
	insertSynced += ")"
	task := tf.riverTask()
	task.BatchSize, task.Queue, task.ControlQueue = *batch, *syncQueue, river.QueueDefault
	task.LatePolicy, task.LateGrace, task.PerSlotTimeout, task.SyncTimeout = riverslot.LatePolicy(*latePolicy), *lateGrace, *perSlotTimeout, *syncTimeout
	task.FirstCycle, task.Punctual = riverslot.FirstCycle(*firstCycle), *punctual
	if task.Weight != "" {
		task.PinsTimeout = *pinsTimeout
	}
	task.Upstream = *upstreamExpr
	task.Limits = riverslot.UpstreamLimits{Rate: *upstreamRate, Burst: *upstreamBurst, Concurrency: *upstreamConcurrency,
		FailureThreshold: *upstreamFailures, Cooldown: *upstreamCooldown}
	callUpstream := upstreamCaller(*upstreamURL)
	task.Sync = func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
		if err := callUpstream(ctx, job.Args.Upstream); err != nil {
			return err
		}
		if !recordOK {
			return nil
		}
		args := []any{job.Args.Task, accountID, job.Args.CycleStart, clientID}
		for _, c := range optional {
			switch c {
			case "job_id":
				args = append(args, job.ID)
			case "scheduled_at":
				args = append(args, job.ScheduledAt)
			}
		}
		_, err := pool.Exec(ctx, insertSynced, args...)
		return err
	}
	tasks := []riverslot.Task{task}
	if *reciprocal {
		opposite := task
		opposite.Name, opposite.OppositeOf = task.Name+"_opposite", task.Name
		// A task OppositeOf a weighted task follows its pins (shifted by
		// half a cycle) and has no Weight of its own.
		opposite.Weight, opposite.PinsTimeout = "", 0
		tasks = append(tasks, opposite)
	}
	schedulerConfig := &riverslot.Config{Logger: logger, Tasks: tasks, AccountsPool: accountsPool, Shard: *shard}
	if metrics != nil {
		schedulerConfig.MeterProvider = metrics.provider
	}
	scheduler, err := riverslot.New(pool, schedulerConfig)
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
		Logger:               riverLogger,
		Queues:               queues,
		Schema:               *schema,
		FetchPollInterval:    250 * time.Millisecond,
		RescueStuckJobsAfter: *rescueAfter,

		CompletedJobRetentionPeriod: *completedRetention,
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
	var page http.Handler
	if webLn != nil {
		if page, err = riverslotweb.New(scheduler, &riverslotweb.Config{Metrics: metrics.handler, Logger: logger}); err != nil {
			return err
		}
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	if metricsLn != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics.handler)
		metricsLn.serve(mux)
		fmt.Fprintf(stdout, "metrics at %s\n", metricsLn.url("/metrics"))
	}
	if webLn != nil {
		webLn.serve(page)
		fmt.Fprintf(stdout, "operator's page at %s (metrics at %s)\n", webLn.url("/"), webLn.url("/metrics"))
	}
	fmt.Fprintf(stdout, "worker %s started\n", client.ID())

	<-ctx.Done()
	// The page and metrics stop first, while the pool and the meter
	// provider they read still work.
	for _, ln := range []*httpListener{webLn, metricsLn} {
		if ln != nil {
			ln.close()
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

// checkWorkerSchema refuses (exit 2) a River schema that riverslot demo did
// not create (demo.SchemaComment), before the worker starts anything. The
// worker's built-in sync records a row or does nothing: its River client
// would fetch an app's queued riverslot_sync jobs and complete them without
// the app's Sync ever running.
func checkWorkerSchema(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema string) error {
	state, err := demo.QuerySchemaState(ctx, q, schema)
	if err != nil {
		return err
	}
	switch state {
	case demo.SchemaOwned:
		return nil
	case demo.SchemaAbsent:
		return usageErr("--schema %s: schema %q does not exist; nothing was started. "+
			"Create it with riverslot demo --schema %s (the worker runs only on a schema the demo created)", schema, schema, schema)
	default:
		return usageErr("--schema %s: schema %q was not created by riverslot demo; nothing was started. "+
			"The worker's built-in sync only records syncs for the demo, so on an app's schema it would complete the app's sync jobs without running them. "+
			"Run the app's own workers (Scheduler.Configure) to work its jobs, and riverslot status --schema %s or the app's metrics to observe them", schema, schema, schema)
	}
}

// upstreamCaller returns the worker's call of an account's upstream: GET
// base/<key> (nothing without base). A 2xx succeeds; a 429 is
// riverslot.Throttled for its Retry-After (seconds, default 1 s); anything
// else is an error that names the status.
func upstreamCaller(base string) func(ctx context.Context, key string) error {
	if base == "" {
		return func(context.Context, string) error { return nil }
	}
	client := &http.Client{Timeout: 30 * time.Second}
	return func(ctx context.Context, key string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/"+url.PathEscape(key), nil)
		if err != nil {
			return err
		}
		// When the sync sent it: the limits bound sends; a server sees
		// them later by however long each took to reach it.
		req.Header.Set("X-Riverslot-Sent-At", time.Now().UTC().Format(time.RFC3339Nano))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			retry := time.Second
			if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
				retry = time.Duration(secs) * time.Second
			}
			return riverslot.Throttled(retry, fmt.Errorf("upstream %q answered 429", key))
		case resp.StatusCode < 200 || resp.StatusCode > 299:
			return fmt.Errorf("upstream %q answered %d", key, resp.StatusCode)
		}
		return nil
	}
}

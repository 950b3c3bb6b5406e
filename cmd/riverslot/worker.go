package main

import (
	"context"
	"fmt"
	"io"
	"net/url"

	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/workercmd"
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
// until interrupted (workercmd.Run).
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
	c := &workercmd.Config{
		Schema: *schema, ID: *id, Workers: *workers, WorkSync: *workSync, Periodic: *periodic, Reciprocal: *reciprocal, Record: *record,
		CompletedRetention: *completedRetention, RescueAfter: *rescueAfter, UpstreamURL: *upstreamURL, Shard: *shard, RiverLogLevel: *riverLogLevel,
	}
	var err error
	if *metricsAddr != "" {
		if c.MetricsListener, err = listenHTTP("--metrics-addr", *metricsAddr, ":9090 or 127.0.0.1:0"); err != nil {
			return err
		}
		defer c.MetricsListener.Close()
	}
	if *webAddr != "" {
		if c.WebListener, err = listenHTTP("--web-addr", *webAddr, "127.0.0.1:8080 or 127.0.0.1:0"); err != nil {
			return err
		}
		fmt.Fprint(stderr, openWarning("--web-addr", c.WebListener.Addr()))
		defer c.WebListener.Close()
	}
	c.Task = tf.riverTask()
	c.Task.BatchSize, c.Task.Queue = *batch, *syncQueue
	c.Task.LatePolicy, c.Task.LateGrace, c.Task.PerSlotTimeout, c.Task.SyncTimeout = riverslot.LatePolicy(*latePolicy), *lateGrace, *perSlotTimeout, *syncTimeout
	c.Task.FirstCycle, c.Task.Punctual = riverslot.FirstCycle(*firstCycle), *punctual
	if c.Task.Weight != "" {
		c.Task.PinsTimeout = *pinsTimeout
	}
	c.Task.Upstream = *upstreamExpr
	c.Task.Limits = riverslot.UpstreamLimits{Rate: *upstreamRate, Burst: *upstreamBurst, Concurrency: *upstreamConcurrency,
		FailureThreshold: *upstreamFailures, Cooldown: *upstreamCooldown}

	if c.Pool, err = connect(ctx, databaseURL(), int32(*maxConns)); err != nil {
		return err
	}
	defer c.Pool.Close()
	if err := workercmd.CheckSchema(ctx, c.Pool, *schema); err != nil {
		return inputErr(err)
	}
	if *accountsURL != "" {
		if c.AccountsPool, err = connectFlag(ctx, "--accounts-database-url", *accountsURL, int32(*maxConns)); err != nil {
			return err
		}
		defer c.AccountsPool.Close()
	}
	return inputErr(workercmd.Run(ctx, c, stdout, stderr))
}

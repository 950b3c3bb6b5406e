package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/sqlbucket"
)

// TestDatabaseRestart restarts PostgreSQL (its own throwaway cluster) in the
// middle of a slot of a 40 s cycle. The client reconnects, jobs interrupted by
// the restart are retried or rescued, and every account still has exactly one
// sync job in the cycle.
func TestDatabaseRestart(t *testing.T) {
	parallel(t)

	const (
		accounts = 3000
		cycle    = 40 * time.Second
	)
	c := startCluster(t)
	ctx := t.Context()
	pool := c.pool(ctx, t)
	t.Cleanup(pool.Close)

	schema := riverslottest.Schema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", accounts)
	require.NoError(t, sqlbucket.CreateIndex(ctx, pool, schema, "accounts", "id"))
	riverslottest.CreateSyncedTable(ctx, t, pool, schema)
	b := &testBundle{ids: ids, pool: pool, schema: schema}

	// A grid whose cycle starts 12 s from now, not up to a cycle away.
	offset, start := offsetForStartIn(cycle, 12*time.Second)
	scheduler := newScheduler(t, b, riverslot.Task{
		Name: "transactions", Cycle: cycle, TriggerOffset: offset, Schema: schema, Table: "accounts", Filter: "active",
		BatchSize: 200, PerSlotTimeout: 4 * time.Second, SyncTimeout: 2 * time.Second, Sync: b.recordSync(),
	})
	config := &river.Config{
		Schema:               schema,
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 20}},
		Logger:               riverslottest.Logger(t),
		FetchPollInterval:    200 * time.Millisecond,
		JobTimeout:           2 * time.Second,
		RescueStuckJobsAfter: 5 * time.Second, // jobs whose completion was lost in the restart
	}
	require.NoError(t, scheduler.Configure(config))
	config.PeriodicJobs = nil
	client, err := river.NewClient(riverpgxv5.New(pool), config)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	})

	schedule := taskInfo(t, scheduler, "transactions").Schedule
	require.Equal(t, start, schedule.Next(start.Add(-time.Nanosecond)), "a cycle start of the task")
	_, err = scheduler.EnqueueCycle(ctx, client, "transactions", start)
	require.NoError(t, err)

	// Middle of slot 2 (slots are 5 s).
	time.Sleep(time.Until(start.Add(12500 * time.Millisecond)))
	before := time.Now()
	c.pgctl(t, "restart")
	t.Logf("postgres restarted in %s at %s", time.Since(before).Round(10*time.Millisecond), before.Sub(start).Round(100*time.Millisecond))

	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	waitFor(t, time.Until(start.Add(cycle))+120*time.Second, "the cycle to complete after the restart", func() bool {
		var n int64
		err := pool.QueryRow(ctx, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed'", syncjob.Kind).Scan(&n)
		return err == nil && n == accounts
	})

	m := b.measure(ctx, t, "transactions", start)
	calls := b.count(ctx, t, "SELECT count(*) FROM "+pgx.Identifier{schema, "synced"}.Sanitize())
	retried := b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE attempt > 1")
	t.Logf("accounts=%d synced_once=%d missed=%d duplicated=%d sync_calls=%d (re-executions after the restart: %d) jobs_retried=%d peak_pending=%d",
		m.Accounts, m.SyncedOnce, m.Missed, m.Duplicated, calls, calls-accounts, retried, m.PeakPending)
	b.requireSyncedOnce(ctx, t, m, "transactions", 0)
	// Every sync job calls Sync, at least once, unless it started past its
	// not_after and completed as stale (a loaded CI run: 2 of 3,000).
	require.GreaterOrEqual(t, calls, int64(accounts)-m.Skipped, "skipped as stale: %d", m.Skipped)
}

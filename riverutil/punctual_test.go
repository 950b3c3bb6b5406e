package riverutil_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/riverutil"
)

// TestPunctual runs a real cycle of two tasks over the same accounts, one
// Punctual: its per-slot and sync jobs are inserted available with their
// future time (the other task's scheduled, as River inserts them), River
// never starts one before its time, and every sync of both tasks runs.
func TestPunctual(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 200)
	const cycle = 16 * time.Second
	noop := func(context.Context, uuid.UUID, *river.Job[riverutil.SyncArgs]) error { return nil }
	scheduler, err := riverutil.New(pool, &riverutil.Config{Logger: riverslottest.Logger(t), Tasks: []riverutil.Task{
		{Name: "punctual", Cycle: cycle, Schema: schema, Table: "accounts", Punctual: true, Sync: noop},
		{Name: "plain", Cycle: cycle, Schema: schema, Table: "accounts", Sync: noop},
	}})
	require.NoError(t, err)
	require.NoError(t, scheduler.CreateIndexes(ctx))
	config := &river.Config{Schema: schema, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 20}}, FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, scheduler.Configure(config))
	config.PeriodicJobs = nil
	client, _ := riverslottest.StartClient(ctx, t, pool, config)

	info, err := scheduler.Task("punctual")
	require.NoError(t, err)
	start := info.Schedule.Next(time.Now().Add(2 * time.Second))
	for _, task := range []string{"punctual", "plain"} {
		_, err := scheduler.EnqueueCycle(ctx, client, task, start)
		require.NoError(t, err)
	}
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	// The per-slot jobs, inserted by the bootstraps: the punctual task's
	// available with their times ahead (they run on any node at their
	// time, not when River's scheduler on the leader promotes them).
	riverslottest.WaitFor(t, 30*time.Second, "both tasks' per-slot jobs", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_perslot'") == 2*int64(info.Plan.Slots)
	})
	perSlot := func(task, state string) int64 {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_perslot' AND args->>'task' = $1 AND state = $2 AND scheduled_at > now() + interval '1 second'", task, state)
	}
	require.Positive(t, perSlot("punctual", "available"))
	require.Zero(t, perSlot("punctual", "scheduled"))
	require.Positive(t, perSlot("plain", "scheduled"))
	require.Zero(t, perSlot("plain", "available"))
	count := func(sql string, args ...any) int64 {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_sync' AND "+sql, args...)
	}
	// The first slot's syncs, inserted Lead before it: each task's as its
	// setting says, whatever River's scheduler has done since.
	riverslottest.WaitFor(t, 40*time.Second, "both tasks' first syncs", func() bool {
		return count("args->>'task' = 'punctual'") > 0 && count("args->>'task' = 'plain'") > 0
	})
	require.Zero(t, count("args->>'task' = 'punctual' AND state = 'scheduled'"), "a punctual task's syncs are never scheduled")
	require.Positive(t, count("args->>'task' = 'punctual' AND state = 'available' AND scheduled_at > now()"), "inserted available, their time ahead")
	require.Zero(t, count("args->>'task' = 'plain' AND scheduled_at > now() AND state <> 'scheduled'"), "the other task's are inserted as River does")
	require.Positive(t, count("args->>'task' = 'plain' AND scheduled_at > now() AND state = 'scheduled'"), "the other task's are inserted as River does")

	riverslottest.WaitFor(t, 60*time.Second, "every sync of the cycle", func() bool {
		return count("state = 'completed'") == 400
	})
	require.Zero(t, count("attempted_at < scheduled_at"), "no sync started before its time")
}

package riverslot_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
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
	noop := func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil }
	scheduler, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{
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
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	led := pgx.Identifier{schema, "riverslot_ledger"}.Sanitize()
	count := func(kind, task string, cycleStart time.Time, where string) int64 {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND args->>'task' = $2 AND (args->>'cycle_start')::timestamptz = $3 AND "+where,
			kind, task, cycleStart)
	}
	const perSlot, sync = "riverslot_perslot", "riverslot_sync"

	// A cycle an hour ahead: the states jobs are inserted in, whatever
	// the time. The bootstraps insert the per-slot jobs: the punctual
	// task's available, the other's scheduled, as River inserts them.
	ahead := info.Schedule.Next(time.Now().Add(time.Hour))
	for _, task := range []string{"punctual", "plain"} {
		_, err := scheduler.EnqueueCycle(ctx, client, task, ahead)
		require.NoError(t, err)
	}
	slots := int64(info.Plan.Slots)
	riverslottest.WaitFor(t, 30*time.Second, "both tasks' per-slot jobs", func() bool {
		return count(perSlot, "punctual", ahead, "true") == slots && count(perSlot, "plain", ahead, "true") == slots
	})
	require.Equal(t, slots, count(perSlot, "punctual", ahead, "state = 'available'"))
	require.Equal(t, slots, count(perSlot, "plain", ahead, "state = 'scheduled'"))
	// Slot 0's fan-outs made to run now: their syncs, an hour ahead, are
	// inserted available (punctual) and scheduled (plain).
	runSlot := func(slot int) {
		t.Helper()
		_, err := pool.Exec(ctx, "UPDATE "+jobs+" SET scheduled_at = now(), state = 'available' WHERE kind = $1 AND (args->>'slot')::int = $2 AND (args->>'cycle_start')::timestamptz = $3",
			perSlot, slot, ahead)
		require.NoError(t, err)
		riverslottest.WaitFor(t, 30*time.Second, "both tasks' fan-outs of the slot", func() bool {
			return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+led+" WHERE cycle_start = $1 AND slot = $2 AND finished_at IS NOT NULL", ahead, slot) == 2
		})
	}
	runSlot(0)
	punctualSyncs := count(sync, "punctual", ahead, "true")
	require.Positive(t, punctualSyncs)
	require.Equal(t, punctualSyncs, count(sync, "punctual", ahead, "state = 'available' AND scheduled_at > now()"), "a punctual task's syncs are inserted available, their time ahead")
	plainSyncs := count(sync, "plain", ahead, "true")
	require.Positive(t, plainSyncs)
	require.Equal(t, plainSyncs, count(sync, "plain", ahead, "state = 'scheduled'"), "the other task's as River inserts them")
	// River's producers fetched again since (slot 1's fan-outs ran): none
	// of those available syncs was taken before its time.
	runSlot(1)
	require.Equal(t, punctualSyncs, count(sync, "punctual", ahead, "state = 'available' AND attempt = 0 AND (args->>'slot')::int = 0"), "no sync fetched before its time")

	// A real cycle starting now: every sync of both tasks runs, none
	// before its time.
	start := info.Schedule.Next(time.Now().Add(2 * time.Second))
	for _, task := range []string{"punctual", "plain"} {
		_, err := scheduler.EnqueueCycle(ctx, client, task, start)
		require.NoError(t, err)
	}
	riverslottest.WaitFor(t, 60*time.Second, "every sync of the cycle", func() bool {
		return count(sync, "punctual", start, "state = 'completed'")+count(sync, "plain", start, "state = 'completed'") == 400
	})
	require.Zero(t, count(sync, "punctual", start, "attempted_at < scheduled_at")+count(sync, "plain", start, "attempted_at < scheduled_at"), "no sync started before its time")
}

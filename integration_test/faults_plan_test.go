package integration

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
)

// syncTimes returns the times every account's completed sync jobs were
// scheduled for, in order: what riverslot decides (River starts each within
// about a second of it).
func (b *testBundle) syncTimes(ctx context.Context, t *testing.T) map[uuid.UUID][]time.Time {
	t.Helper()
	return b.accountTimes(ctx, t, "SELECT (args->>'account_id')::uuid, scheduled_at FROM "+pgx.Identifier{b.schema, "river_job"}.Sanitize()+
		" WHERE kind = $1 AND state = 'completed' ORDER BY scheduled_at", syncjob.Kind)
}

// accountTimes runs query, whose rows are (account id, time) in time
// order, and returns each account's times.
func (b *testBundle) accountTimes(ctx context.Context, t *testing.T, query string, args ...any) map[uuid.UUID][]time.Time {
	t.Helper()
	rows, err := b.pool.Query(ctx, query, args...)
	require.NoError(t, err)
	out := map[uuid.UUID][]time.Time{}
	var (
		id uuid.UUID
		at time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &at}, func() error {
		out[id] = append(out[id], at)
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestOutageLongerThanACycle stops every client for 1.5 cycles right after a
// cycle was enqueued, then starts one with the periodic trigger, as an app
// restarting after an outage. The stale cycle's late accounts must not be
// synced on top of the current cycle: no account gets two syncs less than
// half a cycle apart, and every account is synced within one cycle after
// the outage ends.
func TestOutageLongerThanACycle(t *testing.T) {
	parallel(t)

	const (
		accounts = 2000
		cycle    = 40 * time.Second // 8 slots of 5 s
	)
	ctx, b := setup(t, accounts)
	// A grid whose cycle starts 4 s from now, not up to a cycle away.
	offset, stale := offsetForStartIn(cycle, 4*time.Second)
	task := riverslot.Task{Name: "transactions", Cycle: cycle, TriggerOffset: offset, Schema: b.schema, Table: "accounts", Filter: "active", Sync: b.recordSync()}
	scheduler := newScheduler(t, b, task)
	schedule := taskInfo(t, scheduler, "transactions").Schedule

	// The trigger ran for the next cycle, then every client went down.
	insertOnly, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema})
	require.NoError(t, err)
	require.Equal(t, stale, schedule.Next(stale.Add(-time.Nanosecond)), "a cycle start of the task")
	_, err = scheduler.EnqueueCycle(ctx, insertOnly, "transactions", stale)
	require.NoError(t, err)
	outageEnd := stale.Add(cycle * 3 / 2)
	time.Sleep(time.Until(outageEnd)) // the outage itself: nothing may run before it ends
	startClient(ctx, t, b, scheduler, true, river.QueueDefault)
	restarted := time.Now()

	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	deadline := restarted.Add(cycle)
	waitFor(t, time.Until(deadline)+60*time.Second, "a cycle after the outage, every sync due by then done", func() bool {
		return time.Now().After(deadline.Add(5*time.Second)) &&
			b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state NOT IN ('completed', 'cancelled', 'discarded') AND scheduled_at <= $2", syncjob.Kind, deadline) == 0
	})

	times := b.syncTimes(ctx, t)
	var staleSkipped int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT coalesce(sum((metadata->'output'->>'skipped')::bigint), 0) FROM "+jobs+
		" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2", perslot.Kind, stale).Scan(&staleSkipped))
	var closest time.Duration = cycle
	for _, id := range b.ids {
		ts := times[id]
		var within int
		for i, at := range ts {
			if !at.After(deadline) {
				within++
			}
			if i > 0 {
				closest = min(closest, at.Sub(ts[i-1]))
			}
		}
		require.NotZero(t, within, "account %s not synced within a cycle after the outage (syncs %v)", id, ts)
		for i := 1; i < len(ts); i++ {
			require.GreaterOrEqual(t, ts[i].Sub(ts[i-1]), cycle/2, "account %s synced twice %s apart: %v", id, ts[i].Sub(ts[i-1]), ts)
		}
	}
	t.Logf("outage %s (1.5 cycles of %s); stale cycle skipped %d of %d accounts; closest two syncs of one account: %s",
		outageEnd.Sub(stale), cycle, staleSkipped, accounts, closest.Round(time.Millisecond))
	require.EqualValues(t, accounts, staleSkipped, "the stale cycle syncs nobody: the current cycle covers everyone")
}

// TestRerunFailedSlot makes a per-slot job fail for good halfway through its
// fan-out, then does what the README tells an operator: fix the cause and
// retry the job. The retry resumes from its cursor (no account enqueued
// twice), and re-running the cycle's bootstrap adds no second per-slot job.
func TestRerunFailedSlot(t *testing.T) {
	parallel(t)

	const accounts = 4000
	ctx, b := setup(t, accounts)
	scheduler := newScheduler(t, b, riverslot.Task{
		Name: "transactions", Cycle: 16 * time.Second, Schema: b.schema, Table: "accounts",
		BatchSize: 50, Queue: "parked", ControlQueue: river.QueueDefault, Sync: b.recordSync(),
	})
	plan := taskInfo(t, scheduler, "transactions").Plan
	client := startClient(ctx, t, b, scheduler, false, river.QueueDefault)
	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()

	// Sync inserts fail after 100 rows (two batches) until the cause is fixed.
	broken := pgx.Identifier{b.schema, "broken"}.Sanitize()
	_, err := b.pool.Exec(ctx, "CREATE TABLE "+broken+" (on_ boolean); INSERT INTO "+broken+" VALUES (true)")
	require.NoError(t, err)
	b.failSyncInserts(ctx, t, "(SELECT on_ FROM "+broken+") AND (SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_sync') >= 100",
		"upstream table is broken")

	start := b.enqueueFutureCycle(ctx, t, scheduler, client)
	slotJob := b.runSlots(ctx, t, 2, 0)[0]
	waitFor(t, 60*time.Second, "slot 0 to be discarded after its attempts", func() bool {
		job, err := client.JobGet(ctx, slotJob)
		require.NoError(t, err)
		return job.State == rivertype.JobStateDiscarded
	})
	require.EqualValues(t, 100, b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", syncjob.Kind))

	// Re-running the cycle adds nothing: the failed job is still there.
	res, err := scheduler.EnqueueCycle(ctx, client, "transactions", start)
	require.NoError(t, err)
	require.True(t, res.UniqueSkippedAsDuplicate)

	// Fix the cause, retry the job.
	_, err = b.pool.Exec(ctx, "UPDATE "+broken+" SET on_ = false")
	require.NoError(t, err)
	_, err = client.JobRetry(ctx, slotJob)
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "the retried slot to complete", func() bool {
		job, err := client.JobGet(ctx, slotJob)
		require.NoError(t, err)
		return job.State == rivertype.JobStateCompleted
	})

	var want int64
	for _, id := range b.ids {
		if plan.SlotOf(id) == 0 {
			want++
		}
	}
	require.EqualValues(t, want, b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", syncjob.Kind), "one sync job per account of the slot")
	require.EqualValues(t, want, b.count(ctx, t, "SELECT count(DISTINCT args->>'account_id') FROM "+jobs+" WHERE kind = $1", syncjob.Kind))
	require.EqualValues(t, plan.Slots, b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", perslot.Kind))
}

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

// calledSync is a sync job whose Sync was called: the synced table, the
// test kit's record of Sync calls, holds a row for its account and cycle.
type calledSync struct {
	cycleStart, scheduledAt, attemptedAt time.Time
	attempt                              int
}

// calledSyncs returns, per account, the sync jobs of task whose Sync was
// called, in scheduled order.
func (b *testBundle) calledSyncs(ctx context.Context, t *testing.T, task string) map[uuid.UUID][]calledSync {
	t.Helper()
	rows, err := b.pool.Query(ctx, `SELECT (j.args->>'account_id')::uuid, (j.args->>'cycle_start')::timestamptz, j.scheduled_at, j.attempted_at, j.attempt
		FROM `+pgx.Identifier{b.schema, "river_job"}.Sanitize()+` j
		WHERE j.kind = $1 AND j.args->>'task' = $2 AND j.attempted_at IS NOT NULL AND EXISTS (
			SELECT 1 FROM `+pgx.Identifier{b.schema, "synced"}.Sanitize()+` c
			WHERE c.task = $2 AND c.account_id = (j.args->>'account_id')::uuid AND c.cycle_start = (j.args->>'cycle_start')::timestamptz)
		ORDER BY j.scheduled_at`, syncjob.Kind, task)
	require.NoError(t, err)
	out := map[uuid.UUID][]calledSync{}
	var (
		id uuid.UUID
		c  calledSync
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &c.cycleStart, &c.scheduledAt, &c.attemptedAt, &c.attempt}, func() error {
		out[id] = append(out[id], c)
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestOutageLongerThanACycle stops every client for 1.5 cycles right after a
// cycle was enqueued, then starts one with the periodic trigger, as an app
// restarting after an outage. It checks the rule the library promises,
// counted in Sync calls (the synced table), not in sync jobs (a stale job
// completes without calling Sync):
//   - a fan-out that ran within half a cycle of its slot's start skips
//     nobody; the accounts a later one skipped are missed, with the count
//     in its output and the ledger. The stale cycle's fan-outs all ran
//     after the outage, past their windows: it calls Sync for nobody;
//   - in the cycle the app restarts in, every other account's Sync is
//     called once, but for sync jobs that started past their NotAfter
//     (requireSyncedOnce);
//   - every Sync call's job started by its NotAfter (half a cycle after the
//     account's regular time, or LateGrace after a spread sync's time:
//     computed here, not read from the job), and an account's calls are
//     scheduled at least half a cycle apart.
//
// How many accounts the current cycle leaves to the next is the machine's
// and is only logged, as is how many were synced within a cycle after the
// outage: the windows of its first slots close about when the app restarts
// (slot 0's at the restart itself), the restarted leader's first fan-outs
// ran 10 s later on a 2-core machine (skipping slots 0-2, 709 accounts),
// and CI runs beside other tests saw River's scheduler time out for 30 s
// (CPU starvation, not a lock: see TestTwoFullCycles). A run at load
// average 12 made 530 syncs stale and synced 1,741 of the 2,000 accounts
// within a cycle after the outage, the others in the next cycle's later
// slots; the old count of completed jobs took the stale ones for syncs.
func TestOutageLongerThanACycle(t *testing.T) {
	parallel(t)

	const (
		accounts = 2000
		cycle    = 40 * time.Second // 8 slots of 5 s
		task     = "transactions"
	)
	ctx, b := setup(t, accounts)
	// A grid whose cycle starts 4 s from now, not up to a cycle away.
	offset, stale := offsetForStartIn(cycle, 4*time.Second)
	scheduler := newScheduler(t, b, riverslot.Task{Name: task, Cycle: cycle, TriggerOffset: offset, Schema: b.schema, Table: "accounts", Filter: "active", Sync: b.recordSync()})
	info := taskInfo(t, scheduler, task)
	plan := info.Plan
	lateGrace := plan.SlotDuration // the default LateGrace: a slot

	// The trigger ran for the next cycle, then every client went down.
	insertOnly, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema})
	require.NoError(t, err)
	require.Equal(t, stale, info.Schedule.Next(stale.Add(-time.Nanosecond)), "a cycle start of the task")
	_, err = scheduler.EnqueueCycle(ctx, insertOnly, task, stale)
	require.NoError(t, err)
	outageEnd := stale.Add(cycle * 3 / 2)
	time.Sleep(time.Until(outageEnd)) // the outage itself: nothing may run before it ends
	startClient(ctx, t, b, scheduler, true, river.QueueDefault)
	restarted := time.Now()
	// The cycle the app restarts in, half over: RunOnStart bootstraps it.
	current := stale.Add(cycle)
	require.True(t, restarted.Before(current.Add(cycle)), "restarted %s, after the current cycle's end", restarted)

	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	// The deadline is for work still queued, not a speed bound: every
	// per-slot and sync job of the stale and the current cycle has ended,
	// and so has every sync job due by deadline.
	deadline := restarted.Add(cycle)
	waitFor(t, time.Until(deadline)+180*time.Second, "the stale and the current cycle's jobs, and every sync due a cycle after the outage, to end", func() bool {
		return time.Now().After(deadline.Add(5*time.Second)) &&
			b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind IN ($1, $2) AND state NOT IN ('completed', 'cancelled', 'discarded')"+
				" AND ((args->>'cycle_start')::timestamptz IN ($3, $4) OR (kind = $1 AND scheduled_at <= $5))", syncjob.Kind, perslot.Kind, stale, current, deadline) == 0
	})

	// fanOutSkips are what a cycle's fan-outs skipped (their per-slot
	// jobs' output), those that ran within half a cycle of their slot's
	// start (a second's margin: the fan-out reads the clock after River's
	// attempted_at) and the others.
	fanOutSkips := func(start time.Time) (inWindow, late int64) {
		t.Helper()
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT
			coalesce(sum((metadata->'output'->>'skipped')::bigint) FILTER (WHERE attempted_at <= $2::timestamptz + ((args->>'slot')::int * $3::interval) + $4::interval - interval '1 second'), 0),
			coalesce(sum((metadata->'output'->>'skipped')::bigint) FILTER (WHERE attempted_at > $2::timestamptz + ((args->>'slot')::int * $3::interval) + $4::interval - interval '1 second'), 0)
			FROM `+jobs+` WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2`, perslot.Kind, start, plan.SlotDuration, cycle/2).Scan(&inWindow, &late))
		return inWindow, late
	}

	// The stale cycle: its last slot's window closed 5 s before the
	// outage ended, so every fan-out skipped all its accounts.
	ms := b.measure(ctx, t, task, stale)
	inWindow, staleSkipped := fanOutSkips(stale)
	require.Zero(t, inWindow, "the stale cycle's fan-outs ran after the outage, past their windows")
	require.EqualValues(t, accounts, staleSkipped, "the stale cycle skips everyone at its fan-outs: the current cycle covers them")
	require.Zero(t, ms.SyncCalls, "the stale cycle calls Sync for nobody")
	b.requireSyncedOnce(ctx, t, ms, task, staleSkipped)

	// The current cycle: once per account, but for those a late fan-out
	// skipped or whose sync started past its NotAfter, each missed with a
	// reason.
	mc := b.measure(ctx, t, task, current)
	inWindow, late := fanOutSkips(current)
	require.Zero(t, inWindow, "a fan-out that ran within half a cycle of its slot's start spreads its late accounts")
	b.requireSyncedOnce(ctx, t, mc, task, late)
	require.Equal(t, mc.Missed, mc.MissedSkipped, "accounts of the current cycle missed without a reason")

	// Every Sync call so far, of any cycle: its job started by its
	// NotAfter, and an account's calls are scheduled at least half a cycle
	// apart.
	called := b.calledSyncs(ctx, t, task)
	closestScheduled, closestStarted := cycle, cycle
	var syncedByDeadline int
	for _, id := range b.ids {
		cs := called[id]
		if len(cs) > 0 && !cs[0].scheduledAt.After(deadline) {
			syncedByDeadline++ // nothing ran before the outage ended
		}
		for i, c := range cs {
			// A retried job's scheduled_at and start are River's backoff
			// (and its first attempt's Sync may have been the call):
			// requireSyncedOnce counts its calls.
			if c.attempt == 1 {
				notAfter := info.Due(c.cycleStart, id).Add(cycle / 2)
				if grace := c.scheduledAt.Add(lateGrace); grace.After(notAfter) {
					notAfter = grace
				}
				require.False(t, c.attemptedAt.After(notAfter.Add(time.Microsecond)), // River's times are to the microsecond
					"account %s: Sync called for its sync of cycle %s that started %s, after its NotAfter %s", id, c.cycleStart, c.attemptedAt, notAfter)
			}
			if i == 0 || c.attempt > 1 || cs[i-1].attempt > 1 {
				continue
			}
			gap := c.scheduledAt.Sub(cs[i-1].scheduledAt)
			closestScheduled = min(closestScheduled, gap)
			closestStarted = min(closestStarted, c.attemptedAt.Sub(cs[i-1].attemptedAt))
			require.GreaterOrEqual(t, gap, cycle/2, "account %s: two Sync calls scheduled %s apart (cycles %s and %s)", id, gap, cs[i-1].cycleStart, c.cycleStart)
		}
	}
	t.Logf("outage %s (1.5 cycles of %s); stale cycle skipped %d of %d accounts at its fan-outs; current cycle: %d synced once, %d missed (%d skipped by late fan-outs, %d stale syncs); %d accounts synced by a sync scheduled within a cycle after the outage; closest two Sync calls of one account: scheduled %s apart, started %s apart",
		outageEnd.Sub(stale), cycle, staleSkipped, accounts, mc.SyncedOnce, mc.Missed, late, mc.Skipped, syncedByDeadline,
		closestScheduled.Round(time.Millisecond), closestStarted.Round(time.Millisecond))
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

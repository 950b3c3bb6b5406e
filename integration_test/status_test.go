package integration

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestStatus builds a cycle whose slots and sync jobs are in every state (a
// fan-out that really failed, sync jobs moved to each final state), and
// checks every count of Status against one computed directly from
// river_job and the accounts table; then a cycle whose client stopped.
func TestStatus(t *testing.T) {
	parallel(t)

	const accounts = 1000
	ctx, b := setup(t, accounts)
	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	accountsTable := pgx.Identifier{b.schema, "accounts"}.Sanitize()
	_, err := b.pool.Exec(ctx, "UPDATE "+accountsTable+" SET active = false WHERE id = ANY($1)", b.ids[:100])
	require.NoError(t, err)

	scheduler := newScheduler(t, b, riverslot.Task{
		Name: "transactions", Cycle: 40 * time.Second, Schema: b.schema, Table: "accounts", Filter: "active",
		Queue: "parked", ControlQueue: river.QueueDefault, Sync: b.recordSync(),
	})
	info := taskInfo(t, scheduler, "transactions")
	client := startClient(ctx, t, b, scheduler, false, river.QueueDefault)

	// A cycle an hour ahead; slots 0-2 fan out now, slot 3 fails for good.
	start := b.enqueueFutureCycle(ctx, t, scheduler, client)
	b.runSlots(ctx, t, 25, 0, 1, 2)
	waitFor(t, 30*time.Second, "slots 0-2 to fan out", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed'", perslot.Kind) == 3
	})
	b.failSyncInserts(ctx, t, "true", "upstream table is broken")
	b.runSlots(ctx, t, 1, 3)
	waitFor(t, 30*time.Second, "slot 3 to fail for good", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'discarded'", perslot.Kind) == 1
	})

	// Sync jobs (parked, never worked) moved to every state.
	for _, stmt := range []string{
		"WITH j AS (SELECT id FROM " + jobs + " WHERE kind = 'riverslot_sync' AND state = 'scheduled' ORDER BY id LIMIT 40) UPDATE " + jobs + " r SET state = 'completed', attempt = 1, attempted_at = scheduled_at + interval '500 milliseconds', finalized_at = now() FROM j WHERE r.id = j.id",
		"WITH j AS (SELECT id FROM " + jobs + " WHERE kind = 'riverslot_sync' AND state = 'scheduled' ORDER BY id LIMIT 7) UPDATE " + jobs + " r SET state = 'discarded', attempt = 5, attempted_at = now(), finalized_at = now() FROM j WHERE r.id = j.id",
		"WITH j AS (SELECT id FROM " + jobs + " WHERE kind = 'riverslot_sync' AND state = 'scheduled' ORDER BY id LIMIT 3) UPDATE " + jobs + " r SET state = 'cancelled', finalized_at = now() FROM j WHERE r.id = j.id",
		"WITH j AS (SELECT id FROM " + jobs + " WHERE kind = 'riverslot_sync' AND state = 'scheduled' ORDER BY id LIMIT 4) UPDATE " + jobs + " r SET state = 'running', attempt = 1, attempted_at = now() FROM j WHERE r.id = j.id",
		"WITH j AS (SELECT id FROM " + jobs + " WHERE kind = 'riverslot_sync' AND state = 'scheduled' ORDER BY id LIMIT 2) UPDATE " + jobs + " r SET state = 'retryable', attempt = 1, attempted_at = now() FROM j WHERE r.id = j.id",
	} {
		_, err := b.pool.Exec(ctx, stmt)
		require.NoError(t, err)
	}

	// How the finished ones ended, as the sync workers count it in the
	// cycle's ledger row (Status reads it there, not from River).
	riverslottest.CountOutcomes(ctx, t, b.pool, b.schema, "transactions", info.PlanID, start, ledger.OutcomeSynced, 40, 500*time.Millisecond)
	riverslottest.CountOutcomes(ctx, t, b.pool, b.schema, "transactions", info.PlanID, start, ledger.OutcomeFailed, 7, 0)
	riverslottest.CountOutcomes(ctx, t, b.pool, b.schema, "transactions", info.PlanID, start, ledger.OutcomeCancelled, 3, 0)

	st, err := scheduler.StatusAt(ctx, "transactions", start)
	require.NoError(t, err)
	c := st.Current
	count := func(where string, args ...any) int64 {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_sync' AND "+where, args...)
	}
	require.Equal(t, 8, c.Slots)
	require.Equal(t, 3, c.SlotsDone)
	require.Equal(t, 1, c.SlotsFailed)
	require.Equal(t, 3, c.FailedSlot)
	require.Contains(t, c.FailedError, "upstream table is broken")
	require.Equal(t, "failed slot 3: "+c.FailedError, c.Verdict)
	require.False(t, c.OnTrack)
	require.Equal(t, count("true"), c.Enqueued)
	require.Equal(t, count("state IN ('scheduled', 'available')"), c.Pending)
	require.Equal(t, count("state = 'running'"), c.Running)
	require.Equal(t, count("state = 'retryable'"), c.Retryable)
	require.Equal(t, count("state = 'completed'"), c.Completed)
	require.Equal(t, count("state = 'discarded'"), c.Discarded)
	require.Equal(t, count("state = 'cancelled'"), c.Cancelled)
	require.Equal(t, b.count(ctx, t, "SELECT count(*) FROM "+accountsTable+" WHERE active"), c.AccountsExpected)
	require.True(t, c.LatenessKnown)
	require.InEpsilon(t, 0.5, c.LatenessP50.Seconds(), 0.26, "500 ms late, within the ledger histogram's 26% buckets")
	require.EqualValues(t, 40, c.LatenessSample)
	require.EqualValues(t, 40, c.Synced)
	for _, p := range c.PerSlot {
		require.Equal(t, b.count(ctx, t, "SELECT count(*) FROM "+accountsTable+" WHERE active AND get_byte(uuid_send(id), 15) / 32 = $1", p.Slot), p.Expected, "slot %d expected", p.Slot)
		require.Equal(t, count("(args->>'slot')::int = $1", p.Slot), p.Enqueued, "slot %d enqueued", p.Slot)
		switch {
		case p.Slot < 3:
			require.Equal(t, riverslot.SlotDone, p.State)
			require.Equal(t, p.Expected, p.Enqueued, "a done slot enqueued every account it selects")
		case p.Slot == 3:
			require.Equal(t, riverslot.SlotFailed, p.State)
			require.Equal(t, 1, p.Attempts)
		default:
			require.Equal(t, riverslot.SlotScheduled, p.State)
		}
	}
	require.Equal(t, 0, c.NextSlot, "a cycle an hour ahead: slot 0 is next")
	require.True(t, c.NextSlotAt.Equal(start))

	// A cycle whose client stopped: its per-slot jobs still wait, long after
	// their slots.
	insertOnly, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema})
	require.NoError(t, err)
	past := info.Schedule.Start(time.Now().Add(-2 * time.Minute))
	for slot := range 8 {
		_, err := insertOnly.Insert(ctx, perslot.Args{Task: "transactions", CycleStart: past, Slot: slot, Plan: riverslottest.Key(t, info.PlanID)},
			&river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
	}
	st, err = scheduler.StatusAt(ctx, "transactions", past)
	require.NoError(t, err)
	require.Equal(t, "behind by 8 slots", st.Current.Verdict)
	require.Equal(t, 8, st.Current.BehindSlots)
	require.Equal(t, -1, st.Current.NextSlot, "every slot of a past cycle has started")
}

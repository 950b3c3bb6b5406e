package perslot

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// TestFanOutTwoByteBuckets: a per-slot job of a 65,536-bucket task (120 s:
// 64 slots of 1.875 s, where 256 buckets give 8) enqueues exactly the
// accounts of its two-byte slot, in pages that cross bucket boundaries, each
// at its slot's start plus its offset, all inside the one-byte slot of the
// same number / 8.
func TestFanOutTwoByteBuckets(t *testing.T) {
	t.Parallel()

	const batch = 7
	ctx, b := setup(t, 4000, batch, func(s *taskspec.Spec) {
		fine := riverslottest.SpecBuckets(t, s.Name, s.Schema, s.Table, s.Filter, 2*time.Minute, batch, slotplan.BucketsTwoByte)
		fine.SyncOpts = s.SyncOpts
		*s = *fine
	})
	require.NoError(t, sqlbucket.CreateIndexFor(ctx, b.pool, b.schema, "accounts", "id", slotplan.BucketsTwoByte))
	require.Equal(t, 64, b.spec.Plan.Slots)
	coarse, err := slotplan.New(2 * time.Minute)
	require.NoError(t, err)

	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, slot := range []int{0, 37, 63} {
		want := b.slotAccounts(slot)
		require.Greater(t, len(want), 2*batch, "slot %d must need several pages", slot)
		_, err := b.pool.Exec(ctx, "DELETE FROM "+b.table("river_job")+" WHERE kind = 'riverslot_sync'")
		require.NoError(t, err)

		ev := b.run(ctx, t, slot, 1)
		require.Equal(t, river.EventKindJobCompleted, ev.Kind, "%+v", ev.Job.Errors)

		rows, err := b.pool.Query(ctx, "SELECT (args->>'account_id')::uuid, scheduled_at FROM "+b.table("river_job")+" WHERE kind = 'riverslot_sync'")
		require.NoError(t, err)
		got := map[uuid.UUID]int{}
		var (
			id  uuid.UUID
			due time.Time
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &due}, func() error {
			got[id]++
			require.True(t, want[id], "slot %d enqueued %s of two-byte slot %d", slot, id, b.spec.Plan.SlotOf(id))
			require.Equal(t, slot/8, coarse.SlotOf(id), "account %s outside the one-byte slot", id)
			require.True(t, b.spec.Plan.Target(start, b.spec.Seed, id).Equal(due), "account %s due %s, want %s", id, due, b.spec.Plan.Target(start, b.spec.Seed, id))
			from := b.spec.Plan.SlotStart(start, slot)
			require.False(t, due.Before(from) || !due.Before(from.Add(1875*time.Millisecond)), "account %s due %s outside [%s, +1.875s)", id, due, from)
			return nil
		})
		require.NoError(t, err)
		require.Len(t, got, len(want), "slot %d: every account of the slot", slot)
		for id, n := range got {
			require.Equal(t, 1, n, "account %s enqueued %d times", id, n)
		}
	}
}

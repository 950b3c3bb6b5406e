package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestUnshardedOnVersion4Ledger: on a ledger of version 4 (a rolling
// deploy before Migrate), an unsharded bootstrap's statements all run in
// one transaction: the shard-map lock and lookup (no map, no aborted
// transaction), the slots' claim and the cycle's record.
func TestUnshardedOnVersion4Ledger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	ddl := ledger.DDL(schema)
	for _, q := range ddl[:len(ddl)-3] { // version 5's three statements left out
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	led := ledger.New(schema)
	current, err := led.Current(ctx, pool)
	require.NoError(t, err)
	require.False(t, current, "a version-4 ledger is outdated")

	start := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	key := taskspec.PlanKey{Cycle: 120 * time.Second, Slots: 8, Buckets: 256, Seed: 1}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	claimed, err := led.ClaimBootstrap(ctx, tx, "t", key.String(), start, 1)
	require.NoError(t, err)
	require.True(t, claimed)
	require.NoError(t, led.LockShards(ctx, tx, "t", false))
	_, sharded, err := led.ShardMapAt(ctx, tx, "t", start)
	require.NoError(t, err)
	require.False(t, sharded)
	require.NoError(t, led.RecordCycle(ctx, tx, ledger.Cycle{Task: "t", Plan: key, Start: start, End: start.Add(2 * time.Minute)}))
	slots, err := led.ClaimSlots(ctx, tx, "t", key.String(), start, 8)
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, slots)
	require.NoError(t, tx.Commit(ctx))
}

package riverslot_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
)

// recordShardCycle records in shard's ledger a bootstrap of task's cycle
// at start under plan, following shard map version (0: none), as a
// bootstrap (or EnqueueCycle ahead) does.
func recordShardCycle(ctx context.Context, t *testing.T, s riverslot.Shard, task string, plan slotplan.Plan, start time.Time, version int64) {
	t.Helper()
	var v *int64
	if version != 0 {
		v = &version
	}
	_, err := s.Pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{s.Schema, ledger.Table}.Sanitize()+" (task, cycle_start, plan, slot, shard, shard_version) VALUES ($1, $2, $3, -1, $4, $5)",
		task, start, taskspec.KeyOf(plan, 1, 0).String(), s.Name, v)
	require.NoError(t, err)
}

func shardVersions(ctx context.Context, t *testing.T, shards []riverslot.Shard, task string) []int64 {
	t.Helper()
	var out []int64
	for _, s := range shards {
		cur, _, err := riverslot.ShardMapOf(ctx, s, task)
		require.NoError(t, err)
		out = append(out, cur.Version)
	}
	return out
}

// TestShardJoinAndRepair: a new shard (no map of the task) joins a running
// fleet's map at a future cycle start, and then takes a range; a range off
// the task's slots (by its latest cycle's plan in the ledger, or the plan
// given) is refused, naming the nearest bounds; after a change written on
// some shards only, a change is refused (ErrShardMapsDisagree) and
// RepairShardMap brings every shard to one map whatever versions they
// hold, refusing only a map that would change the shards of a cycle
// already made.
func TestShardJoinAndRepair(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	var shards []riverslot.Shard
	for _, name := range []string{"s1", "s2", "s3"} {
		shards = append(shards, riverslot.Shard{Name: name, Pool: pool, Schema: riverslottest.Schema(ctx, t, pool)})
	}
	const task = "transactions"
	plan, err := slotplan.New(24 * time.Second) // 8 slots of 8,192 two-byte buckets
	require.NoError(t, err)
	first := riverslot.ShardMap{Ranges: []riverslot.ShardRange{{Shard: "s1", Lo: 0, Hi: 32767}, {Shard: "s2", Lo: 32768, Hi: 65535}}}
	require.NoError(t, riverslot.SetShardMap(ctx, shards[:2], task, first, time.Time{}))
	now := time.Now().UTC().Truncate(time.Minute)
	recordShardCycle(ctx, t, shards[0], task, plan, now, 1)
	recordShardCycle(ctx, t, shards[1], task, plan, now, 1)

	// s3 joins: the same ranges, from a cycle an hour ahead.
	join := now.Add(time.Hour)
	require.NoError(t, riverslot.SetShardMap(ctx, shards, task, first, join))
	require.Equal(t, []int64{2, 2, 2}, shardVersions(ctx, t, shards, task))
	_, inForce, err := riverslot.ShardMapAt(ctx, shards[2], task, join.Add(-time.Second))
	require.NoError(t, err)
	require.False(t, inForce, "s3 has no map before it joined")

	// Off the slots of the latest cycle's plan: refused, naming the bounds.
	_, err = riverslot.MoveBuckets(ctx, shards, task, 0, 4095, "s3", join.Add(time.Hour))
	require.ErrorIs(t, err, slotplan.ErrShardMap)
	require.ErrorContains(t, err, "move its bound 4096 to 0 or 8192")
	require.ErrorContains(t, err, `the plan of the task's latest cycle`)
	require.Equal(t, []int64{2, 2, 2}, shardVersions(ctx, t, shards, task), "nothing written")
	// The plan given (a 48 s cycle: 4,096 buckets a slot) comes first.
	finer, err := slotplan.New(48 * time.Second)
	require.NoError(t, err)
	moved, err := first.Move(0, 4095, "s3")
	require.NoError(t, err)
	moved.Version = 0
	_, err = riverslot.ChangeShardMap(ctx, &riverslot.ShardMapChange{Shards: shards, Task: task, Map: moved, From: join.Add(time.Hour), Plan: &plan})
	require.ErrorContains(t, err, "move its bound 4096 to 0 or 8192")
	got, err := riverslot.ChangeShardMap(ctx, &riverslot.ShardMapChange{Shards: shards, Task: task, Map: moved, From: join.Add(time.Hour), Plan: &finer})
	require.NoError(t, err)
	require.EqualValues(t, 3, got.Version)
	require.Equal(t, []int64{3, 3, 3}, shardVersions(ctx, t, shards, task))

	// A change made on s1 only (by hand: a change whose undo failed).
	_, err = pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{shards[0].Schema, ledger.ShardsTable}.Sanitize()+
		" (task, version, effective_from, map) SELECT task, 4, effective_from + interval '1 hour', map FROM "+
		pgx.Identifier{shards[0].Schema, ledger.ShardsTable}.Sanitize()+" WHERE task = $1 AND version = 3", task)
	require.NoError(t, err)
	_, err = riverslot.MoveBuckets(ctx, shards, task, 0, 8191, "s1", join.Add(4*time.Hour))
	require.ErrorIs(t, err, riverslot.ErrShardMapsDisagree)
	require.ErrorContains(t, err, "riverslot shards repair")

	// s2 has made a cycle under version 3 three hours ahead: a repair to
	// other ranges from before it would change it, and is refused; to the
	// ranges it followed, or from after it, it is not.
	made := join.Add(3 * time.Hour)
	recordShardCycle(ctx, t, shards[1], task, plan, made, 3)
	_, _, err = riverslot.RepairShardMap(ctx, &riverslot.ShardMapRepair{Shards: shards, Task: task, Map: &first, From: &join})
	require.ErrorIs(t, err, ledger.ErrShardMapLate)
	require.ErrorContains(t, err, `shard "s2"`)
	require.ErrorContains(t, err, made.Format(time.RFC3339))
	require.Equal(t, []int64{4, 3, 3}, shardVersions(ctx, t, shards, task), "a refused repair writes nothing")
	_, _, err = riverslot.RepairShardMap(ctx, &riverslot.ShardMapRepair{Shards: shards, Task: task, Map: &moved, From: &join, Plan: &finer})
	require.NoError(t, err, "the ranges s2's cycle followed: allowed")
	require.Equal(t, []int64{5, 5, 5}, shardVersions(ctx, t, shards, task))
	// The change on s1 only again, to repair by default.
	_, err = pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{shards[0].Schema, ledger.ShardsTable}.Sanitize()+
		" (task, version, effective_from, map) SELECT task, 6, effective_from + interval '2 hour', map FROM "+
		pgx.Identifier{shards[0].Schema, ledger.ShardsTable}.Sanitize()+" WHERE task = $1 AND version = 5", task)
	require.NoError(t, err)

	// The default: the highest version's ranges and start, on every shard.
	_, _, err = riverslot.RepairShardMap(ctx, &riverslot.ShardMapRepair{Shards: shards, Task: task})
	require.ErrorIs(t, err, slotplan.ErrShardMap, "by the latest cycle's plan")
	repaired, ok, err := riverslot.RepairShardMap(ctx, &riverslot.ShardMapRepair{Shards: shards, Task: task, Plan: &finer})
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 7, repaired.Version)
	require.Equal(t, moved.Ranges, repaired.Ranges)
	require.Equal(t, []int64{7, 7, 7}, shardVersions(ctx, t, shards, task))
	for _, s := range shards {
		cur, _, err := riverslot.ShardMapOf(ctx, s, task)
		require.NoError(t, err)
		require.Equal(t, join.Add(2*time.Hour), cur.EffectiveFrom, s.Name)
	}
	_, ok, err = riverslot.RepairShardMap(ctx, &riverslot.ShardMapRepair{Shards: shards, Task: task, Plan: &finer})
	require.NoError(t, err)
	require.False(t, ok, "the shards agree: nothing to repair")

	// From after s2's cycle, to other ranges: written on all.
	after := made.Add(time.Hour)
	back, ok, err := riverslot.RepairShardMap(ctx, &riverslot.ShardMapRepair{Shards: shards, Task: task, Map: &first, From: &after})
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 8, back.Version)
	require.Equal(t, []int64{8, 8, 8}, shardVersions(ctx, t, shards, task))

	// Changes go on as usual after the repair.
	_, err = riverslot.MoveBuckets(ctx, shards, task, 0, 8191, "s3", after.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, []int64{9, 9, 9}, shardVersions(ctx, t, shards, task))
}
